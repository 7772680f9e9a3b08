//! The figures of `lockkeeper-bench --locks`: rows printed as they are measured, each
//! combination's median and range over its trials, the ratios of medians against Curator on
//! ZooKeeper with the targets they are held to, and the `--json` document.

use super::Settings;
use super::Target;
use super::measure::{Contended, Herd, LockKind, Uncontended};
use crate::BoxError;
use crate::process::ServerKind;
use crate::report::{
    Figure, Goal, OF_MEDIANS, Record, Spread, fmt_rate, fmt_us, print_goals, spread,
};
use crate::stats::{Json, fmt_duration};
use crate::versus::{Client, Column, Combo, Trial, goal, medians_json, print_ratios, record};

/// What one run measured; a figure that could not be taken is an `Err` with the reason. The
/// comparisons use the median of each figure over a combination's trials (for the wait, the
/// median of each trial's p99), so that one lucky trial decides nothing.
pub(crate) struct Report {
    pub record: Record,
    pub uncontended: Vec<Trial<Uncontended>>,
    pub contended: Vec<Trial<Contended>>,
    pub herd: Vec<(LockKind, ServerKind, Result<Herd, String>)>,
}

impl Report {
    pub(crate) fn new(targets: &[Target]) -> Report {
        Report {
            record: record(targets),
            uncontended: Vec::new(),
            contended: Vec::new(),
            herd: Vec::new(),
        }
    }

    pub(crate) fn print_uncontended_header(&self, s: &Settings) {
        println!(
            "\nuncontended lock+release, 1 session, up to {} cycles or {}",
            s.cycles,
            fmt_duration(s.limit)
        );
        println!(
            "{:<24} {:>5} {:>8} {:>10}",
            "client", "trial", "cycles", "cycles/s"
        );
    }

    pub(crate) fn add_uncontended(
        &mut self,
        combo: Combo,
        trial: u32,
        result: Result<Uncontended, BoxError>,
    ) {
        let row = |u: &Uncontended| {
            format!(
                "{:<24} {:>5} {:>8} {:>10.0}",
                combo.label(),
                trial + 1,
                u.cycles,
                u.per_sec()
            )
        };
        let trials = &mut self.uncontended;
        (self.record).add(trials, "uncontended", (combo, trial), result, row);
    }

    pub(crate) fn print_contended_header(&self, s: &Settings) {
        println!(
            "\ncontended handoffs, {} sessions on one lock, up to {} each or {}; wait = asking to holding",
            s.clients,
            s.handoffs,
            fmt_duration(s.limit)
        );
        println!("{}", Contended::table_header(24));
    }

    pub(crate) fn add_contended(
        &mut self,
        combo: Combo,
        trial: u32,
        result: Result<Contended, BoxError>,
    ) {
        let row = |c: &Contended| c.table_row(&combo.label(), trial, 24);
        let trials = &mut self.contended;
        (self.record).add(trials, "contended", (combo, trial), result, row);
    }

    pub(crate) fn print_herd_header(&self, s: &Settings) {
        println!(
            "\nwatch notifications per release, {} sessions on one lock, {} acquisitions each",
            s.waiters, s.waiter_cycles
        );
        println!(
            "{:<24} {:>8} {:>13} {:>11}",
            "lock", "releases", "notifications", "per release"
        );
    }

    pub(crate) fn add_herd(
        &mut self,
        kind: LockKind,
        server: ServerKind,
        result: Result<Herd, BoxError>,
    ) {
        let label = format!("{} on {}", kind.name(), server.name());
        match &result {
            Ok(h) => println!(
                "{label:<24} {:>8} {:>13} {:>11}",
                h.releases,
                h.notifications,
                h.per_release().map_or("-".into(), |r| format!("{r:.2}"))
            ),
            Err(e) => self.record.fail(&format!("notifications, {label}"), e),
        }
        self.herd
            .push((kind, server, result.map_err(|e| e.to_string())));
    }

    /// Uncontended cycles/s of `combo` over its trials.
    fn cycles(&self, combo: Combo) -> Option<Spread> {
        spread(&self.uncontended, combo, Uncontended::per_sec)
    }

    /// Contended handoffs/s of `combo` over its trials.
    fn handoffs(&self, combo: Combo) -> Option<Spread> {
        spread(&self.contended, combo, Contended::per_sec)
    }

    /// Each contended trial's p99 wait of `combo`, in microseconds, over its trials.
    fn p99_wait_us(&self, combo: Combo) -> Option<Spread> {
        spread(&self.contended, combo, |c| {
            c.wait_quantile(0.99).as_secs_f64() * 1e6
        })
    }

