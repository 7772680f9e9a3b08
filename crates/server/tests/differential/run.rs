//! Runs operations against one server and turns its answers into comparable [`Step`]s.
//!
//! A [`Backend`] is one server seen through [`SLOTS`] sessions of the `zookeeper-client` crate
//! (plus an inspector session used only for tree dumps). It owns the per-run normalization
//! state of `compare.rs`: the zxid labels and the names of its own sessions.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use zookeeper_client::{
    Acls, AddWatchMode, Client, EventType, MultiReadResult, MultiWriteError, MultiWriteResult,
    PersistentWatcher, Stat, WatchedEvent,
};

use super::client::{
    OP_TIMEOUT, acl_list, bounded, close, connect, create_options, credential, show_acl, sorted,
    text,
};
use super::compare::{MultiItem, NStat, Outcome, ReadItem, Step, TreeEntry, ZxidLabels};
use super::ops::{Op, ReadOp, SLOTS, SubOp, WatchKind};

/// A dump refuses trees larger than this; the generator's universe stays far below it.
const DUMP_LIMIT: usize = 2000;

type EventFuture = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

/// A one-shot watch not yet fired.
struct Pending {
    /// Index of the operation that set it.
    origin: usize,
    kind: WatchKind,
    event: EventFuture,
}

/// A persistent watch and the operation that set it.
struct Persistent {
    origin: usize,
    recursive: bool,
    watcher: PersistentWatcher,
}

struct Slot {
    client: Client,
    /// Digest identities ([`USERS`] indexes) this slot authenticates as; a reopened session
    /// authenticates as the same users.
    users: Vec<usize>,
    generation: usize,
    watches: Vec<Pending>,
    persistent: Vec<Persistent>,
}

/// Names a watch event for the comparison.
fn show_event(s: usize, event: &WatchedEvent, watch: String) -> String {
    let what = if event.event_type == EventType::Session {
        format!("Session {:?}", event.session_state)
    } else {
        format!("{:?} {}", event.event_type, event.path)
    };
    format!("s{s}: {what} ({watch})")
}

/// How a backend's sessions are set up, and which known differences both sides normalize away
/// (always symmetrically, so that the zxid labels stay aligned).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    /// Slot 0 authenticates as alice, slot 1 as bob, the inspector as both; when false no
    /// session authenticates at all.
    pub authenticate: bool,
    /// When false, a create inside a multi is compared by its path alone: Apache ZooKeeper 3.8
    /// answers a create2 inside a multi without a stat (ZOOKEEPER-4026, fixed in 3.9), and a
    /// server that does send one is then not held against it.
    pub multi_create_stats: bool,
    /// When false, an `ephemeralOwner` that is not one of our sessions but carries a container
    /// (`0x80…`) or TTL (`0xff…`) marker in its top byte reads as 0, which is what ZooKeeper
    /// shows clients for such nodes.
    pub owner_markers: bool,
}

/// Turns raw stats into [`NStat`]s for one run.
struct Normalizer {
    zxids: ZxidLabels,
    /// Our own session ids and their names in the run.
    owners: HashMap<i64, String>,
    owner_markers: bool,
}

impl Normalizer {
    fn stat(&mut self, stat: &Stat) -> NStat {
        let marker = |id: i64| matches!((id as u64) >> 56, 0x80 | 0xff);
        let owner = match stat.ephemeral_owner {
            0 => "-".to_string(),
            id => match self.owners.get(&id) {
                Some(name) => name.clone(),
                None if !self.owner_markers && marker(id) => "-".to_string(),
                None => format!("{id:#x}"),
            },
        };
        NStat {
            czxid: self.zxids.label(stat.czxid),
            mzxid: self.zxids.label(stat.mzxid),
            pzxid: self.zxids.label(stat.pzxid),
            version: stat.version,
            cversion: stat.cversion,
            aversion: stat.aversion,
            owner,
            data_length: stat.data_length,
            num_children: stat.num_children,
        }
    }
}

/// One server, driven through [`SLOTS`] sessions.
pub(crate) struct Backend {
    pub name: String,
    connect_string: String,
    /// True when the sessions see the real root (no chroot): dumps then skip `/zookeeper`,
    /// whose contents are server configuration rather than data.
    top_level: bool,
    slots: Vec<Slot>,
    /// A session with every identity, used only to dump the tree.
    inspector: Client,
    norm: Normalizer,
    options: Options,
}

