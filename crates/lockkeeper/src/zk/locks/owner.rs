//! Reentrancy: one owner's count of acquisitions of one lock node.
//!
//! Curator counts re-entries per thread; async tasks move between threads, so lockkeeper
//! counts per *handle*: a [`Mutex`] (and its clones) is one owner. Re-entering while held
//! touches nothing on the server; the node is deleted when the count returns to zero. Two
//! tasks that must exclude each other take separate handles (`session.mutex(path)` twice).
//!
//! [`Mutex`]: crate::zk::Mutex

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::hold::Held;
use crate::zk::session::Health;

/// The owner's current hold and its count.
#[derive(Default)]
pub(crate) struct Owner {
    /// Serializes this owner's acquisitions, so that a second `lock()` on the same handle
    /// re-enters the first one's hold instead of queueing a second node behind it. A tokio
    /// mutex because it is held across the whole (awaiting) acquisition.
    acquiring: tokio::sync::Mutex<()>,
    /// A std mutex: only ever held for a few instructions, never across an await, and needed
    /// from `Drop`.
    current: StdMutex<Option<Reentry>>,
}

struct Reentry {
    held: Arc<Held>,
    count: usize,
}

/// What giving back one count did.
pub(crate) enum Released {
    /// Other counts remain: nothing to do on the server.
    Counted,
    /// That was the last count: delete the node.
    Last,
    /// The owner had already moved on from this hold (it was lost and re-acquired).
    Stale,
}

impl Owner {
    /// Re-enters the current hold if it is held, otherwise runs `acquire` and records its
    /// hold with a count of one.
    pub(crate) async fn lock<F>(
        &self,
        deadline: Deadline,
        acquire: impl FnOnce() -> F,
    ) -> Result<Option<Arc<Held>>>
    where
        F: Future<Output = Result<Option<Held>>>,
    {
        let _acquiring = match deadline {
            Deadline::Never => self.acquiring.lock().await,
            Deadline::Now => match self.acquiring.try_lock() {
                Ok(permit) => permit,
                Err(_) => return Ok(None),
            },
            Deadline::At(at) => match tokio::time::timeout_at(at, self.acquiring.lock()).await {
                Ok(permit) => permit,
                Err(_) => return Ok(None),
            },
        };
        loop {
            let suspended = {
                let mut current = self.lock_current();
                match current.as_mut() {
                    Some(reentry) if reentry.held.is_held() => {
                        reentry.count += 1;
                        return Ok(Some(reentry.held.clone()));
                    }
                    Some(reentry) if reentry.held.is_gone() => {
                        // Lost for good: its guards will say NotHeld; start afresh.
                        *current = None;
                        None
                    }
                    Some(reentry) => Some(reentry.held.generation().clone()),
                    None => None,
                }
            };
            let Some(generation) = suspended else { break };
            // Suspended: the hold may come back with the connection, or be lost for good.
            tokio::select! {
                _ = generation.connected() => {}
                () = deadline.sleep() => return Ok(None),
            }
            if generation.health() == Health::Ended {
                self.lock_current().take();
            }
        }
        let Some(held) = acquire().await? else {
            return Ok(None);
        };
        let held = held.share();
        *self.lock_current() = Some(Reentry {
            held: held.clone(),
            count: 1,
        });
        Ok(Some(held))
    }

    /// Gives back one count of `held`.
    pub(crate) fn give_back(&self, held: &Arc<Held>) -> Released {
        let mut current = self.lock_current();
        match current.as_mut() {
            Some(reentry) if Arc::ptr_eq(&reentry.held, held) => {
                reentry.count -= 1;
                if reentry.count == 0 {
                    *current = None;
                    Released::Last
                } else {
                    Released::Counted
                }
            }
            _ => Released::Stale,
        }
    }

    /// The number of counts currently held (0 when not held).
    pub(crate) fn count(&self) -> usize {
        self.lock_current()
            .as_ref()
            .map_or(0, |reentry| reentry.count)
    }

    /// The current hold, if any, whether or not it is still held.
    pub(crate) fn current(&self) -> Option<Arc<Held>> {
        self.lock_current()
            .as_ref()
            .map(|reentry| reentry.held.clone())
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<Reentry>> {
        crate::sync::lock(&self.current)
    }
}

/// One count of a hold, released by [`LockGuard`](crate::zk::LockGuard).
pub(crate) async fn release(owner: &Owner, held: &Arc<Held>) -> Result<()> {
    match owner.give_back(held) {
        Released::Counted if held.is_held() => Ok(()),
        Released::Counted | Released::Stale => Err(Error::NotHeld),
        Released::Last => held.release().await,
    }
}

pub(crate) fn release_in_background(owner: &Owner, held: &Arc<Held>) {
    if let Released::Last = owner.give_back(held) {
        held.clone().release_in_background();
    }
}
