//! Work queues on ZooKeeper, in Curator's `DistributedQueue` layout: a producer and two
//! consumers, at-least-once.
//!
//! It queues 20 jobs (ten in one atomic multi), then runs two consumers that take them: one
//! handler refuses every seventh job once, and that job goes back to the end of the queue to
//! be taken again. Run it twice at once and the two processes share the jobs, never handling
//! one twice while nothing fails; kill one mid-way and its unacknowledged job is handled by the
//! other once the killed process's session has expired.
//!
//! ```sh
//! cargo run --release -- serve                                  # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_queue          # default 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_queue -- 127.0.0.1:2181/myapp
//! ```
//!
//! A Curator service consumes the same jobs with `QueueBuilder.builder(client, consumer,
//! serializer, "/examples/queues/jobs").lockPath("/examples/queues/jobs-locks").buildQueue()`,
//! and produces them with the same builder and a `null` consumer.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkeeper::zk::{Delivery, Session};

const JOBS: &str = "/examples/queues/jobs";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let session = Session::connect(&connect).await?;
    let queue = session.distributed_queue(JOBS)?;

    for n in 0..10 {
        queue.put(format!("job {n}").as_bytes()).await?;
    }
    let batch: Vec<String> = (10..20).map(|n| format!("job {n}")).collect();
    let batch: Vec<&[u8]> = batch.iter().map(String::as_bytes).collect();
    queue.put_all(&batch).await?;

    let refused: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let mut consumers = Vec::new();
    for id in 0..2 {
        let (queue, refused) = (queue.clone(), refused.clone());
        consumers.push(tokio::spawn(async move {
            let mut handled = 0;
            // Stop after a quiet second: the other consumer (or process) has the rest.
            while let Some(job) = queue
                .take_timeout(Delivery::AtLeastOnce, Duration::from_secs(1))
                .await?
            {
                let text = String::from_utf8_lossy(&job.items()[0]).into_owned();
                let seventh = text.ends_with('7') || text.ends_with("14");
                if seventh && refused.lock().unwrap().insert(job.items()[0].clone()) {
                    println!("consumer {id}: {text} refused once, back to the end");
                    job.requeue().await?;
                    continue;
                }
                println!("consumer {id}: {text}");
                job.ack().await?;
                handled += 1;
            }
            Ok::<usize, lockkeeper::Error>(handled)
        }));
    }
    for (id, consumer) in consumers.into_iter().enumerate() {
        println!("consumer {id} handled {} jobs", consumer.await??);
    }
    session.close().await;
    Ok(())
}
