//! `lockkeeper-zk-client` against Keeper and against Apache ZooKeeper.
//!
//! Every test body runs against each backend of `both()` with the same assertions, so a
//! difference between the client and either server fails with the backend's name. Connection
//! faults go through the test kit's proxy, which closes every relayed connection when cut.
//! Every wait is bounded by [`LIMIT`].

use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use lockkeeper_testkit::{Proxy, both, free_port};
use lockkeeper_zk_client::{
    Acl, AddWatchMode, Client, CreateMode, CreateOptions, Error, EventType, Id, MultiReadResult,
    MultiWriteError, MultiWriteResult, PersistentWatcher, SessionState, perms,
};
use sha1::{Digest, Sha1};

const LIMIT: Duration = Duration::from_secs(20);

struct Backend {
    connect: String,
    name: &'static str,
}

impl Backend {
    async fn within<T>(&self, what: &str, fut: impl Future<Output = T>) -> T {
        lockkeeper_testkit::within(LIMIT, format!("{}: {what}", self.name), fut).await
    }

    async fn client(&self) -> Client {
        self.connect_to(&self.connect).await
    }

    async fn connect_to(&self, connect: &str) -> Client {
        self.within("connect", Client::connect(connect))
            .await
            .unwrap_or_else(|e| panic!("{}: connect to {connect}: {e}", self.name))
    }

    /// A proxy in front of the server, and a session with `session_timeout` through it.
    async fn through_proxy(&self, session_timeout: Duration) -> (Proxy, Client) {
        let proxy = Proxy::start(&self.connect).await;
        let through = proxy.connect_string();
        let connecting = Client::connector()
            .session_timeout(session_timeout)
            .connect(&through);
        let zk = self
            .within("connect through the proxy", connecting)
            .await
            .unwrap_or_else(|e| panic!("{}: connect through the proxy: {e}", self.name));
        (proxy, zk)
    }

