//! [`Election`]: leader election with the key layout of Go's `concurrency.Election`, so
//! `etcdctl elect`, Go services and lockkeeper campaign and observe together.

use std::sync::Arc;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::etcd::error::is_transient;
use crate::etcd::guard::{HoldOptions, LockGuard};
use crate::etcd::queue::{Place, acquire};
use crate::etcd::rpc::{
    Compare, KeyValue, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
};
use crate::etcd::session::{RETRY_PAUSE, Session};
use crate::etcd::{check_name, token};
use crate::fencing::FencingToken;
use crate::options::{Configure, Delay, LockOptions, Setting};
use tokio_util::sync::ReusableBoxFuture;

/// A leader election on etcd, laid out as Go's `concurrency.Election` (and so `etcdctl
/// elect`): each candidate puts `NAME/{lease:x}` with its proclaimed value and the session's
/// lease; the leader is the key with the lowest create revision under `NAME/`.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
/// let election = session.election("scheduler")?;
/// let leadership = election.campaign("host-a:8080").await?; // waits until elected
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer the leader"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // lead
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    session: Session,
    name: Arc<str>,
    /// What each leadership gets: the maximum hold time.
    options: HoldOptions,
}

/// Who leads an election: its key, proclaimed value and create revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// `NAME/{lease:x}`.
    pub key: String,
    /// The value the leader proclaimed.
    pub value: Vec<u8>,
    /// The key's create revision: the leadership's fencing token.
    pub token: FencingToken,
    /// The key's last modification (a proclamation changes it): with the key, what tells one
    /// leadership-and-value from the next.
    mod_revision: i64,
}

impl Leader {
    fn from_kv(kv: &KeyValue) -> Leader {
        Leader {
            key: String::from_utf8_lossy(&kv.key).into_owned(),
            value: kv.value.clone(),
            token: token(kv.create_revision),
            mod_revision: kv.mod_revision,
        }
    }
}

/// The read of an election's leader: the key under `prefix` with the lowest create revision.
fn first_by_creation(prefix: String) -> RangeRequest {
    RangeRequest::prefix(prefix).oldest_first().limit(1)
}

impl Session {
    /// The election called `name` (see [`Election`]); its keys live under `name/`.
    /// [`Error::InvalidArgument`] for an empty name.
    pub fn election(&self, name: &str) -> Result<Election> {
        check_name("election", name)?;
        Ok(Election {
            session: self.clone(),
            name: Arc::from(name),
            options: HoldOptions::default(),
        })
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How leadership is held ([`LockOptions`]): `max_hold` ends every leadership that long
    /// after it was won: from then on `is_held()` is false and `lost()` resolves, and the key
    /// is deleted, which elects the next candidate. For a leader that must not keep the role
    /// forever. [`Error::InvalidArgument`] for zero or an option an election does not take.
    pub fn with_options(self, options: LockOptions) -> Result<Election> {
        options.apply(self)
    }

    /// Campaigns with `value` and waits until elected. [`Error::SessionLost`] if the session
    /// is lost meanwhile. Cancel-safe: a dropped campaign withdraws its candidacy.
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Leadership> {
        let guard = acquire(
            &self.session,
            &self.place(value.into()),
            &self.options,
            Deadline::Never,
        )
        .await?
        .ok_or(Error::SessionLost)?;
        Ok(Leadership { guard })
    }

    /// Becomes the leader only if nobody leads or campaigns now; `None` otherwise (the
    /// candidacy is withdrawn).
    pub async fn try_campaign(&self, value: impl Into<Vec<u8>>) -> Result<Option<Leadership>> {
        let place = self.place(value.into());
        let guard = acquire(&self.session, &place, &self.options, Deadline::Now).await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }

    /// Campaigns with `value`, waiting at most `timeout` to be elected; `None` if not elected
    /// in time (the candidacy is withdrawn before this returns), as
    /// [`Mutex::lock_timeout`](crate::etcd::Mutex::lock_timeout). A zero timeout is refused:
    /// use [`try_campaign`](Election::try_campaign).
    pub async fn campaign_timeout(
        &self,
        value: impl Into<Vec<u8>>,
        timeout: std::time::Duration,
    ) -> Result<Option<Leadership>> {
        let place = self.place(value.into());
        let deadline = Deadline::after(timeout)?;
        let guard = acquire(&self.session, &place, &self.options, deadline).await?;
        Ok(guard.map(|guard| Leadership { guard }))
    }

    fn place(&self, value: Vec<u8>) -> Place {
        Place {
            key: format!("{}/{:x}", self.name, self.session.lease_id()).into_bytes(),
            value,
            wait_on: format!("{}/", self.name).into_bytes(),
            admits: 0,
            per_session: true,
        }
    }

    /// This election with the value a candidate campaigns with, as a [`Lock`](crate::Lock):
    /// holding it is leading (`lock()` campaigns, its guard resigns on release).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
    /// use lockkeeper::Lock;
    ///
    /// let candidacy = session.election("scheduler")?.candidacy("replica-a");
    /// let leadership = candidacy.lock().await?;
    /// leadership.lost().await;
    /// # Ok(()) }
    /// ```
    pub fn candidacy(&self, value: impl Into<Vec<u8>>) -> Candidacy {
        Candidacy {
            election: self.clone(),
            value: value.into(),
        }
    }

    /// The current leader, `None` when nobody campaigns.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let found = self
            .session
            .client()
            .range(first_by_creation(format!("{}/", self.name)))
            .await?;
        Ok(found.kvs.first().map(Leader::from_kv))
    }

