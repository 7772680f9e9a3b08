//! A release whose answer is lost with the connection: the server ran the release script, but
//! the connection broke before its answer came back.
//!
//! Before, the release returned the I/O error, and the caller could not tell a released lock
//! from one still held until its lease ran out. Now the lease lock, the read-write lock and the
//! semaphore send the (idempotent, token-compared) release again once the client has
//! reconnected; when the retry finds the lock no longer ours and the lost attempt was sent
//! within the lease, the release counts as done and returns `Ok(())`. The reentrant lock's
//! unlock is a decrement, which must not be sent twice, so it still returns the error.
//!
//! A loopback proxy sits between the client and a real redis-server. Armed, it forwards the
//! next bytes the client sends (the release's `EVALSHA`) to the server, keeps back everything
//! the server answers, and once the answer is in (so the script has run) closes both sides of
//! that connection; it disarms itself, so the client's reconnection goes through untouched. The
//! proxy records what it forwarded and what it kept back, so each test checks that the cut hit
//! the release and that the server had released the lock (`:1`) before the client retried.
//! Locks use an explicit lease (no watchdog renewal on the connection) and are only tried, not
//! waited for (no pub/sub connection). Keys are checked on a direct connection to the server.
//! Last, a release that no server answers at all is retried a bounded number of times.

mod support_redis;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, Unlock};
use lockkeeper_testkit::RedisServer;
use support_redis::{exists, raw};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Long enough that no lease runs out during a test.
const LEASE: Duration = Duration::from_secs(30);
/// How long the proxy waits, after forwarding the cut request, for the server's answer (which
/// says the script has run) before it closes the connection anyway.
const CUT_PATIENCE: Duration = Duration::from_secs(2);
/// How many connections the proxy accepts: the first, and a few reconnections.
const PROXY_CONNECTIONS: usize = 16;
/// A release (with its retries) must be done well within this.
const RELEASE_LIMIT: Duration = Duration::from_secs(15);

/// What the proxy shares with the test.
#[derive(Default)]
struct ProxyState {
    /// Set by the test; the next client bytes on any connection consume it and are cut.
    armed: AtomicBool,
    /// How many cuts happened.
    cuts: AtomicUsize,
    /// How many client connections the proxy accepted.
    connections: AtomicUsize,
    /// The bytes forwarded to the server just before the cut.
    cut_request: Mutex<Vec<u8>>,
    /// What the server answered on the cut connection, kept from the client.
    withheld: Mutex<Vec<u8>>,
}

/// A loopback proxy in front of a redis-server; stopped, with every relayed connection, when
/// dropped.
struct CuttingProxy {
    address: String,
    state: Arc<ProxyState>,
    task: JoinHandle<()>,
}

