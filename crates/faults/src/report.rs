//! The results: the table printed at the end of a run, the `--json` file, and the table in
//! docs/safety.md generated from that file.
//!
//! Columns (docs/safety.md explains them to users): operations are turns begun at the resource;
//! overlaps are entries while another client was inside (no fencing); stale writes are writes
//! from a client someone had entered after, as attempted (in brackets: those a careful client
//! would have sent too), refused by a fence, and accepted by each fence (local, redis,
//! postgres, sqlite, zk; `n/a` for a lock without fencing tokens); max unavailable is the
//! longest time between two entries; the verdict is [`crate::verdict::judge`]'s.

use std::fmt::Write as _;

use serde_json::Value;

use crate::fences::NAMES;
use crate::scenario::Row;
use crate::verdict::{Verdict, judge};

const HEADER: [&str; 10] = [
    "backend",
    "lock",
    "fault",
    "operations",
    "overlaps (unfenced)",
    "stale attempted (careful)",
    "stale refused",
    "stale accepted (local/redis/pg/sqlite/zk)",
    "max unavailable",
    "verdict",
];

/// The table of `rows`, aligned, with each row's seed last.
pub(crate) fn table(rows: &[Row]) -> String {
    let json: Vec<Value> = rows.iter().map(row_json).collect();
    markdown(&json)
}

/// The table of rows in `--json` form (what `report` turns into the table in docs/safety.md).
pub(crate) fn markdown(rows: &[Value]) -> String {
    let mut lines: Vec<Vec<String>> = vec![
        HEADER
            .iter()
            .map(|h| (*h).to_owned())
            .chain(["seed".to_owned()])
            .collect(),
    ];
    for row in rows {
        let text = |field: &str| row[field].as_str().unwrap_or("?").to_owned();
        let number = |field: &str| row[field].as_u64().map_or("?".into(), |n| n.to_string());
        let stale = &row["stale"];
        let accepted = match stale["accepted"].as_object() {
            Some(by_fence) => NAMES
                .iter()
                .map(|name| {
                    by_fence[*name]
                        .as_u64()
                        .map_or("?".into(), |n| n.to_string())
                })
                .collect::<Vec<_>>()
                .join("/"),
            None => "n/a".into(),
        };
        let fault = if row["struck"] == Value::Bool(false) {
            format!("{} (no holder found: not injected)", text("fault"))
        } else {
            text("fault")
        };
        let ms = row["max_unavailable_ms"].as_u64().unwrap_or(0);
        lines.push(vec![
            text("backend"),
            text("lock"),
            fault,
            number("operations"),
            number("overlaps"),
            format!(
                "{} ({})",
                stale["attempted"].as_u64().unwrap_or(0),
                stale["attempted_careful"].as_u64().unwrap_or(0)
            ),
            stale["refused"].as_u64().unwrap_or(0).to_string(),
            accepted,
            format!("{:.1} s", ms as f64 / 1000.0),
            text("verdict"),
            number("seed"),
        ]);
    }
    let columns = lines[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if (3..9).contains(&c) {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            let _ = writeln!(out, "| {} |", rule.join(" | "));
        }
    }
    out
}

/// One row as JSON: `{backend, lock, fault, seed, struck, operations, writes, overlaps,
/// stale: {attempted, attempted_careful, refused, accepted: {local, redis, postgres, sqlite,
/// zk} or null without tokens}, unavailable: {per fence}, fence_problems, history_problems,
/// notes, max_unavailable_ms,
/// took_ms, verdict, expected_by}`.
fn row_json(row: &Row) -> Value {
    let s = row.scenario;
    let c = &row.counts;
    let by_fence = |values: &[u64; 5]| {
        NAMES
            .iter()
            .zip(values)
            .map(|(name, n)| ((*name).to_owned(), Value::from(*n)))
            .collect::<serde_json::Map<_, _>>()
    };
    let verdict = judge(row);
    serde_json::json!({
        "backend": s.backend.name(),
        "lock": s.kind.name(),
        "fault": s.fault.name(s.backend),
        "struck": row.struck,
        "seed": row.seed,
        "operations": c.turns,
        "writes": c.writes,
        "overlaps": c.overlaps,
        "stale": {
            "attempted": c.stale.attempted,
            "attempted_careful": c.stale.attempted_careful,
            "refused": c.stale.refused,
            "accepted": c.fenced.then(|| by_fence(&c.stale.accepted)),
        },
        "unavailable": by_fence(&c.unavailable),
        "fence_problems": row.fence_problems,
        "history_problems": row.history_problems,
        "notes": row.notes,
        "max_unavailable_ms": c.max_gap.as_millis() as u64,
        "took_ms": row.took.as_millis() as u64,
        "verdict": verdict.word(),
        "expected_by": match verdict {
            Verdict::Expected { page, quote } => Some(format!("{page}: {quote}")),
            _ => None,
        },
    })
}

/// The run as JSON: `{"seed": N, "rows": [...]}` (see [`row_json`]).
pub(crate) fn json(seed: u64, rows: &[Row]) -> Value {
    let rows: Vec<Value> = rows.iter().map(row_json).collect();
    serde_json::json!({ "seed": seed, "rows": rows })
}
