//! Group membership with Curator's `GroupMember` layout: each member is an ephemeral node
//! `{group}/{member id}` whose data is the member's payload, so Java services using Curator
//! and Rust services using lockkeeper can share one group.
//!
//! A [`Group`] is a view-only handle on the group's path; [`Group::join`] makes a [`Member`],
//! whose node is a shared persistent node (Curator's `PersistentNode` behaviour): it comes back after a
//! session loss and after a deletion behind its back, and it never takes over another
//! process's node with the same id (it waits for that one to go instead; see
//! [`Member::is_present`]).
//!
//! [`Group::members`] reads the group afresh; [`Group::watch`] keeps a [`GroupView`] in memory
//! on the shared tree cache, with a stream of [`MemberEvent`]s (joins, leaves, updates).
//!
//! Invariants: an id is one path segment (non-empty, no `/`, not `.` or `..`, no control
//! characters), checked before anything is sent; the group's parents are containers, so an
//! empty group leaves nothing behind once its last member is gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::zk::cache::{Cache, CacheEvent, CacheEvents};
use crate::zk::nodes::persistent::PersistentNode;
use crate::zk::path::{node_name_problem, validate_node_path};
use crate::zk::session::Session;

impl Session {
    /// A [`Group`] at `path` (Curator's `GroupMember` layout): join it, or read who is in it.
    /// [`Error::InvalidArgument`] for a path that is not absolute or not a valid node path.
    pub fn group(&self, path: &str) -> Result<Group> {
        Group::new(self.clone(), path)
    }
}

/// A group of members at one path: a view-only handle; [`join`](Group::join) makes a
/// member. Cheap to clone.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let group = session.group("/services/orders")?;
/// let me = group.join("worker-1", b"10.0.0.7:8080".to_vec()).await?;
/// for (id, data) in group.members().await? {
///     println!("{id} at {}", String::from_utf8_lossy(&data));
/// }
/// me.leave().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Group {
    session: Session,
    path: Arc<str>,
}

impl Group {
    fn new(session: Session, path: &str) -> Result<Group> {
        validate_node_path("group path", path)?;
        Ok(Group {
            session,
            path: path.into(),
        })
    }

    /// The group's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Joins the group as `id` with `data` as its payload: creates the ephemeral node
    /// `{path}/{id}` (the group's parents as containers) and keeps it there until
    /// [`leave`](Member::leave) or drop, through session losses. Returns once the member's
    /// node is on the server.
    ///
    /// [`Error::Conflict`] if another session's node holds the id (it is left alone): two
    /// members of one id would each believe they are it. When that node may be this process's
    /// previous run, whose session the server has not expired yet, use
    /// [`join_when_free`](Group::join_when_free), which takes the id over once it goes.
    /// [`Error::InvalidArgument`] for an id that is empty, contains `/` or a control
    /// character, or is `.` or `..`.
    pub async fn join(&self, id: &str, data: impl Into<Vec<u8>>) -> Result<Member> {
        let member = self.join_when_free(id, data).await?;
        if !member.is_present() {
            let path = member.node.path().to_owned();
            // Dropping the member stops it: the other node stays as it is.
            drop(member);
            return Err(Error::Conflict {
                path,
                why: "another session's node holds this member id; join_when_free waits for it \
                      to go"
                    .into(),
            });
        }
        Ok(member)
    }

    /// As [`join`](Group::join), except that an id held by another session's node is not an
    /// error: that node is left alone, and ours is created as soon as it is gone (a restarted
    /// process whose previous session the server has not expired yet).
    /// [`Member::is_present`] is false, and [`Member::present`] waits, until then.
    pub async fn join_when_free(&self, id: &str, data: impl Into<Vec<u8>>) -> Result<Member> {
        check_id(&self.path, id)?;
        let node_path = format!("{}/{id}", self.path);
        let node = PersistentNode::create(&self.session, &node_path, data.into(), true).await?;
        Ok(Member {
            id: id.to_owned(),
            group: Arc::clone(&self.path),
            node,
        })
    }

