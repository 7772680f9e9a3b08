//! What every comparison's report is made of, whichever mode measured it (`--locks`,
//! `--recipes`, `--etcd`): the trials of each entrant, the figure a comparison takes from
//! them, the spread of a set of figures, the failures, the ratio targets, and the `--json`
//! document with its header.
//!
//! Invariants: a figure that could not be taken is kept as an `Err` with its reason, printed
//! when it happens and listed again at the end; a report with any failure ends as a
//! [`Partial`], which still carries the JSON of everything measured, so that a run is never
//! mistaken for a complete one and never loses what it did measure.

use super::BoxError;
use super::stats::{Json, fmt_ratio};

/// Who is measured in a comparison: a client on a server (`versus::Combo`), or one side of
/// the etcd comparison.
pub(crate) trait Entrant: Copy + PartialEq {
    /// `lockkeeper on Keeper`, for tables and failures.
    fn label(self) -> String;
    /// The fields that name it in a JSON row (`client`, and `server` where there are several).
    fn json_fields(self) -> Vec<(&'static str, Json)>;
}

/// One measurement of one entrant in one trial (from 0), or why it could not be taken.
pub(crate) struct Trial<E, T> {
    pub who: E,
    pub trial: u32,
    pub result: Result<T, String>,
}

impl<E: Entrant, T> Trial<E, T> {
    /// Its JSON row: the entrant's fields, `trial` (from 1), then `fields` of the figure or
    /// its `error`.
    pub(crate) fn json(&self, fields: impl FnOnce(&T) -> Vec<(&'static str, Json)>) -> Json {
        let mut f = self.who.json_fields();
        f.push(("trial", Json::num(self.trial + 1)));
        match &self.result {
            Ok(figure) => f.extend(fields(figure)),
            Err(e) => f.push(("error", Json::Str(e.clone()))),
        }
        Json::obj(f)
    }
}

/// The figures of `who` that were taken, in trial order.
pub(crate) fn taken<E: Entrant, T>(trials: &[Trial<E, T>], who: E) -> impl Iterator<Item = &T> {
    trials
        .iter()
        .filter(move |t| t.who == who)
        .filter_map(|t| t.result.as_ref().ok())
}

/// The figure of `who` with the highest `score` (the first of equals).
pub(crate) fn best<E: Entrant, T>(
    trials: &[Trial<E, T>],
    who: E,
    score: impl Fn(&T) -> f64,
) -> Option<&T> {
    taken(trials, who).reduce(|a, b| if score(b) > score(a) { b } else { a })
}

/// How a set of figures spreads: how many, the least, the median, the most and the mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spread {
    pub n: usize,
    pub min: f64,
    /// The middle value; of an even count, the lower of the two middle ones (a value that was
    /// measured, not an average of two).
    pub median: f64,
    pub max: f64,
    pub mean: f64,
}

impl Spread {
    /// Of `values`; `None` when there are none.
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        Some(Spread {
            n,
            min: values[0],
            median: values[(n - 1) / 2],
            max: values[n - 1],
            mean: values.iter().sum::<f64>() / n as f64,
        })
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

/// Prints the `targets:` list.
pub(crate) fn print_goals(goals: &[Goal]) {
    println!("\ntargets:");
    for goal in goals {
        println!("  {}", goal.row());
    }
}

/// What every report carries besides its own figures: the programs that ran and the
/// failures.
pub(crate) struct Record {
    /// Each program measured, by JSON key, and the command that started it (`None` while it
    /// has not started). Empty when the report names its peer otherwise (etcd's endpoint).
    programs: Vec<(&'static str, Option<String>)>,
    /// Every figure that could not be taken, with the reason.
    pub errors: Vec<String>,
}

impl Record {
    pub(crate) fn new(programs: Vec<(&'static str, Option<String>)>) -> Record {
        Record {
            programs,
            errors: Vec::new(),
        }
    }

    /// A program of the run (`key` in the JSON, `name` in print) when it started: its command
    /// printed and kept for the JSON. Else `None`, the reason recorded as a failure.
    pub(crate) fn started<J>(
        &mut self,
        (key, name): (&'static str, &str),
        started: Result<J, BoxError>,
        describe: impl Fn(&J) -> &str,
    ) -> Option<J> {
        match started {
            Ok(program) => {
                println!("{name}: {}", describe(&program));
                let command = Some(describe(&program).to_string());
                match self.programs.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, slot)) => *slot = command,
                    None => self.programs.push((key, command)),
                }
                Some(program)
            }
            Err(e) => {
                self.errors.push(format!("{name}: {e}"));
                None
            }
        }
    }

    /// Prints and records a figure that could not be taken.
    pub(crate) fn fail(&mut self, what: &str, error: &BoxError) {
        println!("{what}: error: {error}");
        self.errors.push(format!("{what}: {error}"));
    }

