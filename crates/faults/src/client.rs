//! The lock client: a child process of the suite's binary that takes turns on one lock and
//! uses the resource server inside each turn, so the orchestrator can pause or kill it.
//!
//! Each turn: acquire (bounded wait), `enter` with the fencing token, a few writes with small
//! seeded random sleeps, `exit`, release. Invariants:
//! - **A zombie between check and write.** The client asks its guard whether it still holds
//!   the lock (the local deadline: no round trip) once, before it enters; then it writes with
//!   the token it had, without asking again, as a process does whose check was followed by a
//!   pause it knows nothing about. A holder paused anywhere in its turn therefore wakes into a
//!   stale write (unless the pause fell after its last write), which only the fences can stop.
//!   Each line also says what `is_held()` answered right before it was sent, so the resource
//!   counts apart what a careful client (checking right before every write) would have sent.
//! - A refused `enter` or write ends the turn: a fence said someone newer holds the lock.
//! - Lock errors (a connection lost, a server restarting) end the turn, are logged to stderr
//!   and retried after a short sleep; the client runs until `--run-for` passes or it is killed.
//! - On etcd, a session whose lease is lost stays lost (the library's rule), so before each
//!   acquisition a client whose session is no longer alive opens a new one, as a service would.

use std::net::SocketAddr;
use std::time::Duration;

