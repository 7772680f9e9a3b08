//! zkCli, Apache ZooKeeper's own command-line client, driven against Keeper and against Apache
//! ZooKeeper with the same script and the same assertions.
//!
//! zkCli starts a JVM, so every backend gets one run with one long script. The script is cut
//! into named sections by marker commands (`stat /zkcli-mark-NAME`, whose only output is
//! `Node does not exist: /zkcli-mark-NAME`), so each section's output can be checked on its own.
//! Watch notifications are printed by zkCli's event thread and may land between any two lines;
//! they are taken out of the sections and checked as one ordered list, which ZooKeeper's
//! per-session ordering guarantee makes deterministic.

#[path = "clients/zkcli/harness.rs"]
mod harness;

use harness::{
    Findings, Script, Transcript, concat, digest_id, lines, run_zkcli, stat, zxid_shape, zxids,
};
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer, ZkOptions, backend_enabled, both};

/// The commands every backend gets; see `check_transcript` for what each section must print.
fn script(connect: &str) -> Script {
    let mut s = Script::default();
    s.section("create")
        .cmd("create /zk-cli hello")
        .cmd("create /zk-cli/child")
        .cmd("create -s /zk-cli/seq- a")
        .cmd("create -s /zk-cli/seq- b")
        .cmd("create -e /zk-cli/eph x")
        .cmd("create -c /zk-cli/container")
        .cmd("create -t 60000 /zk-cli/ttl v");
    s.section("create-errors")
        .cmd("create /zk-cli again")
        .cmd("create /zk-missing/child x")
        .cmd("create -s /zk-missing/seq- x")
        .cmd("create /zk-cli/eph/under x")
        .cmd("delete /zookeeper");
    s.section("read")
        .cmd("get /zk-cli")
        .cmd("get /zk-cli/child")
        .cmd("get -s /zk-cli");
    s.section("set")
        .cmd("set /zk-cli world")
        .cmd("set -v 0 /zk-cli x")
        .cmd("set -s -v 1 /zk-cli bye")
        .cmd("get /zk-cli");
    s.section("kinds")
        .cmd("stat /zk-cli/eph")
        .cmd("stat /zk-cli/container")
        .cmd("stat /zk-cli/ttl");
    s.section("list")
        .cmd("ls /zk-cli")
        .cmd("ls -s /zk-cli")
        .cmd("getEphemerals /zk-cli")
        .cmd("getAllChildrenNumber /zk-cli");
    s.section("list-recursive").cmd("ls -R /zk-cli");
    s.section("delete")
        .cmd("delete /zk-cli")
        .cmd("delete -v 5 /zk-cli/child")
        .cmd("delete /zk-cli/child")
        .cmd("delete /zk-cli/child")
        .cmd("getAllChildrenNumber /zk-cli");
    s.section("whoami").cmd("whoami");
    s.section("whoami-digest")
        .cmd("addauth digest alice:secret")
        .cmd("whoami");
    s.section("acl-auth")
        .cmd("create /zk-acl data")
        .cmd("setAcl /zk-acl auth::cdrwa")
        .cmd("getAcl /zk-acl")
        .cmd("get /zk-acl")
        .cmd("setAcl /zk-acl digest:nocolon:cdrwa");
    s.section("acl-digest")
        .cmd(format!(
            "create /zk-bob data digest:{}:r",
            digest_id("bob", "pw")
        ))
        .cmd("get /zk-bob")
        .cmd("getAcl /zk-bob");
    s.section("acl-read-only")
        .cmd("create /zk-ro data world:anyone:r")
        .cmd("set /zk-ro x")
        .cmd("get /zk-ro")
        .cmd("setAcl /zk-ro world:anyone:cdrwa")
        .cmd("delete /zk-ro")
        .cmd("stat /zk-ro");
    s.section("acl-admin-only")
        .cmd("create /zk-adm data world:anyone:a")
        .cmd("getAcl /zk-adm")
        .cmd("setAcl /zk-adm world:anyone:r")
        .cmd("getAcl -s /zk-adm");
    s.section("acl-ip")
        .cmd("create /zk-ip d ip:127.0.0.1:cdrwa")
        .cmd("get /zk-ip")
        .cmd("create /zk-ip-other d ip:10.1.1.1:cdrwa")
        .cmd("get /zk-ip-other");
    // A new session: the first one's ephemeral is gone, and its authentication with it.
    s.cmd("close").cmd(format!("connect {connect}"));
    s.section("new-session")
        .cmd("stat /zk-cli/eph")
        .cmd("get /zk-acl")
        .cmd("create /zk-noauth x auth::cdrwa")
        .cmd("addauth digest alice:wrong")
        .cmd("get /zk-acl")
        .cmd("addauth digest alice:secret")
        .cmd("get /zk-acl")
        .cmd("addauth digest bob:pw")
        .cmd("get /zk-bob");
    s.section("watches")
        .cmd("create /zk-w")
        .cmd("get -w /zk-w")
        .cmd("set /zk-w one")
        .cmd("set /zk-w two")
        .cmd("stat -w /zk-w/new")
        .cmd("create /zk-w/new")
        .cmd("ls -w /zk-w")
        .cmd("create /zk-w/new2")
        .cmd("delete /zk-w/new2")
        .cmd("get -w /zk-w/new")
        .cmd("delete /zk-w/new");
    s.section("persistent-watch")
        .cmd("addWatch -m PERSISTENT_RECURSIVE /zk-pr")
        .cmd("create /zk-pr")
        .cmd("create /zk-pr/a")
        .cmd("create /zk-pr/a/b")
        .cmd("set /zk-pr/a x")
        .cmd("delete /zk-pr/a/b")
        .cmd("removewatches /zk-pr -a")
        .cmd("create /zk-pr/c");
    s.section("sync").cmd("sync /");
    s.section("cleanup")
        .cmd("deleteall /zk-cli")
        .cmd("stat /zk-cli")
        .cmd("ls /zookeeper")
        .cmd("ls /");
    s.section("end");
    s
}