    /// Adds one trial to `trials`: its `row` printed, or its failure (`<what>, <entrant>`)
    /// printed and recorded.
    pub(crate) fn add<E: Entrant, T>(
        &mut self,
        trials: &mut Vec<Trial<E, T>>,
        what: &str,
        (who, trial): (E, u32),
        result: Result<T, BoxError>,
        row: impl FnOnce(&T) -> String,
    ) {
        match &result {
            Ok(figure) => println!("{}", row(figure)),
            Err(e) => self.fail(&format!("{what}, {}", who.label()), e),
        }
        trials.push(Trial {
            who,
            trial,
            result: result.map_err(|e| e.to_string()),
        });
    }

    /// The JSON document: `command`, `servers` (when the record names programs), `header`,
    /// `settings`, the report's own `figures`, `goals` and `errors`.
    pub(crate) fn json(
        &self,
        header: Vec<(&'static str, Json)>,
        settings: Vec<(&'static str, Json)>,
        figures: Vec<(&'static str, Json)>,
        goals: &[Goal],
    ) -> Json {
        let mut fields = vec![(
            "command",
            Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
        )];
        if !self.programs.is_empty() {
            let programs = self
                .programs
                .iter()
                .map(|(key, command)| (*key, command.clone().map_or(Json::Null, Json::Str)))
                .collect();
            fields.push(("servers", Json::obj(programs)));
        }
        fields.extend(header);
        fields.push(("settings", Json::obj(settings)));
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

    /// `json`, or a [`Partial`] carrying it and naming every failure (each also on stderr
    /// after `prefix`).
    pub(crate) fn finish(&self, json: Json, prefix: &str) -> Result<Json, BoxError> {
        json_or_partial(json, &self.errors, prefix)
    }
}

/// A benchmark in which some figure could not be taken or a check failed; carries what was
/// measured (for `--json`) and what went wrong.
#[derive(Debug)]
pub(crate) struct Partial(pub Json, pub String);

impl Partial {
    pub(crate) fn new(json: Json) -> Partial {
        Partial(
            json,
            "some figures could not be measured (errors above)".into(),
        )
    }
}

/// The JSON on success, or a [`Partial`] naming every failure, each also printed on stderr
/// after `prefix`.
pub(crate) fn json_or_partial(
    json: Json,
    failures: &[String],
    prefix: &str,
) -> Result<Json, BoxError> {
    if failures.is_empty() {
        return Ok(json);
    }
    for f in failures {
        eprintln!("{prefix}{f}");
    }
    Err(Box::new(Partial(json, failures.join("; "))))
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Partial {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Side(&'static str);

    impl Entrant for Side {
        fn label(self) -> String {
            self.0.to_string()
        }
        fn json_fields(self) -> Vec<(&'static str, Json)> {
            vec![("client", Json::Str(self.0.into()))]
        }
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

    #[test]
    fn a_spread_takes_a_measured_middle_value() {
        assert_eq!(Spread::of([]), None);
        let odd = Spread::of([3.0, 1.0, 2.0]).expect("three values");
        assert_eq!((odd.n, odd.min, odd.median, odd.max), (3, 1.0, 2.0, 3.0));
        assert!((odd.mean - 2.0).abs() < 1e-9);
        let even = Spread::of([4.0, 1.0, 2.0, 3.0]).expect("four values");
        assert_eq!(even.median, 2.0, "the lower middle, not 2.5");
    }

    #[test]
    fn trials_are_picked_by_entrant_and_failures_kept() {
        let (a, b) = (Side("a"), Side("b"));
        let mut record = Record::new(vec![("server", Some("serve".into()))]);
        let mut trials = Vec::new();
        record.add(&mut trials, "rate", (a, 0), Ok(1.0), |r| format!("{r}"));
        record.add(&mut trials, "rate", (b, 0), Ok(5.0), |r| format!("{r}"));
        record.add(&mut trials, "rate", (a, 1), Ok(3.0), |r| format!("{r}"));
        record.add(&mut trials, "rate", (b, 1), Err("down".into()), |r| {
            format!("{r}")
        });
        assert_eq!(best(&trials, a, |r| *r), Some(&3.0));
        assert_eq!(taken(&trials, b).collect::<Vec<_>>(), [&5.0]);
        assert_eq!(record.errors, ["rate, b: down"]);
        let failed = record.started(("peer", "Peer"), Err::<(), _>("no jar".into()), |_| "");
        assert!(failed.is_none());
        assert_eq!(record.errors[1], "Peer: no jar");
        let text = record
            .json(
                vec![("endpoint", Json::Str("e".into()))],
                vec![],
                vec![],
                &[],
            )
            .render();
        assert!(text.contains("\"server\": \"serve\""), "{text}");
        assert!(text.contains("\"endpoint\": \"e\""), "{text}");
        let row = trials[3].json(|r| vec![("rate", Json::num(*r))]).render();
        assert!(
            row.contains("\"error\": \"down\"") && row.contains("\"trial\": 2"),
            "{row}"
        );
        let err = record
            .finish(Json::Null, "test: ")
            .expect_err("failures make a Partial");
        assert!(err.downcast_ref::<Partial>().is_some());
    }
}
