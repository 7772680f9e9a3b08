//! The `--trace` mode's targets: figures of Keeper's write path that depend on the code, not on
//! the machine, each judged on the medians of trials taken in one invocation.
//!
//! - **log syncs per contended handoff**, at most 1.1: the releaser's re-queue and the woken
//!   holder's release share one sync;
//! - **log syncs per uncontended lock cycle**, exactly 2: the acquisition's create and the
//!   release's delete, nothing more;
//! - **an uncontended lock cycle's p50**, at most 1.1x a library-free create+delete pair's p50
//!   on the same Keeper: what lockkeeper's client and recipe add to the two writes;
//! - **a durable create+delete pair's p50**, at most a never-synced pair's p50 (a `--sync none`
//!   Keeper) plus two p50s of Keeper's own fdatasyncs (`mntr`'s `lk_log_sync_p50_us`, read
//!   after each trial's durable pairs) plus 0.05 ms: what Keeper adds to a pair's two syncs.
//!
//! The runs behind the last two take turns within each trial (see the `trials` module), so
//! that drift during the run favours none of them. Three more runs take their turns with them,
//! with no target of their own, to split the cycle's ratio into its steps (see
//! [`Trials::steps`]): the same library-free pairs on a tokio socket awaited in a task, the same
//! pairs through `lockkeeper-zk-client`, and a lock cycle's own requests through that client.

use std::time::Duration;

use lockkeeper_load::stats::Json;

use super::trials::ROUND;
use crate::report::{Spread, met_json, verdict};

/// Most log syncs per contended handoff.
const HANDOFF_SYNCS: f64 = 1.1;
/// Log syncs per uncontended lock -> release cycle.
const CYCLE_SYNCS: f64 = 2.0;
/// Most an uncontended cycle's p50 may be over a library-free pair's.
const CYCLE_OVER_PAIR: f64 = 1.1;
/// What a durable pair may take above a never-synced pair and two fdatasyncs.
pub(crate) const PAIR_SLACK: Duration = Duration::from_micros(50);

/// Each trial's figures, in trial order.
#[derive(Default)]
pub(crate) struct Trials {
    /// p50 of the library-free client's durable create+delete pairs, µs.
    pub durable_pair_us: Vec<f64>,
    /// p50 of the same pairs on the Keeper that never syncs, µs.
    pub unsynced_pair_us: Vec<f64>,
    /// p50 of the same durable pairs on a tokio socket awaited in a task, µs.
    pub tokio_pair_us: Vec<f64>,
    /// p50 of the same durable pairs through `lockkeeper-zk-client`, µs.
    pub library_pair_us: Vec<f64>,
    /// p50 of a lock cycle's own requests through `lockkeeper-zk-client`, µs.
    pub lock_requests_us: Vec<f64>,
    /// p50 of one session's uncontended `zk::Mutex` lock -> release cycles, µs.
    pub cycle_us: Vec<f64>,
    /// Log syncs per uncontended cycle.
    pub cycle_syncs: Vec<f64>,
    /// Log syncs per contended handoff.
    pub handoff_syncs: Vec<f64>,
    /// p50 of Keeper's own recent fdatasyncs, read after the durable pairs, µs.
    pub keeper_sync_us: Vec<f64>,
}

/// One target's verdict.
pub(crate) struct Check {
    pub name: &'static str,
    /// The median it is judged on (`None`: not measured).
    pub measured: Option<f64>,
    /// What the median may be at most, or exactly.
    pub bound: Option<f64>,
    pub exact: bool,
    /// How both are printed.
    pub fmt: Format,
}

impl Check {
    /// `None` when either side could not be measured.
    pub(crate) fn met(&self) -> Option<bool> {
        let (measured, bound) = (self.measured?, self.bound?);
        Some(if self.exact {
            // Counts over thousands of operations: equal to two decimals.
            (measured - bound).abs() < 0.005
        } else {
            measured <= bound
        })
    }