use lockkeeper::redis::{
    LeaseGuard, LeaseLock, Redis, RedisOptions, ReentrantGuard, ReentrantLock, redlock,
};
use lockkeeper::zk::{LeaderLatch, Leadership, Leases, LockGuard, Mutex, RwLock, Semaphore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use crate::kind::{Endpoint, Kind};

/// How long one acquire may wait before the client tries again.
const ACQUIRE_WAIT: Duration = Duration::from_secs(2);
/// How long the resource server may take to answer: every fence gets
/// [`FENCE_WAIT`](crate::fences::FENCE_WAIT), and requests are handled one at a time.
const RESOURCE_WAIT: Duration = Duration::from_secs(30);
/// The ZooKeeper session timeout (the test servers' minimum).
pub const ZK_SESSION: Duration = Duration::from_secs(4);
/// The Redis watchdog lease and the Redlock lease.
pub const REDIS_LEASE: Duration = Duration::from_secs(2);
/// The etcd session's lease TTL (short, so a pause or a cut outlives it quickly; at least
/// etcd's minimum lease TTL with testkit's Raft timings).
pub const ETCD_TTL: Duration = Duration::from_secs(3);
/// Writes per turn.
pub(crate) const WRITES: usize = 5;

/// What one client process was told.
#[derive(Debug)]
pub struct ClientArgs {
    /// Where the lock lives.
    pub endpoint: Endpoint,
    /// Which lock.
    pub kind: Kind,
    /// The lock's name (a path on ZooKeeper).
    pub lock: String,
    /// The resource server.
    pub resource: SocketAddr,
    /// This client's name at the resource.
    pub name: String,
    /// Seeds the sleeps between writes.
    pub seed: u64,
    /// When to stop.
    pub run_for: Duration,
}

/// Runs turns until `run_for` passes. `Err` only when the setup itself is impossible (the
/// resource server unreachable, an argument the library refuses).
pub async fn run(args: ClientArgs) -> Result<(), String> {
    if args.kind == Kind::CliElect {
        return crate::cli_client::run(args).await;
    }
    let deadline = Instant::now() + args.run_for;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut resource = ResourceConn::connect(args.resource).await?;
    let mut locker = loop {
        match Locker::connect(&args).await {
            Ok(locker) => break locker,
            Err(err) if Instant::now() < deadline => {
                eprintln!("{}: connect: {err}", args.name);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => return Err(format!("{}: connect: {err}", args.name)),
        }
    };
    while Instant::now() < deadline {
        match locker.acquire().await {
            Ok(Some(held)) => turn(&args.name, held, &mut resource, &mut rng).await?,
            Ok(None) => {}
            Err(err) => {
                eprintln!("{}: acquire: {err}", args.name);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(())
}

async fn turn(
    name: &str,
    held: Held,
    resource: &mut ResourceConn,
    rng: &mut StdRng,
) -> Result<(), String> {
    let token = held.token().map_or("-".to_owned(), |t| t.to_string());
    let node = held.node().unwrap_or("-").to_owned();
    let line = |verb: &str, held: &Held| {
        let state = if held.is_held() { "held" } else { "lost" };
        format!("{verb} {name} {token} {node} {state}")
    };
    if held.is_held() && resource.call(&line("enter", &held)).await? == "ok" {
        for _ in 0..WRITES {
            // A pause anywhere here wakes into the next write with the token it had.
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
            if resource.call(&line("write", &held)).await? != "ok" {
                break;
            }
        }
    }
    resource.call(&format!("exit {name}")).await?;
    if let Err(err) = held.release().await {
        eprintln!("{name}: release: {err}");
    }
    Ok(())
}

/// The connection to the resource server.
pub(crate) struct ResourceConn {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl ResourceConn {
    pub(crate) async fn connect(addr: SocketAddr) -> Result<ResourceConn, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("resource server {addr}: {e}"))?;
        let (read, write) = stream.into_split();
        Ok(ResourceConn {
            lines: BufReader::new(read).lines(),
            write,
        })
    }

    pub(crate) async fn call(&mut self, request: &str) -> Result<String, String> {
        self.write
            .write_all(format!("{request}\n").as_bytes())
            .await
            .map_err(|e| format!("resource server: {e}"))?;
        match tokio::time::timeout(RESOURCE_WAIT, self.lines.next_line()).await {
            Ok(Ok(Some(reply))) if reply.starts_with("error") => {
                Err(format!("resource server refused {request:?}: {reply}"))
            }
            Ok(Ok(Some(reply))) => Ok(reply),
            Ok(Ok(None)) => Err("resource server closed the connection".into()),
            Ok(Err(e)) => Err(format!("resource server: {e}")),
            Err(_) => Err(format!("resource server silent for {RESOURCE_WAIT:?}")),
        }
    }
}

/// A lock handle of one kind.
enum Locker {
    Mutex(Mutex),
    RwWrite(RwLock),
    Semaphore(Semaphore),
    Leader(LeaderLatch),
    Lease(LeaseLock),
    Reentrant(ReentrantLock),
    Redlock(redlock::RedlockLock),
    /// The session is kept to be checked (and replaced once lost) before each acquisition.
    Etcd {
        session: lockkeeper::etcd::Session,
        lock: EtcdLock,
        endpoints: String,
        kind: Kind,
        name: String,
        /// The candidate's value in an election: the client's name.
        id: String,
    },
}

/// An etcd lock of one kind, on the current session.
enum EtcdLock {
    Mutex(lockkeeper::etcd::Mutex),
    RwWrite(lockkeeper::etcd::RwLock),
    Semaphore(lockkeeper::etcd::Semaphore),
    Leader(lockkeeper::etcd::Election),
}

impl EtcdLock {
    fn new(
        session: &lockkeeper::etcd::Session,
        kind: Kind,
        name: &str,
    ) -> lockkeeper::Result<Self> {
        Ok(match kind {
            Kind::Mutex => EtcdLock::Mutex(session.mutex(name)?),
            Kind::RwWrite => EtcdLock::RwWrite(session.rw_lock(name)?),
            Kind::Semaphore | Kind::Semaphore2 => {
                EtcdLock::Semaphore(session.semaphore(name, kind.holders())?)
            }
            Kind::Leader => EtcdLock::Leader(session.election(name)?),
            other => return Err(mismatch(other, "etcd")),
        })
    }

    async fn acquire(&self, id: &str) -> lockkeeper::Result<Option<Held>> {
        Ok(match self {
            EtcdLock::Mutex(m) => m.lock_timeout(ACQUIRE_WAIT).await?.map(Held::Etcd),
            EtcdLock::RwWrite(rw) => rw.write_timeout(ACQUIRE_WAIT).await?.map(Held::Etcd),
            EtcdLock::Semaphore(s) => s.acquire_timeout(ACQUIRE_WAIT).await?.map(Held::Etcd),
            // A campaign dropped at the timeout withdraws the candidacy.
            EtcdLock::Leader(e) => match tokio::time::timeout(ACQUIRE_WAIT, e.campaign(id)).await {
                Ok(leadership) => Some(Held::EtcdLeader(leadership?)),
                Err(_) => None,
            },
        })
    }
}

impl Locker {
    async fn connect(args: &ClientArgs) -> lockkeeper::Result<Locker> {
        let lock = args.lock.as_str();
        Ok(match (&args.endpoint, args.kind) {
            (Endpoint::Zk(connect), kind) => {
                let session = lockkeeper::zk::Session::builder(connect)
                    .session_timeout(ZK_SESSION)
                    .connect()
                    .await?;
                match kind {
                    Kind::Mutex => Locker::Mutex(session.mutex(lock)?),
                    Kind::RwWrite => Locker::RwWrite(session.rw_lock(lock)?),
                    Kind::Semaphore | Kind::Semaphore2 => {
                        Locker::Semaphore(session.semaphore(lock, args.kind.holders() as u32)?)
                    }
                    Kind::Leader => Locker::Leader(session.leader_latch(lock, &args.name)?),
                    other => return Err(mismatch(other, "zk")),
                }
            }
            (Endpoint::Redis(_) | Endpoint::Sentinel { .. }, kind) => {
                let redis = match &args.endpoint {
                    Endpoint::Redis(url) => Redis::connect(url).await?,
                    Endpoint::Sentinel { master, sentinels } => {
                        Redis::connect_sentinel(sentinels, master, RedisOptions::new()).await?
                    }
                    Endpoint::Redlock(_) | Endpoint::Zk(_) | Endpoint::Etcd(_) => {
                        unreachable!("matched above")
                    }
                };
                match kind {
                    Kind::Lease => Locker::Lease(redis.lease_lock(lock).watchdog(REDIS_LEASE)),
                    Kind::Reentrant => Locker::Reentrant(
                        redis
                            .reentrant_lock(lock)
                            .owner(args.name.clone())
                            .watchdog(REDIS_LEASE),
                    ),
                    other => return Err(mismatch(other, "redis")),
                }
            }
            (Endpoint::Redlock(masters), Kind::Redlock) => Locker::Redlock(
                redlock::Redlock::new(masters)?
                    .lease_lock(lock)
                    .lease(REDIS_LEASE),
            ),
            (Endpoint::Redlock(_), other) => return Err(mismatch(other, "redlock")),
            (Endpoint::Etcd(endpoints), kind) => {
                let session = etcd_session(endpoints).await?;
                Locker::Etcd {
                    lock: EtcdLock::new(&session, kind, lock)?,
                    session,
                    endpoints: endpoints.clone(),
                    kind,
                    name: lock.to_owned(),
                    id: args.name.clone(),
                }
            }
        })
    }

    async fn acquire(&mut self) -> lockkeeper::Result<Option<Held>> {
        Ok(match self {
            Locker::Mutex(m) => m.lock_timeout(ACQUIRE_WAIT).await?.map(Held::Guard),
            Locker::RwWrite(rw) => rw.write_timeout(ACQUIRE_WAIT).await?.map(Held::Guard),
            Locker::Semaphore(s) => s.acquire_timeout(1, ACQUIRE_WAIT).await?.map(Held::Leases),
            Locker::Leader(l) => l.lead_timeout(ACQUIRE_WAIT).await?.map(Held::Leader),
            Locker::Lease(l) => l.lock_timeout(ACQUIRE_WAIT).await?.map(Held::Lease),
            Locker::Reentrant(r) => r.lock_timeout(ACQUIRE_WAIT).await?.map(Held::Reentrant),
            Locker::Redlock(r) => r.lock_timeout(ACQUIRE_WAIT).await?.map(Held::Redlock),
            Locker::Etcd {
                session,
                lock,
                endpoints,
                kind,
                name,
                id,
            } => {
                // A lease that ran out (a paused or cut-off holder) takes a new session.
                if !session.is_alive() {
                    let fresh = etcd_session(endpoints).await?;
                    *lock = EtcdLock::new(&fresh, *kind, name)?;
                    *session = fresh;
                }
                return lock.acquire(id).await;
            }
        })
    }
}

/// A new etcd session with the suite's lease TTL.
async fn etcd_session(endpoints: &str) -> lockkeeper::Result<lockkeeper::etcd::Session> {
    lockkeeper::etcd::Session::builder(endpoints)
        .ttl(ETCD_TTL)
        .connect()
        .await
}

fn mismatch(kind: Kind, backend: &str) -> lockkeeper::Error {
    lockkeeper::Error::InvalidArgument(format!(
        "lock kind {} does not run on a {backend} backend",
        kind.name()
    ))
}

/// A held lock of one kind.
enum Held {
    Guard(LockGuard),
    Leases(Leases),
    Leader(Leadership),
    Lease(LeaseGuard),
    Reentrant(ReentrantGuard),
    Redlock(redlock::RedlockGuard),
    Etcd(lockkeeper::etcd::LockGuard),
    EtcdLeader(lockkeeper::etcd::Leadership),
}

impl Held {
    /// The fencing token; Redlock has none.
    fn token(&self) -> Option<u64> {
        match self {
            Held::Guard(g) => Some(g.fencing_token().get()),
            Held::Leases(l) => l.fencing_tokens().first().map(|t| t.get()),
            Held::Leader(l) => Some(l.fencing_token().get()),
            Held::Lease(g) => Some(g.fencing_token().get()),
            Held::Reentrant(g) => Some(g.fencing_token().get()),
            Held::Redlock(_) => None,
            Held::Etcd(g) => Some(g.fencing_token().get()),
            Held::EtcdLeader(l) => Some(l.fencing_token().get()),
        }
    }

    /// The ZooKeeper lock node the holder presents to the ZooKeeper fence.
    fn node(&self) -> Option<&str> {
        match self {
            Held::Guard(g) => Some(g.node()),
            Held::Leases(l) => l.nodes().first().copied(),
            Held::Leader(l) => Some(l.node()),
            Held::Lease(_)
            | Held::Reentrant(_)
            | Held::Redlock(_)
            | Held::Etcd(_)
            | Held::EtcdLeader(_) => None,
        }
    }

    fn is_held(&self) -> bool {
        match self {
            Held::Guard(g) => g.is_held(),
            Held::Leases(l) => l.is_held(),
            Held::Leader(l) => l.is_leader(),
            Held::Lease(g) => g.is_held(),
            Held::Reentrant(g) => g.is_held(),
            Held::Redlock(g) => g.is_held(),
            Held::Etcd(g) => g.is_held(),
            Held::EtcdLeader(l) => l.is_held(),
        }
    }

    async fn release(self) -> lockkeeper::Result<()> {
        match self {
            Held::Guard(g) => g.release().await,
            Held::Leases(l) => l.release().await,
            Held::Leader(l) => l.resign().await,
            Held::Lease(g) => g.release().await,
            Held::Reentrant(g) => g.release().await.map(drop),
            Held::Redlock(g) => g.release().await,
            Held::Etcd(g) => g.release().await,
            Held::EtcdLeader(l) => l.resign().await,
        }
    }
}
