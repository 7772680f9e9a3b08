//! Reads at a point: a read answered with the state as it was at the earliest zxid that shows
//! what it reads, so it does not wait for the sync of writes nobody has seen.
//!
//! Keeper applies a write before its log sync, and every message waits in its outbox until the
//! log is durable past what it reveals. A read answered at the last zxid would wait for every
//! write applied before it. For a lock's queue that is the slow part of a handoff: the holder
//! deletes its node and, once that is durable, queues again at once; the next waiter hears of
//! the deletion, lists the queue and reads its own node, and each reply would then wait for the
//! sync of that new create, a node behind it that it does not care about.
//!
//! So these reads answer at a *point*, the latest of:
//! - the durable zxid: everything any client has been told about is at or below it;
//! - the last zxid this connection has been shown or has queued (`Connection::seen`), so a
//!   client always sees its own writes and never sees the tree go back;
//! - what the read shows of the node it reads, below.
//!
//! **getChildren** (opcode 8: names only, no stat) adds the parent's own creation and the last
//! pending change of its child list that cannot be hidden (a child's deletion) or of its ACL
//! ([`Unhidable`]). Children created after the point are left out: nobody has been told of
//! them, so the listing is ordered before their creation, and the reply waits for the point
//! only. The listing is the child list at the point exactly, because after it the list changed
//! only by those creates. A watch set by such a listing fires at once (after the creates are
//! durable), since the creates it missed happened before it was registered.
//!
//! **getData and exists of a node that exists** add the node's last data change (mzxid), last
//! child change (pzxid), both its creation if nothing since, and last ACL change: the node's
//! data and every field of its stat are then the same at the point as now, so the reply is
//! exact at the point and nothing after it is revealed. A data watch set by it misses nothing:
//! the node did not change after the point.
//!
//! Everything else (getChildren2, a read of a missing node, whose absence may be a pending
//! deletion, and every other request) reveals the last zxid.

use std::collections::HashMap;

use lockkeeper_proto::*;

use super::Core;
use crate::core::reply::Body;
use crate::state::path;
use crate::state::tree::Node;
use crate::state::txn::{Trigger, Txn};
use crate::state::watch::{ConnId, Fired};

/// Paths whose child list lost a child, or whose ACL was set, at a zxid that may not be durable
/// yet: a read of such a path is answered no earlier than that zxid. An entry at or below the
/// durable zxid has no effect, so old ones are dropped only to bound the map.
#[derive(Default)]
pub(super) struct Unhidable {
    last_change: HashMap<Box<str>, i64>,
    /// The durable zxid of the last sweep: sweeping again before it moves frees nothing, and a
    /// batch of deletes under many parents would sweep the whole map at every one of them.
    swept_at: i64,
}

/// Entries kept before the durable ones are swept out.
const SWEEP_AT: usize = 1024;

impl Unhidable {
    /// Notes what `txn`, applied at `zxid` with `triggers`, changed that a listing must show.
    pub(super) fn note(&mut self, zxid: i64, txn: &Txn, triggers: &[Trigger], durable: i64) {
        if self.last_change.len() >= SWEEP_AT && durable > self.swept_at {
            self.last_change.retain(|_, z| *z > durable);
            self.swept_at = durable;
        }
        for t in triggers {
            if t.event == EventType::NodeDeleted
                && let Some(parent) = path::parent(&t.path)
            {
                self.set(parent, zxid);
            }
        }
        acls_set(txn, &mut |p| self.set(p, zxid));
    }

    /// Without allocating a key when the path is already there (a busy queue's parent).
    fn set(&mut self, path: &str, zxid: i64) {
        match self.last_change.get_mut(path) {
            Some(z) => *z = zxid,
            None => {
                self.last_change.insert(path.into(), zxid);
            }
        }
    }

    fn last_change(&self, path: &str) -> i64 {
        self.last_change.get(path).copied().unwrap_or(0)
    }
}

fn acls_set(txn: &Txn, each: &mut impl FnMut(&str)) {
    match txn {
        Txn::SetAcl { path, .. } => each(path),
        Txn::Multi(txns) => txns.iter().for_each(|t| acls_set(t, each)),
        _ => {}
    }
}

