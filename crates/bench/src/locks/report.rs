//! The figures of `lockkeeper-bench --locks`: rows printed as they are measured, the ratios
//! against Curator on ZooKeeper with the targets they are held to, and the `--json` document.

use super::Settings;
use super::Target;
use super::measure::{Contended, Herd, LockKind, Uncontended};
use crate::BoxError;
use crate::process::ServerKind;
use crate::report::{Goal, Record, best, print_goals};
use crate::stats::{Json, fmt_duration, ratio};
use crate::versus::{Client, Column, Combo, Trial, per_combo_json, print_ratios, record};

/// What one run measured; a figure that could not be taken is an `Err` with the reason. The
/// comparisons use each combination's best trial (the highest rate; for contended runs, the
/// wait figures of that same trial).
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

    /// The best uncontended rate of `combo` over its trials.
    fn uncontended_rate(&self, combo: Combo) -> Option<f64> {
        best(&self.uncontended, combo, Uncontended::per_sec).map(Uncontended::per_sec)
    }

    /// The trial of `combo` with the most handoffs per second.
    fn contended_of(&self, combo: Combo) -> Option<&Contended> {
        best(&self.contended, combo, Contended::per_sec)
    }

    fn handoff_rate(&self, combo: Combo) -> Option<f64> {
        self.contended_of(combo).map(Contended::per_sec)
    }

    fn p99_wait_us(&self, combo: Combo) -> Option<f64> {
        self.contended_of(combo)
            .map(|c| c.wait_quantile(0.99).as_secs_f64() * 1e6)
    }

    /// The ratios the lock recipes are held to, all against Curator on ZooKeeper.
    fn goals(&self) -> Vec<Goal> {
        let base = Combo::BASELINE;
        let lk_keeper = Combo::new(Client::Lockkeeper, ServerKind::Keeper);
        let lk_zk = Combo::new(Client::Lockkeeper, ServerKind::Zookeeper);
        let goal = |name, figure: &dyn Fn(Combo) -> Option<f64>, combo, target, at_most| Goal {
            name,
            ratio: ratio(figure(combo), figure(base)),
            target,
            at_most,
        };
        let cycles = &|c| self.uncontended_rate(c);
        let handoffs = &|c| self.handoff_rate(c);
        let p99 = &|c| self.p99_wait_us(c);
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
        print_ratios(&[
            Column {
                title: "cycles/s",
                width: 10,
                figure: &|c| self.uncontended_rate(c),
            },
            Column {
                title: "handoffs/s",
                width: 10,
                figure: &|c| self.handoff_rate(c),
            },
            Column {
                title: "p99 wait",
                width: 9,
                figure: &|c| self.p99_wait_us(c),
            },
        ]);
        print_goals(&self.goals());
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
            ("best", self.best_json()),
            ("notifications", Json::Arr(herd)),
        ];
        self.record.json(vec![], settings, figures, &self.goals())
    }

    /// Each combination's best trial, with its ratios against Curator on ZooKeeper's best.
    fn best_json(&self) -> Json {
        let base = Combo::BASELINE;
        let vs = |figure: &dyn Fn(Combo) -> Option<f64>, combo| {
            Json::opt_num(ratio(figure(combo), figure(base)))
        };
        let cycles = &|c| self.uncontended_rate(c);
        let handoffs = &|c| self.handoff_rate(c);
        let p99 = &|c| self.p99_wait_us(c);
        per_combo_json(|combo| {
            vec![
                ("cycles_per_sec", Json::opt_num(cycles(combo))),
                ("handoffs_per_sec", Json::opt_num(handoffs(combo))),
                ("wait_p99_us", Json::opt_num(p99(combo))),
                ("cycles_vs_curator_on_zookeeper", vs(cycles, combo)),
                ("handoffs_vs_curator_on_zookeeper", vs(handoffs, combo)),
                ("wait_p99_vs_curator_on_zookeeper", vs(p99, combo)),
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn report() -> Report {
        let mut r = Report::new(&[]);
        let ms = Duration::from_millis;
        let fast = Uncontended {
            cycles: 300,
            elapsed: Duration::from_secs(1),
        };
        let slow = Uncontended {
            cycles: 100,
            elapsed: Duration::from_secs(1),
        };
        let trial = |combo, trial, result| Trial {
            who: combo,
            trial,
            result,
        };
        r.uncontended.push(trial(Combo::ALL[0], 0, Ok(fast)));
        r.uncontended.push(trial(Combo::BASELINE, 0, Ok(slow)));
        r.uncontended
            .push(trial(Combo::ALL[1], 0, Err("down".into())));
        // A worse second trial does not change the best figure.
        let worse = Uncontended {
            cycles: 50,
            elapsed: Duration::from_secs(1),
        };
        r.uncontended.push(trial(Combo::BASELINE, 1, Ok(worse)));
        let quick = Contended::from_waits(2, &[ms(1), ms(1)], Duration::from_secs(1));
        let base = Contended::from_waits(2, &[ms(2), ms(2)], Duration::from_secs(2));
        r.contended.push(Trial {
            who: Combo::ALL[0],
            trial: 0,
            result: Ok(quick),
        });
        r.contended.push(Trial {
            who: Combo::BASELINE,
            trial: 0,
            result: Ok(base),
        });
        r
    }

    #[test]
    fn goals_are_ratios_against_curator_on_zookeeper() {
        let goals = report().goals();
        let find = |name: &str| goals.iter().find(|g| g.name == name).expect(name).ratio;
        assert_eq!(
            find("uncontended cycles/s, lockkeeper on Keeper"),
            Some(3.0)
        );
        assert_eq!(find("uncontended cycles/s, lockkeeper on ZooKeeper"), None);
        assert_eq!(
            find("contended handoffs/s, lockkeeper on Keeper"),
            Some(2.0)
        );
        let p99 = goals
            .iter()
            .find(|g| g.name == "p99 wait, lockkeeper on Keeper")
            .expect("p99 goal");
        let r = p99.ratio.expect("p99 ratio");
        assert!((r - 0.5).abs() < 0.01, "{r}");
        assert_eq!(
            p99.met(),
            Some(true),
            "half Curator's wait meets `at most 1x`"
        );
    }

    #[test]
    fn json_marks_failed_figures_and_unmet_goals() {
        let r = report();
        let text = r.to_json(&test_settings()).render();
        assert!(text.contains("\"error\": \"down\""), "{text}");
        assert!(
            text.contains("\"cycles_vs_curator_on_zookeeper\": 3"),
            "{text}"
        );
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
