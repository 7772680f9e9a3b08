use std::time::Duration;

use lockkeeper_testkit::Etcd;

use super::*;
use crate::report::Spread;
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
        (2000, 8, 250, 5),
        "the median of at least 5 trials"
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

/// Three trials of each side, whose best trials and means would give other ratios than their
/// medians.
fn report() -> Report {
    let mut r = Report::default();
    let (ours, theirs) = (Side::Lockkeeper, Side::V3lock);
    let cycles = |cycles| {
        Ok(Uncontended {
            cycles,
            elapsed: Duration::from_secs(1),
            latency: stats::new_histogram(),
        })
    };
    // Cycles/s: lockkeeper 900, 1000, 100; v3lock 1000, 950, 3000 (best 3000, mean 1650).
    for (n, (a, b)) in (0..).zip([(900, 1000), (1000, 950), (100, 3000)]) {
        r.uncontended.push(report::Trial {
            who: ours,
            trial: n,
            result: cycles(a),
        });
        r.uncontended.push(report::Trial {
            who: theirs,
            trial: n,
            result: cycles(b),
        });
    }
    // Two handoffs per trial, each waiting `us`, in `ms`. lockkeeper: 8, 2, 10 handoffs/s
    // (median 8, best 10, mean 6.7), p99 100, 300, 200 us; v3lock: 2, 1, 8 handoffs/s (median
    // 2, best 8, mean 3.7), p99 900, 2000, 1000 us.
    let handed = |us, ms| {
        let wait = Duration::from_micros(us);
        Ok(Contended::from_waits(
            2,
            &[wait, wait],
            Duration::from_millis(ms),
        ))
    };
    let runs = [
        ((100, 250), (900, 1_000)),
        ((300, 1_000), (2_000, 2_000)),
        ((200, 200), (1_000, 250)),
    ];
    for (n, (a, b)) in (0..).zip(runs) {
        r.contended.push(report::Trial {
            who: ours,
            trial: n,
            result: handed(a.0, a.1),
        });
        r.contended.push(report::Trial {
            who: theirs,
            trial: n,
            result: handed(b.0, b.1),
        });
    }
    r
}

#[test]
fn the_median_trials_decide_the_ratios_and_the_target() {
    let r = report();
    let ratios = r.ratios();
    // 900 / 1000: the best trials would give 1000 / 3000, the means 667 / 1650.
    assert_eq!(ratios[0].1, Some(0.9));
    // 8 / 2 meets 3x; the best trials (10 / 8) and the means (6.7 / 3.7) would miss it.
    assert_eq!(ratios[1].1, Some(4.0));
    assert_eq!(r.goals()[0].ratio, Some(4.0));
    assert_eq!(r.goals()[0].met(), Some(true));
    // v3lock's median p99 over lockkeeper's: 1000 / 200.
    assert_eq!(ratios[2].1, Some(5.0));
}

#[test]
fn json_gives_each_side_its_medians_and_the_ratios_of_medians() {
    let settings = Settings {
        endpoint: None,
        cycles: 3,
        clients: 2,
        handoffs: 1,
        trials: 3,
        ttl: Duration::from_secs(10),
        warmup: Duration::ZERO,
        limit: Duration::from_secs(1),
        connect_limit: Duration::from_secs(1),
    };
    let json = report().to_json(&settings, "127.0.0.1:2379", "test");
    assert_eq!(rows(&json, "uncontended").len(), 6, "every trial kept");
    let medians = rows(&json, "medians");
    assert_eq!(medians.len(), 2);
    let spread = |values: [f64; 3]| Spread::of(values).expect("three trials").json();
    let lk = &medians[0];
    assert_eq!(field(lk, "client"), &Json::Str("lockkeeper".into()));
    assert_eq!(field(lk, "cycles_per_sec"), &spread([900.0, 1000.0, 100.0]));
    assert_eq!(field(lk, "handoffs_per_sec"), &spread([8.0, 2.0, 10.0]));
    assert_eq!(field(lk, "wait_p99_us"), &spread([100.0, 300.0, 200.0]));
    assert_eq!(
        field(&medians[1], "wait_p99_us"),
        &spread([900.0, 2000.0, 1000.0])
    );
    let ratios = field(&json, "ratios");
    assert_eq!(
        number(ratios, "contended_handoffs_lockkeeper_over_v3lock"),
        4.0
    );
    assert_eq!(number(ratios, "wait_p99_v3lock_over_lockkeeper"), 5.0);
    assert!(!json.render().contains("\"best\""), "{}", json.render());
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
        let cycles = report.cycles(side).expect("uncontended trials");
        let handoffs = report.handoffs(side).expect("contended trials");
        assert_eq!((cycles.n, handoffs.n), (2, 2), "{side:?}");
        assert!(cycles.median > 0.0 && handoffs.median > 0.0, "{side:?}");
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
