//! The two bidirectional streams of the etcd client: [`WatchStream`] (watches up, events down)
//! and [`KeepAlive`] (renewals up, granted TTLs down).
//!
//! Each is a gRPC call whose requests come from a channel the stream's owner writes to, and
//! whose answers the owner reads; dropping the stream ends the call, and etcd then drops its
//! watches or stops expecting renewals on it.
//!
//! Invariant: a stream is open only once its first request has been sent and etcd has started
//! answering. etcd sends a stream's response headers with its first message, so the call's
//! future resolves only then: the first request goes into the channel before the call is
//! made, and the channel's timeout bounds the wait for that first answer.

use futures_util::Stream;
use tokio::sync::mpsc;
use tonic::Streaming;
use tonic::transport::Channel;

use super::proto::etcdserverpb::lease_client::LeaseClient;
use super::proto::etcdserverpb::watch_client::WatchClient;
use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::{
    LeaseKeepAliveRequest, LeaseKeepAliveResponse, WatchCreateRequest, WatchRequest, WatchResponse,
};
use crate::etcd::error::EtcdError;

/// How many requests may wait to go up a stream: the recipes send a few watches, or one
/// renewal at a time, before reading again.
const QUEUED_REQUESTS: usize = 16;

/// The requests a call sends: whatever its owner puts into the channel, until the owner drops
/// its end.
fn queued<T: Send + 'static>(queue: mpsc::Receiver<T>) -> impl Stream<Item = T> + Send + 'static {
    futures_util::stream::unfold(queue, |mut queue| async move {
        queue.recv().await.map(|request| (request, queue))
    })
}

/// A watch stream: one or more watches on one member, and the answers to all of them
/// (`created`, events, `canceled`) in the order etcd sends them.
pub(crate) struct WatchStream {
    requests: mpsc::Sender<WatchRequest>,
    answers: Streaming<WatchResponse>,
}

impl WatchStream {
    /// Opens the stream with `first` as its first watch; the answer to it (`created`) is the
    /// first [`message`](WatchStream::message).
    pub(super) async fn open(
        channel: Channel,
        first: WatchCreateRequest,
    ) -> Result<WatchStream, EtcdError> {
        let (requests, queue) = mpsc::channel(QUEUED_REQUESTS);
        send_watch(&requests, first).await?;
        let mut client = WatchClient::new(channel);
        let opened = client.watch(queued(queue)).await;
        let answers = opened.map_err(EtcdError::status)?.into_inner();
        Ok(WatchStream { requests, answers })
    }

    /// Adds a watch to the stream; etcd answers it with a `created` message.
    pub(crate) async fn watch(&mut self, create: WatchCreateRequest) -> Result<(), EtcdError> {
        send_watch(&self.requests, create).await
    }

    /// The next answer; `None` once etcd ended the stream.
    pub(crate) async fn message(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        self.answers.message().await.map_err(EtcdError::status)
    }
}

/// Queues a create request on a watch stream's channel.
async fn send_watch(
    requests: &mpsc::Sender<WatchRequest>,
    create: WatchCreateRequest,
) -> Result<(), EtcdError> {
    let request = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(create)),
    };
    requests
        .send(request)
        .await
        .map_err(|_| EtcdError::no_answer("the watch stream closed before the watch was sent"))
}

/// A keep-alive stream of one lease: each [`renew`](KeepAlive::renew) asks etcd to renew the
/// lease once, and each [`answer`](KeepAlive::answer) is the TTL granted by one renewal.
pub(crate) struct KeepAlive {
    id: i64,
    requests: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: Streaming<LeaseKeepAliveResponse>,
}

impl KeepAlive {
    /// Opens the stream for the lease `id`, renewing it once on the way: `None` if etcd
    /// answers that the lease is gone (a lasting answer: the caller's session is over), an
    /// error if the stream fails or ends without answering.
    pub(super) async fn open(channel: Channel, id: i64) -> Result<Option<KeepAlive>, EtcdError> {
        let (sender, queue) = mpsc::channel(QUEUED_REQUESTS);
        let first = LeaseKeepAliveRequest { id };
        sender
            .send(first)
            .await
            .map_err(|_| EtcdError::no_answer("the keep-alive stream closed before it opened"))?;
        let mut client = LeaseClient::new(channel);
        let opened = client.lease_keep_alive(queued(queue)).await;
        let mut answers = opened.map_err(EtcdError::status)?.into_inner();
        match answers.message().await.map_err(EtcdError::status)? {
            Some(answer) if answer.ttl > 0 => Ok(Some(KeepAlive {
                id,
                requests: sender,
                answers,
            })),
            Some(_) => Ok(None),
            None => Err(EtcdError::no_answer(
                "the keep-alive stream ended before its first answer",
            )),
        }
    }

    /// Asks for one renewal; its answer comes through [`answer`](KeepAlive::answer).
    pub(crate) async fn renew(&mut self) -> Result<(), EtcdError> {
        self.requests
            .send(LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| EtcdError::no_answer("the keep-alive stream closed"))
    }

    /// The answer to the oldest renewal not yet answered; `None` once etcd ended the stream.
    pub(crate) async fn answer(&mut self) -> Result<Option<LeaseKeepAliveResponse>, EtcdError> {
        self.answers.message().await.map_err(EtcdError::status)
    }
}
