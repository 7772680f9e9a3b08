//! Turning the first difference of a run into a short reproduction, and the failure report.
//!
//! The failing sequence is replayed on the same two servers, each replay in a fresh chroot, and
//! operations are removed while the last one still differs. Operations are plain data, so a
//! replay needs no generator; the report then shows every remaining step with ZooKeeper's
//! answer, and both answers where they differ.

use std::time::{Duration, Instant};

use super::compare::{difference, show_step};
use super::ops::Op;
use super::{Mismatch, Pair, Settings};

/// How long shrinking a failure may take; the test has already failed, this only buys a
/// shorter reproduction.
const SHRINK_BUDGET: Duration = Duration::from_secs(120);

/// Replays fixed operations on fresh backends; true if the first difference is at the last one.
async fn fails_at_end(pair: &mut Pair, ops: &[Op]) -> bool {
    let (mut a, mut b) = pair.open("shrink", true).await;
    let mut result = false;
    for (index, op) in ops.iter().enumerate() {
        let step_a = a.step(index, op).await;
        let step_b = b.step(index, op).await;
        if difference(&step_a, &step_b).is_some() {
            result = index + 1 == ops.len();
            break;
        }
    }
    a.close().await;
    b.close().await;
    result
}

/// Removes operations while the last one still differs: chunks of halving size, then single
/// operations until none can go. Bounded by [`SHRINK_BUDGET`].
pub(crate) async fn shrink(pair: &mut Pair, ops: &[Op]) -> Option<Vec<Op>> {
    let deadline = Instant::now() + SHRINK_BUDGET;
    let mut current = ops.to_vec();
    if !fails_at_end(pair, &current).await {
        return None;
    }
    let mut chunk = (current.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start + 1 < current.len() {
            if Instant::now() > deadline {
                return Some(current);
            }
            let end = (start + chunk).min(current.len() - 1);
            let mut candidate = current[..start].to_vec();
            candidate.extend_from_slice(&current[end..]);
            if fails_at_end(pair, &candidate).await {
                current = candidate;
                removed = true;
            } else {
                start = end;
            }
        }
        if chunk == 1 && !removed {
            return Some(current);
        }
        chunk = (chunk / 2).max(1);
    }
}

/// Runs the shrunk sequence once more to print every step with both answers.
pub(crate) async fn show_replay(pair: &mut Pair, ops: &[Op]) -> String {
    let (mut a, mut b) = pair.open("shown", true).await;
    let mut out = String::new();
    for (index, op) in ops.iter().enumerate() {
        let step_a = a.step(index, op).await;
        let step_b = b.step(index, op).await;
        out.push_str(&format!(
            "  #{index} {op}\n      {}: {}\n",
            a.name,
            show_step(&step_a)
        ));
        if difference(&step_a, &step_b).is_some() {
            out.push_str(&format!("      {}: {}\n", b.name, show_step(&step_b)));
        }
    }
    a.close().await;
    b.close().await;
    out
}

/// The environment a reproduction needs beside the seed and the length.
fn env_flags(settings: &Settings) -> String {
    let mut out = String::new();
    if !settings.skip.is_empty() {
        out.push_str(&format!(
            " LOCKKEEPER_DIFF_SKIP={}",
            settings.skip.join(",")
        ));
    }
    if !settings.allow.is_empty() {
        out.push_str(&format!(
            " LOCKKEEPER_DIFF_ALLOW={}",
            settings.allow.join(",")
        ));
    }
    if settings.selfcheck {
        out.push_str(" LOCKKEEPER_DIFF_SELFCHECK=1");
    }
    out
}

pub(crate) fn report(
    settings: &Settings,
    seed: u64,
    other: &str,
    mismatch: &Mismatch,
    shrunk: Option<String>,
) -> String {
    let index = mismatch.ops.len() - 1;
    let mut out = format!(
        "{other} differs from Apache ZooKeeper: {} (seed {seed}, operation #{index})\n\
         \x20 operation: {}\n\
         \x20 zookeeper: {}\n\
         \x20 {other}: {}\n\
         reproduce: LOCKKEEPER_DIFF_SEED={seed} LOCKKEEPER_DIFF_OPS={}{} cargo test -p lockkeeper-server --test differential\n",
        mismatch.why,
        mismatch.ops[index],
        show_step(&mismatch.reference[index]),
        show_step(&mismatch.other),
        settings.ops,
        env_flags(settings),
    );
    match shrunk {
        Some(shrunk) => out.push_str(&format!(
            "shrunk reproduction (replayed in a fresh chroot; zookeeper's answer to each step, \
             both answers where they differ):\n{shrunk}"
        )),
        None => {
            out.push_str("the operations before it (with zookeeper's answers):\n");
            let from = index.saturating_sub(20);
            for i in from..index {
                out.push_str(&format!(
                    "  #{i} {}\n      {}\n",
                    mismatch.ops[i],
                    show_step(&mismatch.reference[i])
                ));
            }
        }
    }
    out
}
