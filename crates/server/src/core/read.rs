//! Reads: every request that does not change the tree (reads, watch registration, auth,
//! pings). Reads see all writes before them (they run in the same task) and their replies wait
//! for durability like any other. getChildren, getData and exists of a node that exists are
//! answered at the earliest point that shows what they read (see `point`), every other read at
//! the last zxid.

use bytes::Bytes;
use lockkeeper_proto::*;

use super::Core;
use crate::core::reply::{Body, ReadResult};
use crate::state::tree::{DataTree, Node};
use crate::state::watch::ConnId;

impl Core {
    /// Answers a request that changes nothing, at the last zxid.
    pub(super) fn read_request(&mut self, conn: ConnId, xid: i32, request: Request) {
        let zxid = self.state.last_zxid;
        match request {
            Request::Ping => self.reply(conn, XID_PING, zxid, ErrorCode::Ok, Body::Empty),
            Request::Auth(auth) => self.auth(conn, xid, auth),
            Request::Sasl(token) => self.sasl(conn, xid, token),
            Request::SetWatches(set) => {
                self.set_watches(conn, set);
                self.reply(conn, xid, zxid, ErrorCode::Ok, Body::Empty);
            }
            Request::GetChildren(req) => self.list_children(conn, xid, req),
            Request::GetData(req) => self.get_data(conn, xid, req),
            Request::Exists(req) => self.exists(conn, xid, req),
            other => {
                let (err, body) = match self.read(conn, other) {
                    Ok(body) => (ErrorCode::Ok, body),
                    Err(err) => (err, Body::Empty),
                };
                self.reply(conn, xid, zxid, err, body);
            }
        }
    }

    /// getData: a node that is there and readable is shown at its point (see `point`).
    fn get_data(&mut self, conn: ConnId, xid: i32, req: PathWatchRequest) {
        let (point, body) = match self.readable(conn, &req.path, perms::READ) {
            Ok(node) => {
                let data = node.data.as_deref().map(Bytes::copy_from_slice);
                let stat = node.stat();
                (
                    self.node_point(conn, &req.path, node),
                    Body::Data { data, stat },
                )
            }
            Err(err) => {
                let zxid = self.state.last_zxid;
                return self.reply(conn, xid, zxid, err, Body::Empty);
            }
        };
        if req.watch {
            self.watches.add_data(&req.path, conn);
        }
        self.reply_at(conn, xid, point, ErrorCode::Ok, body);
    }

    /// exists: a node that is there is shown at its point (see `point`); a missing one at the
    /// last zxid, as its absence may be a deletion not yet durable. The watch is set either way.
    fn exists(&mut self, conn: ConnId, xid: i32, req: PathWatchRequest) {
        let zxid = self.state.last_zxid;
        if req.path.contains('\0') {
            return self.reply(conn, xid, zxid, ErrorCode::BadArguments, Body::Empty);
        }
        if req.watch {
            self.watches.add_data(&req.path, conn);
        }
        match self.state.tree.get(&req.path) {
            Some(node) => {
                let stat = node.stat();
                let point = self.node_point(conn, &req.path, node);
                self.reply_at(conn, xid, point, ErrorCode::Ok, Body::Stat(stat));
            }
            None => self.reply(conn, xid, zxid, ErrorCode::NoNode, Body::Empty),
        }
    }

