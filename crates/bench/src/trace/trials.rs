//! The trials the `--trace` targets are judged on: the same synchronous clients as the stage
//! tables, timed in rounds that take turns, so that every client samples the same moments.
//!
//! A trial opens its clients and warms each up: the library-free client on a blocking socket
//! (c) and on a tokio socket awaited in the task (c2), `lockkeeper-zk-client` (b), the same
//! client sending a lock cycle's own requests (b2: what a `zk::Mutex` cycle asks of the server,
//! with none of the recipe around it), one session's uncontended `zk::Mutex` (d), and the
//! library-free client on the Keeper that never syncs. It then times [`ROUND`] pairs (or lock
//! -> release cycles) of each in turn, the order reversed every other round, until each has its
//! `--trace-pairs` (or `--duration` times five has passed). A machine's speed drifts over
//! seconds, so runs of a few seconds one after another each see a different machine, and the
//! ratio of their p50s moves with the drift; rounds of tens of milliseconds see the same one.
//!
//! Each client is idle while another's round runs, so each pair is timed alone, as in the
//! stage tables' runs. Keeper's log syncs are counted around each round of (d), so its syncs
//! per cycle are its own.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkeeper::zk::Mutex;
use lockkeeper_load::BoxError;
use lockkeeper_zk_client as own;

use super::targets::Trials;
use super::wire::{self, Wire};
use super::{OP_LIMIT, PairTimes, SYNCS, Settings, delta, keeper_sync_p50, micros, totals, within};
use crate::locks::open;

/// Pairs (or cycles) each client runs before the next takes its turn: tens of milliseconds.
pub(super) const ROUND: u32 = 50;
/// The node the library client's pairs create and delete.
const PAIR_PATH: &str = "/trace-pair";
/// The lock the Mutex client cycles on.
const LOCK_PATH: &str = "/trace-mutex";
/// The directory (b2) creates its lock nodes in.
const REQUESTS_DIR: &str = "/trace-requests";
/// (b2)'s node prefix: as long as a lock's protected prefix, `_c_{uuid}-lock-`.
const REQUESTS_PREFIX: &str = "/trace-requests/_c_00000000-0000-4000-8000-000000000000-lock-";

/// The clients of one trial, in the order a round runs them.
#[derive(Clone, Copy)]
enum Run {
    Durable,
    Tokio,
    Library,
    Requests,
    Cycles,
    Unsynced,
}

/// Runs one trial on the Keeper at `addr` (and the one that never syncs at `unsynced_addr`)
/// and adds its figures to `trials`. `first_reversed` starts it with the order reversed.
pub(super) async fn trial(
    addr: SocketAddr,
    unsynced_addr: SocketAddr,
    settings: &Settings,
    first_reversed: bool,
    trials: &mut Trials,
) -> Result<(), BoxError> {
    let mut durable = Blocking::warmed_up(addr).await?;
    let mut unsynced = Blocking::warmed_up(unsynced_addr).await?;
    let mut task = wire::warmed_up_in_task(addr, OP_LIMIT).await?;
    let library = within("connect", own::Client::connect(&addr.to_string())).await??;
    library_round(&library, ROUND, &mut PairTimes::new()).await?;
    let persistent = own::CreateOptions::new(own::CreateMode::Persistent);
    match within("create", library.create(REQUESTS_DIR, b"", &persistent)).await? {
        Ok(_) | Err(own::Error::NodeExists) => {}
        Err(e) => return Err(format!("create {REQUESTS_DIR}: {e}").into()),
    }
    let data = lock_data();
    requests_round(&library, &data, ROUND, &mut PairTimes::new()).await?;
    let session = open(&addr.to_string(), settings.connect_limit).await?;
    let outcome = async {
        let mutex = session.mutex(LOCK_PATH)?;
        cycle_round(&mutex, ROUND, &mut PairTimes::new()).await?;
        let mut times: [PairTimes; 6] = std::array::from_fn(|_| PairTimes::new());
        let mut cycle_syncs = 0.0;
        let pairs = u64::from(settings.pairs);
        let started = Instant::now();
        let mut round = 0u32;
        while times[0].count() < pairs && started.elapsed() < settings.limit * 5 {
            let n = ROUND.min(u32::try_from(pairs - times[0].count()).unwrap_or(ROUND));
            let mut order = [
                Run::Durable,
                Run::Tokio,
                Run::Library,
                Run::Requests,
                Run::Cycles,
                Run::Unsynced,
            ];
            if (round % 2 == 1) != first_reversed {
                order.reverse();
            }
            for run in order {
                let times = &mut times[run as usize];
                match run {
                    Run::Durable => durable.round(n, settings.limit, times).await?,
                    Run::Tokio => times.absorb(&task.pairs(n, settings.limit).await?)?,
                    Run::Library => library_round(&library, n, times).await?,
                    Run::Requests => requests_round(&library, &data, n, times).await?,
                    Run::Cycles => {
                        let before = totals(addr).await?;
                        cycle_round(&mutex, n, times).await?;
                        let syncs = delta(&before, &totals(addr).await?);
                        cycle_syncs += syncs.get(SYNCS).map_or(0.0, |(count, _)| *count);
                    }
                    Run::Unsynced => unsynced.round(n, settings.limit, times).await?,
                }
            }
            round += 1;
        }
        let p50 = |run: Run| micros(times[run as usize].p50());
        trials.durable_pair_us.push(p50(Run::Durable));
        trials.tokio_pair_us.push(p50(Run::Tokio));
        trials.library_pair_us.push(p50(Run::Library));
        trials.lock_requests_us.push(p50(Run::Requests));
        trials.cycle_us.push(p50(Run::Cycles));
        trials.unsynced_pair_us.push(p50(Run::Unsynced));
        let cycles = times[Run::Cycles as usize].count().max(1) as f64;
        trials.cycle_syncs.push(cycle_syncs / cycles);
        trials.keeper_sync_us.push(keeper_sync_p50(addr).await?);
        Ok::<_, BoxError>(())
    }
    .await;
    session.close().await;
    outcome
}