    /// Waits until the server's count of watches (`wchs`; ZooKeeper counts only its data
    /// watches there) is zero: until `what` is done.
    async fn until_no_watches(&self, what: &str) {
        self.within(what, async {
            while total_watches(&self.connect) != 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    async fn next_node_event(&self, watcher: &mut PersistentWatcher) -> (EventType, String) {
        loop {
            let event = self.within("a persistent watch", watcher.changed()).await;
            if event.event_type != EventType::Session {
                return (event.event_type, event.path);
            }
        }
    }
}

async fn each_backend<F, Fut>(body: F)
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    let servers = both();
    assert!(!servers.is_empty(), "no backend selected");
    for server in &servers {
        body(Backend {
            connect: server.connect_string(),
            name: server.name(),
        })
        .await;
    }
}

/// The server's count of watches (`wchs`).
fn total_watches(connect: &str) -> usize {
    let addr = connect.parse().expect("a single 127.0.0.1:PORT");
    lockkeeper_testkit::total_watches(addr)
}

fn persistent() -> CreateOptions {
    CreateOptions::new(CreateMode::Persistent)
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test]
async fn reads_writes_versions_and_the_errors_they_answer() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let n = b.name;
        let (stat, path) = zk.create("/app", b"v0", &persistent()).await.unwrap();
        assert_eq!(
            (path.as_str(), stat.version, stat.data_length),
            ("/app", 0, 2),
            "{n}"
        );
        assert_eq!(
            zk.create("/app", b"", &persistent()).await,
            Err(Error::NodeExists),
            "{n}"
        );
        assert_eq!(
            zk.create("/missing/child", b"", &persistent()).await,
            Err(Error::NoNode),
            "{n}"
        );
        let sequential = CreateOptions::new(CreateMode::PersistentSequential);
        let (_, first) = zk.create("/app/item-", b"", &sequential).await.unwrap();
        let (_, second) = zk.create("/app/item-", b"", &sequential).await.unwrap();
        assert_eq!(
            (first.as_str(), second.as_str()),
            ("/app/item-0000000000", "/app/item-0000000001"),
            "{n}"
        );

        let stat = zk.set_data("/app", b"v1", Some(0)).await.unwrap();
        assert_eq!(stat.version, 1, "{n}");
        assert_eq!(
            zk.set_data("/app", b"v2", Some(0)).await,
            Err(Error::BadVersion),
            "{n}"
        );
        let (data, stat) = zk.get_data("/app").await.unwrap();
        assert_eq!((data.as_slice(), stat.version), (&b"v1"[..], 1), "{n}");
        assert_eq!(zk.check_stat("/app/none").await, Ok(None), "{n}");
        assert_eq!(
            zk.check_stat("/app").await.unwrap().map(|s| s.num_children),
            Some(2),
            "{n}"
        );
        assert_eq!(zk.get_data("/none").await, Err(Error::NoNode), "{n}");

        let (children, stat) = zk.get_children("/app").await.unwrap();
        assert_eq!(
            sorted(children),
            ["item-0000000000", "item-0000000001"],
            "{n}"
        );
        assert_eq!(stat.num_children, 2, "{n}");
        assert_eq!(zk.count_descendants("/app").await, Ok(2), "{n}");
        assert_eq!(zk.delete("/app", None).await, Err(Error::NotEmpty), "{n}");
        assert_eq!(
            zk.delete(&first, Some(7)).await,
            Err(Error::BadVersion),
            "{n}"
        );
        zk.delete(&first, Some(0)).await.unwrap();
        zk.delete(&second, None).await.unwrap();
        assert_eq!(zk.delete(&second, None).await, Err(Error::NoNode), "{n}");
        zk.sync("/app").await.unwrap();

        let ephemeral = CreateOptions::new(CreateMode::Ephemeral);
        let (stat, _) = zk.create("/app/mine", b"", &ephemeral).await.unwrap();
        assert_eq!(stat.ephemeral_owner, zk.session_id(), "{n}");
        assert_eq!(
            zk.list_ephemerals("/app").await,
            Ok(vec!["/app/mine".to_owned()]),
            "{n}"
        );
        assert_eq!(
            zk.create("/app/mine/x", b"", &persistent()).await,
            Err(Error::NoChildrenForEphemerals),
            "{n}"
        );
        let (stat, _) = zk
            .create("/box", b"", &CreateOptions::new(CreateMode::Container))
            .await
            .unwrap();
        assert_eq!(stat.version, 0, "{n}");
        // mkdir: every missing ancestor, and nothing wrong with what is there already.
        zk.mkdir("/app/x/y/z", &persistent()).await.unwrap();
        zk.mkdir("/app/x/y/z", &persistent()).await.unwrap();
        assert_eq!(
            zk.list_children("/app/x/y").await,
            Ok(vec!["z".to_owned()]),
            "{n}"
        );
        let sequential = CreateOptions::new(CreateMode::PersistentSequential);
        assert!(
            matches!(zk.mkdir("/app/s", &sequential).await, Err(Error::BadArguments(why)) if why.contains("/app/s")),
            "{n}"
        );
    })
    .await;
}

/// Bad arguments are refused before anything is sent, naming what was wrong.
#[tokio::test]
async fn bad_arguments_name_the_path_and_send_nothing() {
    each_backend(|b| async move {
        let zk = b.client().await;
        for bad in ["relative", "/trailing/", "/a//b", "/a/../b"] {
            match zk.get_data(bad).await {
                Err(Error::BadArguments(why)) => {
                    assert!(why.contains(&format!("{bad:?}")), "{}: {why}", b.name);
                }
                other => panic!("{}: get_data({bad:?}) gave {other:?}", b.name),
            }
        }
        let ttl_without_time = CreateOptions::new(CreateMode::PersistentWithTtl);
        assert!(
            matches!(zk.create("/t", b"", &ttl_without_time).await, Err(Error::BadArguments(why)) if why.contains("TTL")),
            "{}",
            b.name
        );
        let no_acl = persistent().with_acl(Vec::new());
        assert_eq!(zk.create("/t", b"", &no_acl).await, Err(Error::InvalidAcl), "{}", b.name);
        // The session is unharmed.
        assert_eq!(zk.check_stat("/t").await, Ok(None), "{}", b.name);
    })
    .await;
}