    /// The figures of the summary and of `medians` in the JSON, each set against Curator on
    /// ZooKeeper.
    fn columns(&self) -> [Column<'_>; 3] {
        [
            Column {
                figure: Figure {
                    title: "cycles/s",
                    key: "cycles_per_sec",
                    fmt: fmt_rate,
                    spread: Box::new(|c| self.cycles(c)),
                },
                vs: "cycles_vs_curator_on_zookeeper",
            },
            Column {
                figure: Figure {
                    title: "handoffs/s",
                    key: "handoffs_per_sec",
                    fmt: fmt_rate,
                    spread: Box::new(|c| self.handoffs(c)),
                },
                vs: "handoffs_vs_curator_on_zookeeper",
            },
            Column {
                figure: Figure {
                    title: "p99 wait",
                    key: "wait_p99_us",
                    fmt: fmt_us,
                    spread: Box::new(|c| self.p99_wait_us(c)),
                },
                vs: "wait_p99_vs_curator_on_zookeeper",
            },
        ]
    }

    /// The ratios the lock recipes are held to, all of medians against Curator on ZooKeeper.
    fn goals(&self) -> Vec<Goal> {
        let lk_keeper = Combo::new(Client::Lockkeeper, ServerKind::Keeper);
        let lk_zk = Combo::new(Client::Lockkeeper, ServerKind::Zookeeper);
        let cycles = |c| self.cycles(c);
        let handoffs = |c| self.handoffs(c);
        let p99 = |c| self.p99_wait_us(c);
        // The targets: a contended handoff at 3x Curator on ZooKeeper, an uncontended cycle (two
        // syncs) at 2.5x, and lockkeeper on ZooKeeper at least Curator on ZooKeeper.
        vec![
            goal(
                "uncontended cycles/s, lockkeeper on Keeper",
                cycles,
                lk_keeper,
                2.5,
                false,
            ),
            goal(
                "uncontended cycles/s, lockkeeper on ZooKeeper",
                cycles,
                lk_zk,
                1.0,
                false,
            ),
            goal(
                "contended handoffs/s, lockkeeper on Keeper",
                handoffs,
                lk_keeper,
                3.0,
                false,
            ),
            goal(
                "contended handoffs/s, lockkeeper on ZooKeeper",
                handoffs,
                lk_zk,
                1.0,
                false,
            ),
            goal("p99 wait, lockkeeper on Keeper", p99, lk_keeper, 1.0, true),
            goal("p99 wait, lockkeeper on ZooKeeper", p99, lk_zk, 1.0, true),
        ]
    }

    fn print_summary(&self) {
        print_ratios(&self.columns());
        print_goals(&self.goals(), Some(OF_MEDIANS));
    }

    /// Prints the goals and returns the JSON, or a `Partial` naming what failed.
    pub(crate) fn finish(self, settings: &Settings) -> Result<Json, BoxError> {
        self.print_summary();
        let json = self.to_json(settings);
        self.record.finish(json, "lock benchmark: ")
    }

