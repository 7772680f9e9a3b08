//! Comparisons against Curator on ZooKeeper, shared by `bench --locks` and `bench --recipes`:
//! the servers they start, the four client/server combinations and the order they are
//! measured in, the record of what ran, and the table of ratios against the baseline. The
//! parts of a report every mode shares (trials, failures, targets, the JSON document) are
//! in [`report`].
//!
//! Only a ratio measured in the same run on the same machine means anything elsewhere, so every
//! figure of those benchmarks is set against Curator on ZooKeeper, the combination most Java
//! services run today.

use std::time::Duration;

use super::BoxError;
use super::process::{ChildServer, Launcher, ServerKind};
use super::report::{self, Entrant, Record};
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
}
