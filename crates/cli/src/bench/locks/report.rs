//! The figures of `lockkeeper bench --locks`: rows printed as they are measured, the ratios
//! against Curator on ZooKeeper with the targets they are held to, and the `--json` document.

use super::Settings;
use super::Target;
use super::measure::{Contended, Herd, LockKind, Uncontended};
use crate::bench::BoxError;
use crate::bench::compare::json_or_partial;
use crate::bench::process::ServerKind;
use crate::bench::stats::{Json, fmt_duration, fmt_ratio, ratio};
use crate::bench::versus::{Client, Combo, Goal, Trial};

/// What one run measured; a figure that could not be taken is an `Err` with the reason. The
/// comparisons use each combination's best trial (the highest rate; for contended runs, the
/// wait figures of that same trial).
pub struct Report {
    pub targets: Vec<Target>,
    pub curator_command: Option<String>,
    pub uncontended: Vec<Trial<Uncontended>>,
    pub contended: Vec<Trial<Contended>>,
    pub herd: Vec<(LockKind, ServerKind, Result<Herd, String>)>,
    pub errors: Vec<String>,
}

impl Report {
    pub fn new(targets: &[Target]) -> Report {
        Report {
            targets: targets.to_vec(),
            curator_command: None,
            uncontended: Vec::new(),
            contended: Vec::new(),
            herd: Vec::new(),
            errors: Vec::new(),
        }
    }

