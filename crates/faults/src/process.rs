//! The client processes' signals: a client is one process, or (`cli-elect`) `lockkeeper
//! elect` and its command under it, so a fault strikes the whole tree, read from `/proc`.
//!
//! Invariants: only PIDs this run spawned, or their descendants, are signalled; a paused
//! tree is stopped parents first (so none reacts to a child's stop) and resumed children
//! first.

use std::process::Child;
use std::time::Duration;

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a PID this run spawned (or its descendant) and has not reaped.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// `pid` and its descendants, parents before children (read from `/proc`): a client is one
/// process, or (`cli-elect`) `lockkeeper elect` and its command under it.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // `pid (comm) state ppid ...`: the command may hold spaces, so split after ')'.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((child, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        next += 1;
    }
    tree
}

/// Stops a client and everything it runs, parents first (so none reacts to a child's stop).
pub(crate) fn pause(pid: u32) {
    for process in process_tree(pid) {
        signal(process, libc::SIGSTOP);
    }
}

/// Resumes a client stopped by [`pause`], children first, the deepest (the one writing to the
/// resource) a moment before the rest: a paused leader's work may wake before its supervisor
/// notices the loss, as scheduling may have it.
pub(crate) async fn resume(pid: u32) {
    let mut tree = process_tree(pid);
    tree.reverse();
    let mut processes = tree.into_iter();
    if let Some(deepest) = processes.next() {
        signal(deepest, libc::SIGCONT);
    }
    let rest: Vec<u32> = processes.collect();
    if !rest.is_empty() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for process in rest {
        signal(process, libc::SIGCONT);
    }
}

/// SIGKILLs a client and everything it runs, and reaps the client.
pub(crate) fn kill(child: &mut Child) {
    for process in process_tree(child.id()).into_iter().skip(1) {
        signal(process, libc::SIGKILL);
    }
    let _ = child.kill(); // SIGKILL, also ends a stopped process
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_its_root_then_its_descendants_and_dies_whole() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sh -c 'sleep 30; true' & sleep 30; wait"])
            .spawn()
            .expect("sh");
        let root = child.id();
        // The shells start their children at once, but not before spawn returns.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut tree = process_tree(root);
        while tree.len() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            tree = process_tree(root);
        }
        assert_eq!(tree[0], root, "{tree:?}");
        assert_eq!(
            tree.len(),
            4,
            "sh, its sleep, the inner sh and its sleep: {tree:?}"
        );
        kill(&mut child);
        for pid in &tree[1..] {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            // SAFETY: signal 0 only asks whether the pid still exists.
            while unsafe { libc::kill(*pid as i32, 0) } == 0 {
                // A killed orphan is reaped by init; it may linger a moment as a zombie.
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                if state.contains(") Z") {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{pid} outlived the kill"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