    pub(crate) fn to_json(&self, s: &Settings) -> Json {
        let uncontended = self
            .uncontended
            .iter()
            .map(|t| {
                t.json(|u| {
                    vec![
                        ("cycles", Json::Num(u.cycles as f64)),
                        ("elapsed_s", Json::num(u.elapsed.as_secs_f64())),
                        ("cycles_per_sec", Json::num(u.per_sec())),
                    ]
                })
            })
            .collect();
        let contended = self.contended.iter().map(|t| t.json(Contended::json));
        let herd = self
            .herd
            .iter()
            .map(|(kind, server, r)| {
                let mut f = vec![
                    ("lock", Json::Str(kind.name().into())),
                    ("server", Json::Str(server.json_key().into())),
                ];
                match r {
                    Ok(h) => f.extend([
                        ("sessions", Json::num(h.sessions as u32)),
                        ("releases", Json::Num(h.releases as f64)),
                        ("notifications", Json::Num(h.notifications as f64)),
                        ("per_release", Json::opt_num(h.per_release())),
                    ]),
                    Err(e) => f.push(("error", Json::Str(e.clone()))),
                }
                Json::obj(f)
            })
            .collect();
        let settings = vec![
            ("run_limit_s", Json::num(s.limit.as_secs_f64())),
            ("warmup_s", Json::num(s.warmup.as_secs_f64())),
            ("uncontended_cycles", Json::num(s.cycles)),
            ("trials", Json::num(s.trials)),
            ("contended_sessions", Json::num(s.clients as u32)),
            ("contended_handoffs_per_session", Json::num(s.handoffs)),
            ("notification_sessions", Json::num(s.waiters as u32)),
            (
                "notification_cycles_per_session",
                Json::num(s.waiter_cycles),
            ),
        ];
        let figures = vec![
            ("uncontended", Json::Arr(uncontended)),
            ("contended", Json::Arr(contended.collect())),
            ("medians", medians_json(&self.columns(), |_| Vec::new())),
            ("notifications", Json::Arr(herd)),
        ];
        self.record.json(vec![], settings, figures, &self.goals())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::Spread;
    use crate::tests::{field, number, rows};

    fn trial<T>(who: Combo, trial: u32, result: Result<T, String>) -> Trial<T> {
        Trial { who, trial, result }
    }

    /// Three trials of lockkeeper on Keeper and of Curator on ZooKeeper, whose best trials and
    /// means would give other ratios than their medians; lockkeeper on ZooKeeper failed.
    fn report() -> Report {
        let mut r = Report::new(&[]);
        let (lk, base) = (Combo::ALL[0], Combo::BASELINE);
        let cycles = |cycles| {
            Ok(Uncontended {
                cycles,
                elapsed: Duration::from_secs(1),
            })
        };
        // Cycles/s: lockkeeper 300, 310, 290; Curator 100, 400, 50 (best 400, mean 183).
        for (n, (ours, theirs)) in (0..).zip([(300, 100), (310, 400), (290, 50)]) {
            r.uncontended.push(trial(lk, n, cycles(ours)));
            r.uncontended.push(trial(base, n, cycles(theirs)));
        }
        r.uncontended
            .push(trial(Combo::ALL[1], 0, Err("down".into())));
        // Two handoffs per trial, each waiting `us`, in `ms`: handoffs/s and the p99 wait.
        let handed = |us, ms| {
            let wait = Duration::from_micros(us);
            Ok(Contended::from_waits(
                2,
                &[wait, wait],
                Duration::from_millis(ms),
            ))
        };
        // lockkeeper: 2, 8, 4 handoffs/s (median 4, best 8), p99 100, 200, 900 us (median 200,
        // best 100, mean 400); the median rate's trial is not the median wait's.
        for (n, (us, ms)) in (0..).zip([(100, 1_000), (200, 250), (900, 500)]) {
            r.contended.push(trial(lk, n, handed(us, ms)));
        }
        // Curator: 2, 1, 2 handoffs/s (median 2), p99 400, 400, 800 us (median 400).
        for (n, (us, ms)) in (0..).zip([(400, 1_000), (400, 2_000), (800, 1_000)]) {
            r.contended.push(trial(base, n, handed(us, ms)));
        }
        r
    }

    #[test]
    fn goals_are_ratios_of_medians_against_curator_on_zookeeper() {
        let goals = report().goals();
        let find = |name: &str| goals.iter().find(|g| g.name == name).expect(name);
        // 300 / 100: the best trials would give 310 / 400, the means 300 / 183.
        let cycles = find("uncontended cycles/s, lockkeeper on Keeper");
        assert_eq!((cycles.ratio, cycles.met()), (Some(3.0), Some(true)));
        let failed = find("uncontended cycles/s, lockkeeper on ZooKeeper");
        assert_eq!((failed.ratio, failed.met()), (None, None));
        // 4 / 2 misses 3x, where the best trials (8 / 2) would meet it.
        let handoffs = find("contended handoffs/s, lockkeeper on Keeper");
        assert_eq!((handoffs.ratio, handoffs.met()), (Some(2.0), Some(false)));
        // The median of each trial's p99: 200 / 400, not the best 100 / 400 nor the
        // median-rate trial's 900 / 400.
        let p99 = find("p99 wait, lockkeeper on Keeper");
        assert_eq!((p99.ratio, p99.met()), (Some(0.5), Some(true)));
    }

    #[test]
    fn json_gives_each_combination_its_medians_and_marks_failures() {
        let r = report();
        let json = r.to_json(&test_settings());
        assert_eq!(rows(&json, "uncontended").len(), 7, "every trial kept");
        assert_eq!(rows(&json, "contended").len(), 6);
        let medians = rows(&json, "medians");
        assert_eq!(medians.len(), 4);
        let lk = &medians[0];
        let spread = |values: [f64; 3]| Spread::of(values).expect("three trials").json();
        assert_eq!(field(lk, "cycles_per_sec"), &spread([300.0, 310.0, 290.0]));
        assert_eq!(field(lk, "handoffs_per_sec"), &spread([2.0, 8.0, 4.0]));
        assert_eq!(field(lk, "wait_p99_us"), &spread([100.0, 200.0, 900.0]));
        assert_eq!(number(lk, "cycles_vs_curator_on_zookeeper"), 3.0);
        assert_eq!(number(lk, "handoffs_vs_curator_on_zookeeper"), 2.0);
        assert_eq!(number(lk, "wait_p99_vs_curator_on_zookeeper"), 0.5);
        let baseline = &medians[2];
        assert_eq!(number(baseline, "cycles_vs_curator_on_zookeeper"), 1.0);
        assert_eq!(field(&medians[1], "cycles_per_sec"), &Json::Null);
        let text = json.render();
        assert!(!text.contains("\"best\""), "{text}");
        assert!(text.contains("\"error\": \"down\""), "{text}");
        assert!(text.contains("\"met\": \"unknown\""), "{text}");
        assert!(text.contains("\"met\": \"no\""), "{text}");
    }

    fn test_settings() -> Settings {
        Settings {
            launcher: crate::tests::launcher(),
            curator_classpath: String::new(),
            limit: Duration::from_secs(1),
            warmup: Duration::from_secs(1),
            cycles: 1,
            clients: 2,
            handoffs: 1,
            waiters: 2,
            waiter_cycles: 1,
            trials: 1,
            connect_limit: Duration::from_secs(1),
        }
    }
}