impl Backend {
    /// Opens the sessions (see [`Options`]).
    pub(crate) async fn open(
        name: &str,
        connect_string: String,
        top_level: bool,
        options: Options,
    ) -> Result<Backend, String> {
        let authenticate = options.authenticate;
        let mut norm = Normalizer {
            zxids: ZxidLabels::default(),
            owners: HashMap::new(),
            owner_markers: options.owner_markers,
        };
        let mut slots = Vec::with_capacity(SLOTS);
        for s in 0..SLOTS {
            let users = match s {
                0 if authenticate => vec![0],
                1 if authenticate => vec![1],
                _ => Vec::new(),
            };
            let client = connect(&connect_string, &users).await?;
            norm.owners.insert(client.session_id().0, format!("s{s}.0"));
            slots.push(Slot {
                client,
                users,
                generation: 0,
                watches: Vec::new(),
                persistent: Vec::new(),
            });
        }
        let everyone: &[usize] = if authenticate { &[0, 1] } else { &[] };
        let inspector = connect(&connect_string, everyone).await?;
        norm.owners
            .insert(inspector.session_id().0, "inspector".to_string());
        Ok(Backend {
            name: name.to_string(),
            connect_string,
            top_level,
            slots,
            inspector,
            norm,
            options,
        })
    }

    /// Closes every session of this backend.
    pub(crate) async fn close(self) {
        for slot in self.slots {
            let _ = close(slot.client).await;
        }
        let _ = close(self.inspector).await;
    }

    /// Runs operation number `index` and collects what it caused.
    pub(crate) async fn step(&mut self, index: usize, op: &Op) -> Step {
        let outcome = self.exec(index, op).await;
        let events = self.collect_events().await;
        let zxid_ranks = self.norm.zxids.take_fresh();
        Step {
            outcome,
            events,
            zxid_ranks,
        }
    }

    /// Hands over the watch events every session has received so far.
    ///
    /// Each session with pending watches first does a read of its own: ZooKeeper sends a
    /// session the events a change fired before it answers any later request of that session,
    /// and the client hands an event to its watcher before it resolves the reply that follows
    /// it. So once that read has returned, every event this step caused is ready to be polled.
    async fn collect_events(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        let mut cx = Context::from_waker(Waker::noop());
        for (s, slot) in self.slots.iter_mut().enumerate() {
            if slot.watches.is_empty() && slot.persistent.is_empty() {
                continue;
            }
            if let Err(e) = bounded(slot.client.check_stat("/")).await {
                events.push(format!("s{s}: the read after the step failed: {e}"));
            }
            slot.watches
                .retain_mut(|pending| match pending.event.as_mut().poll(&mut cx) {
                    Poll::Ready(event) => {
                        let watch = format!("watch #{} {:?}", pending.origin, pending.kind);
                        events.push(show_event(s, &event, watch));
                        false
                    }
                    Poll::Pending => true,
                });
            for persistent in &mut slot.persistent {
                // A persistent watcher's events queue up in a channel; a `changed()` future
                // that is still pending can be dropped without losing one.
                loop {
                    let mut next = std::pin::pin!(persistent.watcher.changed());
                    let Poll::Ready(event) = next.as_mut().poll(&mut cx) else {
                        break;
                    };
                    let mode = if persistent.recursive {
                        "recursive"
                    } else {
                        "persistent"
                    };
                    let watch = format!("addWatch #{} {mode}", persistent.origin);
                    events.push(show_event(s, &event, watch));
                }
            }
        }
        events.sort();
        events
    }

