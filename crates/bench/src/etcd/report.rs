//! The figures of `lockkeeper-bench --etcd`: rows printed as they are measured, each side's
//! best trial, the ratios of lockkeeper over v3lock with the target they are held to, and the
//! `--json` document.

use std::time::Duration;

use super::{Settings, Side, Uncontended};
use crate::BoxError;
use crate::locks::Contended;
use crate::report::{self, Entrant, Goal, Record, best, print_goals};
use crate::stats::{Json, fmt_duration, fmt_ratio, ratio};

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

    /// The best uncontended rate of `side` over its trials.
    pub(crate) fn cycles(&self, side: Side) -> Option<f64> {
        best(&self.uncontended, side, Uncontended::per_sec).map(Uncontended::per_sec)
    }

    /// The contended trial of `side` with the most handoffs per second.
    fn contended_of(&self, side: Side) -> Option<&Contended> {
        best(&self.contended, side, Contended::per_sec)
    }

    pub(crate) fn handoffs(&self, side: Side) -> Option<f64> {
        self.contended_of(side).map(Contended::per_sec)
    }

    /// The p99 wait of `side`'s best contended trial, in microseconds.
    pub(crate) fn p99_wait_us(&self, side: Side) -> Option<f64> {
        self.contended_of(side)
            .map(|c| c.wait_quantile(0.99).as_secs_f64() * 1e6)
    }

    /// The target the issue sets: lockkeeper's contended handoffs/s at least 3x v3lock's.
    pub(crate) fn goals(&self) -> Vec<Goal> {
        vec![Goal {
            name: "contended handoffs/s, lockkeeper / v3lock",
            ratio: ratio(self.handoffs(Side::Lockkeeper), self.handoffs(Side::V3lock)),
            target: 3.0,
            at_most: false,
        }]
    }

    /// Prints each side's best figures, the ratios and the targets.
    fn print_summary(&self) {
        println!(
            "\nbest of the trials {:>16} {:>12} {:>10}",
            "cycles/s", "handoffs/s", "wait p99"
        );
        for side in Side::ALL {
            let wait = self.p99_wait_us(side).map_or("-".into(), |us| {
                fmt_duration(Duration::from_micros(us as u64))
            });
            println!(
                "  {:<26} {:>10} {:>12} {:>10}",
                side.label(),
                self.cycles(side).map_or("-".into(), |r| format!("{r:.0}")),
                self.handoffs(side)
                    .map_or("-".into(), |r| format!("{r:.0}")),
                wait
            );
        }
        let (ours, theirs) = (Side::Lockkeeper, Side::V3lock);
        println!(
            "lockkeeper / v3lock, same run: uncontended cycles/s {}, contended handoffs/s {}, \
             wait p99 {} (v3lock / lockkeeper: higher is better)",
            fmt_ratio(self.cycles(ours), self.cycles(theirs)),
            fmt_ratio(self.handoffs(ours), self.handoffs(theirs)),
            fmt_ratio(self.p99_wait_us(theirs), self.p99_wait_us(ours)),
        );
        print_goals(&self.goals());
    }

    /// Prints the summary and returns the JSON, or a `Partial` naming what failed.
    pub(crate) fn finish(self, json: Json) -> Result<Json, BoxError> {
        self.print_summary();
        self.record.finish(json, "etcd lock benchmark: ")
    }

    pub(crate) fn to_json(&self, s: &Settings, endpoint: &str, version: &str) -> Json {
        let uncontended = self.uncontended.iter().map(|t| t.json(uncontended_json));
        let contended = self.contended.iter().map(|t| t.json(Contended::json));
        let best = Side::ALL
            .into_iter()
            .map(|side| {
                Json::obj(vec![
                    ("client", Json::Str(side.json_key().into())),
                    ("cycles_per_sec", Json::opt_num(self.cycles(side))),
                    ("handoffs_per_sec", Json::opt_num(self.handoffs(side))),
                    ("wait_p99_us", Json::opt_num(self.p99_wait_us(side))),
                ])
            })
            .collect();
        let (ours, theirs) = (Side::Lockkeeper, Side::V3lock);
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
        let ratios = vec![
            (
                "uncontended_cycles_lockkeeper_over_v3lock",
                Json::opt_num(ratio(self.cycles(ours), self.cycles(theirs))),
            ),
            (
                "contended_handoffs_lockkeeper_over_v3lock",
                Json::opt_num(ratio(self.handoffs(ours), self.handoffs(theirs))),
            ),
            (
                "wait_p99_v3lock_over_lockkeeper",
                Json::opt_num(ratio(self.p99_wait_us(theirs), self.p99_wait_us(ours))),
            ),
        ];
        let figures = vec![
            ("uncontended", Json::Arr(uncontended.collect())),
            ("contended", Json::Arr(contended.collect())),
            ("best", Json::Arr(best)),
            ("ratios", Json::obj(ratios)),
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
