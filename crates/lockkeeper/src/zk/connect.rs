//! Establishing one ZooKeeper session, bounded by the connection timeout, and saying why not.
//!
//! The client tries the hosts of a connect string until the connection timeout and names what
//! each one answered at the socket. Here one attempt lasts at most the connection timeout. If the session is not established within a short grace period, each
//! host is probed alongside: a TCP connection, then ZooKeeper's handshake (a connect request
//! for a new session, closed again at once if the server grants it). So a failure names every
//! host and what happened there: refused, timed out, silent, or not ZooKeeper at all. A host
//! that answers but is not ZooKeeper will not become one by waiting, so when every host is of
//! that kind the attempt fails at once; refused and silent hosts are tried until the timeout,
//! as a server that is starting (or an ensemble electing a leader) comes up in that time.

use std::time::Duration;

use bytes::Bytes;
use lockkeeper_proto::{ConnectRequest, ConnectResponse, Jute, Reader, encode_frame};
use lockkeeper_zk_client::Client;
use tokio::time::Instant;

use crate::connect::{Answer, ask, combine, dial, shown};
use crate::error::{ConnectCause, Error, Result};

/// The opcode of closeSession, to end the probe's session at once.
const CLOSE_SESSION: i32 = -11;

/// The hosts of a connect string (`host:port,host:port/chroot`), each as `host:port`.
pub(crate) fn hosts(connect_string: &str) -> Result<Vec<String>> {
    lockkeeper_zk_client::hosts(connect_string).map_err(|err| match err {
        lockkeeper_zk_client::Error::BadArguments(why) => Error::InvalidArgument(why),
        other => Error::Zk(other),
    })
}

/// The settings of one attempt.
pub(crate) struct Attempt<'a> {
    pub connect_string: &'a str,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
}

