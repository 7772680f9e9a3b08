//! Release notifications: one shared subscriber connection per [`Redis`](super::Redis) handle,
//! multiplexing the channels of every lock its waiters wait on.
//!
//! A waiter subscribes to its lock's channel *before* it tries the lock, so a release that
//! happens between a failed attempt and the wait cannot be missed: each channel has a
//! generation counter (a `watch`), bumped by every message, and a waiter only sleeps if the
//! counter has not moved since its subscription was confirmed by the server.
//!
//! The connection is opened on the first subscription and re-opened (with back-off) when it
//! drops. Messages published while it was down are lost, so after every reconnect each channel
//! is bumped once: its waiters try again instead of sleeping until the lease runs out.
//! Channels are reference-counted; a channel nobody waits on any more is unsubscribed after
//! lingering for [`LINGER`], so that a process taking the same lock again and again does not
//! pay a `SUBSCRIBE` round trip each time it has to wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{Client, RedisError};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::conn::{SentinelConn, Timeouts, within};

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_secs(5);

/// Where the subscriber connection goes.
pub(crate) enum PubSource {
    /// One server.
    Single(Box<Client>),
    /// Any node of a cluster: classic `PUBLISH` reaches subscribers on every node. The nodes
    /// are tried in turn when one is down.
    Cluster(Vec<Client>),
    /// The current master, as the Sentinels name it.
    Sentinel(SentinelConn),
}

impl PubSource {
    async fn connect(
        &self,
        attempt: usize,
        timeouts: Timeouts,
    ) -> Result<redis::aio::PubSub, RedisError> {
        let client = match self {
            PubSource::Single(client) => (**client).clone(),
            PubSource::Cluster(clients) => clients[attempt % clients.len()].clone(),
            PubSource::Sentinel(sentinel) => sentinel.master_client().await?,
        };
        within(timeouts.connect, client.get_async_pubsub()).await
    }
}

/// The handle side of the subscriber: waiters call [`Subscriber::subscribe`].
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    wake: mpsc::UnboundedSender<()>,
}

struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
}

struct Channel {
    /// Live [`Subscription`]s of this channel.
    refs: usize,
    /// Bumped by every message (and every reconnect), with the waiter the message is for
    /// (`None`: everyone).
    generation: watch::Sender<Wake>,
    /// Whether the server confirmed the subscription on the current connection.
    confirmed: bool,
    /// Whether it was ever confirmed: a re-confirmation after a reconnect wakes the waiters.
    ever_confirmed: bool,
    /// Subscribers waiting for the confirmation.
    pending: Vec<oneshot::Sender<Result<(), RedisError>>>,
    /// When the last reference went (while `refs == 0`).
    idle_since: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every critical section below leaves the map consistent before it can panic.
        crate::sync::lock(&self.channels)
    }
}

impl Subscriber {
    /// Starts the subscriber task (it connects on the first subscription). Must be called
    /// inside a tokio runtime.
    pub(crate) fn start(source: PubSource, timeouts: Timeouts) -> Subscriber {
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
        });
        let (wake, wakes) = mpsc::unbounded_channel();
        tokio::spawn(run(source, timeouts, Arc::clone(&shared), wakes));
        Subscriber { shared, wake }
    }

    /// Subscribes to `channel`; returns once the server has confirmed the subscription (at once
    /// if another waiter of this handle already holds it). Cancel-safe: dropping the future
    /// drops the reference, and the task unsubscribes if it was the last one.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, RedisError> {
        let (receiver, confirmation) = {
            let mut channels = self.shared.lock();
            let entry = channels
                .entry(channel.to_string())
                .or_insert_with(|| Channel {
                    refs: 0,
                    generation: watch::Sender::new(Wake::default()),
                    confirmed: false,
                    ever_confirmed: false,
                    pending: Vec::new(),
                    idle_since: None,
                });
            entry.refs += 1;
            entry.idle_since = None;
            let receiver = entry.generation.subscribe();
            let confirmation = if entry.confirmed {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                entry.pending.push(tx);
                Some(rx)
            };
            (receiver, confirmation)
        };
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            wake: self.wake.clone(),
            channel: channel.to_string(),
            generation: receiver,
        };
        if let Some(confirmation) = confirmation {
            let _ = self.wake.send(());
            match confirmation.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(_) => {
                    return Err(RedisError::from((
                        redis::ErrorKind::Client,
                        "the pub/sub subscriber stopped",
                    )));
                }
            }
        }
        Ok(subscription)
    }
}

/// One waiter's interest in one channel.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    wake: mpsc::UnboundedSender<()>,
    channel: String,
    generation: watch::Receiver<Wake>,
}

/// The latest wake-up on a channel.
#[derive(Clone, Debug, Default)]
pub(crate) struct Wake {
    count: u64,
    /// The one waiter the release was addressed to (`released:{waiter}`), or `None` for all.
    addressee: Option<Arc<str>>,
}

impl Wake {
    fn next(&mut self, addressee: Option<Arc<str>>) {
        self.count += 1;
        self.addressee = addressee;
    }
}

