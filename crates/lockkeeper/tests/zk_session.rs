//! The Session's connection states through a server restart (Suspended, then Reconnected with
//! the same session and the lock still held), an expiry (Lost, then Reconnected with a new
//! session), and close (Closed), on Keeper and on Apache ZooKeeper.

mod support;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::{ConnectionState, Session, StateStream};
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer, ZkOptions, backend_enabled};
use support::Partition;

async fn next_state(states: &mut StateStream) -> ConnectionState {
    let started = std::time::Instant::now();
    let state = tokio::time::timeout(Duration::from_secs(60), states.next())
        .await
        .expect("a state change within a minute")
        .expect("the stream is open");
    eprintln!("{state:?} after {:?}", started.elapsed());
    state
}

/// The body, given a server it may restart and a session timeout that outlasts its restart
/// (the server must allow it).
async fn states_through_restart(mut server: Box<dyn Restartable>, session_timeout: Duration) {
    let connect = server.connect_string();
    let session = Session::builder(&connect)
        .session_timeout(session_timeout)
        .connect()
        .await
        .unwrap();
    assert_eq!(session.state(), ConnectionState::Connected);
    let mut states = session.states();
    let first_id = session.session_id();
    let guard = session
        .mutex("/locks/restart")
        .unwrap()
        .lock()
        .await
        .unwrap();

    // Restart on a blocking thread, so that the suspension can be observed while it lasts.
    let restarting = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    });
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    assert!(!guard.is_held(), "held while suspended");
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires on suspension");
    let _server = restarting.await.unwrap();
    assert_eq!(next_state(&mut states).await, ConnectionState::Reconnected);
    // A server that is still starting may accept a connection and drop it again, so the
    // state can flap for a while; wait until the connection holds.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !guard.is_held() {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock did not come back with the connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        session.session_id(),
        first_id,
        "the same session survives a restart"
    );
    guard.release().await.unwrap();
    session.close().await;
}

/// Lost (a partition longer than the session timeout), Reconnected with a new session once
/// the network heals, and Closed.
async fn states_through_a_partition_and_close(connect: &str) {
    let partition = Partition::start(connect).await;
    let session = Session::builder(&partition.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let mut states = session.states();
    let first_id = session.session_id();
    let guard = session
        .mutex("/locks/partition")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let token = guard.fencing_token();
    partition.cut();
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    assert_eq!(next_state(&mut states).await, ConnectionState::Lost);
    assert!(!guard.is_held());
    partition.heal();
    assert_eq!(next_state(&mut states).await, ConnectionState::Reconnected);
    assert_ne!(session.session_id(), first_id, "a new session after expiry");
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
    let again = session
        .mutex("/locks/partition")
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(again.fencing_token() > token);

    session.close().await;
    assert_eq!(next_state(&mut states).await, ConnectionState::Closed);
    assert!(!again.is_held());
    assert!(matches!(again.release().await, Err(Error::NotHeld)));
    assert!(matches!(
        session.mutex("/x").unwrap().try_lock().await,
        Err(Error::SessionLost)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_states() {
    support::for_each_backend(|connect| async move {
        states_through_a_partition_and_close(&connect).await;
    })
    .await;
}

/// A test server that can be restarted on the same address and data directory.
trait Restartable: TestServer {
    fn restart(&mut self);
}

impl Restartable for Keeper {
    fn restart(&mut self) {
        Keeper::restart(self);
    }
}

impl Restartable for ApacheZk {
    fn restart(&mut self) {
        ApacheZk::restart(self);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keeper_states() {
    if backend_enabled("keeper") {
        // Keeper restarts in well under a second.
        states_through_restart(Box::new(Keeper::start()), Duration::from_secs(30)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_states() {
    if backend_enabled("zookeeper") {
        // A JVM's restart on a loaded machine can take most of a minute, longer than the
        // default server allows a session (20 ticks of 2 s): a 6 s tick allows two minutes.
        let server = ApacheZk::start_with(ZkOptions {
            tick_time_ms: 6000,
            ..ZkOptions::default()
        });
        states_through_restart(Box::new(server), Duration::from_secs(120)).await;
    }
}
