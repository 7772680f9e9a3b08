//! Comparisons against Curator on ZooKeeper, shared by `bench --locks` and `bench --recipes`:
//! the four client/server combinations, the order they are measured in, one trial's result, the
//! ratio targets the figures are held to, and what every report of theirs carries besides its
//! own figures ([`Record`]: the servers, the Curator command, the failures, the JSON header, the
//! ratio table and the targets list).
//!
//! Only a ratio measured in the same run on the same machine means anything elsewhere, so every
//! figure of those benchmarks is set against Curator on ZooKeeper, the combination most Java
//! services run today.

use std::time::Duration;

use super::BoxError;
use super::compare::json_or_partial;
use super::process::{ChildServer, Launcher, ServerKind};
use super::startup::first_session;
use super::stats::{Json, fmt_duration, fmt_ratio};

/// A server under test: which one, and where.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub kind: ServerKind,
    pub connect: String,
    pub command: String,
}

/// Starts Keeper and Apache ZooKeeper as child processes and waits (up to `limit` each) for
/// their first session, printing how each was started. Dropping the servers kills them.
pub(crate) async fn start_servers(
    launcher: &Launcher,
    limit: Duration,
) -> Result<(Vec<ChildServer>, Vec<Target>), BoxError> {
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for kind in [ServerKind::Keeper, ServerKind::Zookeeper] {
        let mut server = ChildServer::spawn(kind, launcher)?;
        let ready = first_session(&mut server, limit).await?;
        let command = launcher.describe(kind);
        println!(
            "{kind}: {command} (first session after {})",
            fmt_duration(ready)
        );
        targets.push(Target {
            kind,
            connect: server.addr().to_string(),
            command,
        });
        servers.push(server);
    }
    Ok((servers, targets))
}

/// Starts both servers (see [`start_servers`]), takes `measure`'s figures against them, then
/// kills them: the servers stay up until every figure is taken.
pub(crate) async fn on_both_servers<R>(
    launcher: &Launcher,
    limit: Duration,
    measure: impl AsyncFnOnce(&[Target]) -> R,
) -> Result<R, BoxError> {
    let (servers, targets) = start_servers(launcher, limit).await?;
    let figures = measure(&targets).await;
    drop(servers);
    Ok(figures)
}

/// Every run of `trials` trials over the four combinations, each with the address of its
/// server (a combination whose server is missing is left out): every combination in turn,
/// every other trial in reverse order, so that whatever drifts during a run (a server's log
/// file warming up, the JIT, other load on the machine) does not favour the combinations that
/// happen to come last.
pub(crate) fn runs(trials: u32, targets: &[Target]) -> impl Iterator<Item = (u32, Combo, String)> {
    (0..trials).flat_map(move |trial| {
        Combo::in_turn(trial)
            .filter_map(move |combo| Some((trial, combo, connect(targets, combo.server)?)))
    })
}

/// Where the server of `kind` among `targets` listens.
pub(crate) fn connect(targets: &[Target], kind: ServerKind) -> Option<String> {
    targets
        .iter()
        .find(|t| t.kind == kind)
        .map(|t| t.connect.clone())
}

/// Which client library runs the recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Client {
    Lockkeeper,
    Curator,
}

impl Client {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Client::Lockkeeper => "lockkeeper",
            Client::Curator => "Curator",
        }
    }

    pub(crate) fn json_key(self) -> &'static str {
        match self {
            Client::Lockkeeper => "lockkeeper",
            Client::Curator => "curator",
        }
    }
}

/// A client on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Combo {
    pub client: Client,
    pub server: ServerKind,
}

impl Combo {
    /// Every combination, in the order measured; Curator on Keeper is extra information.
    pub(crate) const ALL: [Combo; 4] = [
        Combo::new(Client::Lockkeeper, ServerKind::Keeper),
        Combo::new(Client::Lockkeeper, ServerKind::Zookeeper),
        Combo::BASELINE,
        Combo::new(Client::Curator, ServerKind::Keeper),
    ];

    /// What every ratio is taken against.
    pub(crate) const BASELINE: Combo = Combo::new(Client::Curator, ServerKind::Zookeeper);

    /// The combinations in the order of trial `trial`: every other trial reversed.
    pub(crate) fn in_turn(trial: u32) -> impl Iterator<Item = Combo> {
        let mut order = Combo::ALL;
        if trial % 2 == 1 {
            order.reverse();
        }
        order.into_iter()
    }

    pub(crate) const fn new(client: Client, server: ServerKind) -> Combo {
        Combo { client, server }
    }

    /// `lockkeeper-keeper`, for znode paths.
    pub(crate) fn key(self) -> String {
        format!("{}-{}", self.client.json_key(), self.server.json_key())
    }

    /// `lockkeeper on Keeper`, for tables.
    pub(crate) fn label(self) -> String {
        format!("{} on {}", self.client.name(), self.server.name())
    }

