//! The bystander: a well-behaved session that watches the abuse from the side.
//!
//! "Bad input never takes the server down" means more than the process staying up: every other
//! session keeps its connection and its data. So each test starts a bystander before the abuse,
//! which writes a node and is acknowledged; after the abuse (and during long waits) it must
//! still be connected on the *same* TCP connection, read back everything it was ever told was
//! written, and still be able to write.

use std::net::SocketAddr;

use bytes::Bytes;
use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{
    GetDataResponse, Jute, OpCode, PathWatchRequest, Request, SetDataRequest, StatResponse,
};

use lockkeeper_testkit::raw::{Answer, Raw, open_acl};

pub(crate) struct Bystander {
    conn: Raw,
    backend: String,
    /// Every node the server acknowledged writing, with the data it last acknowledged.
    acknowledged: Vec<(String, Bytes)>,
    checks: usize,
}

impl Bystander {
    /// Connects and writes `/bystander` (acknowledged) before any abuse starts.
    pub(crate) async fn start(addr: SocketAddr, backend: &str) -> Bystander {
        let conn = Raw::session(addr, format!("{backend} bystander")).await;
        let mut bystander = Bystander {
            conn,
            backend: backend.to_string(),
            acknowledged: Vec::new(),
            checks: 0,
        };
        bystander
            .create(
                "/bystander",
                Bytes::from_static(b"written before the abuse"),
            )
            .await;
        bystander
    }

    /// A ping on the bystander's connection: the server still serves it right now.
    pub(crate) async fn ping(&mut self, during: &str) {
        self.conn.label = format!("{} bystander (during {during})", self.backend);
        self.conn.ping().await;
    }

    /// After `after`: still connected, reads back every acknowledged write, and writes again.
    pub(crate) async fn check(&mut self, after: &str) {
        self.checks += 1;
        self.conn.label = format!("{} bystander (after {after})", self.backend);
        self.conn.ping().await;
        read_back(&mut self.conn, &self.acknowledged).await;
        let data = Bytes::from(format!("written after {after}"));
        self.set_data("/bystander", data).await;
        let child = format!("/bystander/check-{}", self.checks);
        self.create(&child, Bytes::from(format!("child after {after}")))
            .await;
    }

    /// From a new session (e.g. after a restart): every acknowledged write is still there.
    pub(crate) async fn verify_from(&self, addr: SocketAddr, after: &str) {
        let label = format!("{} reader (after {after})", self.backend);
        let mut reader = Raw::session_eventually(addr, label, 4_000).await;
        read_back(&mut reader, &self.acknowledged).await;
    }

    async fn create(&mut self, path: &str, data: Bytes) {
        let answer = self
            .conn
            .call(&Request::Create(CreateOp {
                op: OpCode::Create,
                path: path.to_string(),
                data: Some(data.clone()),
                acl: open_acl(),
                flags: 0,
                ttl: 0,
            }))
            .await;
        assert_eq!(
            answer.err(),
            Some(0),
            "{}: create {path} answered {answer:?}",
            self.conn.label
        );
        self.acknowledged.push((path.to_string(), data));
    }

    async fn set_data(&mut self, path: &str, data: Bytes) {
        let answer = self
            .conn
            .call(&Request::SetData(SetDataRequest {
                path: path.to_string(),
                data: Some(data.clone()),
                version: -1,
            }))
            .await;
        let Answer::Reply { err: 0, body } = answer else {
            panic!("{}: setData {path} answered {answer:?}", self.conn.label);
        };
        StatResponse::decode(body).expect("a setData reply decodes");
        if let Some(entry) = self.acknowledged.iter_mut().find(|(p, _)| p == path) {
            entry.1 = data;
        }
    }
}

/// Reads every node in `acknowledged` on `conn` and asserts it holds the acknowledged data.
async fn read_back(conn: &mut Raw, acknowledged: &[(String, Bytes)]) {
    for (path, data) in acknowledged {
        let answer = conn
            .call(&Request::GetData(PathWatchRequest {
                path: path.clone(),
                watch: false,
            }))
            .await;
        let Answer::Reply { err: 0, body } = answer else {
            panic!("{}: getData {path} answered {answer:?}", conn.label);
        };
        let reply = GetDataResponse::decode(body).expect("a getData reply decodes");
        assert_eq!(
            reply.data.as_ref(),
            Some(data),
            "{}: {path} lost its acknowledged data",
            conn.label
        );
    }
}
