//! The Prometheus endpoint: `GET /metrics` on its own listener (`serve --metrics-listen`),
//! answered with the core's [`Stats`] and the [`Timings`] in ZooKeeper's names (the text is
//! [`crate::metrics`]'s).
//!
//! With TLS (`serve --metrics-tls`), the endpoint speaks HTTPS with the secure listener's
//! certificate, key and client CA (reloaded with them), so a scrape across hosts is neither
//! plain text nor, with a client CA, anyone's.
//!
//! Invariant: **a scrape never holds up requests.** The core's part is to copy a few numbers
//! into a `Stats` when a scrape asks, like answering `mntr`; encoding and socket IO run in the
//! metrics task. A scraper that is slow to send or read holds only its own connection, which is
//! dropped after [`CONNECTION_LIMIT`], and at most [`MAX_SCRAPERS`] are served at once (more are
//! closed at once).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::core::CoreMsg;
use crate::metrics::{Stats, Timings, render};
use crate::net::socket::{ReadHalf, Socket, WriteHalf};
use crate::net::tls::Acceptor;

/// Scrapes served at once; a scraper past this is closed unanswered.
const MAX_SCRAPERS: usize = 16;
/// The longest one scrape's connection may live, request and answer included.
const CONNECTION_LIMIT: Duration = Duration::from_secs(30);
/// The largest request head read; a longer one is answered 431.
const MAX_HEAD: usize = 8 << 10;
/// How long a scrape waits for the core's numbers before answering 503.
const CORE_LIMIT: Duration = Duration::from_secs(10);

/// Serves `/metrics` on `listener` (over TLS with `tls`) until `shutdown` flips; `core`
/// answers with its [`Stats`].
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Arc<Acceptor>>,
    core: mpsc::Sender<CoreMsg>,
    timings: Timings,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_SCRAPERS));
    let mut scrapes = JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = scrapes.join_next(), if !scrapes.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(
                max = MAX_SCRAPERS,
                "metrics: too many scrapes at once; closing"
            );
            continue;
        };
        let (core, timings, tls) = (core.clone(), timings.clone(), tls.clone());
        scrapes.spawn(async move {
            let exchange = async {
                let socket = match tls {
                    None => Socket::Plain(stream),
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok((stream, _)) => Socket::Tls(Box::new(stream)),
                        Err(e) => {
                            tracing::warn!(error = %e, "metrics: connection refused");
                            return Ok(());
                        }
                    },
                };
                scrape(socket, &core, &timings).await
            };
            let _ = tokio::time::timeout(CONNECTION_LIMIT, exchange).await;
            drop(slot);
        });
    }
    scrapes.shutdown().await;
}

/// One HTTP/1.1 exchange: the request head, one answer, then the close.
async fn scrape(
    socket: Socket,
    core: &mpsc::Sender<CoreMsg>,
    timings: &Timings,
) -> std::io::Result<()> {
    let (mut reader, mut stream) = socket.split();
    let Some(head) = read_head(&mut reader).await? else {
        return respond(&mut stream, "431 Request Header Fields Too Large", "", "").await;
    };
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_ascii_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return respond(&mut stream, "400 Bad Request", "", "").await;
    };
    if !version.starts_with("HTTP/1.") {
        return respond(&mut stream, "400 Bad Request", "", "").await;
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return respond(&mut stream, "404 Not Found", "", "").await;
    }
    if method != "GET" {
        return respond(&mut stream, "405 Method Not Allowed", "", "").await;
    }
    let Some(stats) = stats_from(core).await else {
        return respond(&mut stream, "503 Service Unavailable", "", "").await;
    };
    let text = render(&stats, timings);
    let format = TextEncoder::new().format_type().to_string();
    respond(&mut stream, "200 OK", &format, &text).await
}

/// The core's numbers, or `None` if it is gone or too busy to answer within [`CORE_LIMIT`].
async fn stats_from(core: &mpsc::Sender<CoreMsg>) -> Option<Stats> {
    let (reply, answer) = oneshot::channel();
    tokio::time::timeout(CORE_LIMIT, async {
        core.send(CoreMsg::Stats { reply }).await.ok()?;
        answer.await.ok()
    })
    .await
    .ok()
    .flatten()
}

/// Reads up to the blank line that ends a request head. `None` if it is longer than
/// [`MAX_HEAD`]; an error if the peer closes first.
async fn read_head(stream: &mut ReadHalf) -> std::io::Result<Option<String>> {
    let mut head = BytesMut::with_capacity(512);
    loop {
        let n = stream.read_buf(&mut head).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

async fn respond(
    stream: &mut WriteHalf,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let content_type = if content_type.is_empty() {
        "text/plain; charset=utf-8"
    } else {
        content_type
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
