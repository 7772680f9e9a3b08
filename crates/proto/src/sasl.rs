//! SASL DIGEST-MD5 (RFC 2831) as ZooKeeper uses it: the tokens its two steps carry in
//! [`SaslToken`](crate::SaslToken)s (opcode 102), for a server and a client alike.
//!
//! ZooKeeper runs the JDK's DIGEST-MD5 with fixed parameters, so every client and server agree
//! on: the service `zookeeper`, the realm and server name `zk-sasl-md5` (hence the digest-uri
//! `zookeeper/zk-sasl-md5`), quality of protection `auth` only (no integrity or encryption
//! layer), `charset=utf-8` and `algorithm=md5-sess`.
//!
//! The exchange, after the session's handshake:
//! 1. the client sends an empty token; the server answers the challenge
//!    `realm="zk-sasl-md5",nonce="…",charset=utf-8,algorithm=md5-sess` ([`challenge`]);
//! 2. the client answers with its digest-response ([`client_response`]): its user name, a
//!    cnonce, and the response value that proves the password; the server checks it
//!    ([`Directives::parse`], [`response_value`]) and answers `rspauth=…`, which proves to the
//!    client that the server knows the password too. Nothing more is sent.
//!
//! A failed step is answered with `AuthFailed` and a null token, and the connection closed.

use std::collections::HashMap;

use md5::{Digest as _, Md5};

/// The realm, and the server name in the digest-uri, that ZooKeeper fixes.
pub const REALM: &str = "zk-sasl-md5";
/// The digest-uri every ZooKeeper client sends: `service/server-name`.
pub const DIGEST_URI: &str = "zookeeper/zk-sasl-md5";
/// The longest digest-response a server reads (the JDK's limit).
pub const MAX_RESPONSE: usize = 4096;

/// The server's challenge with `nonce` (step 1's answer), byte for byte as ZooKeeper's.
pub fn challenge(nonce: &str) -> String {
    format!("realm=\"{REALM}\",nonce=\"{nonce}\",charset=utf-8,algorithm=md5-sess")
}

/// The directives of a challenge or a digest-response: lower-cased keys, unquoted values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Directives(HashMap<String, Vec<u8>>);

impl Directives {
    /// Parses `key=value` pairs separated by commas; values quoted (`"…"`, with `\` escaping
    /// the next byte) or not. Errors: a key given twice, a quote left open, a key without `=`.
    pub fn parse(text: &[u8]) -> Result<Directives, String> {
        let mut out = HashMap::new();
        let mut i = 0;
        let skip_space = |i: &mut usize| {
            while *i < text.len() && matches!(text[*i], b' ' | b'\t' | b'\r' | b'\n' | b',') {
                *i += 1;
            }
        };
        loop {
            skip_space(&mut i);
            if i >= text.len() {
                return Ok(Directives(out));
            }
            let start = i;
            while i < text.len() && text[i] != b'=' && text[i] != b',' {
                i += 1;
            }
            if i >= text.len() || text[i] != b'=' {
                return Err(format!(
                    "a directive without '=': {:?}",
                    String::from_utf8_lossy(&text[start..i])
                ));
            }
            let key = String::from_utf8_lossy(&text[start..i])
                .trim()
                .to_ascii_lowercase();
            i += 1;
            while i < text.len() && matches!(text[i], b' ' | b'\t') {
                i += 1;
            }
            let mut value = Vec::new();
            if i < text.len() && text[i] == b'"' {
                i += 1;
                loop {
                    match text.get(i) {
                        None => return Err(format!("the value of {key:?} is not closed")),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') if i + 1 < text.len() => {
                            value.push(text[i + 1]);
                            i += 2;
                        }
                        Some(&byte) => {
                            value.push(byte);
                            i += 1;
                        }
                    }
                }
            } else {
                while i < text.len() && !matches!(text[i], b',' | b' ' | b'\t' | b'\r' | b'\n') {
                    value.push(text[i]);
                    i += 1;
                }
            }
            if out.insert(key.clone(), value).is_some() {
                return Err(format!("{key:?} is given twice"));
            }
        }
    }

    /// The value of `key` (lower case), if given.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.0.get(key).map(Vec::as_slice)
    }
}

