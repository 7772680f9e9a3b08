//! Establishing one ZooKeeper session, bounded by the connection timeout, and saying why not.
//!
//! The client library tries the hosts of a connect string until the connection timeout and
//! reports, for each host, what it found at the socket: refused, no connection, no answer to
//! the handshake, an answer that is not ZooKeeper's, a closed connection, or a session
//! refused. Hosts that answer but are not ZooKeeper fail the attempt at once (waiting will not
//! make them ZooKeeper); refused and silent hosts are tried until the timeout, as a server that
//! is starting (or an ensemble electing a leader) comes up in that time. This module turns
//! that report into [`Error::Connect`], one cause per host, in the connect string's order.

use std::time::Duration;

use lockkeeper_zk_client::{Client, HostFailure, TlsFiles};

use crate::error::{ConnectCause, Error, Result};
use crate::probe::combine;

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
    pub tls: Option<&'a TlsFiles>,
    pub sasl: Option<&'a (String, String)>,
}

impl Attempt<'_> {
    /// Establishes a session within the connection timeout, or fails naming each host and why.
    pub(crate) async fn connect(&self) -> Result<Client> {
        let hosts = hosts(self.connect_string)?;
        let mut connector = Client::connector();
        if let Some(files) = self.tls {
            connector = connector.tls(files.clone());
        }
        if let Some((user, password)) = self.sasl {
            connector = connector.sasl_digest(user, password);
        }
        let connected = connector
            .session_timeout(self.session_timeout)
            .connection_timeout(self.connection_timeout)
            // As Curator creates its namespace: otherwise the first lock would fail with a
            // bare NoNode that names no path.
            .create_chroot(true)
            .connect(self.connect_string)
            .await;
        let cause = match connected {
            Ok(client) => return Ok(client),
            // A malformed connect string will not get better by retrying.
            Err(err @ lockkeeper_zk_client::Error::BadArguments(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "connect string {:?}: {err}",
                    self.connect_string
                )));
            }
            // Refused credentials will not get better by retrying either.
            Err(err @ lockkeeper_zk_client::Error::AuthFailed) => return Err(Error::Zk(err)),
            Err(lockkeeper_zk_client::Error::Connect { failures, .. }) => {
                combine(in_order(&hosts, failures))
            }
            // A session was established, and then something else failed (creating the
            // chroot, say).
            Err(err) => ConnectCause::Other(format!("a ZooKeeper server answers, but: {err}")),
        };
        Err(Error::Connect {
            address: hosts.join(","),
            cause,
        })
    }
}

/// Each host's cause, in the order of `hosts`; a host the client never got to is said to be.
fn in_order(hosts: &[String], failures: Vec<(String, HostFailure)>) -> Vec<(String, ConnectCause)> {
    hosts
        .iter()
        .map(|host| {
            let cause = failures
                .iter()
                .find(|(tried, _)| tried == host)
                .map_or_else(
                    || ConnectCause::Other("not tried before the connection timeout".into()),
                    |(_, why)| cause(why),
                );
            (host.clone(), cause)
        })
        .collect()
}

/// The library's cause for what the client found at one host.
fn cause(failure: &HostFailure) -> ConnectCause {
    match failure {
        HostFailure::Refused => ConnectCause::Refused,
        HostFailure::ConnectTimedOut(after) => ConnectCause::TimedOut(*after),
        HostFailure::NoAnswer(after) => ConnectCause::NoAnswer(*after),
        HostFailure::NotZooKeeper(what) => ConnectCause::NotZooKeeper(what.clone()),
        HostFailure::Closed | HostFailure::SessionRefused => {
            ConnectCause::Rejected(failure.to_string())
        }
        HostFailure::Tls(what) | HostFailure::Io(what) => ConnectCause::Other(what.clone()),
    }
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
    fn causes_follow_the_connect_string_and_name_a_host_not_tried() {
        let hosts = ["a:1".to_owned(), "b:2".to_owned(), "c:3".to_owned()];
        let failures = vec![
            (
                "c:3".to_owned(),
                HostFailure::NotZooKeeper("it answered \"x\"".into()),
            ),
            ("a:1".to_owned(), HostFailure::Refused),
        ];
        let causes = in_order(&hosts, failures);
        assert_eq!(causes[0], ("a:1".to_owned(), ConnectCause::Refused));
        assert!(
            matches!(&causes[1], (h, ConnectCause::Other(why)) if h == "b:2" && why.contains("not tried"))
        );
        assert!(matches!(&causes[2], (h, ConnectCause::NotZooKeeper(_)) if h == "c:3"));
        assert!(matches!(
            cause(&HostFailure::Closed),
            ConnectCause::Rejected(_)
        ));
    }
}