impl Attempt<'_> {
    /// Establishes a session within the connection timeout, or fails naming each host and why.
    pub(crate) async fn connect(&self) -> Result<Client> {
        let hosts = hosts(self.connect_string)?;
        let limit = self.connection_timeout;
        let deadline = Instant::now() + limit;
        let connecting = Client::connector()
            .session_timeout(self.session_timeout)
            .connection_timeout(limit)
            // As Curator creates its namespace: otherwise the first lock would fail with a
            // bare NoNode that names no path.
            .create_chroot(true)
            .connect(self.connect_string);
        tokio::pin!(connecting);
        // A healthy server answers well within this; only then is a probe worth its cost.
        let grace = (limit / 5).min(Duration::from_secs(1));
        tokio::select! {
            connected = &mut connecting => return self.outcome(connected, &hosts, deadline, None).await,
            () = tokio::time::sleep(grace) => {}
        }
        // The probes end by the deadline on their own (each step is bounded by it). A client
        // that gives up meanwhile (at the deadline, as the probes do) is answered with what
        // they find: probes started afresh then would have no time left.
        let probing = self.probe_all(&hosts, deadline);
        tokio::pin!(probing);
        let probes = tokio::select! {
            connected = &mut connecting => {
                let probes = match connected {
                    Ok(client) => return Ok(client),
                    Err(_) => (&mut probing).await,
                };
                return self.outcome(connected, &hosts, deadline, Some(probes)).await;
            }
            probes = &mut probing => probes,
        };
        // A host that answers, but not as ZooKeeper, will not become one by waiting.
        let hopeless = probes
            .iter()
            .all(|(_, probe)| matches!(probe, Probe::Fails(ConnectCause::NotZooKeeper(_))));
        if !hopeless {
            tokio::select! {
                connected = &mut connecting => {
                    return self.outcome(connected, &hosts, deadline, Some(probes)).await;
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
        Err(self.error(&hosts, combine(self.causes(probes, None))))
    }

    /// The client, or the error for a connect the client library ended before the deadline:
    /// each host's cause from `probes`, or from probes run now in the time left.
    async fn outcome(
        &self,
        connected: std::result::Result<Client, lockkeeper_zk_client::Error>,
        hosts: &[String],
        deadline: Instant,
        probes: Option<Vec<(String, Probe)>>,
    ) -> Result<Client> {
        let err = match connected {
            Ok(client) => return Ok(client),
            // A malformed connect string will not get better by retrying.
            Err(err @ lockkeeper_zk_client::Error::BadArguments(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "connect string {:?}: {err}",
                    self.connect_string
                )));
            }
            Err(err) => err,
        };
        let probes = match probes {
            Some(probes) => probes,
            // Bounded by the deadline, step by step.
            None => self.probe_all(hosts, deadline).await,
        };
        Err(self.error(hosts, combine(self.causes(probes, Some(&err)))))
    }

    /// The cause of each host's failure. A host that serves ZooKeeper fine failed for the
    /// client library's reason (`err`), or by not establishing the session in time.
    fn causes(
        &self,
        probes: Vec<(String, Probe)>,
        err: Option<&lockkeeper_zk_client::Error>,
    ) -> Vec<(String, ConnectCause)> {
        probes
            .into_iter()
            .map(|(host, probe)| {
                let cause = match (probe, err) {
                    (Probe::Fails(cause), _) => cause,
                    (Probe::Serving, Some(err)) => {
                        ConnectCause::Other(format!("a ZooKeeper server answers, but: {err}"))
                    }
                    (Probe::Serving, None) => ConnectCause::Other(format!(
                        "a ZooKeeper server answers, but no session was established within {:?}",
                        self.connection_timeout
                    )),
                };
                (host, cause)
            })
            .collect()
    }

    fn error(&self, hosts: &[String], cause: ConnectCause) -> Error {
        Error::Connect {
            address: hosts.join(","),
            cause,
        }
    }

    /// Probes every host at once; each answer is in the order of `hosts`.
    async fn probe_all(&self, hosts: &[String], deadline: Instant) -> Vec<(String, Probe)> {
        let probes = hosts
            .iter()
            .map(|host| async move { (host.clone(), self.probe(host, deadline).await) });
        futures_util::future::join_all(probes).await
    }

    /// What `host` is: a ZooKeeper server that grants sessions, or the cause a connection
    /// there fails with.
    async fn probe(&self, host: &str, deadline: Instant) -> Probe {
        let limit = self.connection_timeout;
        let mut stream = match dial(host, deadline, limit).await {
            Ok(stream) => stream,
            Err(cause) => return Probe::Fails(cause),
        };
        let mut question = Vec::with_capacity(64);
        let timeout = i32::try_from(self.session_timeout.as_millis()).unwrap_or(i32::MAX);
        encode_frame(&mut question, |out| {
            ConnectRequest::new_session(timeout).write(out)
        });
        // A connect response is 4 bytes of length and 36 or 37 of record.
        let answer = match ask(&mut stream, &question, 41, deadline, limit).await {
            Ok(Answer::Bytes(bytes)) => bytes,
            Ok(Answer::Closed) => {
                return Probe::Fails(ConnectCause::Rejected(
                    "it closed the connection without answering ZooKeeper's handshake \
                     (a ZooKeeper server that is not serving: no quorum, or too many \
                     connections from this address; or not ZooKeeper at all)"
                        .into(),
                ));
            }
            Err(cause) => return Probe::Fails(cause),
        };
        let Some(response) = connect_response(&answer) else {
            return Probe::Fails(ConnectCause::NotZooKeeper(shown(&answer)));
        };
        if response.timeout <= 0 {
            return Probe::Fails(ConnectCause::Rejected(
                "it refused to open a session".into(),
            ));
        }
        // End the probe's session now rather than leave it to expire. Best effort: if this
        // does not arrive, the server expires the session after its timeout.
        let mut close = Vec::with_capacity(12);
        encode_frame(&mut close, |out| {
            1i32.write(out);
            CLOSE_SESSION.write(out);
        });
        let _ = tokio::time::timeout_at(deadline, async {
            use tokio::io::AsyncWriteExt;
            stream.write_all(&close).await
        })
        .await;
        Probe::Serving
    }
}

/// What a probe found at one host.
enum Probe {
    /// A ZooKeeper server that granted the probe a session.
    Serving,
    /// A connection there fails, for this reason.
    Fails(ConnectCause),
}

/// The connect response in `answer`, if it is one: a frame whose length fits the record.
fn connect_response(answer: &[u8]) -> Option<ConnectResponse> {
    let length = i32::from_be_bytes(answer.get(..4)?.try_into().ok()?);
    if !(36..=37).contains(&length) {
        return None;
    }
    let record = answer.get(4..4 + length as usize)?;
    let response = ConnectResponse::read(&mut Reader::new(Bytes::copy_from_slice(record))).ok()?;
    (response.protocol_version == 0 && response.passwd.len() == 16).then_some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_get_the_default_port_and_lose_the_chroot() {
        assert_eq!(
            hosts("a:1,b,[::1]:3,[::1]/app/x").unwrap(),
            ["a:1", "b:2181", "[::1]:3", "[::1]:2181"]
        );
        assert!(matches!(hosts("a:1,,b:2"), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn only_a_connect_response_is_one() {
        let mut frame = Vec::new();
        encode_frame(&mut frame, |out| {
            ConnectResponse {
                protocol_version: 0,
                timeout: 4000,
                session_id: 7,
                passwd: Bytes::from_static(&[1; 16]),
                read_only: Some(false),
            }
            .write(out)
        });
        assert_eq!(connect_response(&frame).map(|r| r.session_id), Some(7));
        assert!(connect_response(b"-ERR unknown command 'x'\r\n").is_none());
        assert!(connect_response(b"HTTP/1.1 400 Bad Request\r\n\r\n").is_none());
    }
}