    /// The current members, id -> payload, read fresh from the server (empty if the group's
    /// node does not exist). A member that leaves while it is read is left out.
    /// [`Error::SessionLost`] while a lost session is being replaced (a read never waits for
    /// the next one).
    pub async fn members(&self) -> Result<BTreeMap<String, Vec<u8>>> {
        let generation = self.session.generation();
        let path = &*self.path;
        let ids = generation
            .retry(|client| async move {
                match client.list_children(path).await {
                    Ok(ids) => Ok(ids),
                    Err(lockkeeper_zk_client::Error::NoNode) => Ok(Vec::new()),
                    Err(err) => Err(err),
                }
            })
            .await?;
        let reads = ids.into_iter().map(|id| {
            let generation = &generation;
            async move {
                let node = format!("{path}/{id}");
                let found = crate::zk::node::look(generation, &node, false).await?;
                Ok::<_, Error>(found.map(|(data, _, _)| (id, data)))
            }
        });
        let mut members = BTreeMap::new();
        for read in futures_util::future::join_all(reads).await {
            if let Some((id, data)) = read? {
                members.insert(id, data);
            }
        }
        Ok(members)
    }
}

impl Group {
    /// A live view of the members, kept in memory by a tree cache of the group's path (so a
    /// ZooKeeper 3.6+ server or Keeper). Returns once the current members have been read;
    /// [`GroupView::next`] then reports each change from that moment on.
    pub async fn watch(&self) -> Result<GroupView> {
        let cache = self.session.tree_cache(&self.path).await?;
        let events = cache.events();
        Ok(GroupView {
            group: Arc::clone(&self.path),
            cache,
            events,
        })
    }
}

/// A change to a group, as [`GroupView::next`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// A member joined (or came back after its session was lost).
    Joined {
        /// The member's id.
        id: String,
        /// Its payload.
        data: Vec<u8>,
    },
    /// A member updated its payload.
    Updated {
        /// The member's id.
        id: String,
        /// The payload before.
        old: Vec<u8>,
        /// The payload now.
        data: Vec<u8>,
    },
    /// A member left: it said so, its session expired, or its node was deleted.
    Left {
        /// The member's id.
        id: String,
        /// Its last payload.
        data: Vec<u8>,
    },
}

/// The members of a [`Group`], kept in memory, and the stream of their changes: see
/// [`Group::watch`]. Dropping it stops the cache under it.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::MemberEvent;
///
/// let mut view = session.group("/services/orders")?.watch().await?;
/// println!("members now: {:?}", view.members().keys());
/// while let Some(event) = view.next().await {
///     match event {
///         MemberEvent::Joined { id, .. } => println!("{id} joined"),
///         MemberEvent::Updated { id, data, .. } => println!("{id} is now {data:?}"),
///         MemberEvent::Left { id, .. } => println!("{id} left"),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct GroupView {
    group: Arc<str>,
    cache: Cache,
    events: CacheEvents,
}

impl GroupView {
    /// The group's path.
    pub fn path(&self) -> &str {
        &self.group
    }

    /// The members, id -> payload, as the view holds them now (from memory).
    pub fn members(&self) -> BTreeMap<String, Vec<u8>> {
        self.cache
            .children(&self.group)
            .into_iter()
            .map(|(id, node)| (id, node.data))
            .collect()
    }

    /// The next change; `None` once the view's cache has stopped. Changes wait in memory until
    /// read.
    pub async fn next(&mut self) -> Option<MemberEvent> {
        loop {
            let event = self.events.next().await?;
            if let Some(event) = self.member_event(event) {
                return Some(event);
            }
        }
    }