impl CuttingProxy {
    async fn start(upstream: String) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for the proxy");
        let address = listener
            .local_addr()
            .expect("local address of the proxy")
            .to_string();
        let state = Arc::new(ProxyState::default());
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every relay.
            let mut relays = JoinSet::new();
            for _ in 0..PROXY_CONNECTIONS {
                let Ok((client, _)) = listener.accept().await else {
                    break;
                };
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    break;
                };
                shared.connections.fetch_add(1, Ordering::SeqCst);
                relays.spawn(relay(client, server, Arc::clone(&shared)));
            }
            drop(listener);
            while relays.join_next().await.is_some() {}
        });
        CuttingProxy {
            address,
            state,
            task,
        }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.address)
    }

    /// Cut the connection at the next request.
    fn arm(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    fn armed(&self) -> bool {
        self.state.armed.load(Ordering::SeqCst)
    }

    fn cuts(&self) -> usize {
        self.state.cuts.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    fn cut_request(&self) -> String {
        let bytes = self.state.cut_request.lock().expect("proxy state lock");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn withheld(&self) -> String {
        let bytes = self.state.withheld.lock().expect("proxy state lock");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Checks that exactly one cut happened, on an `EVALSHA` whose answer (kept from the
    /// client) was `answer`.
    fn assert_cut(&self, answer: &str) {
        assert!(!self.armed(), "the proxy was never sent the release");
        assert_eq!(self.cuts(), 1, "exactly one connection was cut");
        let request = self.cut_request();
        assert!(
            request.contains("EVALSHA"),
            "the cut request should be the release script: {request:?}"
        );
        assert_eq!(
            self.withheld(),
            answer,
            "what the server answered to the cut request"
        );
    }

    /// Checks that the client came back on a new connection through the proxy.
    fn assert_reconnected(&self) {
        assert!(
            self.connections() >= 2,
            "the retry should have gone out on a new connection ({} connections)",
            self.connections()
        );
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one client connection to the server, cutting it when the proxy is armed.
async fn relay(client: TcpStream, server: TcpStream, state: Arc<ProxyState>) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    let answers = {
        let (cut, state) = (Arc::clone(&cut), Arc::clone(&state));
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match server_rx.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if cut.load(Ordering::SeqCst) {
                    let mut withheld = state.withheld.lock().expect("proxy state lock");
                    withheld.extend_from_slice(&buf[..n]);
                } else if client_tx.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let cutting = state.armed.swap(false, Ordering::SeqCst);
        if cutting {
            // Nothing the server says from now on reaches the client.
            cut.store(true, Ordering::SeqCst);
            state.cuts.fetch_add(1, Ordering::SeqCst);
            *state.cut_request.lock().expect("proxy state lock") = buf[..n].to_vec();
        }
        if server_tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if cutting {
            // Let the server run the script and answer (bounded), then drop both sides.
            let deadline = Instant::now() + CUT_PATIENCE;
            while state.withheld.lock().expect("proxy state lock").is_empty()
                && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            break;
        }
    }
    // Dropping the answers task closes the client's write side and the server's read side;
    // returning drops the rest.
    answers.abort();
    let _ = answers.await;
}

/// A real redis-server, a handle on it through a fresh proxy, and a direct connection.
async fn setup() -> (
    RedisServer,
    CuttingProxy,
    Redis,
    redis::aio::MultiplexedConnection,
) {
    let server = RedisServer::start();
    let proxy = CuttingProxy::start(server.addr().to_string()).await;
    let redis = Redis::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    let direct = raw(&server).await;
    (server, proxy, redis, direct)
}

/// Runs a release, bounded in time; returns its result and how long it took.
async fn timed<T>(release: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let result = tokio::time::timeout(RELEASE_LIMIT, release)
        .await
        .expect("the release did not finish in time");
    let took = started.elapsed();
    eprintln!("release took {took:?}");
    (result, took)
}

#[tokio::test]
async fn a_lease_lock_release_whose_answer_is_lost_succeeds() {
    let (_server, proxy, redis, mut direct) = setup().await;
    // An uncut round first loads the scripts, so the cut release is one EVALSHA that runs.
    let warm = redis
        .lease_lock("warm-up")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = warm.try_lock().await.expect("try_lock").expect("free");
    guard.release().await.expect("uncut release");

    let lock = redis
        .lease_lock("orders")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    assert!(exists(&mut direct, lock.key()).await, "the lock key is set");
    proxy.arm();
    let (released, _) = timed(guard.release()).await;
    assert!(
        matches!(released, Ok(())),
        "a release whose answer was lost: {released:?}"
    );
    proxy.assert_cut(":1\r\n");
    proxy.assert_reconnected();
    assert!(
        !exists(&mut direct, lock.key()).await,
        "the lock key is gone"
    );
    // The handle works on after the reconnection.
    let again = lock
        .try_lock()
        .await
        .expect("try_lock")
        .expect("free again");
    again.release().await.expect("uncut release");
}

#[tokio::test]
async fn a_write_lock_release_whose_answer_is_lost_succeeds() {
    let (_server, proxy, redis, mut direct) = setup().await;
    let warm = redis
        .rw_lock("warm-up")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = warm.try_write().await.expect("try_write").expect("free");
    guard.release().await.expect("uncut release");

    let lock = redis
        .rw_lock("catalog")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_write().await.expect("try_write").expect("free");
    assert!(
        exists(&mut direct, lock.writer_key()).await,
        "the writer key is set"
    );
    proxy.arm();
    let (released, _) = timed(guard.release()).await;
    assert!(
        matches!(released, Ok(())),
        "a write release whose answer was lost: {released:?}"
    );
    proxy.assert_cut(":1\r\n");
    proxy.assert_reconnected();
    assert!(
        !exists(&mut direct, lock.writer_key()).await,
        "the writer key is gone"
    );
    assert!(!lock.is_write_locked().await.expect("is_write_locked"));
}

#[tokio::test]
async fn a_semaphore_release_whose_answer_is_lost_succeeds() {
    let (_server, proxy, redis, mut direct) = setup().await;
    let warm = redis
        .semaphore("warm-up", 2)
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let permit = warm
        .try_acquire(1)
        .await
        .expect("try_acquire")
        .expect("free");
    permit.release().await.expect("uncut release");

    let semaphore = redis
        .semaphore("connections", 2)
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let permit = semaphore
        .try_acquire(1)
        .await
        .expect("try_acquire")
        .expect("free");
    assert_eq!(semaphore.available().await.expect("available"), 1);
    proxy.arm();
    let (released, _) = timed(permit.release()).await;
    assert!(
        matches!(released, Ok(())),
        "a permit release whose answer was lost: {released:?}"
    );
    proxy.assert_cut(":1\r\n");
    proxy.assert_reconnected();
    assert!(
        !exists(&mut direct, semaphore.key()).await,
        "no permit is left in the semaphore's set"
    );
    assert_eq!(semaphore.available().await.expect("available"), 2);
}

#[tokio::test]
async fn a_release_of_a_deleted_lock_is_not_held() {
    // The control: with no cut, a lock deleted behind its holder's back is reported lost.
    let (_server, proxy, redis, mut direct) = setup().await;
    let lock = redis
        .lease_lock("orders")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    let deleted: i64 = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut direct)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1, "the lock key existed");
    assert!(guard.is_held(), "the guard cannot see the deletion");
    let (released, _) = timed(guard.release()).await;
    assert!(
        matches!(released, Err(Error::NotHeld)),
        "a release of a deleted lock: {released:?}"
    );
    assert_eq!(proxy.cuts(), 0, "nothing was cut");
    assert_eq!(proxy.connections(), 1, "no reconnection");
}

#[tokio::test]
async fn a_lost_release_sent_after_the_lease_ran_out_is_not_held() {
    // The other control: the retry only counts "not ours" as released when the lost attempt
    // was sent within the lease. Here the lease has run out (and the key expired) first.
    let (_server, proxy, redis, mut direct) = setup().await;
    let warm = redis
        .lease_lock("warm-up")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = warm.try_lock().await.expect("try_lock").expect("free");
    guard.release().await.expect("uncut release");

    let lease = Duration::from_millis(300);
    let lock = redis
        .lease_lock("orders")
        .with_options(LockOptions::new().lease(lease))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert!(!guard.is_held(), "the lease has run out");
    assert!(!exists(&mut direct, lock.key()).await, "the key expired");
    proxy.arm();
    let (released, _) = timed(guard.release()).await;
    assert!(
        matches!(released, Err(Error::NotHeld)),
        "a lost release sent after the lease: {released:?}"
    );
    proxy.assert_cut(":0\r\n");
    proxy.assert_reconnected();
}

#[tokio::test]
async fn a_reentrant_unlock_whose_answer_is_lost_is_an_error() {
    // A decrement is not idempotent, so the unlock is not sent again: the caller gets the
    // connection error, although the server did release the lock.
    let (_server, proxy, redis, mut direct) = setup().await;
    let warm = redis
        .reentrant_lock("warm-up")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = warm.try_lock().await.expect("try_lock").expect("free");
    assert_eq!(
        guard.release().await.expect("uncut release"),
        Unlock::Released
    );

    let lock = redis
        .reentrant_lock("accounts")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    assert!(
        exists(&mut direct, lock.key()).await,
        "the lock hash is set"
    );
    proxy.arm();
    let (released, _) = timed(guard.release()).await;
    let err = released.expect_err("an unlock whose answer was lost is not retried");
    eprintln!("the cut unlock returned: {err}");
    assert!(!matches!(err, Error::NotHeld), "got {err:?}");
    assert!(
        matches!(&err, Error::Redis(e) if e.is_io_error() || e.is_connection_dropped()),
        "the connection error: {err:?}"
    );
    // The server's answer, kept from the client: the last hold was released.
    proxy.assert_cut(":0\r\n");
    assert!(
        !exists(&mut direct, lock.key()).await,
        "the lock hash is gone"
    );
}

/// A release Redis refuses (here its user lost the right to run scripts: `NOPERM`) is an
/// answer, not a lost one: it is sent once and its error returned, never retried as if it
/// might have gone through (a retry that then found the key gone would report a release that
/// never happened).
#[tokio::test]
async fn a_refused_release_is_sent_once_and_reported() {
    let server = RedisServer::start();
    let redis = Redis::connect(&server.url()).await.expect("connect");
    let mut admin = raw(&server).await;
    let lock = redis
        .lease_lock("refused")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .expect("CONFIG RESETSTAT");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-@scripting")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let released = guard.release().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("+@all")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    assert!(
        matches!(&released, Err(Error::Redis(err)) if err.to_string().contains("no permissions")),
        "a refused release: {released:?}"
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .expect("INFO commandstats");
    let rejected: u64 = stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval"))
        .filter_map(|line| line.split("rejected_calls=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(rejected, 1, "the release was sent once: {stats}");
}

/// A release that no server answers is sent a bounded number of times, then reported: the
/// retries for a lost answer never turn into an endless loop.
#[tokio::test]
async fn a_release_nobody_answers_gives_up_with_the_error() {
    let server = RedisServer::start();
    let redis = Redis::connect(&server.url()).await.expect("connect");
    let lock = redis
        .lease_lock("unanswered")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    // The server goes away (killed, by its PID): every attempt fails at the socket.
    drop(server);
    let (released, _) = timed(guard.release()).await;
    assert!(
        matches!(released, Err(Error::Redis(_))),
        "a release nobody answered: {released:?}"
    );
}
