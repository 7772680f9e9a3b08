//! Four-letter words: the plain-text admin commands (`echo ruok | nc host 2181`).
//!
//! They arrive *instead of* a length prefix as the first four bytes of a connection, so the
//! connection peeks at those bytes before framing. Output follows ZooKeeper's layout so that
//! monitoring scripts written for it keep working.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::core::View;
use crate::state::tree::Owner;

/// Words Keeper knows. Anything else in the first four bytes is treated as a frame length.
pub const WORDS: [&str; 10] = [
    "ruok", "srvr", "stat", "mntr", "cons", "dump", "wchs", "envi", "conf", "isro",
];

pub(crate) fn is_four_letter_word(first: &[u8]) -> Option<&'static str> {
    WORDS.iter().copied().find(|w| w.as_bytes() == first)
}

pub(crate) const VERSION: &str = concat!("3.8.0-lockkeeper-", env!("CARGO_PKG_VERSION"));

pub(crate) fn answer(view: &View, word: &str) -> String {
    if !view.config.four_letter_word_allowed(word) {
        return format!("{word} is not executed because it is not in the whitelist.\n");
    }
    let mut out = String::new();
    match word {
        "ruok" => out.push_str("imok"),
        "srvr" => srvr(view, &mut out),
        "stat" => {
            let _ = writeln!(out, "Zookeeper version: {VERSION}");
            out.push_str("Clients:\n");
            cons(view, &mut out);
            out.push('\n');
            srvr_body(view, &mut out);
        }
        "mntr" => mntr(view, &mut out),
        // ZooKeeper's answer, without a newline: "ro" from a read-only server, else "rw".
        // Keeper is read-only while its disk fails.
        "isro" => out.push_str(if view.read_only { "ro" } else { "rw" }),
        "cons" => cons(view, &mut out),
        "dump" => dump(view, &mut out),
        "wchs" => {
            let (conns, paths) = view.watches.summary();
            let _ = writeln!(
                out,
                "{conns} connections watching {paths} paths\nTotal watches:{}",
                view.watches.count()
            );
        }
        "envi" => {
            out.push_str("Environment:\n");
            let _ = writeln!(out, "zookeeper.version={VERSION}");
            let _ = writeln!(out, "host.name=localhost");
            let _ = writeln!(out, "os.name={}", std::env::consts::OS);
            let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
            let _ = writeln!(
                out,
                "user.dir={}",
                std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            );
        }
        "conf" => {
            let c = view.config;
            let _ = writeln!(out, "clientPort={}", c.listen.port());
            let _ = writeln!(out, "clientPortAddress={}", c.listen.ip());
            let _ = writeln!(out, "dataDir={}", c.data_dir.display());
            let _ = writeln!(out, "tickTime={}", c.tick_time.as_millis());
            let _ = writeln!(out, "maxClientCnxns={}", c.max_client_cnxns);
            let _ = writeln!(
                out,
                "minSessionTimeout={}",
                c.min_session_timeout().as_millis()
            );
            let _ = writeln!(
                out,
                "maxSessionTimeout={}",
                c.max_session_timeout().as_millis()
            );
            let _ = writeln!(out, "serverId=0");
        }
        _ => {}
    }
    out
}

fn srvr(view: &View, out: &mut String) {
    let _ = writeln!(out, "Zookeeper version: {VERSION}");
    srvr_body(view, out);
}

fn srvr_body(view: &View, out: &mut String) {
    let s = &view.stats;
    let _ = writeln!(
        out,
        "Latency min/avg/max: {}/{:.4}/{}",
        s.min_latency, s.avg_latency, s.max_latency
    );
    let _ = writeln!(out, "Received: {}", s.packets_received);
    let _ = writeln!(out, "Sent: {}", s.packets_sent);
    let _ = writeln!(out, "Connections: {}", s.num_alive_connections);
    let _ = writeln!(out, "Outstanding: {}", s.outstanding_requests);
    let _ = writeln!(out, "Zxid: {:#x}", view.last_zxid);
    let _ = writeln!(out, "Mode: {}", s.server_state);
    let _ = writeln!(out, "Node count: {}", s.znode_count);
}

