//! What every comparison's report is made of, whichever mode measured it (`--locks`,
//! `--recipes`, `--etcd`): the trials of each entrant, the spread of a figure over them and
//! the ratio of medians a comparison takes from it, the printed table of spreads, the
//! failures, the ratio targets, and the `--json` document with its header.
//!
//! A comparison sets entrants against each other by the **median** of each one's trials, and
//! shows the range beside it: one lucky or unlucky trial moves neither the figure nor the
//! ratio, and the range tells how far the trials agree.
//!
//! Invariants: a figure that could not be taken is kept as an `Err` with its reason, printed
//! when it happens and listed again at the end; a report with any failure ends as a
//! [`Partial`], which still carries the JSON of everything measured, so that a run is never
//! mistaken for a complete one and never loses what it did measure.

use std::time::Duration;

use super::BoxError;
use super::stats::{Json, fmt_duration, fmt_ratio, ratio};

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
fn taken<E: Entrant, T>(trials: &[Trial<E, T>], who: E) -> impl Iterator<Item = &T> {
    trials
        .iter()
        .filter(move |t| t.who == who)
        .filter_map(|t| t.result.as_ref().ok())
}

/// How `figure` spreads over the trials of `who` that were taken; a trial without that figure
/// (`figure` gives `None`, e.g. a mean of no handoffs) is left out. `None` when no trial has
/// it. A figure that is itself a quantile of one trial (a p99 wait) spreads per trial: its
/// median is the median over trials of each trial's p99.
pub(crate) fn spread<E: Entrant, T, F: Into<Option<f64>>>(
    trials: &[Trial<E, T>],
    who: E,
    figure: impl Fn(&T) -> F,
) -> Option<Spread> {
    Spread::of(taken(trials, who).filter_map(|t| figure(t).into()))
}

/// `a`'s median over `b`'s: the one way a comparison sets two entrants against each other.
/// `None` when either has no trial, or `b`'s median is 0.
pub(crate) fn ratio_of_medians(a: Option<Spread>, b: Option<Spread>) -> Option<f64> {
    ratio(a.map(|s| s.median), b.map(|s| s.median))
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

    /// `{ "median", "min", "max", "trials" }`: the figure a comparison uses, how far its
    /// trials strayed from it, and how many there were.
    pub(crate) fn json(&self) -> Json {
        Json::obj(vec![
            ("median", Json::num(self.median)),
            ("min", Json::num(self.min)),
            ("max", Json::num(self.max)),
            ("trials", Json::Num(self.n as f64)),
        ])
    }

    /// `4210 (3980–4400)`: the median, then the range, each value through `fmt`.
    pub(crate) fn fmt(&self, fmt: impl Fn(f64) -> String) -> String {
        format!("{} ({}–{})", fmt(self.median), fmt(self.min), fmt(self.max))
    }
}

/// A rate, `4210`.
pub(crate) fn fmt_rate(per_sec: f64) -> String {
    format!("{per_sec:.0}")
}

/// A time kept in microseconds, `2.41ms`.
pub(crate) fn fmt_us(us: f64) -> String {
    fmt_secs(us / 1e6)
}

/// A time kept in milliseconds, `2.41ms`.
pub(crate) fn fmt_ms(ms: f64) -> String {
    fmt_secs(ms / 1e3)
}

fn fmt_secs(secs: f64) -> String {
    Duration::try_from_secs_f64(secs).map_or("-".into(), fmt_duration)
}

/// One figure of a comparison's summary: printed under `title` as each entrant's median and
/// range (see [`spreads_table`]), given in `--json` under `key` as [`Spread::json`].
pub(crate) struct Figure<'a, E> {
    pub title: &'static str,
    pub key: &'static str,
    /// How one value prints: [`fmt_rate`], [`fmt_us`], [`fmt_ms`].
    pub fmt: fn(f64) -> String,
    /// The figure's spread over an entrant's trials (see [`spread`]).
    pub spread: Box<dyn Fn(E) -> Option<Spread> + 'a>,
}

impl<E: Entrant> Figure<'_, E> {
    /// The figure's spread over `who`'s trials.
    pub(crate) fn of(&self, who: E) -> Option<Spread> {
        (self.spread)(who)
    }

    /// The field of `who`'s JSON row: `key` and its spread.
    pub(crate) fn json(&self, who: E) -> (&'static str, Json) {
        (self.key, spread_json(self.of(who)))
    }
}

/// [`Spread::json`], or `null` for a figure without any trial.
pub(crate) fn spread_json(spread: Option<Spread>) -> Json {
    spread.map_or(Json::Null, |s| s.json())
}

