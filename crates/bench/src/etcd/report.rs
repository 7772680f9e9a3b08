//! The figures of `lockkeeper-bench --etcd`: rows printed as they are measured, each side's
//! median and range over its trials, the ratios of lockkeeper's medians over v3lock's with the
//! target they are held to, and the `--json` document.

use super::{Settings, Side, Uncontended};
use crate::BoxError;
use crate::locks::Contended;
use crate::report::{
    self, Entrant, Figure, Goal, OF_MEDIANS, Record, Spread, fmt_rate, fmt_us, per_entrant_json,
    print_goals, print_spreads, ratio_of_medians, spread,
};
use crate::stats::{Json, fmt_duration, fmt_ratio};

/// One measurement of one side in one trial.
pub(crate) type Trial<T> = report::Trial<Side, T>;

impl Entrant for Side {
    fn label(self) -> String {
        Side::label(self).to_string()
    }

    /// `client`: there is one server, named in the document's header.
    fn json_fields(self) -> Vec<(&'static str, Json)> {
        vec![("client", Json::Str(self.json_key().into()))]
    }
}

/// What one run measured.
pub(crate) struct Report {
    pub record: Record,
    pub uncontended: Vec<Trial<Uncontended>>,
    pub contended: Vec<Trial<Contended>>,
}

impl Default for Report {
    fn default() -> Report {
        Report {
            record: Record::new(Vec::new()),
            uncontended: Vec::new(),
            contended: Vec::new(),
        }
    }
}

impl Report {
    pub(crate) fn print_uncontended_header(&self, s: &Settings) {
        println!(
            "\nuncontended lock+unlock, 1 client, up to {} cycles or {}",
            s.cycles,
            fmt_duration(s.limit)
        );
        println!(
            "{:<26} {:>5} {:>8} {:>10} {:>9} {:>9}",
            "client", "trial", "cycles", "cycles/s", "p50", "p99"
        );
    }

    pub(crate) fn add_uncontended(
        &mut self,
        side: Side,
        trial: u32,
        result: Result<Uncontended, BoxError>,
    ) {
        let row = |u: &Uncontended| {
            format!(
                "{:<26} {:>5} {:>8} {:>10.0} {:>9} {:>9}",
                side.label(),
                trial + 1,
                u.cycles,
                u.per_sec(),
                fmt_duration(u.quantile(0.5)),
                fmt_duration(u.quantile(0.99)),
            )
        };
        let trials = &mut self.uncontended;
        (self.record).add(trials, "uncontended", (side, trial), result, row);
    }

    pub(crate) fn print_contended_header(&self, s: &Settings) {
        println!(
            "\ncontended handoffs, {} clients (a session each) looping lock -> unlock on one \
             name, up to {} each or {}; wait = asking to holding",
            s.clients,
            s.handoffs,
            fmt_duration(s.limit)
        );
        println!("{}", Contended::table_header(26));
    }

    pub(crate) fn add_contended(
        &mut self,
        side: Side,
        trial: u32,
        result: Result<Contended, BoxError>,
    ) {
        let row = |c: &Contended| c.table_row(side.label(), trial, 26);
        let trials = &mut self.contended;
        (self.record).add(trials, "contended", (side, trial), result, row);
    }

    /// Uncontended cycles/s of `side` over its trials.
    pub(crate) fn cycles(&self, side: Side) -> Option<Spread> {
        spread(&self.uncontended, side, Uncontended::per_sec)
    }

    /// Contended handoffs/s of `side` over its trials.
    pub(crate) fn handoffs(&self, side: Side) -> Option<Spread> {
        spread(&self.contended, side, Contended::per_sec)
    }

    /// Each contended trial's p99 wait of `side`, in microseconds, over its trials.
    pub(crate) fn p99_wait_us(&self, side: Side) -> Option<Spread> {
        spread(&self.contended, side, |c| {
            c.wait_quantile(0.99).as_secs_f64() * 1e6
        })
    }

    /// The figures of the summary and of `medians` in the JSON.
    fn figures(&self) -> [Figure<'_, Side>; 3] {
        [
            Figure {
                title: "cycles/s",
                key: "cycles_per_sec",
                fmt: fmt_rate,
                spread: Box::new(|side| self.cycles(side)),
            },
            Figure {
                title: "handoffs/s",
                key: "handoffs_per_sec",
                fmt: fmt_rate,
                spread: Box::new(|side| self.handoffs(side)),
            },
            Figure {
                title: "wait p99",
                key: "wait_p99_us",
                fmt: fmt_us,
                spread: Box::new(|side| self.p99_wait_us(side)),
            },
        ]
    }

