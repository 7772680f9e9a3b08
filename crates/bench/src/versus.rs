//! Comparisons against Curator on ZooKeeper, shared by `bench --locks` and `bench --recipes`:
//! the servers they start, the four client/server combinations and the order they are
//! measured in, the record of what ran, and the summary: each combination's median and range
//! over its trials, then the ratios of medians against the baseline. The parts of a report
//! every mode shares (trials, spreads, failures, targets, the JSON document) are in
//! [`report`].
//!
//! Only a ratio measured in the same run on the same machine means anything elsewhere, so every
//! figure of those benchmarks is set against Curator on ZooKeeper, the combination most Java
//! services run today; and only a ratio of medians over alternating trials stands for the run
//! rather than its luckiest trial.

use std::time::Duration;

use super::BoxError;
use super::process::{ChildServer, Launcher, ServerKind};
use super::report::{
    self, Entrant, Figure, Goal, Record, Spread, per_entrant_json, print_spreads, ratio_of_medians,
};
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
}

impl Combo {
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

impl Entrant for Combo {
    fn label(self) -> String {
        Combo::label(self)
    }

    fn json_fields(self) -> Vec<(&'static str, Json)> {
        Combo::json_fields(self)
    }
}

/// One measurement of one combination in one trial.
pub(crate) type Trial<T> = report::Trial<Combo, T>;

/// One row per combination, in [`Combo::ALL`]'s order: `client`, `server`, then `fields`.
pub(crate) fn per_combo_json(fields: impl Fn(Combo) -> Vec<(&'static str, Json)>) -> Json {
    per_entrant_json(&Combo::ALL, fields)
}

/// A figure of the summary, set against Curator on ZooKeeper: each combination's median and
/// range, then the ratio of its median to the baseline's, given in `--json` as `vs`.
pub(crate) struct Column<'a> {
    pub figure: Figure<'a, Combo>,
    /// The ratio's key in `--json`, `cycles_vs_curator_on_zookeeper`.
    pub vs: &'static str,
}

impl Column<'_> {
    /// `combo`'s median over Curator on ZooKeeper's.
    pub(crate) fn ratio(&self, combo: Combo) -> Option<f64> {
        ratio_of_medians(self.figure.of(combo), self.figure.of(Combo::BASELINE))
    }
}