    fn row(&self) -> String {
        let show = |v: Option<f64>| v.map_or("-".into(), self.fmt);
        let verdict = verdict(self.met());
        format!(
            "  {:<52} {:>10}  target {} {}  {verdict}",
            self.name,
            show(self.measured),
            if self.exact { "=" } else { "<=" },
            show(self.bound),
        )
    }

    fn json(&self) -> Json {
        Json::obj(vec![
            ("name", Json::Str(self.name.into())),
            ("median", Json::opt_num(self.measured)),
            ("bound", Json::opt_num(self.bound)),
            (
                "direction",
                Json::Str(if self.exact { "exactly" } else { "at_most" }.into()),
            ),
            ("met", met_json(self.met())),
        ])
    }
}

/// One step of the cycle's ratio to the library-free pair: one run's median p50 over the
/// one below it.
pub(crate) struct Step {
    /// Which runs, as the trace names them: `(b)/(c2)`.
    pub ratio: &'static str,
    /// Its name in `--json`.
    pub key: &'static str,
    /// What the step adds.
    pub what: &'static str,
    /// `None` when either run is missing.
    pub value: Option<f64>,
}

/// How a figure is printed.
type Format = fn(f64) -> String;

fn fmt_count(v: f64) -> String {
    format!("{v:.2}")
}

fn fmt_ratio(v: f64) -> String {
    format!("{v:.2}x")
}

/// Microseconds as the rest of `--trace` prints times, `0.415 ms`.
fn fmt_ms(us: f64) -> String {
    super::fmt_us(Duration::from_secs_f64(us.max(0.0) / 1e6))
}

impl Trials {
    fn median(values: &[f64]) -> Option<f64> {
        Spread::of(values.iter().copied()).map(|s| s.median)
    }

    /// The targets, judged on the medians.
    pub(crate) fn checks(&self) -> Vec<Check> {
        let durable = Self::median(&self.durable_pair_us);
        let unsynced = Self::median(&self.unsynced_pair_us);
        let cycle = Self::median(&self.cycle_us);
        let sync = Self::median(&self.keeper_sync_us);
        vec![
            Check {
                name: "log syncs per contended handoff",
                measured: Self::median(&self.handoff_syncs),
                bound: Some(HANDOFF_SYNCS),
                exact: false,
                fmt: fmt_count,
            },
            Check {
                name: "log syncs per uncontended lock cycle",
                measured: Self::median(&self.cycle_syncs),
                bound: Some(CYCLE_SYNCS),
                exact: true,
                fmt: fmt_count,
            },
            Check {
                name: "uncontended cycle p50 / library-free pair p50",
                measured: cycle.zip(durable).map(|(c, d)| c / d),
                bound: Some(CYCLE_OVER_PAIR),
                exact: false,
                fmt: fmt_ratio,
            },
            Check {
                name: "durable pair p50 (never-synced + 2 fdatasync + 0.05 ms)",
                measured: durable,
                bound: unsynced
                    .zip(sync)
                    .map(|(u, s)| u + 2.0 * s + PAIR_SLACK.as_secs_f64() * 1e6),
                exact: false,
                fmt: fmt_ms,
            },
        ]
    }

    /// The spreads of every figure, one line each, then the targets with their verdicts.
    pub(crate) fn lines(&self) -> Vec<String> {
        let n = self.durable_pair_us.len();
        let mut lines = vec![format!(
            "{n} trials, each timing (c), (c2), (b), (b2), (d) and (c) on the Keeper that never syncs \
             in turns of {ROUND}, every other turn in reverse order, and running (e): \
             median (min–max)"
        )];
        let figures: [(&str, &[f64], Format); 9] = [
            ("(c) durable pair p50", &self.durable_pair_us, fmt_ms),
            ("(c2) tokio-socket pair p50", &self.tokio_pair_us, fmt_ms),
            ("(b) zk-client pair p50", &self.library_pair_us, fmt_ms),
            ("(b2) lock's requests p50", &self.lock_requests_us, fmt_ms),
            ("Keeper's fdatasync p50", &self.keeper_sync_us, fmt_ms),
            ("(c) never-synced pair p50", &self.unsynced_pair_us, fmt_ms),
            ("(d) uncontended cycle p50", &self.cycle_us, fmt_ms),
            ("(d) log syncs per cycle", &self.cycle_syncs, fmt_count),
            ("(e) log syncs per handoff", &self.handoff_syncs, fmt_count),
        ];
        for (name, values, fmt) in figures {
            let shown = Spread::of(values.iter().copied()).map_or("-".into(), |s| s.fmt(fmt));
            lines.push(format!("  {name:<28} {shown}"));
        }
        lines.push("targets, from the medians:".into());
        lines.extend(self.checks().iter().map(Check::row));
        lines.push(
            "the cycle over the library-free pair, step by step (medians; no targets):".into(),
        );
        for step in self.steps() {
            lines.push(format!(
                "  {:<10} {:>6}  {}",
                step.ratio,
                step.value.map_or("-".into(), fmt_ratio),
                step.what
            ));
        }
        lines
    }