/// The printed table of `figures`, one row per entrant, each cell the median and range over
/// that entrant's trials: `median (min–max) over 5 trials` heads it when every cell has the
/// same number of trials, else each cell says its own (`n=4`), so that a figure with failed
/// trials is not taken for one of the full count.
pub(crate) fn spreads_table<E: Entrant>(entrants: &[E], figures: &[&Figure<E>]) -> Vec<String> {
    let spreads: Vec<Vec<Option<Spread>>> = entrants
        .iter()
        .map(|&who| figures.iter().map(|f| f.of(who)).collect())
        .collect();
    let mut counts = spreads.iter().flatten().flatten().map(|s| s.n);
    let first = counts.next();
    let same = first.filter(|&n| counts.all(|m| m == n));
    let head = match same {
        Some(1) => "median (min–max) over 1 trial".to_string(),
        Some(n) => format!("median (min–max) over {n} trials"),
        None => "median (min–max) over n trials".to_string(),
    };
    let cell = |s: &Option<Spread>, f: &&Figure<E>| match s {
        None => "-".to_string(),
        Some(s) if same.is_some() => s.fmt(f.fmt),
        Some(s) => format!("{} n={}", s.fmt(f.fmt), s.n),
    };
    let cells: Vec<Vec<String>> = spreads
        .iter()
        .map(|row| row.iter().zip(figures).map(|(s, f)| cell(s, f)).collect())
        .collect();
    let labels: Vec<String> = entrants.iter().map(|e| e.label()).collect();
    let label_width = labels
        .iter()
        .map(|l| l.chars().count())
        .fold(head.chars().count(), usize::max);
    let widths: Vec<usize> = figures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .fold(f.title.len(), usize::max)
        })
        .collect();
    let line = |first: &str, rest: Vec<&str>| {
        let mut line = format!("{first:<label_width$}");
        for (text, w) in rest.into_iter().zip(&widths) {
            line.push_str(&format!("  {text:>w$}"));
        }
        line
    };
    let mut lines = vec![line(&head, figures.iter().map(|f| f.title).collect())];
    for (label, row) in labels.iter().zip(&cells) {
        lines.push(line(label, row.iter().map(String::as_str).collect()));
    }
    lines
}

/// Prints [`spreads_table`] after a blank line.
pub(crate) fn print_spreads<E: Entrant>(entrants: &[E], figures: &[&Figure<E>]) {
    println!();
    for line in spreads_table(entrants, figures) {
        println!("{line}");
    }
}

/// One JSON row per entrant: its own fields (`client`, ...), then `fields`.
pub(crate) fn per_entrant_json<E: Entrant>(
    entrants: &[E],
    fields: impl Fn(E) -> Vec<(&'static str, Json)>,
) -> Json {
    Json::Arr(
        entrants
            .iter()
            .map(|&who| {
                let mut f = who.json_fields();
                f.extend(fields(who));
                Json::obj(f)
            })
            .collect(),
    )
}

/// A ratio the benchmark is held to: the median of `measured` over the median of `baseline`
/// (see [`ratio_of_medians`]) should reach `target` (rates), or stay at or below it
/// (`at_most`, for times, where lower is better).
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
        let verdict = verdict(self.met());
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
            ("met", met_json(self.met())),
        ])
    }
}

/// A target's verdict as printed: `met`, `MISSED`, or `not measured` when a side is missing.
pub(crate) fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

/// A target's verdict in `--json`: `yes`, `no` or `unknown`.
pub(crate) fn met_json(met: Option<bool>) -> Json {
    Json::Str(
        match met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        }
        .into(),
    )
}

/// What the goals of a comparison over trials are judged on, for the head of its list.
pub(crate) const OF_MEDIANS: &str = "each a ratio of medians over the trials";

/// The `targets:` list: its head, with what the ratios are of (`basis`) when given, then one
/// line per goal.
pub(crate) fn goals_table(goals: &[Goal], basis: Option<&str>) -> Vec<String> {
    let head = basis.map_or("targets:".to_string(), |b| format!("targets: {b}"));
    let rows = goals.iter().map(|goal| format!("  {}", goal.row()));
    std::iter::once(head).chain(rows).collect()
}