/// The inputs of a response value (RFC 2831 2.1.2.1), as the client sent them.
#[derive(Debug, Clone, Copy)]
pub struct Digest<'a> {
    /// Who authenticates.
    pub username: &'a [u8],
    /// The realm the client named (ZooKeeper's [`REALM`]).
    pub realm: &'a [u8],
    /// The user's password.
    pub password: &'a [u8],
    /// The server's nonce, from the challenge.
    pub nonce: &'a [u8],
    /// The client's nonce.
    pub cnonce: &'a [u8],
    /// The nonce count, 8 hex digits.
    pub nc: &'a str,
    /// The quality of protection: `auth`.
    pub qop: &'a str,
    /// The digest-uri as the client spelled it ([`DIGEST_URI`]).
    pub digest_uri: &'a [u8],
    /// Only when the client sent one (the Java client does; kazoo does not).
    pub authzid: Option<&'a [u8]>,
}

/// The response value for `digest`: with `method` `"AUTHENTICATE"` the client's `response`,
/// with `""` the server's `rspauth`. 32 lower-case hex digits.
///
/// `A1 = H(user:realm:password) ":" nonce ":" cnonce [":" authzid]` (the inner hash raw, not
/// hex), `A2 = method ":" digest-uri`, and the value is
/// `HEX(H(HEX(H(A1)) ":" nonce ":" nc ":" cnonce ":" qop ":" HEX(H(A2))))`.
pub fn response_value(method: &str, digest: &Digest<'_>) -> String {
    let inner = Md5::new()
        .chain_update(digest.username)
        .chain_update(b":")
        .chain_update(digest.realm)
        .chain_update(b":")
        .chain_update(digest.password)
        .finalize();
    let mut a1 = Md5::new()
        .chain_update(inner)
        .chain_update(b":")
        .chain_update(digest.nonce)
        .chain_update(b":")
        .chain_update(digest.cnonce);
    if let Some(authzid) = digest.authzid {
        a1 = a1.chain_update(b":").chain_update(authzid);
    }
    let ha1 = hex(&a1.finalize());
    let ha2 = hex(&Md5::new()
        .chain_update(method.as_bytes())
        .chain_update(b":")
        .chain_update(digest.digest_uri)
        .finalize());
    hex(&Md5::new()
        .chain_update(ha1.as_bytes())
        .chain_update(b":")
        .chain_update(digest.nonce)
        .chain_update(b":")
        .chain_update(digest.nc.as_bytes())
        .chain_update(b":")
        .chain_update(digest.cnonce)
        .chain_update(b":")
        .chain_update(digest.qop.as_bytes())
        .chain_update(b":")
        .chain_update(ha2.as_bytes())
        .finalize())
}

/// A client's step 2: its digest-response to `challenge` for `username` and `password` with
/// the client nonce `cnonce`, and the `rspauth=…` the server must answer with (anything else
/// means the server does not know the password). Errors name what the challenge lacks.
pub fn client_response(
    challenge: &[u8],
    username: &str,
    password: &str,
    cnonce: &str,
) -> Result<(String, String), String> {
    let directives = Directives::parse(challenge)?;
    let nonce = directives
        .get("nonce")
        .ok_or("the challenge has no nonce")?;
    let realm = directives.get("realm").unwrap_or(REALM.as_bytes());
    if let Some(qop) = directives.get("qop")
        && !qop.split(|&b| b == b',').any(|q| q.trim_ascii() == b"auth")
    {
        return Err(format!(
            "the server offers qop {:?}, not auth",
            String::from_utf8_lossy(qop)
        ));
    }
    let digest = Digest {
        username: username.as_bytes(),
        realm,
        password: password.as_bytes(),
        nonce,
        cnonce: cnonce.as_bytes(),
        nc: "00000001",
        qop: "auth",
        digest_uri: DIGEST_URI.as_bytes(),
        authzid: None,
    };
    let response = format!(
        "charset=utf-8,username=\"{}\",realm=\"{}\",nonce=\"{}\",nc=00000001,cnonce=\"{cnonce}\",\
         digest-uri=\"{DIGEST_URI}\",response={},qop=auth",
        quote(username),
        quote(&String::from_utf8_lossy(realm)),
        String::from_utf8_lossy(nonce),
        response_value("AUTHENTICATE", &digest),
    );
    Ok((response, format!("rspauth={}", response_value("", &digest))))
}