    /// The cycle's ratio to the library-free pair, as the product of the steps between the
    /// runs: what each layer adds at the medians. The first step is tokio's and the kernel's
    /// (a tokio client with no library); the second is the client library's; the third is what
    /// the lock's algorithm asks of the server beyond a pair (a listing, an ephemeral sequential
    /// node with data); the fourth is the recipe's own work in the client. The last line is
    /// lockkeeper's whole part, the product of the middle three.
    pub(crate) fn steps(&self) -> [Step; 5] {
        let ratio = |over: &[f64], under: &[f64]| {
            Self::median(over)
                .zip(Self::median(under))
                .map(|(o, u)| o / u)
        };
        [
            Step {
                ratio: "(c2)/(c)",
                key: "tokio_over_blocking",
                what: "a tokio socket awaited in the task, over a blocking one: the runtime's wake-up on each reply",
                value: ratio(&self.tokio_pair_us, &self.durable_pair_us),
            },
            Step {
                ratio: "(b)/(c2)",
                key: "zk_client_over_tokio",
                what: "lockkeeper-zk-client over the tokio socket: the client library",
                value: ratio(&self.library_pair_us, &self.tokio_pair_us),
            },
            Step {
                ratio: "(b2)/(b)",
                key: "lock_requests_over_zk_client",
                what: "a lock cycle's requests over the pair's, through the same client: the lock's algorithm",
                value: ratio(&self.lock_requests_us, &self.library_pair_us),
            },
            Step {
                ratio: "(d)/(b2)",
                key: "cycle_over_lock_requests",
                what: "the Mutex cycle over its own requests sent bare: the recipe's client work",
                value: ratio(&self.cycle_us, &self.lock_requests_us),
            },
            Step {
                ratio: "(d)/(c2)",
                key: "cycle_over_tokio",
                what: "the Mutex cycle over the tokio socket: all that lockkeeper adds",
                value: ratio(&self.cycle_us, &self.tokio_pair_us),
            },
        ]
    }