/// Prints [`goals_table`] after a blank line.
pub(crate) fn print_goals(goals: &[Goal], basis: Option<&str>) {
    println!();
    for line in goals_table(goals, basis) {
        println!("{line}");
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

    /// `who`'s trials with these figures, in order; `None` is a trial that failed.
    fn trials_of(who: Side, figures: &[Option<f64>]) -> Vec<Trial<Side, f64>> {
        (0..)
            .zip(figures)
            .map(|(trial, figure)| Trial {
                who,
                trial,
                result: figure.ok_or_else(|| "failed".to_string()),
            })
            .collect()
    }

    #[test]
    fn a_figure_spreads_over_its_entrants_trials_that_have_it() {
        let (a, b) = (Side("a"), Side("b"));
        let mut trials = trials_of(a, &[Some(9.0), Some(1.0), None, Some(2.0), Some(8.0)]);
        trials.extend(trials_of(b, &[Some(100.0)]));
        let s = spread(&trials, a, |r| *r).expect("a's trials");
        // The failed trial and b's are left out; of four, the lower middle.
        assert_eq!((s.n, s.min, s.median, s.max), (4, 1.0, 2.0, 9.0));
        // A figure some trials lack is taken over those that have it.
        let big = spread(&trials, a, |r| (*r > 1.5).then_some(*r)).expect("three have it");
        assert_eq!((big.n, big.min, big.median), (3, 2.0, 8.0));
        assert_eq!(spread(&trials, a, |_| None::<f64>), None);
        assert_eq!(spread(&trials, Side("c"), |r| *r), None);
    }

    #[test]
    fn a_ratio_is_of_medians_not_of_bests_or_means() {
        // a: median 30 (best 31, mean 20.3); b: median 10 (best 40, mean 20).
        let a = Spread::of([30.0, 31.0, 0.0]);
        let b = Spread::of([10.0, 40.0, 10.0]);
        assert_eq!(ratio_of_medians(a, b), Some(3.0));
        assert_eq!(ratio_of_medians(a, None), None);
        assert_eq!(ratio_of_medians(a, Spread::of([0.0])), None, "over 0");
    }

    #[test]
    fn a_spread_in_json_is_its_median_range_and_trials() {
        let s = Spread::of([3.5, 1.0, 2.0, 8.0]).expect("four values");
        assert_eq!(
            s.json(),
            Json::obj(vec![
                ("median", Json::Num(2.0)),
                ("min", Json::Num(1.0)),
                ("max", Json::Num(8.0)),
                ("trials", Json::Num(4.0)),
            ])
        );
        assert_eq!(s.fmt(fmt_rate), "2 (1–8)");
        assert_eq!(s.fmt(fmt_ms), "2.00ms (1.00ms–8.00ms)");
        assert_eq!(fmt_us(2_410.0), "2.41ms");
        assert_eq!(fmt_us(-1.0), "-", "a negative time is not printed as one");
    }

    fn figures<'a>(a: &'a [Trial<Side, f64>], b: &'a [Trial<Side, f64>]) -> Vec<Figure<'a, Side>> {
        vec![
            Figure {
                title: "rate",
                key: "rate_per_sec",
                fmt: fmt_rate,
                spread: Box::new(|who| spread(a, who, |r| *r)),
            },
            Figure {
                title: "wait",
                key: "wait_ms",
                fmt: fmt_ms,
                spread: Box::new(|who| spread(b, who, |r| *r)),
            },
        ]
    }

    #[test]
    fn the_spreads_table_gives_each_entrant_its_median_and_range() {
        let (x, y) = (Side("lockkeeper"), Side("peer"));
        let mut rates = trials_of(x, &[Some(300.0), Some(900.0), Some(310.0)]);
        rates.extend(trials_of(y, &[Some(100.0), Some(120.0), Some(90.0)]));
        let mut waits = trials_of(x, &[Some(2.0), Some(1.0), Some(3.0)]);
        waits.extend(trials_of(y, &[Some(7.0), Some(5.0), Some(6.0)]));
        let both = figures(&rates, &waits);
        let table = spreads_table(&[x, y], &[&both[0], &both[1]]);
        assert_eq!(
            table,
            [
                "median (min–max) over 3 trials           rate                    wait",
                "lockkeeper                      310 (300–900)  2.00ms (1.00ms–3.00ms)",
                "peer                             100 (90–120)  6.00ms (5.00ms–7.00ms)",
            ]
        );
        // A failed trial: each cell says how many trials it is of; a figure with none is `-`.
        let waits = trials_of(x, &[Some(2.0), None, Some(3.0)]);
        let both = figures(&rates, &waits);
        let table = spreads_table(&[x, y], &[&both[0], &both[1]]);
        assert_eq!(
            table[0],
            "median (min–max) over n trials               rate                        wait"
        );
        assert!(
            table[1].ends_with("310 (300–900) n=3  2.00ms (2.00ms–3.00ms) n=2"),
            "{table:?}"
        );
        assert!(table[2].ends_with("  -"), "{table:?}");
        let two = Spread::of([2.0, 3.0]).expect("two trials");
        assert_eq!(both[1].json(x), ("wait_ms", two.json()));
        assert_eq!(both[1].json(y), ("wait_ms", Json::Null));
    }

    #[test]
    fn the_targets_say_they_are_ratios_of_medians() {
        let goal = Goal {
            name: "g",
            ratio: Some(3.0),
            target: 3.0,
            at_most: false,
        };
        let table = goals_table(&[goal], Some(OF_MEDIANS));
        assert_eq!(table[0], "targets: each a ratio of medians over the trials");
        assert!(
            table[1].starts_with("  g ") && table[1].ends_with("met"),
            "{table:?}"
        );
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
        let a_spread = spread(&trials, a, |r| *r).expect("a's trials");
        assert_eq!((a_spread.n, a_spread.min, a_spread.max), (2, 1.0, 3.0));
        assert_eq!(
            spread(&trials, b, |r| *r).map(|s| s.n),
            Some(1),
            "b's failure left out"
        );
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