/// `value` with `"` and `\` escaped, for a quoted directive.
fn quote(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest<'a>(authzid: Option<&'a [u8]>) -> Digest<'a> {
        Digest {
            username: b"jaasuser",
            realm: REALM.as_bytes(),
            password: b"jaas_password",
            nonce: b"OA6MG9tEQGm2hh",
            cnonce: b"OA6MHXh6VqTrRk",
            nc: "00000001",
            qop: "auth",
            digest_uri: DIGEST_URI.as_bytes(),
            authzid,
        }
    }

    #[test]
    fn rfc_2831s_example_values() {
        let imap = Digest {
            username: b"chris",
            realm: b"elwood.innosoft.com",
            password: b"secret",
            nonce: b"OA6MG9tEQGm2hh",
            cnonce: b"OA6MHXh6VqTrRk",
            nc: "00000001",
            qop: "auth",
            digest_uri: b"imap/elwood.innosoft.com",
            authzid: None,
        };
        assert_eq!(
            response_value("AUTHENTICATE", &imap),
            "d388dad90d4bbd760a152321f2143af7"
        );
        assert_eq!(
            response_value("", &imap),
            "ea40f60335c427b5527b84dbabcdfffd"
        );
    }

    /// The values ZooKeeper's JDK server computes for kazoo (no authzid) and for the Java
    /// client (authzid = user name).
    #[test]
    fn zookeeper_values_with_and_without_authzid() {
        assert_eq!(
            response_value("AUTHENTICATE", &digest(None)),
            "b0c76e9ae0974fc98c918431bf931ff0"
        );
        assert_eq!(
            response_value("", &digest(None)),
            "17eb1283d2f243987b228884466ddb48"
        );
        let java = digest(Some(b"jaasuser"));
        assert_eq!(
            response_value("AUTHENTICATE", &java),
            "c484151caa2f19ecd58b05dd806b7499"
        );
        assert_eq!(
            response_value("", &java),
            "93ebe1aac8808856548251a797555a37"
        );
    }

    /// A response as pure-sasl (kazoo's SASL library) sends it.
    #[test]
    fn directives_parse_as_clients_send_them() {
        let sent = br#"qop=auth,realm="zk-sasl-md5",username="jaasuser",nonce="OA6MG9tEQGm2hh",cnonce="1234567890123",nc=00000001,digest-uri="zookeeper/zk-sasl-md5",response=7faaad51a0090d8966238c5b3230c8c6"#;
        let d = Directives::parse(sent).unwrap();
        assert_eq!(d.get("username"), Some(&b"jaasuser"[..]));
        assert_eq!(d.get("nc"), Some(&b"00000001"[..]));
        assert_eq!(d.get("digest-uri"), Some(DIGEST_URI.as_bytes()));
        let check = Digest {
            cnonce: b"1234567890123",
            ..digest(None)
        };
        assert_eq!(
            d.get("response"),
            Some(response_value("AUTHENTICATE", &check).as_bytes())
        );
        let escaped = Directives::parse(br#"Username="a\"b" , realm = x"#).unwrap();
        assert_eq!(escaped.get("username"), Some(&b"a\"b"[..]));
        assert_eq!(escaped.get("realm"), Some(&b"x"[..]));
        assert!(Directives::parse(b"a=1,A=2").unwrap_err().contains("twice"));
        assert!(
            Directives::parse(b"a=\"open")
                .unwrap_err()
                .contains("not closed")
        );
        assert!(Directives::parse(b"novalue").is_err());
    }

    #[test]
    fn a_client_answers_the_challenge_and_knows_the_servers_proof() {
        let (response, rspauth) = client_response(
            challenge("OA6MG9tEQGm2hh").as_bytes(),
            "jaasuser",
            "jaas_password",
            "OA6MHXh6VqTrRk",
        )
        .unwrap();
        let d = Directives::parse(response.as_bytes()).unwrap();
        assert_eq!(
            d.get("response"),
            Some(&b"b0c76e9ae0974fc98c918431bf931ff0"[..])
        );
        assert_eq!(rspauth, "rspauth=17eb1283d2f243987b228884466ddb48");
        assert!(client_response(b"realm=\"x\"", "u", "p", "c").is_err());
        assert!(client_response(b"nonce=\"n\",qop=\"auth-conf\"", "u", "p", "c").is_err());
    }
}