    async fn exec(&mut self, index: usize, op: &Op) -> Outcome {
        let norm = &mut self.norm;
        match op {
            Op::Create {
                s,
                path,
                data,
                kind,
                acl,
            } => {
                let acl = acl_list(*acl);
                let options = create_options(*kind, Acls::new(&acl));
                match bounded(self.slots[*s].client.create(path, data, &options)).await {
                    Ok((stat, sequence)) => {
                        // The client checks that the server's path is our path plus a number
                        // and returns the number; the exact digits are compared through the
                        // children lists and the paths multi returns.
                        let path = if kind.is_sequential() {
                            format!("{path}{sequence}")
                        } else {
                            path.clone()
                        };
                        Outcome::Created {
                            path,
                            stat: norm.stat(&stat),
                        }
                    }
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::Delete { s, path, version } => {
                match bounded(self.slots[*s].client.delete(path, *version)).await {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::SetData {
                s,
                path,
                data,
                version,
            } => match bounded(self.slots[*s].client.set_data(path, data, *version)).await {
                Ok(stat) => Outcome::Stat(norm.stat(&stat)),
                Err(e) => Outcome::Error(e),
            },
            Op::GetData { s, path } => match bounded(self.slots[*s].client.get_data(path)).await {
                Ok((data, stat)) => Outcome::Data {
                    data: text(&data),
                    stat: norm.stat(&stat),
                },
                Err(e) => Outcome::Error(e),
            },
            Op::Exists { s, path } => match bounded(self.slots[*s].client.check_stat(path)).await {
                Ok(stat) => Outcome::Exists(stat.map(|stat| norm.stat(&stat))),
                Err(e) => Outcome::Error(e),
            },
            Op::ListChildren { s, path } => {
                match bounded(self.slots[*s].client.list_children(path)).await {
                    Ok(names) => Outcome::Children {
                        names: sorted(names),
                        stat: None,
                    },
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::GetChildren { s, path } => {
                match bounded(self.slots[*s].client.get_children(path)).await {
                    Ok((names, stat)) => Outcome::Children {
                        names: sorted(names),
                        stat: Some(norm.stat(&stat)),
                    },
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::GetAcl { s, path } => match bounded(self.slots[*s].client.get_acl(path)).await {
                Ok((acl, stat)) => Outcome::Acl {
                    acl: show_acl(&acl),
                    stat: norm.stat(&stat),
                },
                Err(e) => Outcome::Error(e),
            },
            Op::SetAcl {
                s,
                path,
                acl,
                version,
            } => {
                let acl = acl_list(*acl);
                match bounded(self.slots[*s].client.set_acl(path, &acl, *version)).await {
                    Ok(stat) => Outcome::Stat(norm.stat(&stat)),
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::Multi { s, ops } => {
                let keep_stats = self.options.multi_create_stats;
                multi(&self.slots[*s].client, norm, ops, keep_stats).await
            }
            Op::MultiRead { s, ops } => multi_read(&self.slots[*s].client, norm, ops).await,
            Op::GetEphemerals { s, prefix } => {
                match bounded(self.slots[*s].client.list_ephemerals(prefix)).await {
                    Ok(paths) => Outcome::Names(sorted(paths)),
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::AllChildrenNumber { s, path } => {
                match bounded(self.slots[*s].client.count_descendants_number(path)).await {
                    Ok(n) => Outcome::Count(n),
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::Sync { s, path } => match bounded(self.slots[*s].client.sync(path)).await {
                Ok(()) => Outcome::Done,
                Err(e) => Outcome::Error(e),
            },
            Op::AddAuth { s, user } => {
                let slot = &mut self.slots[*s];
                match bounded(slot.client.auth("digest", credential(*user).as_bytes())).await {
                    Ok(()) => {
                        if !slot.users.contains(user) {
                            slot.users.push(*user);
                        }
                        Outcome::Done
                    }
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::WhoAmI { s } => match bounded(self.slots[*s].client.list_auth_users()).await {
                Ok(users) => Outcome::Names(sorted(
                    users
                        .iter()
                        .map(|u| format!("{}:{}", u.scheme(), u.user()))
                        .collect(),
                )),
                Err(e) => Outcome::Error(e),
            },
            Op::Watch { s, path, kind } => {
                let slot = &mut self.slots[*s];
                let client = &slot.client;
                let (outcome, watcher) = match kind {
                    WatchKind::Exists => match bounded(client.check_and_watch_stat(path)).await {
                        Ok((stat, w)) => {
                            (Outcome::Exists(stat.map(|stat| norm.stat(&stat))), Some(w))
                        }
                        Err(e) => (Outcome::Error(e), None),
                    },
                    WatchKind::Data => match bounded(client.get_and_watch_data(path)).await {
                        Ok((data, stat, w)) => (
                            Outcome::Data {
                                data: text(&data),
                                stat: norm.stat(&stat),
                            },
                            Some(w),
                        ),
                        Err(e) => (Outcome::Error(e), None),
                    },
                    WatchKind::Children => {
                        match bounded(client.get_and_watch_children(path)).await {
                            Ok((names, stat, w)) => (
                                Outcome::Children {
                                    names: sorted(names),
                                    stat: Some(norm.stat(&stat)),
                                },
                                Some(w),
                            ),
                            Err(e) => (Outcome::Error(e), None),
                        }
                    }
                };
                if let Some(watcher) = watcher {
                    slot.watches.push(Pending {
                        origin: index,
                        kind: *kind,
                        event: Box::pin(watcher.changed()),
                    });
                }
                outcome
            }
            Op::AddWatch { s, path, recursive } => {
                let slot = &mut self.slots[*s];
                let mode = if *recursive {
                    AddWatchMode::PersistentRecursive
                } else {
                    AddWatchMode::Persistent
                };
                match bounded(slot.client.watch(path, mode)).await {
                    Ok(watcher) => {
                        slot.persistent.push(Persistent {
                            origin: index,
                            recursive: *recursive,
                            watcher,
                        });
                        Outcome::Done
                    }
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::CloseSession { s } => {
                let slot = &mut self.slots[*s];
                let fresh = match connect(&self.connect_string, &slot.users).await {
                    Ok(client) => client,
                    Err(e) => return Outcome::Error(format!("reopen: {e}")),
                };
                let old = std::mem::replace(&mut slot.client, fresh);
                slot.generation += 1;
                norm.owners.insert(
                    slot.client.session_id().0,
                    format!("s{s}.{}", slot.generation),
                );
                let result = close(old).await;
                // The old session's watches died with it; dropping them now (after the client
                // is gone) sends nothing to the server.
                slot.watches.clear();
                slot.persistent.clear();
                match result {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Error(e),
                }
            }
            Op::Dump => self.dump().await,
        }
    }

    /// Reads every node (data, stat, ACL), depth first in name order.
    async fn dump(&mut self) -> Outcome {
        let mut entries = Vec::new();
        let mut stack = vec!["/".to_string()];
        while let Some(path) = stack.pop() {
            if entries.len() >= DUMP_LIMIT {
                return Outcome::Error(format!("dump: more than {DUMP_LIMIT} nodes"));
            }
            let client = &self.inspector;
            let node = bounded(client.get_data(&path)).await;
            let acl = bounded(client.get_acl(&path)).await;
            // Children are listed even when the data is hidden: READ guards both, but a
            // difference in one should not hide the rest of the tree.
            match bounded(client.list_children(&path)).await {
                Ok(names) => {
                    for name in sorted(names).iter().rev() {
                        let child = if path == "/" {
                            format!("/{name}")
                        } else {
                            format!("{path}/{name}")
                        };
                        if !(self.top_level && child == "/zookeeper") {
                            stack.push(child);
                        }
                    }
                }
                Err(e) if e == "NoAuth" => {
                    // Unlistable: its children stay out of the dump on both sides alike.
                }
                Err(e) => return Outcome::Error(format!("dump: getChildren {path}: {e}")),
            }
            entries.push(TreeEntry {
                node: node.map(|(data, stat)| (text(&data), self.norm.stat(&stat))),
                acl: acl.map(|(acl, _)| show_acl(&acl)),
                path,
            });
        }
        Outcome::Tree(entries)
    }
}

async fn multi(
    client: &Client,
    norm: &mut Normalizer,
    ops: &[SubOp],
    create_stats: bool,
) -> Outcome {
    let mut writer = client.new_multi_writer();
    for op in ops {
        let added = match op {
            SubOp::Create { path, data, kind } => {
                writer.add_create(path, data, &create_options(*kind, Acls::anyone_all()))
            }
            SubOp::Delete { path, version } => writer.add_delete(path, *version),
            SubOp::SetData {
                path,
                data,
                version,
            } => writer.add_set_data(path, data, *version),
            SubOp::Check { path, version } => writer.add_check_version(path, *version),
        };
        if let Err(e) = added {
            return Outcome::Error(format!("client refused: {e:?}"));
        }
    }
    let results = match tokio::time::timeout(OP_TIMEOUT, writer.commit()).await {
        Err(_) => return Outcome::Error(format!("no answer within {OP_TIMEOUT:?}")),
        Ok(Err(MultiWriteError::OperationFailed { index, source })) => {
            return Outcome::MultiFailed {
                index,
                error: format!("{source:?}"),
            };
        }
        Ok(Err(MultiWriteError::RequestFailed { source })) => {
            return Outcome::Error(format!("{source:?}"));
        }
        Ok(Ok(results)) => results,
    };
    let items = results
        .into_iter()
        .map(|result| match result {
            MultiWriteResult::Check => MultiItem::Check,
            MultiWriteResult::Delete => MultiItem::Delete,
            MultiWriteResult::Create { path, stat } => MultiItem::Create {
                path,
                stat: (create_stats && !stat.is_invalid()).then(|| norm.stat(&stat)),
            },
            MultiWriteResult::SetData { stat } => MultiItem::SetData(norm.stat(&stat)),
            other => panic!("a multi result this test does not know: {other:?}"),
        })
        .collect();
    Outcome::Multi(items)
}

async fn multi_read(client: &Client, norm: &mut Normalizer, ops: &[ReadOp]) -> Outcome {
    let mut reader = client.new_multi_reader();
    for op in ops {
        let added = match op {
            ReadOp::GetData(path) => reader.add_get_data(path),
            ReadOp::GetChildren(path) => reader.add_get_children(path),
        };
        if let Err(e) = added {
            return Outcome::Error(format!("client refused: {e:?}"));
        }
    }
    match bounded(reader.commit()).await {
        Ok(results) => Outcome::MultiRead(
            results
                .into_iter()
                .map(|result| match result {
                    MultiReadResult::Data { data, stat } => ReadItem::Data {
                        data: text(&data),
                        stat: norm.stat(&stat),
                    },
                    MultiReadResult::Children { children } => ReadItem::Children(sorted(children)),
                    MultiReadResult::Error { err } => ReadItem::Error(format!("{err:?}")),
                    other => panic!("a multiRead result this test does not know: {other:?}"),
                })
                .collect(),
        ),
        Err(e) => Outcome::Error(e),
    }
}
