//! Sessions in the core: the connect handshake (new session or re-attach with the password),
//! a session moving to a new connection, a connection going away, and expiry.
//!
//! A session outlives its connections; what ends it is a closeSession, or its timeout passing
//! with no packet from it, both logged txns that delete its ephemerals.

use std::net::SocketAddr;
use std::time::Instant;

use lockkeeper_proto::*;

use super::reply::ReplyQueue;
use super::{Connection, Core};
use crate::core::reply::Message;
use crate::state::acl::AuthIds;
use crate::state::txn::Txn;
use crate::state::watch::ConnId;

impl Core {
    pub(super) fn connect(
        &mut self,
        conn: ConnId,
        peer: SocketAddr,
        x509: Option<String>,
        request: ConnectRequest,
        outbox: Box<dyn ReplyQueue>,
    ) {
        self.conns.insert(
            conn,
            Connection {
                outbox,
                peer,
                session: None,
                auth: AuthIds::for_peer(peer.ip(), x509),
                sasl: crate::sasl::Exchange::default(),
                received: 1,
                seen: 0,
                unflushed: false,
            },
        );
        // A client that has seen newer state than ours must go elsewhere, as ZooKeeper says.
        if request.last_zxid_seen > self.state.last_zxid {
            tracing::warn!(%peer, seen = request.last_zxid_seen, ours = self.state.last_zxid, "client has seen a newer zxid; closing");
            self.close(conn);
            return;
        }
        let read_only = request.read_only.map(|_| false);
        let refused = ConnectResponse {
            protocol_version: 0,
            timeout: 0,
            session_id: 0,
            passwd: vec![0u8; 16].into(),
            read_only,
        };
        if request.session_id == 0 {
            let timeout = self.state.sessions.negotiate(request.timeout);
            let session_id = self.state.sessions.next_id();
            let passwd: [u8; 16] = rand::random();
            let timeout_ms = timeout.as_millis() as i32;
            if self.read_only.is_some() {
                // Reads still work while the disk fails; the session is logged once it recovers.
                self.state
                    .sessions
                    .insert_unlogged(session_id, passwd, timeout, Instant::now());
            } else {
                self.write_txn(Txn::CreateSession {
                    session_id,
                    timeout_ms,
                    passwd,
                });
            }
            self.attach(conn, session_id);
            let response = ConnectResponse {
                protocol_version: 0,
                timeout: timeout_ms,
                session_id,
                passwd: passwd.to_vec().into(),
                read_only,
            };
            tracing::debug!(%peer, session = format_args!("{session_id:#x}"), timeout_ms, "session created");
            self.send(conn, Message::Connect(response), false);
            return;
        }
        let valid = self
            .state
            .sessions
            .get(request.session_id)
            .is_some_and(|s| s.passwd[..] == request.passwd[..]);
        if !valid {
            tracing::debug!(%peer, session = format_args!("{:#x}", request.session_id), "re-attach refused: unknown session or wrong password");
            self.send(conn, Message::Connect(refused), true);
            return;
        }
        self.attach(conn, request.session_id);
        let Some(session) = self.state.sessions.get(request.session_id) else {
            return;
        };
        let response = ConnectResponse {
            protocol_version: 0,
            timeout: session.timeout.as_millis() as i32,
            session_id: session.id,
            passwd: session.passwd.to_vec().into(),
            read_only,
        };
        self.send(conn, Message::Connect(response), false);
    }

    /// Binds `session` to `conn`, closing the connection it had before (a client that moved).
    fn attach(&mut self, conn: ConnId, session_id: i64) {
        let now = Instant::now();
        let Some(session) = self.state.sessions.get_mut(session_id) else {
            return;
        };
        let previous = session.conn.replace(conn);
        session.deadline = now + session.timeout;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(session_id);
        }
        if let Some(old) = previous.filter(|old| *old != conn) {
            if let Some(c) = self.conns.get_mut(&old) {
                c.session = None;
            }
            self.close(old);
        }
    }

    pub(super) fn disconnect(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.after_burst.departed(Instant::now());
        self.watches.remove_connection(conn);
        if let Some(session) = c.session.and_then(|s| self.state.sessions.get_mut(s))
            && session.conn == Some(conn)
        {
            session.conn = None;
        }
    }

    pub(super) fn expire_sessions(&mut self) {
        for session_id in self.state.sessions.expired(Instant::now()) {
            let conn = self.state.sessions.get(session_id).and_then(|s| s.conn);
            tracing::info!(session = format_args!("{session_id:#x}"), "session expired");
            self.write_txn(Txn::CloseSession { session_id });
            if let Some(conn) = conn {
                self.close(conn);
            }
        }
    }
}