impl Subscription {
    /// Resolves when a message arrived on the channel since the subscription was made or since
    /// the last call returned, with the waiter it was addressed to (`None`: everyone). Never
    /// resolves if the subscriber is gone (the caller always waits with a time limit as well).
    pub(crate) async fn changed(&mut self) -> Option<Arc<str>> {
        if self.generation.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.generation.borrow_and_update().addressee.clone()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.lock();
        if let Some(entry) = channels.get_mut(&self.channel) {
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                entry.idle_since = Some(Instant::now());
                drop(channels);
                let _ = self.wake.send(());
            }
        }
    }
}

/// The subscriber task: (re)connects, keeps the server's subscriptions in line with the map,
/// and turns messages into generation bumps. Ends when the last handle is gone.
async fn run(
    source: PubSource,
    timeouts: Timeouts,
    shared: Arc<Shared>,
    mut wakes: mpsc::UnboundedReceiver<()>,
) {
    let mut attempt = 0usize;
    let mut backoff = Duration::from_millis(50);
    loop {
        // Connect only when someone waits.
        while !shared.lock().values().any(|c| c.refs > 0) {
            if wakes.recv().await.is_none() {
                return;
            }
            forget_unused(&shared);
        }
        let pubsub = match source.connect(attempt, timeouts).await {
            Ok(pubsub) => pubsub,
            Err(error) => {
                tracing::debug!(%error, "redis pub/sub connection failed");
                fail_pending(&shared, &error);
                attempt += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let (mut sink, mut stream) = pubsub.split();
        let outcome: Result<(), RedisError> = async {
            loop {
                let (subscribe, unsubscribe, next_check) = plan(&shared);
                if !subscribe.is_empty() {
                    within(timeouts.response, sink.subscribe(&subscribe)).await?;
                    confirm(&shared, &subscribe);
                }
                if !unsubscribe.is_empty() {
                    within(timeouts.response, sink.unsubscribe(&unsubscribe)).await?;
                }
                tokio::select! {
                    message = stream.next() => match message {
                        Some(message) => {
                            let addressee = message
                                .get_payload::<String>()
                                .ok()
                                .and_then(|p| p.strip_prefix("released:").map(Arc::from));
                            bump(&shared, message.get_channel_name(), addressee);
                        }
                        None => return Err(RedisError::from((
                            redis::ErrorKind::Io,
                            "the pub/sub connection closed",
                        ))),
                    },
                    wake = wakes.recv() => {
                        if wake.is_none() {
                            return Ok(());
                        }
                        while wakes.try_recv().is_ok() {}
                    }
                    _ = sleep_until(next_check) => {}
                }
            }
        }
        .await;
        match outcome {
            Ok(()) => return,
            Err(error) => {
                tracing::debug!(%error, "redis pub/sub connection lost; reconnecting");
                disconnected(&shared, &error);
                attempt += 1;
            }
        }
    }
}

/// Drops map entries nobody references and that are not subscribed on the server.
fn forget_unused(shared: &Shared) {
    shared.lock().retain(|_, c| c.refs > 0 || c.confirmed);
}

/// What to send: channels someone waits on that the server does not have yet, and channels
/// nobody has waited on for [`LINGER`] (which leave the map); and when to look again for
/// lingering channels.
fn plan(shared: &Shared) -> (Vec<String>, Vec<String>, Option<Instant>) {
    let now = Instant::now();
    let mut channels = shared.lock();
    let mut subscribe = Vec::new();
    let mut unsubscribe = Vec::new();
    let mut next_check: Option<Instant> = None;
    channels.retain(|name, c| {
        if c.refs > 0 {
            if !c.confirmed {
                subscribe.push(name.clone());
            }
            return true;
        }
        if !c.confirmed {
            return false;
        }
        let until = c.idle_since.unwrap_or(now) + LINGER;
        if until > now {
            next_check = Some(next_check.map_or(until, |n| n.min(until)));
            return true;
        }
        unsubscribe.push(name.clone());
        false
    });
    (subscribe, unsubscribe, next_check)
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn confirm(shared: &Shared, names: &[String]) {
    let mut channels = shared.lock();
    for name in names {
        if let Some(c) = channels.get_mut(name) {
            c.confirmed = true;
            if c.ever_confirmed {
                // Re-subscribed after a reconnect: a release may have gone unheard.
                c.generation.send_modify(|g| g.next(None));
            }
            c.ever_confirmed = true;
            for tx in c.pending.drain(..) {
                let _ = tx.send(Ok(()));
            }
        }
    }
}

fn bump(shared: &Shared, name: &str, addressee: Option<Arc<str>>) {
    if let Some(c) = shared.lock().get_mut(name) {
        c.generation.send_modify(|g| g.next(addressee));
    }
}

fn fail_pending(shared: &Shared, error: &RedisError) {
    for c in shared.lock().values_mut() {
        for tx in c.pending.drain(..) {
            let _ = tx.send(Err(error.clone()));
        }
    }
}

fn disconnected(shared: &Shared, error: &RedisError) {
    let mut channels = shared.lock();
    for c in channels.values_mut() {
        c.confirmed = false;
        // Wake the waiters: they try again now (and see the error, if the server is gone).
        c.generation.send_modify(|g| g.next(None));
        for tx in c.pending.drain(..) {
            let _ = tx.send(Err(error.clone()));
        }
    }
    channels.retain(|_, c| c.refs > 0);
}