/// A request is sent when the method is called: a listing asked for right after a create,
/// before awaiting either, already contains the node.
#[tokio::test]
async fn requests_leave_in_call_order_before_they_are_awaited() {
    each_backend(|b| async move {
        let zk = b.client().await;
        zk.create("/q", b"", &persistent()).await.unwrap();
        let ephemeral_sequential = CreateOptions::new(CreateMode::EphemeralSequential);
        let create = zk.create("/q/n-", b"", &ephemeral_sequential);
        let listing = zk.list_children("/q");
        let children = b.within("listing", listing).await.unwrap();
        let (_, path) = b.within("create", create).await.unwrap();
        assert_eq!(children, [path.trim_start_matches("/q/")], "{}", b.name);
        // Many in flight at once from many tasks: every one answered, each with its own node.
        let mut tasks = Vec::new();
        for i in 0..64 {
            let zk = zk.clone();
            tasks.push(tokio::spawn(async move {
                zk.create(&format!("/q/p{i}"), b"", &persistent()).await
            }));
        }
        for (i, task) in tasks.into_iter().enumerate() {
            let (_, path) = task.await.unwrap().unwrap();
            assert_eq!(path, format!("/q/p{i}"), "{}", b.name);
        }
        assert_eq!(zk.count_descendants("/q").await, Ok(65), "{}", b.name);
    })
    .await;
}

/// Replies bigger than one read, and many replies landing across reads, all arrive whole: a
/// read stops waiting for more only once it has taken everything the socket held.
#[tokio::test]
async fn replies_of_every_size_arrive_whole_however_the_reads_fall() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let big = vec![7u8; 900 * 1024];
        zk.create("/big", &big, &persistent()).await.unwrap();
        for i in 0..40usize {
            let value = vec![u8::try_from(i).unwrap(); 1 + i * 997];
            zk.create(&format!("/sized-{i}"), &value, &persistent())
                .await
                .unwrap();
        }
        // All within one limit, many times what they take: a read left waiting for bytes the
        // socket already held would wait for the next ping's reply, seconds away.
        b.within("every read", async {
            for round in 0..3 {
                let (data, _) = zk.get_data("/big").await.unwrap();
                assert!(
                    data == big,
                    "{}: round {round}: {} bytes",
                    b.name,
                    data.len()
                );
            }
            // Values of many sizes, all read at once: replies end anywhere in a read.
            let reads: Vec<_> = (0..40usize)
                .flat_map(|i| [i, 39 - i])
                .map(|i| (i, zk.get_data(&format!("/sized-{i}"))))
                .collect();
            for (i, read) in reads {
                let (data, _) = read.await.unwrap();
                assert_eq!(data.len(), 1 + i * 997, "{}: /sized-{i}", b.name);
                assert!(
                    data.iter().all(|&byte| usize::from(byte) == i),
                    "{}",
                    b.name
                );
            }
        })
        .await;
    })
    .await;
}

/// A cork holds requests back, in order, until it is dropped; corks nest.
#[tokio::test]
async fn a_cork_holds_requests_back_until_it_is_dropped() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let other = b.client().await;
        zk.create("/c", b"", &persistent()).await.unwrap();
        let outer = zk.cork();
        let inner = zk.cork();
        let first = zk.create("/c/first", b"", &persistent());
        let second = zk.create("/c/second", b"", &persistent());
        drop(inner);
        // Nothing left while a cork lives: another session sees neither node, even after
        // its own round trip (which a request written at once would have preceded).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let seen = b.within("listing", other.list_children("/c")).await;
        assert_eq!(seen, Ok(vec![]), "{}: written under a cork", b.name);
        drop(outer);
        b.within("first", first).await.unwrap();
        b.within("second", second).await.unwrap();
        let (_, first) = zk.get_data("/c/first").await.unwrap();
        let (_, second) = zk.get_data("/c/second").await.unwrap();
        assert!(first.czxid < second.czxid, "{}: sent in call order", b.name);
    })
    .await;
}

#[tokio::test]
async fn oneshot_watches_fire_once_with_their_event() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let other = b.client().await;
        let n = b.name;
        let (missing, created) = zk.check_and_watch_stat("/w").await.unwrap();
        assert_eq!(missing, None, "{n}");
        other.create("/w", b"", &persistent()).await.unwrap();
        let event = b.within("created", created.changed()).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeCreated, "/w"),
            "{n}"
        );

        let (_, _, changed) = zk.get_and_watch_data("/w").await.unwrap();
        let (_, children) = zk.list_and_watch_children("/w").await.unwrap();
        other.set_data("/w", b"x", None).await.unwrap();
        let event = b.within("data changed", changed.changed()).await;
        assert_eq!(event.event_type, EventType::NodeDataChanged, "{n}");
        other.create("/w/c", b"", &persistent()).await.unwrap();
        let event = b.within("children changed", children.changed()).await;
        assert_eq!(event.event_type, EventType::NodeChildrenChanged, "{n}");

        let (_, _, deleted) = zk.get_and_watch_data("/w/c").await.unwrap();
        other.delete("/w/c", None).await.unwrap();
        let event = b.within("deleted", deleted.changed()).await;
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeDeleted, "/w/c"),
            "{n}"
        );
        // A read that fails says why, and hands out no watcher.
        assert_eq!(
            zk.get_and_watch_data("/w/c").await.map(drop),
            Err(Error::NoNode),
            "{n}"
        );
    })
    .await;
}