/// The `medians` of a `--json` document: per combination, each column's spread and its ratio
/// of medians against Curator on ZooKeeper, then `more`'s fields (figures without a ratio).
pub(crate) fn medians_json(
    columns: &[Column],
    more: impl Fn(Combo) -> Vec<(&'static str, Json)>,
) -> Json {
    per_combo_json(|combo| {
        let mut fields = Vec::new();
        for c in columns {
            fields.push(c.figure.json(combo));
            fields.push((c.vs, Json::opt_num(c.ratio(combo))));
        }
        fields.extend(more(combo));
        fields
    })
}

/// A target on `combo`'s median `figure` over Curator on ZooKeeper's.
pub(crate) fn goal(
    name: &'static str,
    figure: impl Fn(Combo) -> Option<Spread>,
    combo: Combo,
    target: f64,
    at_most: bool,
) -> Goal {
    Goal {
        name,
        ratio: ratio_of_medians(figure(combo), figure(Combo::BASELINE)),
        target,
        at_most,
    }
}

/// The record of a comparison against Curator: each server's command, and Curator's once
/// its JVM has started.
pub(crate) fn record(targets: &[Target]) -> Record {
    let mut programs: Vec<(&'static str, Option<String>)> = targets
        .iter()
        .map(|t| (t.kind.json_key(), Some(t.command.clone())))
        .collect();
    programs.push(("curator", None));
    Record::new(programs)
}

/// Records the Curator JVM when it started; see [`Record::started`].
pub(crate) fn curator<J>(
    record: &mut Record,
    started: Result<J, BoxError>,
    describe: impl Fn(&J) -> &str,
) -> Option<J> {
    record.started(("curator", "Curator"), started, describe)
}

/// The ratio table: every combination but the baseline, with each column's ratio of medians
/// against Curator on ZooKeeper.
pub(crate) fn ratios_table(columns: &[Column]) -> Vec<String> {
    let head = "ratio of medians against Curator on ZooKeeper, same run";
    let label_width = Combo::ALL
        .iter()
        .map(|c| c.label().len())
        .fold(head.len(), usize::max);
    // A column as wide as its title, and at least as `0.0312x`.
    let width = |c: &Column| c.figure.title.len().max(7);
    let mut line = format!("{head:<label_width$}");
    for c in columns {
        line.push_str(&format!("  {:>w$}", c.figure.title, w = width(c)));
    }
    let mut lines = vec![line];
    for combo in Combo::ALL.into_iter().filter(|c| *c != Combo::BASELINE) {
        let mut line = format!("{:<label_width$}", combo.label());
        for c in columns {
            let ratio = fmt_ratio(c.ratio(combo), Some(1.0));
            line.push_str(&format!("  {ratio:>w$}", w = width(c)));
        }
        lines.push(line);
    }
    lines
}

/// Prints the summary: each combination's median and range per column (see
/// [`report::spreads_table`]), then [`ratios_table`].
pub(crate) fn print_ratios(columns: &[Column]) {
    let figures: Vec<&Figure<Combo>> = columns.iter().map(|c| &c.figure).collect();
    print_spreads(&Combo::ALL, &figures);
    println!();
    for line in ratios_table(columns) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{fmt_rate, spread};

    /// Curator on ZooKeeper's best trial (400) and mean (about 183) would give other ratios.
    fn trials() -> Vec<Trial<f64>> {
        let lk_keeper = Combo::ALL[0];
        let lk_zk = Combo::ALL[1];
        let rates = [
            (lk_keeper, [300.0, 310.0, 290.0]),
            (Combo::BASELINE, [100.0, 400.0, 50.0]),
            (lk_zk, [150.0, 60.0, 100.0]),
        ];
        rates
            .into_iter()
            .flat_map(|(who, rates)| {
                (0..).zip(rates).map(move |(trial, rate)| Trial {
                    who,
                    trial,
                    result: Ok(rate),
                })
            })
            .collect()
    }

    fn cycles(trials: &[Trial<f64>]) -> Column<'_> {
        Column {
            figure: Figure {
                title: "cycles/s",
                key: "cycles_per_sec",
                fmt: fmt_rate,
                spread: Box::new(|combo| spread(trials, combo, |r| *r)),
            },
            vs: "cycles_vs_curator_on_zookeeper",
        }
    }

    #[test]
    fn the_summary_sets_each_median_against_curator_on_zookeepers() {
        let trials = trials();
        let columns = [cycles(&trials)];
        assert_eq!(
            ratios_table(&columns),
            [
                "ratio of medians against Curator on ZooKeeper, same run  cycles/s",
                "lockkeeper on Keeper                                        3.00x",
                "lockkeeper on ZooKeeper                                     1.00x",
                "Curator on Keeper                                               -",
            ]
        );
        let json = medians_json(&columns, |_| vec![("more", Json::Null)]);
        let Json::Arr(rows) = &json else {
            panic!("{}", json.render())
        };
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[0],
            Json::obj(vec![
                ("client", Json::Str("lockkeeper".into())),
                ("server", Json::Str("keeper".into())),
                (
                    "cycles_per_sec",
                    Spread::of([300.0, 310.0, 290.0]).expect("three").json()
                ),
                ("cycles_vs_curator_on_zookeeper", Json::Num(3.0)),
                ("more", Json::Null),
            ])
        );
        let text = json.render();
        assert!(
            text.contains("\"cycles_vs_curator_on_zookeeper\": 1,"),
            "{text}"
        );
        assert!(text.contains("\"cycles_per_sec\": null"), "{text}");
        let goal = goal("g", |c| columns[0].figure.of(c), Combo::ALL[0], 2.5, false);
        assert_eq!((goal.ratio, goal.met()), (Some(3.0), Some(true)));
    }

    #[test]
    fn every_other_trial_runs_in_reverse() {
        let first: Vec<Combo> = Combo::in_turn(0).collect();
        let second: Vec<Combo> = Combo::in_turn(1).collect();
        assert_eq!(first, Combo::ALL);
        assert_eq!(second.first(), Combo::ALL.last());
        assert_eq!(second.last(), Combo::ALL.first());
        assert_eq!(Combo::in_turn(2).collect::<Vec<_>>(), first);
    }
}
