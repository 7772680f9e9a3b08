//! Small synchronization pieces every backend shares: the one way the library takes its std
//! mutexes, and [`Watcher`], a background watch whose answer anyone can read or await.
//!
//! The std mutexes guard a few instructions each (a handle's state, a table of local waiters), never an
//! await, so a panic while one was held cannot have left its data half-changed in a way a later
//! user would misread: a poisoned mutex is taken as it is rather than turned into a panic in
//! every task that touches the handle after.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// Locks `mutex`, taking it even if a panic poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A watch run by a task of its own, so that its answer is there whether or not anyone awaits
/// it: once the watch's future returns `true` (the thing watched is gone), [`is_set`] turns
/// true and every [`set`] resolves. The task is aborted when this is dropped, so a watch lives
/// no longer than what it watches for. Every held lock node (ZooKeeper) and key (etcd) keeps
/// one, which is what makes their `is_held()` live.
///
/// [`is_set`]: Watcher::is_set
/// [`set`]: Watcher::set
pub(crate) struct Watcher {
    flag: Arc<Flag>,
    task: AbortHandle,
}

#[derive(Default)]
struct Flag {
    set: AtomicBool,
    wake: Notify,
}

impl Watcher {
    /// Runs `watch` in a task on the current runtime; `None` outside one.
    pub(crate) fn spawn(watch: impl Future<Output = bool> + Send + 'static) -> Option<Watcher> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let flag = Arc::new(Flag::default());
        let task = runtime.spawn({
            let flag = flag.clone();
            async move {
                if watch.await {
                    flag.set.store(true, Ordering::Release);
                    flag.wake.notify_waiters();
                }
            }
        });
        Some(Watcher {
            flag,
            task: task.abort_handle(),
        })
    }

    /// Whether the watch has answered `true`.
    pub(crate) fn is_set(&self) -> bool {
        self.flag.set.load(Ordering::Acquire)
    }

    /// Resolves once the watch has answered `true`; never, if it ends otherwise.
    pub(crate) async fn set(&self) {
        loop {
            let notified = self.flag.wake.notified();
            tokio::pin!(notified);
            // Registered before the flag is read, so an answer between the two still wakes us.
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