/// The library-free client on a blocking socket, run on a thread of the blocking pool one
/// round at a time.
struct Blocking(Option<Wire>);

impl Blocking {
    async fn warmed_up(addr: SocketAddr) -> Result<Blocking, BoxError> {
        let wire = tokio::task::spawn_blocking(move || wire::warmed_up(addr, OP_LIMIT))
            .await
            .map_err(|e| format!("library-free client on {addr}: {e}"))??;
        Ok(Blocking(Some(wire)))
    }

    /// `n` pairs, added to `times`.
    async fn round(
        &mut self,
        n: u32,
        limit: Duration,
        times: &mut PairTimes,
    ) -> Result<(), BoxError> {
        let wire = self.0.take().ok_or("the blocking client failed earlier")?;
        let (wire, round) = tokio::task::spawn_blocking(move || {
            let mut wire = wire;
            let round = wire.pairs(n, limit);
            (wire, round)
        })
        .await
        .map_err(|e| format!("library-free client: {e}"))?;
        self.0 = Some(wire);
        times.absorb(&round?)
    }
}

/// `n` create+delete pairs through `lockkeeper-zk-client`, added to `times`.
async fn library_round(
    client: &own::Client,
    n: u32,
    times: &mut PairTimes,
) -> Result<(), BoxError> {
    let persistent = own::CreateOptions::new(own::CreateMode::Persistent);
    for _ in 0..n {
        let t0 = Instant::now();
        within("create", client.create(PAIR_PATH, b"x", &persistent)).await??;
        let t1 = Instant::now();
        within("delete", client.delete(PAIR_PATH, None)).await??;
        times.record(t0, t1, Instant::now());
    }
    Ok(())
}

/// `n` cycles of a lock's own requests through `lockkeeper-zk-client`, added to `times` as
/// pairs: an ephemeral sequential create with the lock's data and the directory's listing, in
/// one write, then the delete of the node created. That is what a `zk::Mutex` cycle sends.
async fn requests_round(
    client: &own::Client,
    data: &[u8],
    n: u32,
    times: &mut PairTimes,
) -> Result<(), BoxError> {
    let sequential = own::CreateOptions::new(own::CreateMode::EphemeralSequential);
    for _ in 0..n {
        let t0 = Instant::now();
        let (create, listing) = {
            let _cork = client.cork();
            (
                client.create(REQUESTS_PREFIX, data, &sequential),
                client.list_children(REQUESTS_DIR),
            )
        };
        let (_, path) = within("create", create).await??;
        within("listing", listing).await??;
        let t1 = Instant::now();
        within("delete", client.delete(&path, None)).await??;
        times.record(t0, t1, Instant::now());
    }
    Ok(())
}

/// What a lock node holds, `lockkeeper HOST:PID`, so that (b2)'s creates carry as many bytes
/// as the lock's.
fn lock_data() -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("lockkeeper {}:{}", host.trim(), std::process::id()).into_bytes()
}

/// `n` uncontended lock -> release cycles, added to `times` as pairs: the acquisition (its
/// create and listing, sent together) is the first op, the release (its delete) the second.
async fn cycle_round(mutex: &Mutex, n: u32, times: &mut PairTimes) -> Result<(), BoxError> {
    for _ in 0..n {
        let t0 = Instant::now();
        let Some(guard) = within("lock", mutex.lock_timeout(OP_LIMIT)).await?? else {
            return Err(format!("no lock on {} within {OP_LIMIT:?}", mutex.path()).into());
        };
        let t1 = Instant::now();
        within("release", guard.release()).await??;
        times.record(t0, t1, Instant::now());
    }
    Ok(())
}
