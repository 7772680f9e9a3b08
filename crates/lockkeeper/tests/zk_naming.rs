//! Naming against Keeper and Apache ZooKeeper: register a name with an address, resolve it,
//! watch it; ephemeral names come back after a session loss and never take over another
//! session's name; persistent names outlive their session.

mod support;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::{ConnectionState, NameWatch, Registration};
use lockkeeper_zk_client::{CreateMode, CreateOptions};
use support::{Partition, for_each_backend, session, wait_state};
use tokio::time::Instant;

/// The next address change, within 20 s.
async fn next(watch: &mut NameWatch) -> Option<String> {
    watch
        .next_timeout(Duration::from_secs(20))
        .await
        .expect("a valid timeout")
        .expect("a change within 20 s")
}

#[tokio::test]
async fn a_name_is_registered_resolved_watched_and_unregistered() {
    for_each_backend(|connect| async move {
        let service = session(&connect).await;
        let client = session(&connect).await;
        let name = "/services/orders/primary";
        assert_eq!(client.resolve(name).await.unwrap(), None);
        let mut watch = client.watch_name(name).await.expect("watch");
        assert_eq!(watch.address(), None);

        let me = service
            .register(name, "10.0.0.7:8080", Registration::Ephemeral)
            .await
            .expect("register");
        assert!(me.is_present());
        assert_eq!(next(&mut watch).await.as_deref(), Some("10.0.0.7:8080"));
        assert_eq!(
            client.resolve(name).await.unwrap().as_deref(),
            Some("10.0.0.7:8080")
        );

        me.set_address("10.0.0.8:8080").await.expect("set");
        assert_eq!(next(&mut watch).await.as_deref(), Some("10.0.0.8:8080"));
        assert_eq!(watch.address().as_deref(), Some("10.0.0.8:8080"));

        me.unregister().await.expect("unregister");
        assert_eq!(next(&mut watch).await, None);
        assert_eq!(client.resolve(name).await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn an_ephemeral_name_comes_back_in_the_next_session() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let service = session(&partition.connect_string()).await;
        let client = session(&connect).await;
        let name = "/services/billing";
        let me = service
            .register(name, "10.0.0.9:9000", Registration::Ephemeral)
            .await
            .expect("register");
        let mut watch = client.watch_name(name).await.expect("watch");
        assert_eq!(watch.address().as_deref(), Some("10.0.0.9:9000"));

        let first = service.session_id();
        partition.cut();
        wait_state(&service, ConnectionState::Lost).await;
        partition.heal();
        wait_state(&service, ConnectionState::Reconnected).await;
        // The old session's node goes when the server expires it; ours comes back after.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let owner = client
                .client()
                .unwrap()
                .get_data(name)
                .await
                .map(|(_, stat)| stat.ephemeral_owner)
                .ok();
            if owner.is_some() && owner != Some(first) {
                assert_eq!(owner, Some(service.session_id()));
                break;
            }
            assert!(Instant::now() < deadline, "the name never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The server applied the create before its answer reached the service: it counts
        // the name as present once that answer is read.
        while !me.is_present() {
            assert!(
                Instant::now() < deadline,
                "the service never saw its name back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            client.resolve(name).await.unwrap().as_deref(),
            Some("10.0.0.9:9000")
        );
        // The watcher saw it go and come back, or nothing if both fell between two reads.
        let mut changes = Vec::new();
        while let Some(change) = watch
            .next_timeout(Duration::from_millis(500))
            .await
            .unwrap()
        {
            changes.push(change);
            assert!(changes.len() <= 2, "{changes:?}");
        }
        let back = Some("10.0.0.9:9000".to_owned());
        assert!(
            changes.is_empty() || changes == [None, back.clone()],
            "{changes:?}"
        );
        assert_eq!(watch.address(), back);
        drop(me);
    })
    .await;
}

#[tokio::test]
async fn another_sessions_name_is_not_taken_over() {
    for_each_backend(|connect| async move {
        let (a, b, client) = (
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        );
        let name = "/services/search";
        let first = a
            .register(name, "a:1", Registration::Ephemeral)
            .await
            .unwrap();
        let second = b
            .register(name, "b:1", Registration::Ephemeral)
            .await
            .unwrap();
        assert!(!second.is_present(), "the name is a's");
        let mut watch = client.watch_name(name).await.unwrap();
        assert_eq!(watch.address().as_deref(), Some("a:1"));
        first.unregister().await.unwrap();
        // b's registration takes the name once a's is gone (possibly between two reads).
        let mut seen = Vec::new();
        while watch.address().as_deref() != Some("b:1") {
            seen.push(next(&mut watch).await);
            assert!(seen.len() < 3, "{seen:?}");
        }
        assert_eq!(client.resolve(name).await.unwrap().as_deref(), Some("b:1"));
        assert!(second.is_present());
    })
    .await;
}

#[tokio::test]
async fn a_persistent_name_outlives_its_session() {
    for_each_backend(|connect| async move {
        let name = "/config/registry/db";
        let service = session(&connect).await;
        let registered = service
            .register(name, "db.internal:5432", Registration::Persistent)
            .await
            .unwrap();
        // Registering again overwrites the address.
        let again = service
            .register(name, "db2.internal:5432", Registration::Persistent)
            .await
            .unwrap();
        drop(registered);
        service.close().await;
        let client = session(&connect).await;
        assert_eq!(
            client.resolve(name).await.unwrap().as_deref(),
            Some("db2.internal:5432")
        );
        drop(again);
        let other = session(&connect).await;
        let handle = other
            .register(name, "db3.internal:5432", Registration::Persistent)
            .await
            .unwrap();
        handle.unregister().await.unwrap();
        assert_eq!(client.resolve(name).await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let check = |result: lockkeeper::Result<()>, needle: &str| match result {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains(needle), "{message} should name {needle}");
            }
            other => panic!("{needle}: {other:?}"),
        };
        for path in ["", "svc", "svc/a", "/svc/", "/a//b", "/a/./b", "/"] {
            let needle = format!("{path:?}");
            check(
                session
                    .register(path, "h:1", Registration::Ephemeral)
                    .await
                    .map(drop),
                &needle,
            );
            check(session.resolve(path).await.map(drop), &needle);
            check(session.watch_name(path).await.map(drop), &needle);
        }
        check(
            session
                .register("/svc/a", "", Registration::Persistent)
                .await
                .map(drop),
            "\"/svc/a\"",
        );
        let mut watch = session.watch_name("/svc/a").await.unwrap();
        check(
            watch.next_timeout(Duration::ZERO).await.map(drop),
            "timeout",
        );
        // Data that is not an address: resolving says which name holds it.
        session
            .client()
            .unwrap()
            .create(
                "/svc-binary",
                &[0xff, 0xfe],
                &CreateOptions::new(CreateMode::Persistent),
            )
            .await
            .unwrap();
        check(
            session.resolve("/svc-binary").await.map(drop),
            "\"/svc-binary\"",
        );
    })
    .await;
}
