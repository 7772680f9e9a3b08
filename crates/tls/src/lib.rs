//! TLS for lockkeeper's ZooKeeper client and for Keeper, the server: rustls (TLS 1.2 and 1.3
//! only, with the `ring` provider) over tokio's `TcpStream`, shaped for code that writes to a
//! socket from any thread and never waits on it.
//!
//! Layout:
//! - [`Stream`] (`stream.rs`): one connection after its handshake, the socket and its rustls
//!   session under one lock; `try_write`, `try_read_buf` and `try_flush` never wait.
//! - [`ServerFiles`] and [`ClientFiles`] (`files.rs`): PEM files to rustls configurations, with
//!   errors that name the file and what is wrong with it.
//! - [`x509_id`] (`subject.rs`): a certificate's subject as ZooKeeper's `x509` ACL scheme
//!   names it (RFC 2253).
//! - `testing` (feature `testing`): a CA made at run time that issues PEM certificates, for
//!   tests.

mod files;
mod stream;
mod subject;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use files::{ClientFiles, ServerFiles};
pub use rustls::pki_types::ServerName;
pub use rustls::{ClientConfig, ServerConfig};
pub use stream::Stream;
pub use subject::x509_id;