/// The children a listing at `point` shows, from `(name, czxid)` in order, and how many it
/// leaves out (created after the point).
fn at_point<'a>(
    children: impl Iterator<Item = (&'a str, i64)>,
    point: i64,
) -> (Vec<String>, usize) {
    let mut shown = Vec::new();
    let mut hidden = 0;
    for (name, czxid) in children {
        if czxid <= point {
            shown.push(name.to_string());
        } else {
            hidden += 1;
        }
    }
    (shown, hidden)
}

impl Core {
    /// The earliest point a read from `conn` may be answered at, whatever it reads: the durable
    /// zxid, or what the connection has already been shown if that is later.
    fn read_floor(&self, conn: ConnId) -> i64 {
        let seen = self.conns.get(&conn).map_or(0, |c| c.seen);
        self.durable_rx.borrow().zxid.max(seen)
    }

    /// The point a getData or exists of `node`, at `path`, is answered at (see the module doc).
    /// A node is created with mzxid and pzxid at its czxid, so those two cover the creation.
    pub(super) fn node_point(&self, conn: ConnId, path: &str, node: &Node) -> i64 {
        self.read_floor(conn)
            .max(node.mzxid)
            .max(node.pzxid)
            .max(self.unhidable.last_change(path))
    }

    /// Answers getChildren (see the module doc).
    pub(super) fn list_children(&mut self, conn: ConnId, xid: i32, req: PathWatchRequest) {
        let node = match self.readable(conn, &req.path, perms::READ) {
            Ok(node) => node,
            Err(err) => {
                let zxid = self.state.last_zxid;
                return self.reply(conn, xid, zxid, err, Body::Empty);
            }
        };
        let point = self
            .read_floor(conn)
            .max(node.czxid)
            .max(self.unhidable.last_change(&req.path))
            .min(self.state.last_zxid);
        let (children, hidden) = at_point(
            self.state
                .tree
                .children_nodes(&req.path)
                .map(|(name, node)| (name, node.czxid)),
            point,
        );
        self.reply_at(conn, xid, point, ErrorCode::Ok, Body::Children(children));
        if req.watch {
            if hidden > 0 {
                self.deliver(vec![Fired {
                    conn,
                    event: EventType::NodeChildrenChanged,
                    path: req.path,
                }]);
            } else {
                self.watches.add_child(&req.path, conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    use crate::config::Config;
    use crate::core::CoreMsg;
    use crate::core::reply::{Message, Outgoing};
    use crate::disk::datadir_lock::DataDirLock;
    use crate::net::outbox::{self, WriterEnd};
    use lockkeeper_proto::request::CreateOp;

    /// A core on an empty data dir, driven by hand: nothing it logs is handed to the log
    /// threads (that happens between batches of `run`), so nothing becomes durable.
    struct Driven {
        core: Core,
        /// Each connection's outbox, and the client's end of its socket (kept open).
        outboxes: HashMap<ConnId, (WriterEnd, tokio::net::TcpStream)>,
        xid: i32,
        _dir: tempfile::TempDir,
        /// The sockets' runtime, dropped last.
        runtime: tokio::runtime::Runtime,
    }

    impl Driven {
        fn new() -> Driven {
            let dir = tempfile::tempdir().expect("a data dir");
            let config = Arc::new(Config {
                data_dir: dir.path().to_path_buf(),
                ..Config::default()
            });
            let lock = DataDirLock::exclusive(dir.path()).expect("lock the data dir");
            let core = Core::recover(config, lock).expect("recover an empty data dir");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .expect("a runtime for the sockets");
            Driven {
                core,
                outboxes: HashMap::new(),
                xid: 0,
                _dir: dir,
                runtime,
            }
        }

        fn connect(&mut self, conn: ConnId) {
            let pair = outbox::testing::pair(self.core.durable(), 1 << 20);
            let (outbox, writer, client) = self.runtime.block_on(pair);
            self.outboxes.insert(conn, (writer, client));
            self.core.handle(CoreMsg::Connect {
                conn,
                peer: "127.0.0.1:1".parse().unwrap(),
                x509: None,
                request: ConnectRequest::new_session(10_000),
                outbox: Box::new(outbox),
            });
            self.take(conn);
        }

        fn request(&mut self, conn: ConnId, request: Request) -> Vec<Outgoing> {
            self.xid += 1;
            self.core.handle(CoreMsg::Request {
                conn,
                xid: self.xid,
                request,
                received: Instant::now(),
            });
            self.take(conn)
        }

        fn take(&mut self, conn: ConnId) -> Vec<Outgoing> {
            let (writer, _) = self.outboxes.get(&conn).expect("connected");
            writer.take_queued()
        }

        /// Creates `path` from `conn`; returns its zxid.
        fn create(&mut self, conn: ConnId, path: &str) -> i64 {
            let request = Request::Create(CreateOp {
                op: OpCode::Create,
                path: path.into(),
                data: None,
                acl: crate::state::acl::open_acl(),
                flags: 0,
                ttl: 0,
            });
            let [reply] = &self.request(conn, request)[..] else {
                panic!("one reply to a create");
            };
            match &reply.message {
                Message::Reply { header, .. } if header.err == 0 => header.zxid,
                other => panic!("create {path} failed: {other:?}"),
            }
        }

        fn delete(&mut self, conn: ConnId, path: &str) {
            let request = Request::Delete(PathVersionRequest {
                path: path.into(),
                version: -1,
            });
            self.request(conn, request);
        }

        /// Sends a write from `conn`; returns its zxid.
        fn write(&mut self, conn: ConnId, request: Request) -> i64 {
            let [reply] = &self.request(conn, request)[..] else {
                panic!("one reply to a write");
            };
            match &reply.message {
                Message::Reply { header, .. } if header.err == 0 => header.zxid,
                other => panic!("write failed: {other:?}"),
            }
        }

        /// Reads from `conn`: the reply's error code, its zxid and the zxid it waits for.
        fn read(&mut self, conn: ConnId, request: Request) -> (i32, i64, i64) {
            let [reply] = &self.request(conn, request)[..] else {
                panic!("one reply to a read");
            };
            match &reply.message {
                Message::Reply { header, .. } => (header.err, header.zxid, reply.visible_at),
                other => panic!("a read answered {other:?}"),
            }
        }

        /// Lists `path` from `conn`: the names, the reply's zxid and the zxid it waits for,
        /// and whatever else was queued with it.
        fn list(
            &mut self,
            conn: ConnId,
            path: &str,
            watch: bool,
        ) -> (Vec<String>, i64, i64, Vec<Outgoing>) {
            let request = Request::GetChildren(PathWatchRequest {
                path: path.into(),
                watch,
            });
            let mut out = self.request(conn, request).into_iter();
            let reply = out.next().expect("a reply");
            match reply.message {
                Message::Reply {
                    header,
                    body: Body::Children(names),
                } => (names, header.zxid, reply.visible_at, out.collect()),
                other => panic!("list {path}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_listing_leaves_out_what_others_created_and_nobody_was_shown() {
        let mut d = Driven::new();
        d.connect(1);
        d.connect(2);
        let parent = d.create(2, "/q");
        let before = d.create(2, "/q/a");
        // Connection 1 has been shown nothing past its session yet; nothing is durable.
        let (names, zxid, visible_at, _) = d.list(1, "/q", false);
        assert_eq!(
            names,
            Vec::<String>::new(),
            "/q/a is not durable and nobody was told of it"
        );
        assert_eq!((zxid, visible_at), (parent, parent));
        // The creator sees its own write.
        let (names, _, visible_at, _) = d.list(2, "/q", false);
        assert_eq!(names, ["a"]);
        assert_eq!(visible_at, before);

        // A deletion cannot be hidden: the listing waits for it, and shows what came before.
        let b = d.create(2, "/q/b");
        d.delete(2, "/q/a");
        let deleted = d.core.state.last_zxid;
        let c = d.create(2, "/q/c");
        let (names, zxid, visible_at, _) = d.list(1, "/q", false);
        assert_eq!(names, ["b"], "b ({b}) came before the deletion; c after it");
        assert_eq!((zxid, visible_at), (deleted, deleted));

        // A listing never goes back: the next one is at least where the last one was.
        let (names, zxid, _, _) = d.list(1, "/q", false);
        assert_eq!((names, zxid), (vec!["b".to_string()], deleted));

        // Any other read reveals the last zxid; a listing after it shows everything up to there.
        d.request(
            1,
            Request::Exists(PathWatchRequest {
                path: "/q/c".into(),
                watch: false,
            }),
        );
        let (names, zxid, _, _) = d.list(1, "/q", false);
        assert_eq!(
            (names, zxid),
            (vec!["b".to_string(), "c".to_string()], c),
            "the exists of /q/c showed connection 1 the state with c"
        );
    }

    #[test]
    fn a_watch_set_by_a_listing_that_left_a_child_out_fires_at_once() {
        let mut d = Driven::new();
        d.connect(1);
        d.connect(2);
        d.create(2, "/q");
        let hidden = d.create(2, "/q/a");
        let (names, _, _, after) = d.list(1, "/q", true);
        assert!(names.is_empty());
        let [event] = &after[..] else {
            panic!("one event after the reply, got {}", after.len());
        };
        match &event.message {
            Message::Reply {
                body: Body::Event(e),
                ..
            } => {
                assert_eq!(e.event_type, EventType::NodeChildrenChanged.code());
                assert_eq!(e.path, "/q");
            }
            other => panic!("expected an event, got {other:?}"),
        }
        assert!(
            event.visible_at >= hidden,
            "the event waits for the create it reports"
        );

        // With nothing left out, the watch is registered and fires on the next change.
        let (names, _, _, after) = d.list(2, "/q", true);
        assert_eq!((names.len(), after.len()), (1, 0));
        d.create(1, "/q/b");
        assert_eq!(d.take(2).len(), 1, "the registered watch fired on /q/b");
    }

    fn get_data(path: &str) -> Request {
        Request::GetData(PathWatchRequest {
            path: path.into(),
            watch: false,
        })
    }

    fn exists(path: &str) -> Request {
        Request::Exists(PathWatchRequest {
            path: path.into(),
            watch: false,
        })
    }

    #[test]
    fn a_node_read_waits_for_the_nodes_own_changes_only() {
        let mut d = Driven::new();
        // Readers connected first (a session's creation is a write it is shown), each used
        // once, so each has been shown nothing since (and nothing is durable).
        let readers = 10..20;
        for conn in readers.clone().chain([1, 2]) {
            d.connect(conn);
        }
        let q = d.create(1, "/q");
        let a = d.create(1, "/q/a");
        let data = d.write(
            1,
            Request::SetData(SetDataRequest {
                path: "/q".into(),
                data: Some(bytes::Bytes::from_static(b"x")),
                version: -1,
            }),
        );
        let b = d.create(1, "/q/a/b");
        let acl = d.write(
            1,
            Request::SetAcl(SetAclRequest {
                path: "/q/a/b".into(),
                acl: crate::state::acl::open_acl(),
                version: -1,
            }),
        );
        d.create(1, "/later");
        let last = d.core.state.last_zxid;
        assert!(q < a && a < data && data < b && b < acl && acl < last);
        let mut readers = readers.into_iter();
        let mut read = |d: &mut Driven, request| d.read(readers.next().expect("a reader"), request);
        assert_eq!(read(&mut d, get_data("/q")), (0, data, data), "its data");
        assert_eq!(read(&mut d, exists("/q/a")), (0, b, b), "its child");
        assert_eq!(read(&mut d, get_data("/q/a/b")), (0, acl, acl), "its ACL");
        let (_, _, created) = read(&mut d, exists("/later"));
        assert_eq!(created, last, "its creation");
        // A missing node may be a deletion nobody was told of: it shows the last zxid.
        let e = ErrorCode::NoNode.code();
        assert_eq!(read(&mut d, exists("/q/none")), (e, last, last));
        assert_eq!(read(&mut d, get_data("/q/none")), (e, last, last));

        // A connection never sees less than it was shown: the writer sees its last write.
        assert_eq!(d.read(1, get_data("/q")), (0, last, last));
        d.read(2, get_data("/q/a/b"));
        assert_eq!(
            d.read(2, get_data("/q")),
            (0, acl, acl),
            "what /q/a/b showed"
        );
        // And a deletion below the node is its child list's change.
        let deleted = d.write(
            1,
            Request::Delete(PathVersionRequest {
                path: "/q/a/b".into(),
                version: -1,
            }),
        );
        assert_eq!(read(&mut d, exists("/q/a")), (0, deleted, deleted));
    }

    fn deleted(path: &str) -> Trigger {
        Trigger {
            path: path.into(),
            event: EventType::NodeDeleted,
            acl: Arc::from(Vec::new()),
        }
    }

    #[test]
    fn children_created_after_the_point_are_left_out() {
        let children = [("a", 5), ("b", 9), ("c", 12), ("d", 13)];
        let (shown, hidden) = at_point(children.into_iter(), 9);
        assert_eq!(shown, ["a", "b"]);
        assert_eq!(hidden, 2);
        let (shown, hidden) = at_point(children.into_iter(), 13);
        assert_eq!(shown, ["a", "b", "c", "d"]);
        assert_eq!(hidden, 0);
    }

    #[test]
    fn a_child_deletion_and_an_acl_set_are_noted_on_the_parent() {
        let mut unhidable = Unhidable::default();
        unhidable.note(
            7,
            &Txn::Delete {
                path: "/q/x".into(),
            },
            &[deleted("/q/x")],
            0,
        );
        unhidable.note(
            8,
            &Txn::Multi(vec![Txn::SetAcl {
                path: "/r".into(),
                acl: Vec::new(),
                aversion: 1,
            }]),
            &[],
            0,
        );
        assert_eq!(unhidable.last_change("/q"), 7);
        assert_eq!(unhidable.last_change("/r"), 8);
        assert_eq!(unhidable.last_change("/q/x"), 0);
        assert_eq!(unhidable.last_change("/"), 0);
    }

    #[test]
    fn the_map_keeps_what_is_not_durable_when_swept() {
        let mut unhidable = Unhidable::default();
        for i in 0..SWEEP_AT as i64 {
            let p = format!("/p{i}/x");
            unhidable.note(i + 1, &Txn::Delete { path: p.clone() }, &[deleted(&p)], 0);
        }
        // Everything up to 1000 is durable: the sweep keeps the 24 above it, then adds one.
        unhidable.note(
            2000,
            &Txn::Delete {
                path: "/z/x".into(),
            },
            &[deleted("/z/x")],
            1000,
        );
        assert_eq!(unhidable.last_change.len(), SWEEP_AT - 1000 + 1);
        assert_eq!(unhidable.last_change("/p1023"), 1024);
        assert_eq!(unhidable.last_change("/p5"), 0);
        assert_eq!(unhidable.last_change("/z"), 2000);
    }

    #[test]
    fn the_map_is_swept_again_only_once_more_is_durable() {
        let mut unhidable = Unhidable::default();
        let mut note = |zxid: i64, durable: i64| {
            let p = format!("/p{zxid}/x");
            unhidable.note(
                zxid,
                &Txn::Delete { path: p.clone() },
                &[deleted(&p)],
                durable,
            );
            (unhidable.last_change.len(), unhidable.swept_at)
        };
        for i in 1..=SWEEP_AT as i64 {
            note(i, 0);
        }
        // Durable at 10: one sweep drops ten entries (and the note adds one).
        assert_eq!(note(5000, 10), (SWEEP_AT - 10 + 1, 10));
        // Full again, durable still at 10: a sweep would free nothing, so none runs.
        for i in 0..10 {
            note(6000 + i, 10);
        }
        assert_eq!(note(6010, 10), (SWEEP_AT + 2, 10));
        // Durable at 20: swept again.
        assert_eq!(note(7000, 20), (SWEEP_AT + 2 - 10 + 1, 20));
    }
}