    /// The `client` and `server` fields of a JSON row.
    pub(crate) fn json_fields(self) -> Vec<(&'static str, Json)> {
        vec![
            ("client", Json::Str(self.client.json_key().into())),
            ("server", Json::Str(self.server.json_key().into())),
        ]
    }
}

/// One measurement of one combination in one trial.
pub(crate) struct Trial<T> {
    pub combo: Combo,
    pub trial: u32,
    pub result: Result<T, String>,
}

impl<T> Trial<T> {
    /// Its JSON row: `client`, `server`, `trial` (from 1), then `fields` of the figure or its
    /// `error`.
    pub(crate) fn json(&self, fields: impl FnOnce(&T) -> Vec<(&'static str, Json)>) -> Json {
        let mut f = self.combo.json_fields();
        f.push(("trial", Json::num(self.trial + 1)));
        match &self.result {
            Ok(figure) => f.extend(fields(figure)),
            Err(e) => f.push(("error", Json::Str(e.clone()))),
        }
        Json::obj(f)
    }
}

/// The figures of `combo` that were taken, in trial order.
pub(crate) fn taken<T>(trials: &[Trial<T>], combo: Combo) -> impl Iterator<Item = &T> {
    trials
        .iter()
        .filter(move |t| t.combo == combo)
        .filter_map(|t| t.result.as_ref().ok())
}

/// The figure of `combo` with the highest `score` (the first of equals).
pub(crate) fn best<T>(trials: &[Trial<T>], combo: Combo, score: impl Fn(&T) -> f64) -> Option<&T> {
    taken(trials, combo).reduce(|a, b| if score(b) > score(a) { b } else { a })
}

/// One row per combination, in [`Combo::ALL`]'s order: `client`, `server`, then `fields`.
pub(crate) fn per_combo_json(fields: impl Fn(Combo) -> Vec<(&'static str, Json)>) -> Json {
    Json::Arr(
        Combo::ALL
            .into_iter()
            .map(|combo| {
                let mut f = combo.json_fields();
                f.extend(fields(combo));
                Json::obj(f)
            })
            .collect(),
    )
}

/// A column of the printed ratio table: each combination's `figure` over Curator on
/// ZooKeeper's.
pub(crate) struct Column<'a> {
    pub title: &'static str,
    pub width: usize,
    pub figure: &'a dyn Fn(Combo) -> Option<f64>,
}

/// What every comparison report carries besides its own figures.
pub(crate) struct Record {
    pub targets: Vec<Target>,
    /// How the Curator JVM was started, once it was.
    pub curator_command: Option<String>,
    /// Every figure that could not be taken, with the reason.
    pub errors: Vec<String>,
}

impl Record {
    pub(crate) fn new(targets: &[Target]) -> Record {
        Record {
            targets: targets.to_vec(),
            curator_command: None,
            errors: Vec::new(),
        }
    }

    /// The Curator JVM when it started (its command printed and kept for the JSON); else
    /// `None`, the reason recorded as a failure.
    pub(crate) fn curator<J>(
        &mut self,
        started: Result<J, BoxError>,
        describe: impl Fn(&J) -> &str,
    ) -> Option<J> {
        match started {
            Ok(jvm) => {
                println!("Curator: {}", describe(&jvm));
                self.curator_command = Some(describe(&jvm).to_string());
                Some(jvm)
            }
            Err(e) => {
                self.errors.push(format!("Curator: {e}"));
                None
            }
        }
    }

    /// Prints and records a figure that could not be taken.
    pub(crate) fn fail(&mut self, what: &str, error: &BoxError) {
        println!("{what}: error: {error}");
        self.errors.push(format!("{what}: {error}"));
    }

    /// Adds one trial to `trials`: its `row` printed, or its failure (`<what>, <combo>`)
    /// printed and recorded.
    pub(crate) fn add<T>(
        &mut self,
        trials: &mut Vec<Trial<T>>,
        what: &str,
        (combo, trial): (Combo, u32),
        result: Result<T, BoxError>,
        row: impl FnOnce(&T) -> String,
    ) {
        match &result {
            Ok(figure) => println!("{}", row(figure)),
            Err(e) => self.fail(&format!("{what}, {}", combo.label()), e),
        }
        trials.push(Trial {
            combo,
            trial,
            result: result.map_err(|e| e.to_string()),
        });
    }

