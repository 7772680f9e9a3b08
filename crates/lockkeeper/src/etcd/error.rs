//! [`EtcdError`]: what a request to etcd failed with, and whether that may pass by itself
//! ([`is_transient`]).
//!
//! It is lockkeeper's own type, so that the gRPC stack under the etcd client (tonic, today) is
//! not part of the public API: callers get a message, the gRPC code when etcd (or gRPC on the
//! way) answered with one, and [`Error::is_connection_loss`](crate::Error::is_connection_loss).
//!
//! Invariant: everything that can be in flight when a member goes away, a connection breaks or
//! the cluster has no leader for a moment is transient, so that the recipes retry it (and tell
//! the caller "maybe applied") instead of giving up on a lock they may hold.

use std::fmt;

/// A request to etcd failed: etcd or the gRPC connection to it answered with an error, or
/// nothing answered in time. The message names what happened (etcd's own words when it
/// answered, e.g. `etcdserver: requested lease not found`).
///
/// [`Error::is_connection_loss`](crate::Error::is_connection_loss) tells the failures that may
/// pass by themselves (and whose request may or may not have been applied) from the rest.
#[derive(Debug)]
pub struct EtcdError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// etcd, or gRPC on the way to it, answered with this status.
    Status(tonic::Status),
    /// The connection to a member could not be set up at all.
    Transport(tonic::transport::Error),
    /// No answer: a deadline of lockkeeper's own passed, or a stream closed before it answered.
    NoAnswer(String),
    /// Something on lockkeeper's side failed (not etcd, not the network).
    Internal(String),
}

impl EtcdError {
    /// An answer with a gRPC status other than OK.
    pub(crate) fn status(status: tonic::Status) -> EtcdError {
        EtcdError {
            kind: Kind::Status(status),
        }
    }

    /// A member's address that the gRPC transport refused to connect to.
    pub(crate) fn transport(err: tonic::transport::Error) -> EtcdError {
        EtcdError {
            kind: Kind::Transport(err),
        }
    }

    /// No answer to `what` (a timeout of lockkeeper's, a stream that ended first).
    pub(crate) fn no_answer(what: impl Into<String>) -> EtcdError {
        EtcdError {
            kind: Kind::NoAnswer(what.into()),
        }
    }

    /// A failure on lockkeeper's side, described by `what`.
    pub(crate) fn internal(what: impl Into<String>) -> EtcdError {
        EtcdError {
            kind: Kind::Internal(what.into()),
        }
    }

    /// The gRPC status code etcd (or gRPC on the way) answered with, as gRPC numbers them
    /// (`14` unavailable, `5` not found, ...); `None` when nothing answered.
    pub fn grpc_code(&self) -> Option<i32> {
        match &self.kind {
            Kind::Status(status) => Some(status.code() as i32),
            _ => None,
        }
    }

    /// What etcd (or gRPC on the way) said, when it answered with a status: its message alone.
    pub(crate) fn status_message(&self) -> Option<&str> {
        match &self.kind {
            Kind::Status(status) => Some(status.message()),
            _ => None,
        }
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Status(status) => {
                let mut text = status.message().to_owned();
                // tonic reports a broken or refused connection as a status whose message is a
                // summary ("transport error") and whose sources say what happened: the text
                // carries both, so that the reason reaches whoever reads only the message.
                append_sources(&mut text, std::error::Error::source(status));
                if text.is_empty() {
                    write!(f, "gRPC status {:?}", status.code())
                } else {
                    write!(f, "{text} (gRPC status {:?})", status.code())
                }
            }
            Kind::Transport(err) => {
                let mut text = err.to_string();
                append_sources(&mut text, std::error::Error::source(err));
                write!(f, "cannot set up the connection: {text}")
            }
            Kind::NoAnswer(what) | Kind::Internal(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for EtcdError {}

/// Appends `: cause` for each error of the chain from `source` whose text does not already
/// appear (wrappers often repeat their source's words).
fn append_sources(text: &mut String, mut source: Option<&(dyn std::error::Error + 'static)>) {
    while let Some(err) = source {
        let cause = err.to_string();
        if !cause.is_empty() && !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
        source = err.source();
    }
}

/// Whether `err` may pass by itself: the connection broke, the member went away or was too
/// slow, the cluster had no leader for a moment. Such a request may or may not have been
/// applied.
pub(crate) fn is_transient(err: &EtcdError) -> bool {
    use tonic::Code;
    match &err.kind {
        Kind::Transport(_) | Kind::NoAnswer(_) => true,
        // Cancelled (a timeout of the channel's), deadline exceeded, internal (a reset stream),
        // unavailable; unknown is how tonic reports a broken connection ("transport error",
        // with the I/O error as its source).
        Kind::Status(status) => {
            matches!(
                status.code(),
                Code::Cancelled | Code::DeadlineExceeded | Code::Internal | Code::Unavailable
            ) || (status.code() == Code::Unknown && std::error::Error::source(status).is_some())
        }
        Kind::Internal(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_show_etcds_words_and_the_code() {
        let err = EtcdError::status(tonic::Status::not_found(
            "etcdserver: requested lease not found",
        ));
        assert_eq!(
            err.to_string(),
            "etcdserver: requested lease not found (gRPC status NotFound)"
        );
        assert_eq!(err.grpc_code(), Some(5));
        assert!(!is_transient(&err));
    }

    #[test]
    fn a_broken_connection_is_transient_and_says_why() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = tonic::Status::from_error(Box::new(io));
        let err = EtcdError::status(status);
        assert!(is_transient(&err), "{err}");
        assert!(err.to_string().contains("connection reset"), "{err}");
        // Without a source, "unknown" is etcd's own answer, not a broken connection.
        assert!(!is_transient(&EtcdError::status(tonic::Status::unknown(
            "etcdserver: something"
        ))));
    }

    #[test]
    fn transient_codes_and_missing_answers() {
        for status in [
            tonic::Status::unavailable("etcdserver: no leader"),
            tonic::Status::deadline_exceeded("etcdserver: request timed out"),
            tonic::Status::cancelled("Timeout expired"),
            tonic::Status::internal("h2 protocol error"),
        ] {
            assert!(is_transient(&EtcdError::status(status)));
        }
        assert!(is_transient(&EtcdError::no_answer("no answer within 1s")));
        assert!(!is_transient(&EtcdError::internal("the task failed")));
        assert_eq!(EtcdError::no_answer("x").grpc_code(), None);
    }

    /// A status whose message is a summary and whose source chain says what happened reads as
    /// the summary, then each cause not already in the text, once.
    #[test]
    fn a_summary_status_carries_its_causes_once() {
        #[derive(Debug)]
        struct Summary(std::io::Error);
        impl fmt::Display for Summary {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Summary {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let err = EtcdError::status(tonic::Status::from_error(Box::new(Summary(io))));
        assert_eq!(
            err.to_string(),
            "transport error: connection refused (gRPC status Unknown)"
        );
        assert_eq!(err.status_message(), Some("transport error"));
        assert_eq!(EtcdError::no_answer("no answer").status_message(), None);
    }
}