#[tokio::test]
async fn persistent_watches_fire_until_dropped() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let other = b.client().await;
        let n = b.name;
        zk.create("/tree", b"", &persistent()).await.unwrap();
        zk.create("/tree/a", b"", &persistent()).await.unwrap();
        // One mode per path and session on the server: the subtree and one node below it.
        let mut subtree = zk
            .watch("/tree", AddWatchMode::PersistentRecursive)
            .await
            .unwrap();
        let mut node = zk.watch("/tree/a", AddWatchMode::Persistent).await.unwrap();
        other.create("/tree/a/b", b"", &persistent()).await.unwrap();
        other.set_data("/tree/a/b", b"1", None).await.unwrap();
        other.delete("/tree/a/b", None).await.unwrap();
        assert_eq!(
            b.next_node_event(&mut subtree).await,
            (EventType::NodeCreated, "/tree/a/b".into()),
            "{n}"
        );
        assert_eq!(
            b.next_node_event(&mut subtree).await,
            (EventType::NodeDataChanged, "/tree/a/b".into()),
            "{n}"
        );
        assert_eq!(
            b.next_node_event(&mut subtree).await,
            (EventType::NodeDeleted, "/tree/a/b".into()),
            "{n}"
        );
        // A recursive watch hears no child events; a persistent one does, and keeps firing.
        assert_eq!(
            b.next_node_event(&mut node).await,
            (EventType::NodeChildrenChanged, "/tree/a".into()),
            "{n}"
        );
        assert_eq!(
            b.next_node_event(&mut node).await,
            (EventType::NodeChildrenChanged, "/tree/a".into()),
            "{n}"
        );
        other.set_data("/tree/a", b"2", None).await.unwrap();
        assert_eq!(
            b.next_node_event(&mut node).await,
            (EventType::NodeDataChanged, "/tree/a".into()),
            "{n}"
        );
        assert_eq!(
            b.next_node_event(&mut subtree).await,
            (EventType::NodeDataChanged, "/tree/a".into()),
            "{n}"
        );
        // Dropping sends the removal: the server's count of watches goes back to none.
        assert_ne!(total_watches(&b.connect), 0, "{n}");
        drop(subtree);
        drop(node);
        b.until_no_watches("the watches' removal").await;
        assert_eq!(
            zk.check_stat("/tree/a").await.unwrap().map(|s| s.version),
            Some(1),
            "{n}"
        );
    })
    .await;
}

/// Dropping the last watcher of a path sends a removal of every watch there; a watch asked
/// for on that path just before, whose answer has not come yet, must not be removed with it:
/// the new watcher hears the next change, and the server keeps exactly its watch.
#[tokio::test]
async fn dropping_a_watcher_spares_a_watch_still_being_set_on_its_path() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let other = b.client().await;
        let n = b.name;
        zk.create("/spared", b"", &persistent()).await.unwrap();
        let old = zk.watch("/spared", AddWatchMode::Persistent).await.unwrap();
        // Sent now, answered later: the drop below happens while it is in flight.
        let asking = zk.watch("/spared", AddWatchMode::Persistent);
        drop(old);
        let mut new = b.within("the second watch", asking).await.unwrap();
        // A one-shot read on the same path: it was answered after any removal the drop sent,
        // so it also shows that nothing removed the watches after the new one was set.
        zk.get_data("/spared").await.unwrap();
        other.set_data("/spared", b"1", None).await.unwrap();
        assert_eq!(
            b.next_node_event(&mut new).await,
            (EventType::NodeDataChanged, "/spared".into()),
            "{n}: the new watcher hears the change"
        );
        assert_eq!(total_watches(&b.connect), 1, "{n}: the new watch alone");
        drop(new);
        b.until_no_watches("the last watch's removal").await;
    })
    .await;
}