    /// A stream of leaders: [`Observer::next`] answers the current leader at once, then each
    /// change of leader or of its value (as Go's `Observe` and `etcdctl elect --listen`).
    pub fn observe(&self) -> Observer {
        let watching = Watching {
            election: self.clone(),
            last: None,
        };
        Observer {
            name: Arc::clone(&self.name),
            next: ReusableBoxFuture::new(watching.next()),
        }
    }
}

/// Follows who leads an [`Election`]; see [`Election::observe`]. Also a
/// [`Stream`](futures_util::Stream) of the same answers, which never ends.
pub struct Observer {
    name: Arc<str>,
    /// The wait for the next leader, owning what it watches with.
    next: ReusableBoxFuture<'static, (Result<Leader>, Watching)>,
}

impl Observer {
    /// Waits until a leader other than the last one answered (or the same with a new value)
    /// is there, and answers it. Skips intermediate leaders that came and went while nobody
    /// asked. Errors only for failures etcd will not get over by itself.
    pub async fn next(&mut self) -> Result<Leader> {
        std::future::poll_fn(|cx| self.poll_leader(cx)).await
    }

    fn poll_leader(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<Leader>> {
        let (answer, watching) = std::task::ready!(self.next.poll(cx));
        self.next.set(watching.next());
        std::task::Poll::Ready(answer)
    }
}

impl futures_util::Stream for Observer {
    type Item = Result<Leader>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Leader>>> {
        self.poll_leader(cx).map(Some)
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.name)
            .finish_non_exhaustive()
    }
}

/// What an [`Observer`] watches with: the election and the leader it last answered.
struct Watching {
    election: Election,
    last: Option<Leader>,
}

impl Watching {
    /// The next leader to answer, and this state to watch on with.
    async fn next(mut self) -> (Result<Leader>, Watching) {
        let answer = loop {
            match self.look().await {
                Ok(Some(leader)) => break Ok(leader),
                Ok(None) => {}
                Err(Error::Etcd(err)) if is_transient(&err) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(err) => break Err(err),
            }
        };
        (answer, self)
    }

    /// A new leader if there is one, else a watch until anything under the prefix changes.
    async fn look(&mut self) -> Result<Option<Leader>> {
        let prefix = format!("{}/", self.election.name);
        let client = self.election.session.client();
        let found = client.range(first_by_creation(prefix.clone())).await?;
        if let Some(leader) = found.kvs.first().map(Leader::from_kv) {
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Ok(Some(leader));
            }
        }
        let revision = found.header.map_or(0, |h| h.revision) + 1;
        let watch = WatchCreateRequest::prefix(prefix).start_at(revision);
        let mut stream = client.watch(watch).await?;
        while let Some(answer) = stream.message().await? {
            if answer.canceled || !answer.events.is_empty() {
                break;
            }
        }
        Ok(None)
    }
}

/// An [`Election`] and the value to campaign with: the election as a [`Lock`](crate::Lock)
/// (see [`Election::candidacy`]).
#[derive(Clone, Debug)]
pub struct Candidacy {
    election: Election,
    value: Vec<u8>,
}

impl Candidacy {
    /// The election campaigned in.
    pub fn election(&self) -> &Election {
        &self.election
    }

    /// The value campaigned with.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// [`Election::campaign`] with this value.
    pub async fn campaign(&self) -> Result<Leadership> {
        self.election.campaign(self.value.clone()).await
    }

    /// [`Election::try_campaign`] with this value.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>> {
        self.election.try_campaign(self.value.clone()).await
    }

    /// [`Election::campaign_timeout`] with this value.
    pub async fn campaign_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<Leadership>> {
        self.election
            .campaign_timeout(self.value.clone(), timeout)
            .await
    }

    /// The same candidacy, its election held with `options` ([`Election::with_options`]).
    pub fn with_options(self, options: LockOptions) -> Result<Candidacy> {
        Ok(Candidacy {
            election: self.election.with_options(options)?,
            value: self.value,
        })
    }
}

/// Being the leader of an [`Election`]: the candidacy's key, with the lost signal and fencing
/// token every lockkeeper guard has. Dropping it resigns (in a background task).
#[must_use = "leadership ends when this is dropped"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The key's create revision: higher for every later leader of this election.
    pub fn fencing_token(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// Whether this process can still be sure it leads (see [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the leadership is certainly ours (see [`LockGuard::valid_until`]).
    pub fn valid_until(&self) -> Option<tokio::time::Instant> {
        self.guard.valid_until()
    }

    /// Resolves once the leadership can no longer be trusted (see [`LockGuard::lost`]).
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// The leader key, `NAME/{lease:x}`.
    pub fn key(&self) -> String {
        self.guard.key()
    }

    /// Replaces the proclaimed value, only while this key is still the one elected (compare on
    /// its create revision, as Go's `Proclaim`). [`Error::NotLeader`] when it is not.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<()> {
        let held = self.guard.held();
        if !held.session.is_alive() {
            return Err(Error::NotLeader);
        }
        let key = held.key.as_slice();
        let put = PutRequest::new(key, value, held.session.lease_id());
        let txn = TxnRequest {
            compare: vec![Compare::created_at(key, held.rev)],
            success: vec![RequestOp::put(put)],
            failure: Vec::new(),
        };
        let answer = held.session.client().txn(txn).await?;
        if answer.succeeded {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }

    /// Steps down: deletes the key, so the next candidate is elected. [`Error::NotLeader`]
    /// if the leadership was known lost before.
    pub async fn resign(self) -> Result<()> {
        match self.guard.release().await {
            Err(Error::NotHeld) => Err(Error::NotLeader),
            released => released,
        }
    }
}

impl Configure for Election {
    fn described(&self) -> String {
        format!("the etcd election {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.name, setting, Delay::NotTaken)
    }
}