    pub fn print_uncontended_header(&self, s: &Settings) {
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

    pub fn add_uncontended(
        &mut self,
        combo: Combo,
        trial: u32,
        result: Result<Uncontended, BoxError>,
    ) {
        match &result {
            Ok(u) => println!(
                "{:<24} {:>5} {:>8} {:>10.0}",
                combo.label(),
                trial + 1,
                u.cycles,
                u.per_sec()
            ),
            Err(e) => self.fail(&format!("uncontended, {}", combo.label()), e),
        }
        self.uncontended.push(Trial {
            combo,
            trial,
            result: result.map_err(|e| e.to_string()),
        });
    }

    pub fn print_contended_header(&self, s: &Settings) {
        println!(
            "\ncontended handoffs, {} sessions on one lock, up to {} each or {}; wait = asking to holding",
            s.clients,
            s.handoffs,
            fmt_duration(s.limit)
        );
        println!(
            "{:<24} {:>5} {:>8} {:>10} {:>9} {:>9} {:>9} {:>8}",
            "client",
            "trial",
            "handoffs",
            "handoffs/s",
            "wait p50",
            "wait p99",
            "wait max",
            "max/mean"
        );
    }

    pub fn add_contended(&mut self, combo: Combo, trial: u32, result: Result<Contended, BoxError>) {
        match &result {
            Ok(c) => println!(
                "{:<24} {:>5} {:>8} {:>10.0} {:>9} {:>9} {:>9} {:>8}",
                combo.label(),
                trial + 1,
                c.handoffs,
                c.per_sec(),
                fmt_duration(c.wait_quantile(0.5)),
                fmt_duration(c.wait_quantile(0.99)),
                fmt_duration(c.max_wait),
                c.fairness().map_or("-".into(), |f| format!("{f:.1}"))
            ),
            Err(e) => self.fail(&format!("contended, {}", combo.label()), e),
        }
        self.contended.push(Trial {
            combo,
            trial,
            result: result.map_err(|e| e.to_string()),
        });
    }

    pub fn print_herd_header(&self, s: &Settings) {
        println!(
            "\nwatch notifications per release, {} sessions on one lock, {} acquisitions each",
            s.waiters, s.waiter_cycles
        );
        println!(
            "{:<24} {:>8} {:>13} {:>11}",
            "lock", "releases", "notifications", "per release"
        );
    }

    pub fn add_herd(&mut self, kind: LockKind, server: ServerKind, result: Result<Herd, BoxError>) {
        let label = format!("{} on {}", kind.name(), server.name());
        match &result {
            Ok(h) => println!(
                "{label:<24} {:>8} {:>13} {:>11}",
                h.releases,
                h.notifications,
                h.per_release().map_or("-".into(), |r| format!("{r:.2}"))
            ),
            Err(e) => self.fail(&format!("notifications, {label}"), e),
        }
        self.herd
            .push((kind, server, result.map_err(|e| e.to_string())));
    }

    fn fail(&mut self, what: &str, error: &BoxError) {
        println!("{what}: error: {error}");
        self.errors.push(format!("{what}: {error}"));
    }

    /// The best uncontended rate of `combo` over its trials.
    fn uncontended_rate(&self, combo: Combo) -> Option<f64> {
        self.uncontended
            .iter()
            .filter(|t| t.combo == combo)
            .filter_map(|t| t.result.as_ref().ok())
            .map(Uncontended::per_sec)
            .reduce(f64::max)
    }

    /// The trial of `combo` with the most handoffs per second.
    fn contended_of(&self, combo: Combo) -> Option<&Contended> {
        self.contended
            .iter()
            .filter(|t| t.combo == combo)
            .filter_map(|t| t.result.as_ref().ok())
            .reduce(|a, b| if b.per_sec() > a.per_sec() { b } else { a })
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
        let handoffs = |c| self.contended_of(c).map(Contended::per_sec);
        let goal = |name, ratio, target, at_most| Goal {
            name,
            ratio,
            target,
            at_most,
        };
        vec![
            goal(
                "uncontended cycles/s, lockkeeper on Keeper",
                ratio(
                    self.uncontended_rate(lk_keeper),
                    self.uncontended_rate(base),
                ),
                3.0,
                false,
            ),
            goal(
                "uncontended cycles/s, lockkeeper on ZooKeeper",
                ratio(self.uncontended_rate(lk_zk), self.uncontended_rate(base)),
                1.5,
                false,
            ),
            goal(
                "contended handoffs/s, lockkeeper on Keeper",
                ratio(handoffs(lk_keeper), handoffs(base)),
                3.0,
                false,
            ),
            goal(
                "contended handoffs/s, lockkeeper on ZooKeeper",
                ratio(handoffs(lk_zk), handoffs(base)),
                1.5,
                false,
            ),
            goal(
                "p99 wait, lockkeeper on Keeper",
                ratio(self.p99_wait_us(lk_keeper), self.p99_wait_us(base)),
                1.0,
                true,
            ),
            goal(
                "p99 wait, lockkeeper on ZooKeeper",
                ratio(self.p99_wait_us(lk_zk), self.p99_wait_us(base)),
                1.0,
                true,
            ),
        ]
    }

    fn print_summary(&self) {
        let base = Combo::BASELINE;
        println!(
            "\nagainst Curator on ZooKeeper, same run {:>10} {:>10} {:>9}",
            "cycles/s", "handoffs/s", "p99 wait"
        );
        for combo in Combo::ALL.into_iter().filter(|c| *c != base) {
            let handoffs = |c| self.contended_of(c).map(Contended::per_sec);
            println!(
                "{:<37} {:>10} {:>10} {:>9}",
                combo.label(),
                fmt_ratio(self.uncontended_rate(combo), self.uncontended_rate(base)),
                fmt_ratio(handoffs(combo), handoffs(base)),
                fmt_ratio(self.p99_wait_us(combo), self.p99_wait_us(base)),
            );
        }
        println!("\ntargets:");
        for goal in self.goals() {
            println!("  {}", goal.row());
        }
    }

    /// Prints the goals and returns the JSON, or a `Partial` naming what failed.
    pub fn finish(self, settings: &Settings) -> Result<Json, BoxError> {
        self.print_summary();
        let json = self.to_json(settings);
        json_or_partial(json, &self.errors, "lock benchmark: ")
    }

    pub fn to_json(&self, s: &Settings) -> Json {
        let trial_fields = |combo: Combo, trial: u32| {
            vec![
                ("client", Json::Str(combo.client.json_key().into())),
                ("server", Json::Str(combo.server.json_key().into())),
                ("trial", Json::num(trial + 1)),
            ]
        };
        let uncontended = self
            .uncontended
            .iter()
            .map(|t| {
                let mut f = trial_fields(t.combo, t.trial);
                match &t.result {
                    Ok(u) => f.extend([
                        ("cycles", Json::Num(u.cycles as f64)),
                        ("elapsed_s", Json::num(u.elapsed.as_secs_f64())),
                        ("cycles_per_sec", Json::num(u.per_sec())),
                    ]),
                    Err(e) => f.push(("error", Json::Str(e.clone()))),
                }
                Json::obj(f)
            })
            .collect();
        let contended = self
            .contended
            .iter()
            .map(|t| {
                let mut f = trial_fields(t.combo, t.trial);
                match &t.result {
                    Ok(c) => f.extend(contended_json(c)),
                    Err(e) => f.push(("error", Json::Str(e.clone()))),
                }
                Json::obj(f)
            })
            .collect();
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
        let goals = self.goals().iter().map(Goal::to_json).collect();
        let mut servers: Vec<(&str, Json)> = self
            .targets
            .iter()
            .map(|t| (t.kind.json_key(), Json::Str(t.command.clone())))
            .collect();
        servers.push((
            "curator",
            self.curator_command.clone().map_or(Json::Null, Json::Str),
        ));
        Json::obj(vec![
            (
                "command",
                Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
            ),
            ("servers", Json::obj(servers)),
            (
                "settings",
                Json::obj(vec![
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
                ]),
            ),
            ("uncontended", Json::Arr(uncontended)),
            ("contended", Json::Arr(contended)),
            ("best", self.best_json()),
            ("notifications", Json::Arr(herd)),
            ("goals", Json::Arr(goals)),
            (
                "errors",
                Json::Arr(self.errors.iter().map(|e| Json::Str(e.clone())).collect()),
            ),
        ])
    }
}

/// The figures of one contended run, wait times in microseconds.
fn contended_json(c: &Contended) -> Vec<(&'static str, Json)> {
    let us = |d: std::time::Duration| Json::num(d.as_secs_f64() * 1e6);
    vec![
        ("sessions", Json::num(c.clients as u32)),
        ("handoffs", Json::Num(c.handoffs as f64)),
        ("elapsed_s", Json::num(c.elapsed.as_secs_f64())),
        ("handoffs_per_sec", Json::num(c.per_sec())),
        ("wait_p50_us", us(c.wait_quantile(0.5))),
        ("wait_p99_us", us(c.wait_quantile(0.99))),
        ("wait_max_us", us(c.max_wait)),
        ("wait_mean_us", us(c.mean_wait)),
        ("fairness", Json::opt_num(c.fairness())),
    ]
}

impl Report {
    /// Each combination's best trial, with its ratios against Curator on ZooKeeper's best.
    fn best_json(&self) -> Json {
        let base = Combo::BASELINE;
        let handoffs = |c| self.contended_of(c).map(Contended::per_sec);
        Json::Arr(
            Combo::ALL
                .into_iter()
                .map(|combo| {
                    Json::obj(vec![
                        ("client", Json::Str(combo.client.json_key().into())),
                        ("server", Json::Str(combo.server.json_key().into())),
                        (
                            "cycles_per_sec",
                            Json::opt_num(self.uncontended_rate(combo)),
                        ),
                        ("handoffs_per_sec", Json::opt_num(handoffs(combo))),
                        ("wait_p99_us", Json::opt_num(self.p99_wait_us(combo))),
                        (
                            "cycles_vs_curator_on_zookeeper",
                            Json::opt_num(ratio(
                                self.uncontended_rate(combo),
                                self.uncontended_rate(base),
                            )),
                        ),
                        (
                            "handoffs_vs_curator_on_zookeeper",
                            Json::opt_num(ratio(handoffs(combo), handoffs(base))),
                        ),
                        (
                            "wait_p99_vs_curator_on_zookeeper",
                            Json::opt_num(ratio(self.p99_wait_us(combo), self.p99_wait_us(base))),
                        ),
                    ])
                })
                .collect(),
        )
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
            combo,
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
            combo: Combo::ALL[0],
            trial: 0,
            result: Ok(quick),
        });
        r.contended.push(Trial {
            combo: Combo::BASELINE,
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
            launcher: crate::bench::process::Launcher {
                keeper_bin: "unused".into(),
                java: "java".into(),
                zookeeper_classpath: String::new(),
                zookeeper_jvm_opts: Vec::new(),
                zookeeper_force_sync: true,
                keeper_flags: Default::default(),
            },
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
