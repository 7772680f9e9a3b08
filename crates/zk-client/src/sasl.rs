//! The client's side of SASL DIGEST-MD5 (see [`lockkeeper_proto::sasl`]), run on a new
//! connection right after the session's handshake and before any other request, as ZooKeeper's
//! own clients run it: an empty token, the server's challenge, the digest-response, and the
//! server's proof that it knows the password too. On every connection again: the server
//! authenticates connections, not sessions.

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{
    ErrorCode, Jute, OpCode, Reader, ReplyHeader, RequestHeader, SaslToken, decode_frame,
    encode_frame, sasl,
};

use crate::error::HostFailure;
use crate::socket::Socket;

/// A SASL password: never shown by `Debug`.
#[derive(Clone)]
pub(crate) struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Why an exchange ended without authenticating.
pub(crate) enum Refusal {
    /// The server refused the credentials, or could not prove it knows them: no other server
    /// of the ensemble will take them either.
    Credentials(String),
    /// The connection failed on the way.
    Host(HostFailure),
}

/// Runs the exchange for `user` with `password` on `stream`, reading into `buf` (whatever
/// follows the last answer stays there). `xid` numbers the two requests.
pub(crate) async fn authenticate(
    stream: &Socket,
    buf: &mut BytesMut,
    mut xid: impl FnMut() -> i32,
    user: &str,
    password: &str,
) -> Result<(), Refusal> {
    let challenge = step(stream, buf, xid(), Bytes::new()).await?;
    let cnonce = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 30]>());
    let (response, proof) = sasl::client_response(&challenge, user, password, &cnonce)
        .map_err(|why| Refusal::Credentials(format!("the server's challenge: {why}")))?;
    let answer = step(stream, buf, xid(), Bytes::from(response)).await?;
    if answer != proof.as_bytes() {
        return Err(Refusal::Credentials(
            "the server did not prove it knows the password (a wrong rspauth)".into(),
        ));
    }
    Ok(())
}

/// Sends one token and reads the server's answer to it.
async fn step(
    stream: &Socket,
    buf: &mut BytesMut,
    xid: i32,
    token: Bytes,
) -> Result<Bytes, Refusal> {
    let mut frame = Vec::new();
    encode_frame(&mut frame, |body| {
        RequestHeader {
            xid,
            op: OpCode::Sasl.code(),
        }
        .write(body);
        SaslToken { token: Some(token) }.write(body);
    });
    stream
        .write_all(&frame)
        .await
        .map_err(|err| Refusal::Host(HostFailure::Io(format!("sending a SASL step: {err}"))))?;
    let body = loop {
        match decode_frame(buf, crate::session::MAX_FRAME) {
            Ok(Some(body)) => break body,
            Ok(None) => {}
            Err(err) => {
                return Err(Refusal::Host(HostFailure::Io(format!(
                    "a SASL answer: {err}"
                ))));
            }
        }
        match stream.read_buf(buf).await {
            // ZooKeeper before 3.6 closed the connection on bad credentials, unanswered.
            Ok(0) => {
                return Err(Refusal::Credentials(
                    "the server closed the connection during SASL".into(),
                ));
            }
            Ok(_) => {}
            Err(err) => return Err(Refusal::Host(HostFailure::Io(err.to_string()))),
        }
    };
    let mut r = Reader::new(body);
    let unreadable =
        |what: &str| Refusal::Host(HostFailure::Io(format!("an unreadable SASL {what}")));
    let header = ReplyHeader::read(&mut r).map_err(|_| unreadable("header"))?;
    if header.xid != xid {
        return Err(Refusal::Host(HostFailure::Io(format!(
            "a SASL answer for xid {} to the request {xid}",
            header.xid
        ))));
    }
    if header.err != 0 {
        let code = ErrorCode::try_from(header.err)
            .map_or_else(|code| format!("error {code}"), |code| format!("{code:?}"));
        return Err(Refusal::Credentials(format!("the server answered {code}")));
    }
    let answer = SaslToken::read(&mut r).map_err(|_| unreadable("token"))?;
    Ok(answer.token.unwrap_or_default())
}