/// A one-shot watch on the path of a dropped persistent watcher keeps the removal back (it
/// would go with it); once it fires, the removal goes, and the server holds no watch.
///
/// The one-shot watch is a child watch: ZooKeeper 3.8.0 keeps one watch per path and
/// connection in each of its data and child tables, so a data read would turn the persistent
/// data watch itself into a one-shot one, and it would go when it fired, removal or not.
#[tokio::test]
async fn a_removal_held_back_by_a_oneshot_watch_goes_once_it_fires() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let other = b.client().await;
        let n = b.name;
        zk.create("/held", b"", &persistent()).await.unwrap();
        let persistent_watcher = zk.watch("/held", AddWatchMode::Persistent).await.unwrap();
        let (_, oneshot) = zk.list_and_watch_children("/held").await.unwrap();
        drop(persistent_watcher);
        // A round trip after the drop: any removal it sent has been handled by now.
        zk.check_stat("/held").await.unwrap();
        assert_ne!(
            total_watches(&b.connect),
            0,
            "{n}: the persistent watch stays while the one-shot one waits"
        );
        other
            .create("/held/child", b"", &persistent())
            .await
            .unwrap();
        assert_eq!(
            b.within("the one-shot watch", oneshot.changed())
                .await
                .event_type,
            EventType::NodeChildrenChanged,
            "{n}"
        );
        b.until_no_watches("the persistent watch's removal").await;
    })
    .await;
}

#[tokio::test]
async fn multi_applies_all_or_names_the_operation_that_failed() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let n = b.name;
        zk.create("/m", b"", &persistent()).await.unwrap();
        let mut batch = zk.multi();
        batch.add_create("/m/a", b"a", &persistent()).unwrap();
        let sequential = CreateOptions::new(CreateMode::PersistentSequential);
        batch.add_create("/m/s-", b"", &sequential).unwrap();
        batch.add_set_data("/m", b"x", Some(0)).unwrap();
        batch.add_check_version("/m/a", 0).unwrap();
        batch.add_delete("/m/a", Some(0)).unwrap();
        // A bad path is refused as it is added, naming it; the batch keeps the others.
        assert!(
            matches!(batch.add_delete("/m//x", None), Err(Error::BadArguments(why)) if why.contains("/m//x")),
            "{n}"
        );
        let results = batch.commit().await.unwrap();
        assert_eq!(results.len(), 5, "{n}: {results:?}");
        assert!(
            matches!(&results[0], MultiWriteResult::Create { path, .. } if path == "/m/a"),
            "{n}: {results:?}"
        );
        assert!(
            matches!(&results[1], MultiWriteResult::Create { path, .. } if path.starts_with("/m/s-")),
            "{n}: {results:?}"
        );
        assert!(matches!(&results[2], MultiWriteResult::SetData { stat } if stat.version == 1), "{n}");
        assert_eq!(results[3..], [MultiWriteResult::Check, MultiWriteResult::Delete], "{n}");

        let mut batch = zk.multi();
        batch.add_create("/m/b", b"", &persistent()).unwrap();
        batch.add_check_version("/m", 0).unwrap();
        batch.add_create("/m/c", b"", &persistent()).unwrap();
        let failed = batch.commit().await;
        assert_eq!(
            failed,
            Err(MultiWriteError::OperationFailed { index: 1, source: Error::BadVersion }),
            "{n}"
        );
        assert_eq!(zk.check_stat("/m/b").await, Ok(None), "{n}: a failed batch applies nothing");

        let mut reads = zk.multi_read();
        reads.add_get_data("/m").unwrap();
        reads.add_get_children("/m").unwrap();
        reads.add_get_data("/m/none").unwrap();
        let read = reads.commit().await.unwrap();
        assert!(matches!(&read[0], MultiReadResult::Data { data, .. } if data == b"x"), "{n}: {read:?}");
        assert!(matches!(&read[1], MultiReadResult::Children { children } if children.len() == 1), "{n}");
        assert_eq!(read[2], MultiReadResult::Error { err: Error::NoNode }, "{n}");
    })
    .await;
}