    /// The JSON document: `command`, `servers`, `settings`, the report's own `figures`, `goals`
    /// and `errors`.
    pub(crate) fn json(
        &self,
        settings: Vec<(&'static str, Json)>,
        figures: Vec<(&'static str, Json)>,
        goals: &[Goal],
    ) -> Json {
        let mut servers: Vec<(&str, Json)> = self
            .targets
            .iter()
            .map(|t| (t.kind.json_key(), Json::Str(t.command.clone())))
            .collect();
        servers.push((
            "curator",
            self.curator_command.clone().map_or(Json::Null, Json::Str),
        ));
        let mut fields = vec![
            (
                "command",
                Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
            ),
            ("servers", Json::obj(servers)),
            ("settings", Json::obj(settings)),
        ];
        fields.extend(figures);
        fields.push((
            "goals",
            Json::Arr(goals.iter().map(Goal::to_json).collect()),
        ));
        fields.push((
            "errors",
            Json::Arr(self.errors.iter().map(|e| Json::Str(e.clone())).collect()),
        ));
        Json::obj(fields)
    }

    /// `json`, or a [`Partial`](super::compare::Partial) carrying it and naming every failure
    /// (each also on stderr after `prefix`).
    pub(crate) fn finish(&self, json: Json, prefix: &str) -> Result<Json, BoxError> {
        json_or_partial(json, &self.errors, prefix)
    }
}

/// Prints every combination but the baseline with `columns`' ratios against Curator on
/// ZooKeeper.
pub(crate) fn print_ratios(columns: &[Column]) {
    let mut header = "\nagainst Curator on ZooKeeper, same run".to_string();
    for c in columns {
        header.push_str(&format!(" {:>w$}", c.title, w = c.width));
    }
    println!("{header}");
    for combo in Combo::ALL.into_iter().filter(|c| *c != Combo::BASELINE) {
        let mut row = format!("{:<37}", combo.label());
        for c in columns {
            let ratio = fmt_ratio((c.figure)(combo), (c.figure)(Combo::BASELINE));
            row.push_str(&format!(" {ratio:>w$}", w = c.width));
        }
        println!("{row}");
    }
}

/// Prints the `targets:` list.
pub(crate) fn print_goals(goals: &[Goal]) {
    println!("\ntargets:");
    for goal in goals {
        println!("  {}", goal.row());
    }
}

/// A ratio the benchmark is held to: `measured / baseline` should reach `target` (rates), or
/// stay at or below it (`at_most`, for times, where lower is better).
pub(crate) struct Goal {
    pub name: &'static str,
    pub ratio: Option<f64>,
    pub target: f64,
    pub at_most: bool,
}

impl Goal {
    /// `None` when either side could not be measured.
    pub(crate) fn met(&self) -> Option<bool> {
        let r = self.ratio?;
        Some(if self.at_most {
            r <= self.target
        } else {
            r >= self.target
        })
    }

    /// One line of the printed `targets:` list.
    pub(crate) fn row(&self) -> String {
        let verdict = match self.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "not measured",
        };
        // 3 prints as `3x`, a third as `0.33x`.
        let target = if self.target.fract() == 0.0 {
            format!("{}", self.target)
        } else {
            format!("{:.2}", self.target)
        };
        format!(
            "{:<46} {:>8}  target {} {target}x  {verdict}",
            self.name,
            fmt_ratio(self.ratio, Some(1.0)),
            if self.at_most { "<=" } else { ">=" },
        )
    }

    pub(crate) fn to_json(&self) -> Json {
        Json::obj(vec![
            ("name", Json::Str(self.name.into())),
            ("ratio", Json::opt_num(self.ratio)),
            ("target", Json::num(self.target)),
            (
                "direction",
                Json::Str(if self.at_most { "at_most" } else { "at_least" }.into()),
            ),
            (
                "met",
                Json::Str(match self.met() {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "unknown".into(),
                }),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_trial_runs_in_reverse() {
        let first: Vec<Combo> = Combo::in_turn(0).collect();
        let second: Vec<Combo> = Combo::in_turn(1).collect();
        assert_eq!(first, Combo::ALL);
        assert_eq!(second.first(), Combo::ALL.last());
        assert_eq!(second.last(), Combo::ALL.first());
        assert_eq!(Combo::in_turn(2).collect::<Vec<_>>(), first);
    }

    #[test]
    fn a_goal_is_met_on_the_right_side_of_its_target() {
        let goal = |ratio, at_most| Goal {
            name: "g",
            ratio,
            target: 3.0,
            at_most,
        };
        assert_eq!(goal(Some(3.0), false).met(), Some(true));
        assert_eq!(goal(Some(2.9), false).met(), Some(false));
        assert_eq!(goal(Some(2.9), true).met(), Some(true));
        assert_eq!(goal(None, true).met(), None);
        assert!(goal(Some(2.0), false).row().contains("MISSED"));
        assert!(goal(None, false).row().contains("not measured"));
        assert!(goal(Some(1.0), false).row().contains(">= 3x"));
        let third = Goal {
            target: 1.0 / 3.0,
            ..goal(Some(0.2), true)
        };
        assert!(third.row().contains("<= 0.33x  met"), "{}", third.row());
    }
}
