//! Comparisons against Curator on ZooKeeper, shared by `bench --locks` and `bench --recipes`:
//! the four client/server combinations, the order they are measured in, one trial's result, and
//! the ratio targets the figures are held to.
//!
//! Only a ratio measured in the same run on the same machine means anything elsewhere, so every
//! figure of those benchmarks is set against Curator on ZooKeeper, the combination most Java
//! services run today.

use std::time::Duration;

use super::BoxError;
use super::process::{ChildServer, Launcher, ServerKind};
use super::startup::first_session;
use super::stats::{Json, fmt_duration, fmt_ratio};

/// A server under test: which one, and where.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: ServerKind,
    pub connect: String,
    pub command: String,
}

/// Starts Keeper and Apache ZooKeeper as child processes and waits (up to `limit` each) for
/// their first session, printing how each was started. Dropping the servers kills them.
pub async fn start_servers(
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

/// Which client library runs the recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    Lockkeeper,
    Curator,
}

impl Client {
    pub fn name(self) -> &'static str {
        match self {
            Client::Lockkeeper => "lockkeeper",
            Client::Curator => "Curator",
        }
    }

    pub fn json_key(self) -> &'static str {
        match self {
            Client::Lockkeeper => "lockkeeper",
            Client::Curator => "curator",
        }
    }
}

/// A client on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Combo {
    pub client: Client,
    pub server: ServerKind,
}

impl Combo {
    /// Every combination, in the order measured; Curator on Keeper is extra information.
    pub const ALL: [Combo; 4] = [
        Combo::new(Client::Lockkeeper, ServerKind::Keeper),
        Combo::new(Client::Lockkeeper, ServerKind::Zookeeper),
        Combo::BASELINE,
        Combo::new(Client::Curator, ServerKind::Keeper),
    ];

    /// What every ratio is taken against.
    pub const BASELINE: Combo = Combo::new(Client::Curator, ServerKind::Zookeeper);

    /// The combinations in the order of trial `trial`: every other trial reversed.
    pub fn in_turn(trial: u32) -> impl Iterator<Item = Combo> {
        let mut order = Combo::ALL;
        if trial % 2 == 1 {
            order.reverse();
        }
        order.into_iter()
    }

    pub const fn new(client: Client, server: ServerKind) -> Combo {
        Combo { client, server }
    }

    /// `lockkeeper-keeper`, for znode paths.
    pub fn key(self) -> String {
        format!("{}-{}", self.client.json_key(), self.server.json_key())
    }

    /// `lockkeeper on Keeper`, for tables.
    pub fn label(self) -> String {
        format!("{} on {}", self.client.name(), self.server.name())
    }

    /// The `client` and `server` fields of a JSON row.
    pub fn json_fields(self) -> Vec<(&'static str, Json)> {
        vec![
            ("client", Json::Str(self.client.json_key().into())),
            ("server", Json::Str(self.server.json_key().into())),
        ]
    }
}

/// One measurement of one combination in one trial.
pub struct Trial<T> {
    pub combo: Combo,
    pub trial: u32,
    pub result: Result<T, String>,
}

/// A ratio the benchmark is held to: `measured / baseline` should reach `target` (rates), or
/// stay at or below it (`at_most`, for times, where lower is better).
pub struct Goal {
    pub name: &'static str,
    pub ratio: Option<f64>,
    pub target: f64,
    pub at_most: bool,
}

impl Goal {
    /// `None` when either side could not be measured.
    pub fn met(&self) -> Option<bool> {
        let r = self.ratio?;
        Some(if self.at_most {
            r <= self.target
        } else {
            r >= self.target
        })
    }

    /// One line of the printed `targets:` list.
    pub fn row(&self) -> String {
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

    pub fn to_json(&self) -> Json {
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