/// Every assertion on one backend's transcript. Failures name the backend and show the output.
fn check_transcript(backend: &'static str, t: &Transcript) {
    let f = Findings::new(backend);
    let check = |name: &str, expected: Vec<String>| {
        f.eq(&format!("section {name:?}"), t.masked(name), expected);
    };

    check(
        "create",
        lines(&[
            "Created /zk-cli",
            "Created /zk-cli/child",
            // Sequential suffix = parent's cversion before the create, 10 digits.
            "Created /zk-cli/seq-0000000001",
            "Created /zk-cli/seq-0000000002",
            "Created /zk-cli/eph",
            "Created /zk-cli/container",
            "Created /zk-cli/ttl",
        ]),
    );
    check(
        "create-errors",
        lines(&[
            "Node already exists: /zk-cli",
            "Node does not exist: /zk-missing/child",
            "Node does not exist: /zk-missing/seq-",
            "Ephemerals cannot have children: /zk-cli/eph/under",
            "Arguments are not valid : /zookeeper",
        ]),
    );
    check(
        "read",
        concat(vec![
            // A node created without data has null data, which zkCli prints as "null".
            lines(&["hello", "null", "hello"]),
            stat(6, 0, 0, "0x0", 5, 6),
        ]),
    );
    check(
        "set",
        concat(vec![
            lines(&["version No is not valid : /zk-cli"]),
            stat(6, 2, 0, "0x0", 3, 6),
            lines(&["bye"]),
        ]),
    );
    let set_section = t.section("set");
    let (c, m) = (zxids(set_section, "cZxid"), zxids(set_section, "mZxid"));
    f.that(
        m.first() > c.first(),
        format!("after two sets mZxid {m:x?} must be above cZxid {c:x?}"),
    );

    check(
        "kinds",
        concat(vec![
            // Ephemeral: owned by the session. Containers and TTL nodes also use the owner field
            // internally, but a client sees 0 for them.
            stat(0, 0, 0, "<session>", 1, 0),
            stat(0, 0, 0, "0x0", 0, 0),
            stat(0, 0, 0, "0x0", 1, 0),
        ]),
    );
    let children = "[child, container, eph, seq-0000000001, seq-0000000002, ttl]";
    check(
        "list",
        concat(vec![
            lines(&[children, children]),
            stat(6, 2, 0, "0x0", 3, 6),
            lines(&["[/zk-cli/eph]", "6"]),
        ]),
    );
    // The recursive listing's order follows the server's child order, which is not a contract.
    let mut recursive = t.section("list-recursive").to_vec();
    recursive.sort();
    f.eq(
        "ls -R",
        recursive,
        lines(&[
            "/zk-cli",
            "/zk-cli/child",
            "/zk-cli/container",
            "/zk-cli/eph",
            "/zk-cli/seq-0000000001",
            "/zk-cli/seq-0000000002",
            "/zk-cli/ttl",
        ]),
    );
    check(
        "delete",
        lines(&[
            "Node not empty: /zk-cli",
            "version No is not valid : /zk-cli/child",
            "Node does not exist: /zk-cli/child",
            "5",
        ]),
    );

    // whoami: a header, then one line per identity; the identities' order is not a contract.
    let sorted_identities = |name: &str| {
        let section = t.section(name);
        f.eq(
            "whoami header",
            section.first().map(String::as_str),
            Some("Auth scheme: User"),
        );
        let mut ids = section.get(1..).unwrap_or_default().to_vec();
        ids.sort();
        ids
    };
    f.eq(
        "whoami before addauth",
        sorted_identities("whoami"),
        lines(&["ip: 127.0.0.1"]),
    );
    f.eq(
        "whoami after addauth",
        sorted_identities("whoami-digest"),
        lines(&["digest: alice", "ip: 127.0.0.1"]),
    );

    let alice = format!("'digest,'{}", digest_id("alice", "secret"));
    check(
        "acl-auth",
        lines(&[
            "Created /zk-acl",
            &alice,
            ": cdrwa",
            "data",
            "Acl is not valid : /zk-acl",
        ]),
    );
    check(
        "acl-digest",
        lines(&[
            "Created /zk-bob",
            // getAcl needs READ or ADMIN since ZooKeeper 3.6.
            "Insufficient permission : /zk-bob",
            "Insufficient permission : /zk-bob",
        ]),
    );
    check(
        "acl-read-only",
        lines(&[
            "Created /zk-ro",
            "Insufficient permission : /zk-ro",
            "data",
            "Insufficient permission : /zk-ro",
            // Deleting needs DELETE on the parent (the root: world:anyone:cdrwa), not the node.
            "Node does not exist: /zk-ro",
        ]),
    );
    check(
        "acl-admin-only",
        concat(vec![
            lines(&[
                "Created /zk-adm",
                "'world,'anyone",
                ": a",
                "'world,'anyone",
                ": r",
            ]),
            stat(0, 0, 1, "0x0", 4, 0),
        ]),
    );
    check(
        "acl-ip",
        lines(&[
            "Created /zk-ip",
            "d",
            "Created /zk-ip-other",
            "Insufficient permission : /zk-ip-other",
        ]),
    );
    check(
        "new-session",
        lines(&[
            "Node does not exist: /zk-cli/eph",
            "Insufficient permission : /zk-acl",
            // `auth::` with no authenticated identity is an invalid ACL.
            "KeeperErrorCode = InvalidACL for /zk-noauth",
            "Acl is not valid : /zk-noauth",
            "Insufficient permission : /zk-acl",
            "data",
            "data",
        ]),
    );
    check(
        "watches",
        lines(&[
            "Created /zk-w",
            "null",
            "Node does not exist: /zk-w/new",
            "Created /zk-w/new",
            "[new]",
            "Created /zk-w/new2",
            "null",
        ]),
    );
    check(
        "persistent-watch",
        lines(&[
            "Created /zk-pr",
            "Created /zk-pr/a",
            "Created /zk-pr/a/b",
            "Created /zk-pr/c",
        ]),
    );
    check("sync", lines(&["Sync is OK"]));
    check(
        "cleanup",
        lines(&[
            "Node does not exist: /zk-cli",
            "[config, quota]",
            "[zk-acl, zk-adm, zk-bob, zk-ip, zk-ip-other, zk-pr, zk-w, zookeeper]",
        ]),
    );
    check("end", Vec::new());

    // Standard watches fire once; the persistent recursive one fires for every change below it
    // (but never NodeChildrenChanged) until removed. One session's notifications keep order.
    let node_events = t.node_events();
    let expected_events = lines(&[
        "state:SyncConnected type:NodeDataChanged path:/zk-w",
        "state:SyncConnected type:NodeCreated path:/zk-w/new",
        "state:SyncConnected type:NodeChildrenChanged path:/zk-w",
        "state:SyncConnected type:NodeDeleted path:/zk-w/new",
        "state:SyncConnected type:NodeCreated path:/zk-pr",
        "state:SyncConnected type:NodeCreated path:/zk-pr/a",
        "state:SyncConnected type:NodeCreated path:/zk-pr/a/b",
        "state:SyncConnected type:NodeDataChanged path:/zk-pr/a",
        "state:SyncConnected type:NodeDeleted path:/zk-pr/a/b",
        "state:SyncConnected type:PersistentWatchRemoved path:/zk-pr",
    ]);
    f.eq("watch notifications", node_events, expected_events);
    // Two connects and two closes: the first session's close, the second's at quit.
    let mut states: Vec<&str> = t
        .events
        .iter()
        .filter(|e| e.contains("type:None"))
        .map(String::as_str)
        .collect();
    // zkCli's JVM may exit before it prints the Closed event of its final `quit`: whether that
    // last line appears says nothing about the server, so it is added when missing.
    if states.last() != Some(&"state:Closed type:None path:null") {
        states.push("state:Closed type:None path:null");
    }
    f.eq(
        "connection events",
        states,
        vec![
            "state:SyncConnected type:None path:null",
            "state:Closed type:None path:null",
            "state:SyncConnected type:None path:null",
            "state:Closed type:None path:null",
        ],
    );
    f.finish(&t.raw);
}

