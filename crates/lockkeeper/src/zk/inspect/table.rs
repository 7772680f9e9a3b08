//! The inspection as a table for people: one line per participant, columns padded to the
//! widest cell, data escaped onto one line and cut so a large node cannot flood a terminal.

use std::time::Duration;

use super::{Inspection, Layout, NodeKind, Participant, State};

impl std::fmt::Display for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let layout = match self.layout {
            Layout::Missing => {
                return write!(f, "{}: no such node (nobody holds or waits)", self.path);
            }
            Layout::Lock => "lock".to_owned(),
            Layout::Election => "election".to_owned(),
            Layout::KazooSemaphore { max_leases: None } => {
                "kazoo semaphore, lease limit unknown".to_owned()
            }
            Layout::KazooSemaphore {
                max_leases: Some(max),
            } => format!("kazoo semaphore of {max} leases"),
            Layout::Semaphore { max_leases: None } => "semaphore, lease limit unknown".to_owned(),
            Layout::Semaphore {
                max_leases: Some(max),
            } => format!("semaphore of {max} leases"),
        };
        write!(
            f,
            "{} ({layout}): {} holding, {} waiting",
            self.path,
            self.holders().count(),
            self.waiters().count()
        )?;
        let mut rows = vec![COLUMNS.map(str::to_owned)];
        rows.extend(self.participants.iter().map(Participant::row));
        let mut widths = [0; COLUMNS.len()];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = String::new();
            for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
                if column + 1 == COLUMNS.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            write!(f, "\n{}", line.trim_end())?;
        }
        Ok(())
    }
}

const COLUMNS: [&str; 8] = [
    "STATE", "KIND", "SEQUENCE", "SESSION", "AGE", "TOKEN", "DATA", "NODE",
];

/// Longest data shown in the table, in characters.
const DATA_WIDTH: usize = 40;

impl Participant {
    /// The session id as ZooKeeper's tools print it (`0x` and 16 hex digits).
    pub fn session_hex(&self) -> String {
        format!("0x{:016x}", self.session_id)
    }

    fn row(&self) -> [String; 8] {
        [
            self.state.to_string(),
            self.kind.to_string(),
            self.sequence
                .map_or_else(|| "-".to_owned(), |sequence| format!("{sequence:010}")),
            self.session_hex(),
            human_age(self.age),
            self.fencing_token.to_string(),
            printable(&self.data),
            self.name.clone(),
        ]
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Holds => "holds",
            State::Waits => "waits",
            State::Unknown => "?",
        })
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeKind::Mutex => "mutex",
            NodeKind::Read => "read",
            NodeKind::Write => "write",
            NodeKind::Lease => "lease",
            NodeKind::Simple => "simple",
            NodeKind::Latch => "latch",
            NodeKind::KazooLock => "kazoo-lock",
            NodeKind::KazooRead => "kazoo-read",
            NodeKind::KazooLease => "kazoo-lease",
            NodeKind::Other => "other",
        })
    }
}

/// Data on one line: control characters escaped, cut at [`DATA_WIDTH`].
fn printable(data: &str) -> String {
    let escaped: String = data
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    match escaped.char_indices().nth(DATA_WIDTH) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

fn human_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0 => format!("{}ms", age.as_millis()),
        1..60 => format!("{:.1}s", age.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_escapes_and_cuts_data() {
        assert_eq!(printable("a\nb"), "a\\nb");
        let long = "x".repeat(DATA_WIDTH + 5);
        assert_eq!(printable(&long).chars().count(), DATA_WIDTH + 1);
        assert_eq!(human_age(Duration::from_millis(250)), "250ms");
        assert_eq!(human_age(Duration::from_secs(125)), "2m05s");
    }
}
