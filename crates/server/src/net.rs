//! Net: the sockets, where requests come in and replies go out.
//!
//! - [`accept`]: the accept loop, with the per-address connection limit.
//! - [`connection`]: one client socket: the handshake, framing and decoding of requests (sent
//!   to the core), and the writer task.
//! - [`outbox`]: a connection's messages from the core, held until the log is durable as far
//!   as each reveals, then written in request order; a waiter on the durable mark, and the
//!   core's `ReplyQueue` (the core's `reply` module says what a message is).
//! - [`socket`]: a connection's reading and writing ends, over plain TCP or TLS.
//! - [`tls`]: the secure listener's certificates (reloadable), TLS sessions and `x509` ids.
//! - [`four_letter`]: the plain-text admin words (`ruok`, `mntr`, ...), formatted from the
//!   core's view.
//! - [`metrics_http`]: `GET /metrics` on its own listener, formatted from the core's numbers.

pub(crate) mod accept;
pub(crate) mod connection;
pub(crate) mod four_letter;
pub(crate) mod metrics_http;
pub(crate) mod outbox;
pub(crate) mod socket;
pub(crate) mod tls;
