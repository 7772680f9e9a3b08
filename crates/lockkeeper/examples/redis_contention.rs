//! How long do waiters wait? Eight contenders take turns on one Redis lock; this prints the
//! distribution of the time from asking to holding, for lockkeeper's lease lock (woken by the
//! release message) and, in the same run against the same redis-server, for redis-py's `Lock`
//! (which polls every 100 ms by default).
//!
//! ```sh
//! cargo run --release -p lockkeeper --example redis_contention [ROUNDS] [HOLD_MS]
//! ```
//!
//! Needs `redis-server` and Python 3 with the `redis` package (`pip install redis`).

use std::process::Command;
use std::time::{Duration, Instant};

use lockkeeper::redis::Redis;
use lockkeeper_testkit::RedisServer;

const CONTENDERS: usize = 8;

/// redis-py's side: the same loop in eight threads, each with its own client. Prints one wait
/// (microseconds) per line.
const REDIS_PY: &str = r#"
import sys, threading, time, redis
url, contenders, rounds, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
waits, lock_ = [], threading.Lock()
def run():
    client = redis.Redis.from_url(url)
    lock = client.lock("redis-py-contention", timeout=30)
    mine = []
    for _ in range(rounds):
        started = time.monotonic()
        lock.acquire(blocking=True, blocking_timeout=120)
        mine.append(time.monotonic() - started)
        time.sleep(hold)
        lock.release()
        time.sleep(0.001)
    with lock_:
        waits.extend(mine)
threads = [threading.Thread(target=run) for _ in range(contenders)]
for t in threads: t.start()
for t in threads: t.join()
for w in waits: print(int(w * 1e6))
"#;

#[tokio::main]
async fn main() -> lockkeeper::Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(125);
    let hold_ms: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let hold = Duration::from_millis(hold_ms);
    let server = RedisServer::start();
    println!(
        "{CONTENDERS} contenders x {rounds} rounds, hold {hold_ms} ms, 1 ms between rounds, redis-server {}",
        server.addr()
    );

    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let redis = Redis::connect(&server.url()).await?;
        tasks.push(tokio::spawn(async move {
            let lock = redis.lease_lock("lockkeeper-contention");
            let mut waits = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let asked = Instant::now();
                let guard = lock
                    .lock_timeout(Duration::from_secs(120))
                    .await?
                    .expect("acquired within two minutes");
                waits.push(asked.elapsed().as_micros() as u64);
                tokio::time::sleep(hold).await;
                guard.release().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<_, lockkeeper::Error>(waits)
        }));
    }
    let mut ours = Vec::new();
    for task in tasks {
        ours.extend(task.await.expect("contender task")?);
    }
    report("lockkeeper lease lock", &mut ours, started.elapsed());

    let started = Instant::now();
    let output = Command::new("python3")
        .args(["-c", REDIS_PY, &server.url(), &CONTENDERS.to_string()])
        .arg(rounds.to_string())
        .arg(format!("{}", hold.as_secs_f64()))
        .output()
        .expect("run python3");
    if !output.status.success() {
        eprintln!(
            "redis-py run failed (is the `redis` package installed?):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        return Ok(());
    }
    let mut theirs: Vec<u64> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    report("redis-py Lock (polling)", &mut theirs, started.elapsed());
    let ratio = percentile(&theirs, 99.9) as f64 / percentile(&ours, 99.9).max(1) as f64;
    println!("p99.9 wait: redis-py / lockkeeper = {ratio:.1}x");
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn report(what: &str, waits: &mut [u64], elapsed: Duration) {
    waits.sort_unstable();
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{what:<26} n={:<5} p50={:>8.2} ms  p99={:>8.2} ms  p99.9={:>8.2} ms  max={:>8.2} ms  ({:.1} s, {:.0} acquisitions/s)",
        waits.len(),
        ms(percentile(waits, 50.0)),
        ms(percentile(waits, 99.0)),
        ms(percentile(waits, 99.9)),
        ms(waits.last().copied().unwrap_or(0)),
        elapsed.as_secs_f64(),
        waits.len() as f64 / elapsed.as_secs_f64(),
    );
}
