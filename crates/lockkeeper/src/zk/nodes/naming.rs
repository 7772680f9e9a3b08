//! Naming: a name is a node whose data is an address (`host:port`, a URL: any non-empty
//! UTF-8 text). Register it, resolve it, watch it.
//!
//! An ephemeral registration is the shared persistent node (`zk/nodes/persistent.rs`): it lives as
//! long as the [`Registered`] handle, comes back in the next session after a session loss and
//! after a deletion behind its back, and never takes over another live session's ephemeral
//! name (it waits for that one to go). A persistent registration is written once and outlives
//! the handle and the process, until [`Registered::unregister`]. Watching a name is a node
//! cache ([`Session::node_cache`]) reduced to the address.
//!
//! Invariants: a name is an absolute node path other than the root and an address is not
//! empty, both checked before anything is sent; a node that holds no data or data that is not
//! UTF-8 resolves to no address (reading it with [`Session::resolve`] says which).

use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions};

use crate::error::{Error, Result};
use crate::sync::lock;
use crate::zk::cache::{Cache, CacheEvent, CacheEvents};
use crate::zk::node::create_parents;
use crate::zk::nodes::persistent::PersistentNode;
use crate::zk::path::validate_node_path;
use crate::zk::session::Session;

/// How a name is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Kept while the [`Registered`] handle lives (and re-registered after a session loss);
    /// gone when the handle is dropped or the process dies (within the session timeout).
    Ephemeral,
    /// Written once; stays until [`Registered::unregister`], whatever happens to the process.
    Persistent,
}

impl Session {
    /// Registers the name `path` with `address`. An existing persistent node at `path` is
    /// overwritten; for [`Registration::Ephemeral`], another live session's ephemeral name is
    /// left alone and ours is written once it goes ([`Registered::is_present`] says false
    /// meanwhile). [`Error::InvalidArgument`] for a bad name or an empty address.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use lockkeeper::zk::Registration;
    ///
    /// let me = session.register("/services/orders/primary", "10.0.0.7:8080", Registration::Ephemeral).await?;
    /// assert_eq!(session.resolve("/services/orders/primary").await?.as_deref(), Some("10.0.0.7:8080"));
    /// me.unregister().await?;
    /// # Ok(()) }
    /// ```
    pub async fn register(
        &self,
        path: &str,
        address: &str,
        registration: Registration,
    ) -> Result<Registered> {
        validate_name(path)?;
        validate_address(path, address)?;
        let kind = match registration {
            Registration::Ephemeral => Kind::Ephemeral(
                PersistentNode::create(self, path, address.as_bytes().to_vec(), true).await?,
            ),
            Registration::Persistent => {
                write_persistent(self, path, address).await?;
                Kind::Persistent {
                    session: self.clone(),
                    address: std::sync::Mutex::new(address.to_owned()),
                }
            }
        };
        Ok(Registered {
            path: path.to_owned(),
            kind,
        })
    }

    /// The address registered under `path`, read from the server now; `None` if there is no
    /// such node or it holds no data. A node whose data is not UTF-8 is an
    /// [`Error::InvalidArgument`] naming the path.
    pub async fn resolve(&self, path: &str) -> Result<Option<String>> {
        validate_name(path)?;
        let generation = self.connected_generation().await?;
        let data = generation
            .retry(|client| async move {
                match client.get_data(path).await {
                    Ok((data, _)) => Ok(Some(data)),
                    Err(lockkeeper_zk_client::Error::NoNode) => Ok(None),
                    Err(err) => Err(err),
                }
            })
            .await?;
        match data {
            None => Ok(None),
            Some(data) => decode(&data).map_err(|len| {
                Error::InvalidArgument(format!(
                    "name {path:?} holds {len} bytes that are not a UTF-8 address"
                ))
            }),
        }
    }

    /// Watches the name `path` (which need not exist yet): its address from memory and a
    /// stream of its changes. One persistent watch (ZooKeeper 3.6+ or Keeper).
    pub async fn watch_name(&self, path: &str) -> Result<NameWatch> {
        validate_name(path)?;
        let cache = self.node_cache(path).await?;
        // Subscribing before reading the address: a change in between is in the stream.
        let events = cache.events();
        let current = address_of(&cache, path);
        Ok(NameWatch {
            cache,
            events,
            current,
        })
    }
}

/// A registered name: see [`Session::register`].
pub struct Registered {
    path: String,
    kind: Kind,
}

enum Kind {
    Ephemeral(PersistentNode),
    Persistent {
        session: Session,
        address: std::sync::Mutex<String>,
    },
}

impl Registered {
    /// The name.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The address this handle registers.
    pub fn address(&self) -> String {
        match &self.kind {
            Kind::Ephemeral(node) => String::from_utf8_lossy(&node.data()).into_owned(),
            Kind::Persistent { address, .. } => lock(address).clone(),
        }
    }

    /// Whether the name is on the server with our address, as far as this handle knows. An
    /// ephemeral name is not while another session's ephemeral name sits on the path, nor
    /// between a session loss and its re-registration; a persistent one always is.
    pub fn is_present(&self) -> bool {
        match &self.kind {
            Kind::Ephemeral(node) => node.is_present(),
            Kind::Persistent { .. } => true,
        }
    }