    /// lockkeeper's median over v3lock's: uncontended cycles/s, contended handoffs/s, and
    /// v3lock's p99 wait over lockkeeper's (so that, like the others, higher is better).
    pub(crate) fn ratios(&self) -> [(&'static str, Option<f64>); 3] {
        let (ours, theirs) = (Side::Lockkeeper, Side::V3lock);
        [
            (
                "uncontended_cycles_lockkeeper_over_v3lock",
                ratio_of_medians(self.cycles(ours), self.cycles(theirs)),
            ),
            (
                "contended_handoffs_lockkeeper_over_v3lock",
                ratio_of_medians(self.handoffs(ours), self.handoffs(theirs)),
            ),
            (
                "wait_p99_v3lock_over_lockkeeper",
                ratio_of_medians(self.p99_wait_us(theirs), self.p99_wait_us(ours)),
            ),
        ]
    }

    /// The target the issue sets: lockkeeper's median contended handoffs/s at least 3x
    /// v3lock's.
    pub(crate) fn goals(&self) -> Vec<Goal> {
        vec![Goal {
            name: "contended handoffs/s, lockkeeper / v3lock",
            ratio: ratio_of_medians(self.handoffs(Side::Lockkeeper), self.handoffs(Side::V3lock)),
            target: 3.0,
            at_most: false,
        }]
    }

    /// Prints each side's medians and ranges, the ratios of medians and the targets.
    fn print_summary(&self) {
        print_spreads(&Side::ALL, &self.figures().each_ref());
        let [cycles, handoffs, wait] = self.ratios().map(|(_, r)| fmt_ratio(r, Some(1.0)));
        println!(
            "lockkeeper / v3lock, ratios of medians, same run: uncontended cycles/s {cycles}, \
             contended handoffs/s {handoffs}, wait p99 {wait} (v3lock / lockkeeper: higher is \
             better)",
        );
        print_goals(&self.goals(), Some(OF_MEDIANS));
    }

    /// Prints the summary and returns the JSON, or a `Partial` naming what failed.
    pub(crate) fn finish(self, json: Json) -> Result<Json, BoxError> {
        self.print_summary();
        self.record.finish(json, "etcd lock benchmark: ")
    }

    pub(crate) fn to_json(&self, s: &Settings, endpoint: &str, version: &str) -> Json {
        let uncontended = self.uncontended.iter().map(|t| t.json(uncontended_json));
        let contended = self.contended.iter().map(|t| t.json(Contended::json));
        let summary = self.figures();
        let medians = per_entrant_json(&Side::ALL, |side| {
            summary.iter().map(|f| f.json(side)).collect()
        });
        let header = vec![
            ("etcd_endpoint", Json::Str(endpoint.into())),
            ("etcd_version", Json::Str(version.into())),
        ];
        let settings = vec![
            ("run_limit_s", Json::num(s.limit.as_secs_f64())),
            ("warmup_s", Json::num(s.warmup.as_secs_f64())),
            ("uncontended_cycles", Json::num(s.cycles)),
            ("contended_clients", Json::num(s.clients as u32)),
            ("contended_handoffs_per_client", Json::num(s.handoffs)),
            ("trials", Json::num(s.trials)),
            ("lease_ttl_s", Json::num(s.ttl.as_secs_f64())),
        ];
        let ratios = self.ratios().map(|(key, r)| (key, Json::opt_num(r)));
        let figures = vec![
            ("uncontended", Json::Arr(uncontended.collect())),
            ("contended", Json::Arr(contended.collect())),
            ("medians", medians),
            ("ratios", Json::obj(ratios.to_vec())),
        ];
        self.record.json(header, settings, figures, &self.goals())
    }
}

fn uncontended_json(u: &Uncontended) -> Vec<(&'static str, Json)> {
    vec![
        ("cycles", Json::Num(u.cycles as f64)),
        ("elapsed_s", Json::num(u.elapsed.as_secs_f64())),
        ("cycles_per_sec", Json::num(u.per_sec())),
        ("p50_us", Json::num(u.quantile(0.5).as_micros() as f64)),
        ("p99_us", Json::num(u.quantile(0.99).as_micros() as f64)),
    ]
}