const SECTIONS: &[&str] = &[
    "create",
    "create-errors",
    "read",
    "set",
    "kinds",
    "list",
    "delete",
    "whoami",
    "whoami-digest",
    "acl-auth",
    "acl-digest",
    "acl-read-only",
    "acl-admin-only",
    "acl-ip",
    "new-session",
    "watches",
    "persistent-watch",
    "sync",
    "cleanup",
    "end",
];

#[test]
fn zkcli_script_behaves_the_same_on_every_backend() {
    let mut shapes: Vec<(&'static str, Vec<String>)> = Vec::new();
    for server in both() {
        let connect = server.connect_string();
        let raw = run_zkcli(&connect, &script(&connect).text());
        let transcript = Transcript::parse(raw);
        check_transcript(server.name(), &transcript);
        // whoami lists identities in no particular order (ZooKeeper keeps them in a hash set);
        // check_transcript compares them as sets, so they stay out of the ordered comparison.
        let ordered: Vec<&str> = SECTIONS
            .iter()
            .copied()
            .filter(|name| !name.starts_with("whoami"))
            .collect();
        shapes.push((server.name(), zxid_shape(&transcript, &ordered)));
    }
    // Beyond the literal checks: where one backend reuses a zxid or moves to a new one, the
    // other must too (e.g. a node's pZxid is the czxid of its last child created or deleted).
    if let [(first, a), (second, b)] = shapes.as_slice() {
        assert_eq!(
            a, b,
            "zkCli transcripts of {first} and {second} differ in their zxid structure"
        );
    }
}

#[test]
fn zkcli_super_digest_overrides_every_acl() {
    let super_digest = digest_id("super", "letmein");
    let data_dir = tempfile::tempdir().expect("tempdir for Keeper");
    let mut config = Keeper::test_config(data_dir.path());
    config.super_digest = Some(super_digest.clone());
    let mut servers: Vec<Box<dyn TestServer>> = Vec::new();
    if backend_enabled("keeper") {
        servers.push(Box::new(Keeper::start_with(config)));
    }
    if backend_enabled("zookeeper") {
        servers.push(Box::new(ApacheZk::start_with(ZkOptions {
            super_digest: Some(super_digest),
            ..ZkOptions::default()
        })));
    }
    for server in servers {
        let backend = server.name();
        let connect = server.connect_string();
        let mut s = Script::default();
        s.section("locked")
            .cmd(format!(
                "create /zk-locked secret digest:{}:cdrwa",
                digest_id("carol", "pw")
            ))
            .cmd("get /zk-locked")
            .cmd("addauth digest super:wrong")
            .cmd("get /zk-locked")
            .cmd("addauth digest super:letmein")
            .cmd("get /zk-locked")
            .cmd("set /zk-locked changed")
            .cmd("get /zk-locked")
            .cmd("setAcl /zk-locked world:anyone:r");
        s.cmd("close").cmd(format!("connect {connect}"));
        s.section("after")
            .cmd("get /zk-locked")
            .cmd("set /zk-locked x");
        s.section("end");
        let t = Transcript::parse(run_zkcli(&connect, &s.text()));
        assert_eq!(
            t.masked("locked"),
            lines(&[
                "Created /zk-locked",
                "Insufficient permission : /zk-locked",
                "Insufficient permission : /zk-locked",
                "secret",
                "changed",
            ]),
            "[{backend}] super digest; whole output:\n{}",
            t.raw
        );
        assert_eq!(
            t.masked("after"),
            lines(&["changed", "Insufficient permission : /zk-locked"]),
            "[{backend}] ACL set by super; whole output:\n{}",
            t.raw
        );
    }
}