/// The same `Stats` as `/metrics`, under ZooKeeper's `mntr` keys.
fn mntr(view: &View, out: &mut String) {
    let s = &view.stats;
    let lines: [(&str, String); 15] = [
        ("zk_version", VERSION.to_string()),
        ("zk_server_state", s.server_state.into()),
        ("zk_avg_latency", format!("{:.4}", s.avg_latency)),
        ("zk_max_latency", s.max_latency.to_string()),
        ("zk_min_latency", s.min_latency.to_string()),
        ("zk_packets_received", s.packets_received.to_string()),
        ("zk_packets_sent", s.packets_sent.to_string()),
        (
            "zk_num_alive_connections",
            s.num_alive_connections.to_string(),
        ),
        (
            "zk_outstanding_requests",
            s.outstanding_requests.to_string(),
        ),
        ("zk_znode_count", s.znode_count.to_string()),
        ("zk_watch_count", s.watch_count.to_string()),
        ("zk_ephemerals_count", s.ephemerals_count.to_string()),
        (
            "zk_approximate_data_size",
            s.approximate_data_size.to_string(),
        ),
        ("zk_uptime", s.uptime.to_string()),
        ("zk_global_sessions", s.global_sessions.to_string()),
    ];
    for (key, value) in lines {
        let _ = writeln!(out, "{key}\t{value}");
    }
    // Keeper's own keys after ZooKeeper's (clients read mntr as key-value lines, and skip
    // keys they do not know): each stage of the write path, in microseconds, and the log's
    // syncs (several traced replies may share one) with their recent p50, when there are any,
    // and its groups taken after a thread hand-off.
    let _ = writeln!(out, "lk_log_syncs\t{}", view.log_syncs);
    let _ = writeln!(out, "lk_log_handoffs\t{}", view.log_handoffs);
    if let Some(p50) = view.log_sync_p50_us() {
        let _ = writeln!(out, "lk_log_sync_p50_us\t{p50}");
    }
    for v in view.stages.values() {
        let name = v.stage.name();
        let _ = writeln!(out, "lk_write_stage_{name}_count\t{}", v.count);
        let _ = writeln!(out, "lk_write_stage_{name}_us_sum\t{:.1}", v.sum_us);
        let _ = writeln!(out, "lk_write_stage_{name}_us_max\t{:.1}", v.max_us);
    }
}

/// One line per connection in ZooKeeper's layout. `queued` is the packets in the connection's
/// outbox (replies and watch events not yet written to the socket, including those held until
/// the log is durable), `sent` the packets written to the socket.
fn cons(view: &View, out: &mut String) {
    let mut conns: Vec<_> = view.conns.iter().collect();
    conns.sort_by_key(|(id, _)| **id);
    for (_, c) in conns {
        let session = c
            .session
            .map(|s| format!("{s:#x}"))
            .unwrap_or_else(|| "0x0".into());
        let stats = c.outbox.stats();
        let _ = writeln!(
            out,
            " /{}[1](queued={},recved={},sent={},sid={session})",
            c.peer,
            stats.queued_packets.load(Ordering::Acquire),
            c.received,
            stats.sent_packets.load(Ordering::Acquire),
        );
    }
}

fn dump(view: &View, out: &mut String) {
    out.push_str("SessionTracker dump:\n");
    let _ = writeln!(out, "Global Sessions({}):", view.sessions.len());
    let mut sessions: Vec<_> = view.sessions.iter().collect();
    sessions.sort_by_key(|s| s.id);
    for s in sessions {
        let _ = writeln!(out, "{:#x}\t{}ms", s.id, s.timeout.as_millis());
    }
    out.push_str("ephemeral nodes dump:\n");
    let mut owners: Vec<_> = view.ephemerals().collect();
    owners.sort_by_key(|(id, _)| **id);
    let _ = writeln!(out, "Sessions with Ephemerals ({}):", owners.len());
    for (id, paths) in owners {
        debug_assert!(matches!(Owner::decode(*id), Owner::Ephemeral(_)));
        let _ = writeln!(out, "{id:#x}:");
        for p in paths {
            let _ = writeln!(out, "\t{p}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::core::Core;
    use crate::disk::datadir_lock::DataDirLock;

    /// `isro` follows the core's read-only state (entered for real only by a failing disk, which
    /// the disk-full test of the command line provokes), and runs even when the whitelist does
    /// not name it.
    #[test]
    fn isro_answers_rw_then_ro_while_writes_are_refused() {
        let dir = tempfile::tempdir().expect("a data dir");
        let config = Arc::new(Config {
            data_dir: dir.path().to_path_buf(),
            four_letter_words: vec!["ruok".into()],
            ..Config::default()
        });
        let lock = DataDirLock::exclusive(dir.path()).expect("lock the data dir");
        let mut core = Core::recover(config, lock).expect("recover an empty data dir");
        assert_eq!(answer(&core.view(), "isro"), "rw");
        core.set_read_only_for_test();
        assert_eq!(answer(&core.view(), "isro"), "ro");
        assert!(answer(&core.view(), "mntr").contains("not in the whitelist"));
    }
}