    /// The next change if one comes within `timeout`; `Ok(None)` if none did.
    /// [`Error::InvalidArgument`] for a zero timeout.
    pub async fn next_timeout(&mut self, timeout: Duration) -> Result<Option<MemberEvent>> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "timeout for the next change of group {:?} must be greater than zero",
                self.group
            )));
        }
        Ok(tokio::time::timeout(timeout, self.next())
            .await
            .ok()
            .flatten())
    }

    /// A cache event about a direct child of the group, as a member event; anything else (the
    /// group's own node, the cache's bookkeeping) is not a membership change.
    fn member_event(&self, event: CacheEvent) -> Option<MemberEvent> {
        let id = |path: &str| {
            let id = path.strip_prefix(&*self.group)?.strip_prefix('/')?;
            (!id.is_empty() && !id.contains('/')).then(|| id.to_owned())
        };
        match event {
            CacheEvent::Created { path, node } => Some(MemberEvent::Joined {
                id: id(&path)?,
                data: node.data,
            }),
            CacheEvent::Changed { path, old, node } => Some(MemberEvent::Updated {
                id: id(&path)?,
                old: old.data,
                data: node.data,
            }),
            CacheEvent::Deleted { path, old } => Some(MemberEvent::Left {
                id: id(&path)?,
                data: old.data,
            }),
            CacheEvent::Initialized | CacheEvent::Rebuilt => None,
        }
    }
}

/// Ends when [`next`](GroupView::next) would answer `None`.
impl futures_util::Stream for GroupView {
    type Item = MemberEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<MemberEvent>> {
        use std::task::Poll;
        loop {
            let event = match std::pin::Pin::new(&mut self.events).poll_next(cx) {
                Poll::Ready(Some(event)) => event,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            if let Some(item) = self.member_event(event) {
                return Poll::Ready(Some(item));
            }
        }
    }
}

impl std::fmt::Debug for GroupView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupView")
            .field("path", &self.group)
            .finish()
    }
}

/// Membership in a [`Group`]: the member's node stays on the server until
/// [`leave`](Member::leave) or drop (which leaves in the background), re-created after a
/// session loss.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let member = session.group("/services/orders")?.join("worker-1", "starting").await?;
/// member.update("serving").await?;
/// member.leave().await?;
/// # Ok(()) }
/// ```
pub struct Member {
    id: String,
    group: Arc<str>,
    node: PersistentNode,
}

impl Member {
    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The group's path.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The member's node path, `{group}/{id}`.
    pub fn path(&self) -> &str {
        self.node.path()
    }

    /// The payload, as last set (the node holds it, or will when it is re-created).
    pub fn data(&self) -> Vec<u8> {
        self.node.data()
    }

    /// Whether the member's node is on the server, as far as this process knows: false while
    /// another session's node holds the id, and from a session loss until the node is created
    /// again in the new session.
    pub fn is_present(&self) -> bool {
        self.node.is_present()
    }

    /// Resolves once the member's node is on the server (at once if it is).
    pub async fn present(&self) {
        self.node.wait_present().await;
    }

    /// Sets the payload: written to the member's node now if it is there, and carried by
    /// every re-creation.
    pub async fn update(&self, data: impl Into<Vec<u8>>) -> Result<()> {
        self.node.set_data(data.into()).await
    }

    /// Leaves the group: the node is deleted and not re-created.
    pub async fn leave(self) -> Result<()> {
        self.node.delete().await
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("path", &self.path())
            .field("present", &self.is_present())
            .finish()
    }
}

/// A member id is one path segment of the group.
fn check_id(group: &str, id: &str) -> Result<()> {
    match node_name_problem(id) {
        Some(why) => Err(Error::InvalidArgument(format!(
            "member id {id:?} in group {group:?}: {why}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_id;
    use crate::Error;

    #[test]
    fn ids_are_one_path_segment() {
        for id in ["worker-1", "a.b", "10.0.0.7:8080", "ü"] {
            check_id("/g", id).unwrap();
        }
        for id in ["", "a/b", "/", ".", "..", "a\0b", "a\nb"] {
            match check_id("/g", id) {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains(&format!("{id:?}")), "{message}");
                    assert!(message.contains("\"/g\""), "{message}");
                }
                other => panic!("{id:?}: {other:?}"),
            }
        }
    }
}
