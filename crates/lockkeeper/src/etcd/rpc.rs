//! lockkeeper's own etcd v3 client: one balanced gRPC channel over every endpoint given, and
//! the calls the recipes make on it (ranges, puts and transactions; lease grant, revoke,
//! time-to-live and keep-alive; watches).
//!
//! The messages are lockkeeper's subset of etcd's API (`proto/`, compiled by `build.rs`, see
//! [`proto`]); requests are built with the constructors of [`request`], and the two
//! bidirectional streams live in [`stream`].
//!
//! Invariants:
//! - **Any member serves any request.** Every endpoint is one backend of a balanced channel:
//!   each request (and each new stream) goes to a member whose connection is ready, a member
//!   that fails is dropped from the choice while it reconnects, so a session outlives any
//!   member as long as one answers. A stream stays on the member it was opened on; the recipes
//!   open a new one when it breaks.
//! - **Nothing waits unbounded.** Connecting to a member is bounded by the connect timeout, and
//!   every request by the same timeout until its answer (or, for a stream, its first answer)
//!   starts arriving: a member that stopped answering turns into an error, not a hang.
//! - **No protoc and no global state.** The channel and its endpoints belong to the
//!   [`Client`]; clones share them.

mod proto;
mod request;
mod stream;

use std::time::Duration;

use tonic::transport::channel::Change;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::etcd::error::EtcdError;

pub(crate) use proto::etcdserverpb::{
    Compare, LeaseGrantResponse, LeaseTimeToLiveResponse, PutRequest, RangeRequest, RangeResponse,
    RequestOp, TxnRequest, TxnResponse, WatchCreateRequest, WatchResponse,
};
pub(crate) use proto::mvccpb::KeyValue;
pub(crate) use stream::{KeepAlive, WatchStream};

use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::lease_client::LeaseClient;
use proto::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest};

/// A connection to an etcd cluster through any of its members. Cheap to clone: clones share
/// the channel.
#[derive(Clone)]
pub(crate) struct Client {
    channel: Channel,
}

impl Client {
    /// A client of the members at `addresses` (`host:port`; HTTP/2, over TLS with `tls`), each
    /// connected on first use within `timeout`, each request answered within `timeout` too.
    /// Nothing is dialled here: a member that is down shows in the first request's error.
    pub(crate) fn connect(
        addresses: &[String],
        timeout: Duration,
        tls: Option<&ClientTlsConfig>,
    ) -> Result<Client, EtcdError> {
        // Room for every endpoint at once, so that no insert waits for the balancer to read
        // (it reads only when a request is made). The list is fixed: dropping the sender at
        // the end leaves the balancer with these endpoints for good.
        let (channel, endpoints) = Channel::balance_channel(addresses.len().max(1));
        for address in addresses {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
                .map_err(EtcdError::transport)?
                .connect_timeout(timeout)
                .timeout(timeout);
            if let Some(tls) = tls {
                endpoint = endpoint
                    .tls_config(tls.clone())
                    .map_err(EtcdError::transport)?;
            }
            endpoints
                .try_send(Change::Insert(address.clone(), endpoint))
                .map_err(|err| {
                    EtcdError::internal(format!(
                        "could not add the etcd endpoint {address} to the channel: {err}"
                    ))
                })?;
        }
        Ok(Client { channel })
    }

    /// Reads keys (`RangeRequest` built with [`request`]'s constructors).
    pub(crate) async fn range(&self, range: RangeRequest) -> Result<RangeResponse, EtcdError> {
        let mut kv = KvClient::new(self.channel.clone());
        answer(kv.range(range).await)
    }

    /// Writes one key.
    pub(crate) async fn put(&self, put: PutRequest) -> Result<(), EtcdError> {
        let mut kv = KvClient::new(self.channel.clone());
        answer(kv.put(put).await).map(drop)
    }

    /// Runs a transaction: its compares, then its success or failure requests, atomically.
    pub(crate) async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse, EtcdError> {
        let mut kv = KvClient::new(self.channel.clone());
        answer(kv.txn(txn).await)
    }

    /// Grants a lease of `ttl` seconds (etcd may grant more, and says so in the answer).
    pub(crate) async fn grant(&self, ttl: i64) -> Result<LeaseGrantResponse, EtcdError> {
        let mut lease = LeaseClient::new(self.channel.clone());
        answer(lease.lease_grant(LeaseGrantRequest { ttl }).await)
    }

    /// Revokes the lease `id`, deleting every key attached to it.
    pub(crate) async fn revoke(&self, id: i64) -> Result<(), EtcdError> {
        let mut lease = LeaseClient::new(self.channel.clone());
        answer(lease.lease_revoke(LeaseRevokeRequest { id }).await).map(drop)
    }

    /// What is left of the lease `id`.
    pub(crate) async fn time_to_live(&self, id: i64) -> Result<LeaseTimeToLiveResponse, EtcdError> {
        let mut lease = LeaseClient::new(self.channel.clone());
        answer(
            lease
                .lease_time_to_live(LeaseTimeToLiveRequest { id })
                .await,
        )
    }

    /// Opens a keep-alive stream for the lease `id` (see [`KeepAlive`]).
    pub(crate) async fn keep_alive(&self, id: i64) -> Result<Option<KeepAlive>, EtcdError> {
        KeepAlive::open(self.channel.clone(), id).await
    }

    /// Opens a watch stream with `create` as its first watch (see [`WatchStream`]).
    pub(crate) async fn watch(&self, create: WatchCreateRequest) -> Result<WatchStream, EtcdError> {
        WatchStream::open(self.channel.clone(), create).await
    }
}

/// The message of a unary call's answer, or its status as an [`EtcdError`].
fn answer<T>(answer: Result<tonic::Response<T>, tonic::Status>) -> Result<T, EtcdError> {
    answer
        .map(tonic::Response::into_inner)
        .map_err(EtcdError::status)
}