#[tokio::test]
async fn a_chroot_is_invisible_to_the_caller() {
    each_backend(|b| async move {
        let root = b.client().await;
        root.create("/apps", b"", &persistent()).await.unwrap();
        root.create("/apps/one", b"", &persistent()).await.unwrap();
        let zk = b.connect_to(&format!("{}/apps/one", b.connect)).await;
        // A chroot that is missing is created when asked for, ancestors and all.
        let made = b
            .within(
                "connect with create_chroot",
                Client::connector()
                    .create_chroot(true)
                    .connect(&format!("{}/made/here", b.connect)),
            )
            .await
            .unwrap();
        assert_eq!(made.list_children("/").await, Ok(Vec::new()), "{}", b.name);
        assert!(
            root.check_stat("/made/here").await.unwrap().is_some(),
            "{}",
            b.name
        );
        let (_, path) = zk.create("/job", b"", &persistent()).await.unwrap();
        assert_eq!(path, "/job", "{}", b.name);
        let (_, _, watcher) = zk.get_and_watch_data("/job").await.unwrap();
        root.delete("/apps/one/job", None).await.unwrap();
        let event = b.within("deleted", watcher.changed()).await;
        assert_eq!(event.path, "/job", "{}", b.name);
        assert_eq!(zk.list_children("/").await, Ok(Vec::new()), "{}", b.name);
    })
    .await;
}