    /// Changes the registered address. [`Error::InvalidArgument`] for an empty address.
    pub async fn set_address(&self, address: &str) -> Result<()> {
        validate_address(&self.path, address)?;
        match &self.kind {
            Kind::Ephemeral(node) => node.set_data(address.as_bytes().to_vec()).await,
            Kind::Persistent {
                session,
                address: held,
            } => {
                write_persistent(session, &self.path, address).await?;
                *lock(held) = address.to_owned();
                Ok(())
            }
        }
    }

    /// Removes the name from the server. `Ok` if it is gone (or was already).
    pub async fn unregister(self) -> Result<()> {
        match self.kind {
            Kind::Ephemeral(node) => match node.delete().await {
                Ok(()) | Err(Error::NotHeld) => Ok(()),
                Err(err) => Err(err),
            },
            Kind::Persistent { session, .. } => {
                let generation = session.connected_generation().await?;
                let path = self.path.as_str();
                generation
                    .retry(|client| async move {
                        match client.delete(path, None).await {
                            Ok(()) | Err(lockkeeper_zk_client::Error::NoNode) => Ok(()),
                            Err(err) => Err(err),
                        }
                    })
                    .await
            }
        }
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("path", &self.path)
            .field("address", &self.address())
            .field("present", &self.is_present())
            .finish()
    }
}

/// A watched name: see [`Session::watch_name`]. Dropping it removes the watch.
pub struct NameWatch {
    cache: Cache,
    events: CacheEvents,
    /// The address last returned (or read when the watch started).
    current: Option<String>,
}

impl NameWatch {
    /// The name.
    pub fn path(&self) -> &str {
        self.cache.path()
    }

    /// The address now, from memory; `None` if the name is not registered.
    pub fn address(&self) -> Option<String> {
        address_of(&self.cache, self.cache.path())
    }

    /// Waits for the address to change and returns the new one (`Some(None)`: the name was
    /// removed). `None` once the watch has stopped (its session was closed).
    pub async fn next(&mut self) -> Option<Option<String>> {
        loop {
            let event = self.events.next().await?;
            if let Some(changed) = self.change(event) {
                return Some(changed);
            }
        }
    }

    /// As [`next`](NameWatch::next), waiting at most `timeout`: `Ok(None)` if the address did
    /// not change in time. [`Error::InvalidArgument`] for a zero timeout.
    pub async fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Option<String>>> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "timeout for watching the name {:?} must be greater than zero",
                self.cache.path()
            )));
        }
        Ok(tokio::time::timeout(timeout, self.next())
            .await
            .ok()
            .flatten())
    }

    /// The new address if `event` changes it.
    fn change(&mut self, event: CacheEvent) -> Option<Option<String>> {
        let address = match event {
            CacheEvent::Created { node, .. } | CacheEvent::Changed { node, .. } => {
                decode(&node.data).unwrap_or_else(|len| {
                    tracing::warn!(
                        name = self.cache.path(),
                        len,
                        "a watched name holds data that is not UTF-8"
                    );
                    None
                })
            }
            CacheEvent::Deleted { .. } => None,
            CacheEvent::Initialized | CacheEvent::Rebuilt => return None,
        };
        if address == self.current {
            return None;
        }
        self.current = address.clone();
        Some(address)
    }
}

/// Ends when [`next`](NameWatch::next) would answer `None`.
impl futures_util::Stream for NameWatch {
    type Item = Option<String>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Option<String>>> {
        use std::task::Poll;
        loop {
            let event = match std::pin::Pin::new(&mut self.events).poll_next(cx) {
                Poll::Ready(Some(event)) => event,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            if let Some(item) = self.change(event) {
                return Poll::Ready(Some(item));
            }
        }
    }
}

impl std::fmt::Debug for NameWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameWatch")
            .field("path", &self.cache.path())
            .field("address", &self.address())
            .finish()
    }
}

/// Creates the persistent name (parents as containers) or overwrites what is there.
async fn write_persistent(session: &Session, path: &str, address: &str) -> Result<()> {
    let generation = session.connected_generation().await?;
    let data = address.as_bytes();
    let parent = &path[..path.rfind('/').unwrap_or(0)];
    generation
        .retry(|client| async move {
            let options = CreateOptions::new(CreateMode::Persistent);
            if !parent.is_empty() {
                match create_parents(&client, parent).await {
                    Ok(()) => {}
                    Err(Error::Zk(err)) => return Err(err),
                    // The session ended: a terminal error ends the retries as SessionLost.
                    Err(_) => return Err(lockkeeper_zk_client::Error::SessionExpired),
                }
            }
            match client.create(path, data, &options).await {
                Ok(_) => Ok(()),
                Err(lockkeeper_zk_client::Error::NodeExists) => {
                    client.set_data(path, data, None).await.map(|_| ())
                }
                Err(err) => Err(err),
            }
        })
        .await
}

/// The address a node's data holds: `Ok(None)` for no data, `Err(len)` if it is not UTF-8.
fn decode(data: &[u8]) -> std::result::Result<Option<String>, usize> {
    if data.is_empty() {
        return Ok(None);
    }
    match std::str::from_utf8(data) {
        Ok(text) => Ok(Some(text.to_owned())),
        Err(_) => Err(data.len()),
    }
}

fn address_of(cache: &Cache, path: &str) -> Option<String> {
    cache
        .get(path)
        .and_then(|node| decode(&node.data).ok().flatten())
}

fn validate_name(path: &str) -> Result<()> {
    validate_node_path("name", path)
}

fn validate_address(path: &str, address: &str) -> Result<()> {
    if address.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "address for the name {path:?} must not be empty"
        )));
    }
    Ok(())
}