    /// Each figure's spread and the targets' verdicts.
    pub(crate) fn json(&self) -> Json {
        let spread =
            |values: &[f64]| Spread::of(values.iter().copied()).map_or(Json::Null, |s| s.json());
        Json::obj(vec![
            ("durable_pair_p50_us", spread(&self.durable_pair_us)),
            ("tokio_pair_p50_us", spread(&self.tokio_pair_us)),
            ("zk_client_pair_p50_us", spread(&self.library_pair_us)),
            ("lock_requests_p50_us", spread(&self.lock_requests_us)),
            (
                "steps",
                Json::obj(
                    self.steps()
                        .iter()
                        .map(|step| (step.key, Json::opt_num(step.value)))
                        .collect(),
                ),
            ),
            ("unsynced_pair_p50_us", spread(&self.unsynced_pair_us)),
            ("keeper_fdatasync_p50_us", spread(&self.keeper_sync_us)),
            ("uncontended_cycle_p50_us", spread(&self.cycle_us)),
            ("log_syncs_per_uncontended_cycle", spread(&self.cycle_syncs)),
            (
                "log_syncs_per_contended_handoff",
                spread(&self.handoff_syncs),
            ),
            (
                "targets",
                Json::Arr(self.checks().iter().map(Check::json).collect()),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three trials whose medians, bests and means would judge differently.
    fn trials() -> Trials {
        Trials {
            durable_pair_us: vec![400.0, 100.0, 420.0],
            unsynced_pair_us: vec![50.0, 10.0, 60.0],
            tokio_pair_us: vec![410.0, 110.0, 430.0],
            library_pair_us: vec![415.0, 115.0, 420.0],
            lock_requests_us: vec![425.0, 118.0, 421.0],
            cycle_us: vec![430.0, 120.0, 900.0],
            cycle_syncs: vec![2.0, 2.0, 2.5],
            handoff_syncs: vec![1.05, 1.6, 1.0],
            keeper_sync_us: vec![150.0, 10.0, 900.0],
        }
    }

    fn verdicts(t: &Trials) -> Vec<(&'static str, Option<f64>, Option<bool>)> {
        t.checks()
            .into_iter()
            .map(|c| (c.name, c.measured, c.met()))
            .collect()
    }

    #[test]
    fn each_target_is_judged_on_the_medians() {
        let v = verdicts(&trials());
        assert_eq!(
            v[0],
            ("log syncs per contended handoff", Some(1.05), Some(true))
        );
        assert_eq!(v[1].2, Some(true), "the median cycle took 2 syncs");
        let ratio = v[2].1.expect("cycle ratio");
        assert!((ratio - 430.0 / 400.0).abs() < 1e-9, "{ratio}");
        assert_eq!(v[2].2, Some(true));
        let lines = trials().lines().join("\n");
        // The steps, each a ratio of medians: 410/400, 415/410, 421/415, 430/421 and 430/410.
        let steps: Vec<_> = trials().steps().iter().map(|s| s.value).collect();
        let expected = [
            410.0 / 400.0,
            415.0 / 410.0,
            421.0 / 415.0,
            430.0 / 421.0,
            430.0 / 410.0,
        ];
        for (step, expected) in steps.iter().zip(expected) {
            let step = step.expect("every run measured");
            assert!((step - expected).abs() < 1e-9, "{step} against {expected}");
            assert!(lines.contains(&format!("{expected:.2}x")), "{lines}");
        }
        let product: f64 = steps[..4].iter().map(|s| s.unwrap_or(0.0)).product();
        assert!(
            (product - 430.0 / 400.0).abs() < 1e-9,
            "the steps multiply to the cycle's ratio"
        );
        // 400 <= 50 + 2 x 150 + 50, on the median of Keeper's syncs.
        assert_eq!(v[3].2, Some(true));
        let mut t = trials();
        t.keeper_sync_us[0] = 149.0;
        assert_eq!(verdicts(&t)[3].2, Some(false), "400 > 50 + 2 x 149 + 50");
        t.keeper_sync_us.clear();
        assert_eq!(verdicts(&t)[3].2, None, "no bound without Keeper's syncs");
    }

    #[test]
    fn a_missed_target_says_so_and_an_unmeasured_one_is_not_met() {
        let mut t = trials();
        t.handoff_syncs = vec![1.2, 1.5, 1.11];
        t.cycle_syncs = vec![3.0];
        t.cycle_us.clear();
        let v = verdicts(&t);
        assert_eq!(v[0].2, Some(false));
        assert_eq!(v[1].2, Some(false), "3 syncs per cycle is not exactly 2");
        assert_eq!(
            v[2],
            ("uncontended cycle p50 / library-free pair p50", None, None)
        );
        let lines = t.lines().join("\n");
        assert!(lines.contains("MISSED"), "{lines}");
        assert!(lines.contains("not measured"), "{lines}");
        assert!(lines.contains("1.20 (1.11–1.50)"), "{lines}");
        let json = t.json().render();
        assert!(json.contains("\"met\": \"no\""), "{json}");
        assert!(json.contains("\"direction\": \"exactly\""), "{json}");
    }
}
