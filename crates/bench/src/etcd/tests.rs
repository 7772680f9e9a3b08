use std::time::Duration;

use lockkeeper_testkit::Etcd;

use super::*;
use crate::tests::{field, number, parse, rows};

#[test]
fn etcd_flags_parse_and_exclude_the_other_modes() {
    let args = parse(&["--etcd"]).expect("parse");
    let etcd = &args.etcd_args;
    assert!(etcd.etcd);
    assert_eq!(
        (
            etcd.etcd_cycles,
            etcd.etcd_clients,
            etcd.etcd_handoffs,
            etcd.etcd_trials
        ),
        (2000, 8, 250, 3)
    );
    assert_eq!(etcd.etcd_ttl, Duration::from_secs(30));
    assert_eq!(etcd.etcd_endpoint, None);
    let args = parse(&[
        "--etcd",
        "--etcd-endpoint",
        "127.0.0.1:2379",
        "--etcd-ttl",
        "5s",
    ])
    .expect("parse");
    assert_eq!(
        args.etcd_args.etcd_endpoint.as_deref(),
        Some("127.0.0.1:2379")
    );
    assert_eq!(args.etcd_args.etcd_ttl, Duration::from_secs(5));
    assert!(!parse(&["--compare"]).expect("defaults").etcd_args.etcd);
    assert!(
        parse(&["--etcd-endpoint", "127.0.0.1:2379"]).is_err(),
        "needs --etcd"
    );
    assert!(parse(&["--etcd", "--compare"]).is_err());
    assert!(parse(&["--etcd", "--recovery", "10"]).is_err());
    assert!(parse(&["--etcd", "--etcd-clients", "1"]).is_err());
    assert!(parse(&["--etcd", "--etcd-trials", "0"]).is_err());
    for ttl in ["0s", "500ms", "1.5s", "soon"] {
        let err = parse(&["--etcd", "--etcd-ttl", ttl]).expect_err(ttl);
        assert!(err.to_string().contains(ttl), "{err}");
    }
}

#[test]
fn every_other_trial_runs_in_reverse() {
    assert_eq!(Side::in_turn(0), [Side::Lockkeeper, Side::V3lock]);
    assert_eq!(Side::in_turn(1), [Side::V3lock, Side::Lockkeeper]);
    assert_eq!(Side::in_turn(2), Side::in_turn(0));
}

/// The whole etcd benchmark in a tiny configuration on a real etcd member: every figure of
/// both sides is taken in both trials, the ratios and the target are computed, and the JSON
/// has its shape. Speed is not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measures_both_sides_in_a_tiny_run() {
    let etcd = tokio::task::spawn_blocking(Etcd::start)
        .await
        .expect("etcd starts");
    let endpoint = etcd.addr().to_string();
    let settings = Settings {
        endpoint: Some(endpoint.clone()),
        cycles: 5,
        clients: 3,
        handoffs: 3,
        trials: 2,
        ttl: Duration::from_secs(10),
        warmup: Duration::from_millis(200),
        limit: Duration::from_secs(30),
        connect_limit: Duration::from_secs(20),
    };
    let report = measure(&settings, &endpoint, "lockkeeper-bench-test").await;
    assert!(
        report.record.errors.is_empty(),
        "{:?}",
        report.record.errors
    );
    let json = report.to_json(&settings, &endpoint, "test");
    let uncontended = rows(&json, "uncontended");
    assert_eq!(uncontended.len(), 2 * 2, "{}", json.render());
    for row in uncontended {
        assert_eq!(number(row, "cycles"), 5.0, "{}", row.render());
        assert!(number(row, "cycles_per_sec") > 0.0, "{}", row.render());
        assert!(number(row, "p50_us") > 0.0, "{}", row.render());
    }
    let contended = rows(&json, "contended");
    assert_eq!(contended.len(), 2 * 2);
    for row in contended {
        assert_eq!(number(row, "handoffs"), 9.0, "{}", row.render());
        assert!(number(row, "handoffs_per_sec") > 0.0);
        assert!(number(row, "wait_max_us") > 0.0, "{}", row.render());
    }
    for side in Side::ALL {
        assert!(report.cycles(side).is_some_and(|r| r > 0.0), "{side:?}");
        assert!(report.handoffs(side).is_some_and(|r| r > 0.0), "{side:?}");
    }
    let ratios = field(&json, "ratios");
    assert!(number(ratios, "uncontended_cycles_lockkeeper_over_v3lock") > 0.0);
    assert!(number(ratios, "contended_handoffs_lockkeeper_over_v3lock") > 0.0);
    let goals = rows(&json, "goals");
    assert_eq!(goals.len(), 1);
    assert_ne!(field(&goals[0], "met"), &Json::Str("unknown".into()));
    // Every client closed: its lease was revoked, so no lock key of the run is left behind.
    let left = lockkeeper_testkit::etcdctl(
        &[etcd.endpoint()],
        &["get", "--prefix", "lockkeeper-bench-test", "--keys-only"],
    )
    .expect("etcdctl get");
    assert!(left.trim().is_empty(), "keys left behind: {left}");
}