    fn read(&mut self, conn: ConnId, request: Request) -> Result<Body, ErrorCode> {
        match request {
            Request::GetChildren2(req) => {
                let node = self.readable(conn, &req.path, perms::READ)?;
                let body = Body::ChildrenStat {
                    children: children(&self.state.tree, &req.path),
                    stat: node.stat(),
                };
                if req.watch {
                    self.watches.add_child(&req.path, conn);
                }
                Ok(body)
            }
            Request::GetAcl(req) => self.get_acl(conn, &req.path),
            Request::GetAllChildrenNumber(req) => {
                self.readable(conn, &req.path, perms::READ)?;
                Ok(Body::Count(
                    self.state.tree.descendant_count(&req.path) as i32
                ))
            }
            Request::GetEphemerals(req) => {
                let session = self
                    .conns
                    .get(&conn)
                    .and_then(|c| c.session)
                    .unwrap_or_default();
                let prefix = req.path;
                let paths = self
                    .state
                    .tree
                    .ephemerals_of(session)
                    .filter(|p| prefix == "/" || p.starts_with(&prefix))
                    .cloned()
                    .collect();
                Ok(Body::Children(paths))
            }
            Request::Sync(req) => Ok(Body::Path(req.path)),
            Request::Check(_) => Err(ErrorCode::Unimplemented),
            Request::MultiRead(ops) => Ok(Body::MultiRead(
                ops.into_iter().map(|op| self.read_op(conn, op)).collect(),
            )),
            Request::AddWatch(req) => {
                let recursive = match AddWatchMode::try_from(req.mode) {
                    Ok(AddWatchMode::Persistent) => false,
                    Ok(AddWatchMode::PersistentRecursive) => true,
                    Err(_) => return Err(ErrorCode::BadArguments),
                };
                self.watches.add_persistent(&req.path, conn, recursive);
                Ok(Body::Code(0))
            }
            Request::RemoveWatches(req) => {
                let kind = addressed_watches(req.watcher_type)?;
                if self.watches.remove(&req.path, conn, kind) {
                    Ok(Body::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::CheckWatches(req) => {
                let kind = addressed_watches(req.watcher_type)?;
                if self.watches.has(&req.path, conn, kind) {
                    Ok(Body::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::WhoAmI => {
                let ids = self
                    .conns
                    .get(&conn)
                    .map(|c| c.auth.ids().to_vec())
                    .unwrap_or_default();
                Ok(Body::WhoAmI(
                    ids.into_iter()
                        .map(|id| {
                            let user = if id.scheme == "digest" {
                                id.id.split(':').next().unwrap_or_default().to_string()
                            } else {
                                id.id
                            };
                            ClientInfo {
                                auth_scheme: id.scheme,
                                user,
                            }
                        })
                        .collect(),
                ))
            }
            Request::Unsupported(_) => Err(ErrorCode::Unimplemented),
            // Writes, pings, auth, setWatches, getChildren, getData and exists are dispatched before
            // reaching here.
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    /// The node at `path` if it exists and this connection may `perm` it.
    pub(super) fn readable(&self, conn: ConnId, path: &str, perm: i32) -> Result<&Node, ErrorCode> {
        let node = self.state.tree.get(path).ok_or(ErrorCode::NoNode)?;
        if let Some(c) = self.conns.get(&conn) {
            c.auth.check(&node.acl, perm)?;
        }
        Ok(node)
    }

    /// getACL needs READ or ADMIN; without ADMIN, digest hashes are masked as ZooKeeper does.
    fn get_acl(&self, conn: ConnId, path: &str) -> Result<Body, ErrorCode> {
        let node = self.readable(conn, path, perms::READ | perms::ADMIN)?;
        let admin = self
            .conns
            .get(&conn)
            .is_some_and(|c| c.auth.check(&node.acl, perms::ADMIN).is_ok());
        let acl = node
            .acl
            .iter()
            .map(|a| {
                if admin || a.id.scheme != "digest" {
                    return a.clone();
                }
                let user = a.id.id.split(':').next().unwrap_or_default();
                Acl {
                    perms: a.perms,
                    id: Id {
                        scheme: a.id.scheme.clone(),
                        id: format!("{user}:x"),
                    },
                }
            })
            .collect();
        Ok(Body::Acl {
            acl,
            stat: node.stat(),
        })
    }

    fn read_op(&mut self, conn: ConnId, op: ReadOp) -> ReadResult {
        let result = match op {
            ReadOp::GetChildren(req) => self
                .readable(conn, &req.path, perms::READ)
                .map(|_| ReadResult::Children(children(&self.state.tree, &req.path))),
            ReadOp::GetData(req) => {
                self.readable(conn, &req.path, perms::READ)
                    .map(|n| ReadResult::Data {
                        data: n.data.as_deref().map(Bytes::copy_from_slice),
                        stat: n.stat(),
                    })
            }
        };
        result.unwrap_or_else(ReadResult::Error)
    }

    /// Handles an `auth` packet. Like ZooKeeper, the reply echoes the request's xid (clients
    /// other than the Java one do not use -4) and carries zxid 0.
    fn auth(&mut self, conn: ConnId, xid: i32, auth: AuthPacket) {
        let super_digest = self.config.super_digest.clone();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let result = c
            .auth
            .add(&auth.scheme, &auth.auth, super_digest.as_deref());
        match result {
            Ok(()) => self.reply(conn, xid, 0, ErrorCode::Ok, Body::Empty),
            Err(err) => {
                tracing::info!(scheme = %auth.scheme, "authentication failed; closing connection");
                self.reply(conn, xid, 0, err, Body::Empty);
                self.close(conn);
            }
        }
    }

    /// One step of the connection's SASL exchange (see `sasl`), answered at zxid 0 as
    /// ZooKeeper answers it. A failed step is `AuthFailed` with a null token, and the end of the
    /// connection (not of the session): ZooKeeper's Java client reads that token to report
    /// the failure.
    fn sasl(&mut self, conn: ConnId, xid: i32, token: SaslToken) {
        let users = self.config.sasl_users.as_ref();
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let step = c
            .sasl
            .step(token.token.as_deref().unwrap_or_default(), users);
        match step {
            Ok((answer, user)) => {
                if let Some(user) = user {
                    tracing::debug!(peer = %c.peer, user, "SASL authenticated");
                    c.auth.add_sasl(user);
                }
                self.reply(conn, xid, 0, ErrorCode::Ok, Body::Sasl(Some(answer)));
            }
            Err(why) => {
                tracing::info!(peer = %c.peer, why, "SASL authentication failed; closing connection");
                self.reply(conn, xid, 0, ErrorCode::AuthFailed, Body::Sasl(None));
                self.close(conn);
            }
        }
    }

    /// Re-registers a reconnecting client's watches, first firing those whose change it missed
    /// while away (anything newer than `relative_zxid`, the last zxid it saw).
    fn set_watches(&mut self, conn: ConnId, set: SetWatches2) {
        let mut fired = Vec::new();
        let since = set.relative_zxid;
        let mut fire = |path: String, event: EventType| {
            fired.push(crate::state::watch::Fired { conn, event, path });
        };
        for p in set.data_watches {
            match self.state.tree.get(&p) {
                None => fire(p, EventType::NodeDeleted),
                Some(n) if n.mzxid > since => fire(p, EventType::NodeDataChanged),
                Some(_) => self.watches.add_data(&p, conn),
            }
        }
        for p in set.exist_watches {
            match self.state.tree.get(&p) {
                Some(_) => fire(p, EventType::NodeCreated),
                None => self.watches.add_data(&p, conn),
            }
        }
        for p in set.child_watches {
            match self.state.tree.get(&p) {
                None => fire(p, EventType::NodeDeleted),
                Some(n) if n.pzxid > since => fire(p, EventType::NodeChildrenChanged),
                Some(_) => self.watches.add_child(&p, conn),
            }
        }
        for p in set.persistent_watches {
            self.watches.add_persistent(&p, conn, false);
        }
        for p in set.persistent_recursive_watches {
            self.watches.add_persistent(&p, conn, true);
        }
        self.deliver(fired);
    }
}

fn children(tree: &DataTree, path: &str) -> Vec<String> {
    tree.children(path).map(str::to_string).collect()
}

/// The watches a checkWatches or removeWatches addresses. ZooKeeper 3.8's server knows three
/// kinds there (a persistent watch goes with `Any`) and answers any other number, the
/// persistent kinds' 4 and 5 included, with MarshallingError.
fn addressed_watches(watcher_type: i32) -> Result<WatcherType, ErrorCode> {
    match WatcherType::try_from(watcher_type) {
        Ok(kind @ (WatcherType::Children | WatcherType::Data | WatcherType::Any)) => Ok(kind),
        _ => Err(ErrorCode::MarshallingError),
    }
}
