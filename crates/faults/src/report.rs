//! The results: the table printed at the end of a run and the `--json` file.
//!
//! Columns (the README explains them to users): operations are turns begun at the resource;
//! overlaps are entries while another client was inside (no fencing); stale accepted are
//! writes the fence accepted from a client someone had entered after (`n/a` for a lock without
//! fencing tokens); max unavailable is the longest time between two entries.

use std::fmt::Write as _;

use crate::scenario::Row;

/// The table, one line per row, aligned.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let header = [
        "backend",
        "lock",
        "fault",
        "operations",
        "overlaps (unfenced)",
        "stale accepted (fenced)",
        "max unavailable",
        "seed",
    ];
    let mut lines: Vec<[String; 8]> = vec![header.map(str::to_owned)];
    for row in rows {
        let s = row.scenario;
        let stale = if row.counts.fenced {
            row.counts.stale_accepted.to_string()
        } else {
            "n/a".to_owned()
        };
        lines.push([
            s.backend.name().to_owned(),
            s.kind.name().to_owned(),
            fault_cell(row),
            row.counts.turns.to_string(),
            row.counts.overlaps.to_string(),
            stale,
            format!("{:.1} s", row.counts.max_gap.as_secs_f64()),
            row.seed.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if (3..7).contains(&c) {
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

/// The fault's name, marked when it found no holder to strike.
fn fault_cell(row: &Row) -> String {
    let name = row.scenario.fault.name(row.scenario.backend);
    if row.struck {
        name.to_owned()
    } else {
        format!("{name} (no holder found: not injected)")
    }
}

/// The rows as JSON: `{"seed": N, "rows": [{backend, lock, fault, seed, operations, writes,
/// struck, overlaps, stale_accepted (null without tokens), refused, max_unavailable_ms,
/// took_ms}]}`.
pub fn json(seed: u64, rows: &[Row]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let s = row.scenario;
            serde_json::json!({
                "backend": s.backend.name(),
                "lock": s.kind.name(),
                "fault": s.fault.name(s.backend),
                "struck": row.struck,
                "seed": row.seed,
                "operations": row.counts.turns,
                "writes": row.counts.writes,
                "overlaps": row.counts.overlaps,
                "stale_accepted": row.counts.fenced.then_some(row.counts.stale_accepted),
                "refused": row.counts.refused,
                "max_unavailable_ms": row.counts.max_gap.as_millis() as u64,
                "took_ms": row.took.as_millis() as u64,
            })
        })
        .collect();
    serde_json::json!({ "seed": seed, "rows": rows })
}