/// `base64(sha1("user:password"))`, the id a digest ACL names.
fn digest(user: &str, password: &str) -> String {
    let hash = Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

#[tokio::test]
async fn digest_credentials_are_sent_on_connect() {
    each_backend(|b| async move {
        let alice = b
            .within(
                "connect with auth",
                Client::connector()
                    .auth("digest", b"alice:secret")
                    .connect(&b.connect),
            )
            .await
            .unwrap();
        let only_alice = vec![Acl {
            perms: perms::ALL,
            id: Id {
                scheme: "digest".into(),
                id: digest("alice", "secret"),
            },
        }];
        alice
            .create("/private", b"s", &persistent().with_acl(only_alice))
            .await
            .unwrap();
        assert_eq!(
            alice.get_data("/private").await.map(|(d, _)| d),
            Ok(b"s".to_vec()),
            "{}",
            b.name
        );
        let (acl, _) = alice.get_acl("/private").await.unwrap();
        assert_eq!(acl[0].id.id, digest("alice", "secret"), "{}", b.name);
        let stranger = b.client().await;
        assert_eq!(
            stranger.get_data("/private").await,
            Err(Error::NoAuth),
            "{}",
            b.name
        );
        assert_eq!(
            stranger.get_acl("/private").await,
            Err(Error::NoAuth),
            "{}",
            b.name
        );
    })
    .await;
}

/// A cut connection fails what was in flight with ConnectionLoss and reports Disconnected;
/// once the network is back the same session resumes, its ephemeral node still there, and a
/// watch left before the cut fires for a change made during it.
#[tokio::test]
async fn the_session_survives_a_short_cut_and_its_watches_too() {
    each_backend(|b| async move {
        let n = b.name;
        let (proxy, zk) = b.through_proxy(Duration::from_secs(8)).await;
        let other = b.client().await;
        let mut states = zk.state_watcher();
        let id = zk.session_id();
        zk.create("/eph", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .unwrap();
        let (_, _, watcher) = zk.get_and_watch_data("/eph").await.unwrap();

        proxy.cut();
        assert_eq!(
            b.within("disconnected", states.changed()).await,
            SessionState::Disconnected,
            "{n}"
        );
        match b.within("a read while cut", zk.get_data("/eph")).await {
            Err(Error::ConnectionLoss(why)) => assert!(why.contains("127.0.0.1:"), "{n}: {why}"),
            other => panic!("{n}: a read while cut gave {other:?}"),
        }
        other
            .set_data("/eph", b"changed while cut", None)
            .await
            .unwrap();
        proxy.heal();
        assert_eq!(
            b.within("reconnected", states.changed()).await,
            SessionState::SyncConnected,
            "{n}"
        );
        assert_eq!(zk.session_id(), id, "{n}: the same session");
        let event = b.within("the missed change", watcher.changed()).await;
        assert_eq!(event.event_type, EventType::NodeDataChanged, "{n}");
        let (data, stat) = zk.get_data("/eph").await.unwrap();
        assert_eq!(
            (data.as_slice(), stat.ephemeral_owner),
            (&b"changed while cut"[..], id),
            "{n}"
        );
    })
    .await;
}

/// A cut longer than the session timeout: the server expires the session, and on reconnecting
/// the client reports Expired, fails every request with SessionExpired and ends its watches.
#[tokio::test]
async fn an_expired_session_ends_requests_and_watches() {
    each_backend(|b| async move {
        let n = b.name;
        let (proxy, zk) = b.through_proxy(Duration::from_secs(2)).await;
        let other = b.client().await;
        zk.create("/gone", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .unwrap();
        let (_, _, watcher) = zk.get_and_watch_data("/gone").await.unwrap();
        let mut states = zk.state_watcher();
        proxy.cut();
        assert_eq!(
            b.within("disconnected", states.changed()).await,
            SessionState::Disconnected,
            "{n}"
        );
        // The server expires the session: its ephemeral goes.
        b.within("expiry on the server", async {
            while other.check_stat("/gone").await.unwrap().is_some() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        proxy.heal();
        assert_eq!(
            b.within("expired", states.changed()).await,
            SessionState::Expired,
            "{n}"
        );
        let event = b.within("watch ended", watcher.changed()).await;
        assert_eq!(
            (event.event_type, event.session_state),
            (EventType::Session, SessionState::Expired),
            "{n}"
        );
        assert_eq!(zk.get_data("/").await, Err(Error::SessionExpired), "{n}");
        assert_eq!(zk.state(), SessionState::Expired, "{n}");
    })
    .await;
}

#[tokio::test]
async fn closing_ends_the_session_on_the_server() {
    each_backend(|b| async move {
        let n = b.name;
        let other = b.client().await;
        let zk = b.client().await;
        zk.create("/closed", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .unwrap();
        b.within("close", zk.close()).await;
        assert_eq!(zk.state(), SessionState::Closed, "{n}");
        assert_eq!(zk.get_data("/").await, Err(Error::ClientClosed), "{n}");
        assert_eq!(
            other.check_stat("/closed").await,
            Ok(None),
            "{n}: ephemeral gone at once"
        );

        // Dropping the last handle closes too.
        let dropped = b.client().await;
        dropped
            .create("/dropped", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .unwrap();
        drop(dropped);
        b.within("the dropped session's end", async {
            while other.check_stat("/dropped").await.unwrap().is_some() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_connect_that_fails_names_every_host_and_why() {
    let (dead1, dead2) = (free_port(), free_port());
    let connect = format!("127.0.0.1:{dead1},127.0.0.1:{dead2}");
    let started = std::time::Instant::now();
    let err = Client::connector()
        .connection_timeout(Duration::from_millis(800))
        .connect(&connect)
        .await
        .unwrap_err();
    let text = err.to_string();
    let Error::Connect { failures, .. } = &err else {
        panic!("{err:?}");
    };
    let mut failures = failures.clone();
    failures.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![
        (
            format!("127.0.0.1:{dead1}"),
            lockkeeper_zk_client::HostFailure::Refused,
        ),
        (
            format!("127.0.0.1:{dead2}"),
            lockkeeper_zk_client::HostFailure::Refused,
        ),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(failures, want, "each host, refused");
    assert!(text.contains(&format!("127.0.0.1:{dead1}")), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{dead2}")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let err = Client::connect("127.0.0.1:1,,x").await.unwrap_err();
    assert!(
        matches!(&err, Error::BadArguments(why) if why.contains("127.0.0.1:1,,x")),
        "{err:?}"
    );
}

/// With `one_round`, hosts that refuse are reported after one try each, long before the
/// connection timeout, which without it keeps trying them (a server may be starting).
#[tokio::test]
async fn one_round_reports_refusing_hosts_without_waiting_for_the_timeout() {
    let (dead1, dead2) = (free_port(), free_port());
    let connect = format!("127.0.0.1:{dead1},127.0.0.1:{dead2}");
    let timeout = Duration::from_secs(60);
    let once = Client::connector()
        .connection_timeout(timeout)
        .one_round(true)
        .connect(&connect);
    let err = tokio::time::timeout(timeout / 2, once)
        .await
        .expect("one round ends long before the connection timeout")
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(text.contains(&format!("127.0.0.1:{dead1}")), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{dead2}")), "{text}");
    // Without it, the same hosts are tried again until the timeout.
    let again = Client::connector()
        .connection_timeout(timeout)
        .connect(&connect);
    assert!(
        tokio::time::timeout(Duration::from_secs(3), again)
            .await
            .is_err(),
        "without one_round, refusing hosts are tried until the connection timeout"
    );
}

/// Across a cut: a persistent watch is restored with the session, and its watcher hears the
/// connection go and come back. An idle session is kept alive by pings alone.
#[tokio::test]
async fn persistent_watches_hear_the_connection_and_survive_it() {
    each_backend(|b| async move {
        let n = b.name;
        let (proxy, zk) = b.through_proxy(Duration::from_secs(2)).await;
        let other = b.client().await;
        zk.create("/p", b"", &persistent()).await.unwrap();
        zk.create("/p/mine", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .unwrap();
        let mut watcher = zk
            .watch("/p", AddWatchMode::PersistentRecursive)
            .await
            .unwrap();
        let mut states = zk.state_watcher();
        // Idle for twice the session timeout: only pings keep it.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(zk.state(), SessionState::SyncConnected, "{n}");
        assert!(
            other.check_stat("/p/mine").await.unwrap().is_some(),
            "{n}: pings kept it"
        );

        proxy.cut();
        let event = b.within("disconnected", watcher.changed()).await;
        assert_eq!(
            (event.event_type, event.session_state),
            (EventType::Session, SessionState::Disconnected),
            "{n}"
        );
        proxy.heal();
        let event = b.within("reconnected", watcher.changed()).await;
        assert_eq!(
            (event.event_type, event.session_state),
            (EventType::Session, SessionState::SyncConnected),
            "{n}"
        );
        assert_eq!(
            [states.changed().await, states.changed().await],
            [SessionState::Disconnected, SessionState::SyncConnected],
            "{n}"
        );
        // Restored on the server before any later request of this session is answered: a
        // change made after such an answer is heard.
        zk.sync("/p").await.unwrap();
        other.create("/p/after", b"", &persistent()).await.unwrap();
        assert_eq!(
            b.next_node_event(&mut watcher).await,
            (EventType::NodeCreated, "/p/after".into()),
            "{n}"
        );
    })
    .await;
}

/// A host that accepts and never answers gets its share of the connection timeout, not all
/// of it: the healthy host listed beside it is still reached in time.
#[tokio::test]
async fn a_silent_host_does_not_keep_the_others_from_being_tried() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut accepted = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            accepted.push(socket);
        }
    });
    each_backend(|b| async move {
        // Three silent entries to one good one: most orders try a silent host first.
        let connect = format!("{silent_addr},{silent_addr},{silent_addr},{}", b.connect);
        let started = std::time::Instant::now();
        let zk = Client::connector()
            .connection_timeout(Duration::from_secs(4))
            .connect(&connect)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
        assert_eq!(zk.state(), SessionState::SyncConnected, "{}", b.name);
        assert!(started.elapsed() < Duration::from_secs(4), "{}", b.name);
    })
    .await;
    held.abort();
}

/// A reconnection that reaches a host which accepts and never answers (as a ZooKeeper still
/// starting may) gives that attempt up after the connection timeout, not the session timeout:
/// its next attempt resumes the same session, long before the server would have expired it.
#[tokio::test]
async fn a_reconnection_gives_up_a_silent_connection_and_resumes_the_session() {
    each_backend(|b| async move {
        let n = b.name;
        let proxy = Proxy::start(&b.connect).await;
        let session_timeout = Duration::from_secs(16);
        let zk = b
            .within(
                "connect through the proxy",
                Client::connector()
                    .session_timeout(session_timeout)
                    .connection_timeout(Duration::from_secs(1))
                    .connect(&proxy.connect_string()),
            )
            .await
            .unwrap_or_else(|e| panic!("{n}: {e}"));
        let id = zk.session_id();
        let mut states = zk.state_watcher();

        // The connection breaks, and the next one the client makes is held silent.
        proxy.silence_new_connections();
        proxy.cut();
        proxy.heal();
        assert_eq!(
            b.within("disconnected", states.changed()).await,
            SessionState::Disconnected,
            "{n}"
        );
        b.within("a connection held silent", async {
            while proxy.silenced() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let since = std::time::Instant::now();
        proxy.relay_new_connections();
        assert_eq!(
            b.within("reconnected", states.changed()).await,
            SessionState::SyncConnected,
            "{n}"
        );
        // Waiting out the silent connection would take the session's timeout (after which the
        // server expires it); giving it up takes the connection timeout. A loose bound between.
        assert!(
            since.elapsed() < session_timeout / 2,
            "{n}: reconnected after {:?}",
            since.elapsed()
        );
        assert_eq!(zk.session_id(), id, "{n}: the same session");
        zk.check_stat("/")
            .await
            .unwrap_or_else(|e| panic!("{n}: {e}"));
    })
    .await;
}
