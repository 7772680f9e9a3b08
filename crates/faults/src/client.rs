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

use lockkeeper::redis::{Redis, RedisOptions, redlock};
use lockkeeper::{Guard, Lock, LockOptions};
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
pub(crate) const ZK_SESSION: Duration = Duration::from_secs(4);
/// The Redis watchdog lease and the Redlock lease.
pub(crate) const REDIS_LEASE: Duration = Duration::from_secs(2);
/// The etcd session's lease TTL (short, so a pause or a cut outlives it quickly; at least
/// etcd's minimum lease TTL with testkit's Raft timings).
pub(crate) const ETCD_TTL: Duration = Duration::from_secs(3);
/// Writes per turn.
pub(crate) const WRITES: usize = 5;

/// What one client process was told.
#[derive(Debug)]
pub(crate) struct ClientArgs {
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
pub(crate) async fn run(args: ClientArgs) -> Result<(), String> {
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
    let node = held.node().unwrap_or_else(|| "-".to_owned());
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

/// The lock of one kind a client takes turns on, through the trait every lock has.
struct Locker {
    lock: Box<dyn Lock>,
    /// On etcd, the session is kept to be checked (and replaced once lost) before each
    /// acquisition.
    etcd: Option<EtcdSession>,
    /// Whether holders present their lock node to the ZooKeeper fence.
    zk: bool,
}

/// An etcd client's session and what it takes to make the lock again on a new one.
struct EtcdSession {
    session: lockkeeper::etcd::Session,
    endpoints: String,
    kind: Kind,
    name: String,
    /// The candidate's value in an election: the client's name.
    id: String,
}

/// The etcd lock of `kind` called `name` on `session`.
fn etcd_lock(
    session: &lockkeeper::etcd::Session,
    kind: Kind,
    name: &str,
    id: &str,
) -> lockkeeper::Result<Box<dyn Lock>> {
    Ok(match kind {
        Kind::Mutex => Box::new(session.mutex(name)?),
        Kind::RwWrite => Box::new(session.rw_lock(name)?.write_lock()),
        Kind::Semaphore | Kind::Semaphore2 => Box::new(session.semaphore(name, kind.holders())?),
        Kind::Leader => Box::new(session.election(name)?.candidacy(id)),
        other => return Err(mismatch(other, "etcd")),
    })
}

impl Locker {
    async fn connect(args: &ClientArgs) -> lockkeeper::Result<Locker> {
        let name = args.lock.as_str();
        let lock: Box<dyn Lock> = match (&args.endpoint, args.kind) {
            (Endpoint::Zk(connect), kind) => {
                let session = lockkeeper::zk::Session::builder(connect)
                    .session_timeout(ZK_SESSION)
                    .connect()
                    .await?;
                match kind {
                    Kind::Mutex => Box::new(session.mutex(name)?),
                    Kind::RwWrite => Box::new(session.rw_lock(name)?.write_lock()),
                    Kind::Semaphore | Kind::Semaphore2 => {
                        Box::new(session.semaphore(name, args.kind.holders() as u32)?)
                    }
                    Kind::Leader => Box::new(session.leader_latch(name, &args.name)?),
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
                    Kind::Lease => Box::new(
                        redis
                            .lease_lock(name)
                            .with_options(LockOptions::new().watchdog(REDIS_LEASE))?,
                    ),
                    Kind::Reentrant => Box::new(
                        redis
                            .reentrant_lock(name)
                            .owner(args.name.clone())
                            .with_options(LockOptions::new().watchdog(REDIS_LEASE))?,
                    ),
                    other => return Err(mismatch(other, "redis")),
                }
            }
            (Endpoint::Redlock(masters), Kind::Redlock) => Box::new(
                redlock::Redlock::new(masters)?
                    .lease_lock(name)
                    .with_options(LockOptions::new().lease(REDIS_LEASE))?,
            ),
            (Endpoint::Redlock(_), other) => return Err(mismatch(other, "redlock")),
            (Endpoint::Etcd(endpoints), kind) => {
                let session = etcd_session(endpoints).await?;
                let lock = etcd_lock(&session, kind, name, &args.name)?;
                return Ok(Locker {
                    lock,
                    etcd: Some(EtcdSession {
                        session,
                        endpoints: endpoints.clone(),
                        kind,
                        name: name.to_owned(),
                        id: args.name.clone(),
                    }),
                    zk: false,
                });
            }
        };
        Ok(Locker {
            lock,
            etcd: None,
            zk: matches!(args.endpoint, Endpoint::Zk(_)),
        })
    }

    async fn acquire(&mut self) -> lockkeeper::Result<Option<Held>> {
        if let Some(etcd) = &mut self.etcd {
            // A lease that ran out (a paused or cut-off holder) takes a new session.
            if !etcd.session.is_alive() {
                let fresh = etcd_session(&etcd.endpoints).await?;
                self.lock = etcd_lock(&fresh, etcd.kind, &etcd.name, &etcd.id)?;
                etcd.session = fresh;
            }
        }
        let guard = self.lock.lock_timeout(ACQUIRE_WAIT).await?;
        Ok(guard.map(|guard| Held { guard, zk: self.zk }))
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
struct Held {
    guard: Box<dyn Guard>,
    /// Whether the lock node is presented to the ZooKeeper fence.
    zk: bool,
}

impl Held {
    /// The fencing token; Redlock has none.
    fn token(&self) -> Option<u64> {
        self.guard
            .fencing_token()
            .map(lockkeeper::FencingToken::get)
    }

    /// The ZooKeeper lock node the holder presents to the ZooKeeper fence (one: a client takes
    /// one lease of a semaphore).
    fn node(&self) -> Option<String> {
        self.zk.then(|| self.guard.held_as())
    }

    fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    async fn release(self) -> lockkeeper::Result<()> {
        self.guard.release().await
    }
}
