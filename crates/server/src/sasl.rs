//! SASL DIGEST-MD5 on Keeper, as ZooKeeper offers it: the users a server knows ([`SaslUsers`],
//! read from a JAAS-style file as ZooKeeper's `DigestLoginModule` reads them) and one
//! connection's exchange ([`Exchange`]). The tokens and the hash are
//! [`lockkeeper_proto::sasl`]'s.
//!
//! Invariants: an exchange belongs to one connection and authenticates that connection only
//! (as `auth` does), so a client runs it again after every reconnection; the first token is
//! always answered with the challenge and only the digest-response can fail, so a client that
//! sends a bad user or password learns it from that step; a failed exchange is answered
//! `AuthFailed` and ends the connection, never the session.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use base64::Engine as _;
use bytes::Bytes;
use lockkeeper_proto::sasl::{self, Digest, Directives};

/// The users a server authenticates with SASL DIGEST-MD5, and their passwords.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SaslUsers {
    users: BTreeMap<String, String>,
}

/// Names the users, never their passwords.
impl std::fmt::Debug for SaslUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslUsers")
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl SaslUsers {
    /// These users, with their passwords.
    pub fn new<U: Into<String>, P: Into<String>>(
        users: impl IntoIterator<Item = (U, P)>,
    ) -> SaslUsers {
        SaslUsers {
            users: users
                .into_iter()
                .map(|(u, p)| (u.into(), p.into()))
                .collect(),
        }
    }

    /// The users of the `Server` section of the JAAS file at `path`, as ZooKeeper reads them
    /// (`java.security.auth.login.config`): every option `user_NAME="password"` of every login
    /// module in the section is a user. Errors name the file and, for a syntax error, the line.
    pub fn from_jaas_file(path: &Path) -> io::Result<SaslUsers> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        SaslUsers::from_jaas(&text, "Server").map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {e}", path.display()),
            )
        })
    }

    /// The users of the JAAS configuration `text`'s section `section` (see
    /// [`SaslUsers::from_jaas_file`]); an error when the section is missing or has no user.
    pub fn from_jaas(text: &str, section: &str) -> Result<SaslUsers, String> {
        let sections = jaas::parse(text)?;
        let options = sections
            .into_iter()
            .find(|(name, _)| name == section)
            .map(|(_, options)| options)
            .ok_or_else(|| format!("no {section:?} section"))?;
        let users = SaslUsers::new(
            options
                .into_iter()
                .filter_map(|(key, value)| Some((key.strip_prefix("user_")?.to_owned(), value))),
        );
        if users.users.is_empty() {
            return Err(format!(
                "the {section:?} section names no user (user_NAME=\"password\")"
            ));
        }
        Ok(users)
    }

    fn password(&self, user: &str) -> Option<&str> {
        self.users.get(user).map(String::as_str)
    }
}

/// Where one connection's exchange stands.
#[derive(Debug, Default)]
pub(crate) enum Exchange {
    #[default]
    Idle,
    /// The challenge with this nonce was sent.
    Challenged { nonce: String },
    /// The exchange succeeded; a further step is an error, as in ZooKeeper.
    Done,
}

impl Exchange {
    /// Takes the client's `token` with the server's `users` (none: SASL is not set up): the
    /// token to answer with and, once authenticated, the user name (the connection's `sasl`
    /// id); or why the exchange failed.
    pub(crate) fn step(
        &mut self,
        token: &[u8],
        users: Option<&SaslUsers>,
    ) -> Result<(Bytes, Option<String>), String> {
        let Some(users) = users else {
            return Err("SASL is not set up on this server (serve --jaas-config)".into());
        };
        match std::mem::replace(self, Exchange::Done) {
            // Any first token is the client's (empty) initial response: answered with the
            // challenge.
            Exchange::Idle => {
                let nonce = nonce();
                let challenge = sasl::challenge(&nonce);
                *self = Exchange::Challenged { nonce };
                Ok((Bytes::from(challenge), None))
            }
            Exchange::Challenged { nonce } => {
                let (rspauth, user) = verify(token, &nonce, users)?;
                Ok((Bytes::from(rspauth), Some(user)))
            }
            Exchange::Done => Err("a SASL step after the exchange completed".into()),
        }
    }
}

/// 30 random bytes in base64: the 40 characters the JDK's server sends.
fn nonce() -> String {
    let bytes: [u8; 30] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Checks a digest-response against the challenge's `nonce` and `users`, as the JDK's DIGEST-MD5
/// server does with ZooKeeper's parameters: `rspauth=…` and the user name, or why not.
fn verify(token: &[u8], nonce: &str, users: &SaslUsers) -> Result<(String, String), String> {
    if token.len() > sasl::MAX_RESPONSE {
        return Err(format!(
            "a digest-response of {} bytes, more than {}",
            token.len(),
            sasl::MAX_RESPONSE
        ));
    }
    let d = Directives::parse(token)?;
    let text = |key: &str| d.get(key).map(|v| String::from_utf8_lossy(v).into_owned());
    if let Some(charset) = text("charset")
        && charset != "utf-8"
    {
        return Err(format!("charset {charset:?}, not utf-8"));
    }
    let username = text("username").ok_or("no username")?;
    let realm = text("realm").unwrap_or_default();
    if realm != sasl::REALM {
        return Err(format!("realm {realm:?}, not {:?}", sasl::REALM));
    }
    if d.get("nonce") != Some(nonce.as_bytes()) {
        return Err("not the nonce of this connection's challenge".into());
    }
    let cnonce = d.get("cnonce").ok_or("no cnonce")?;
    if let Some(nc) = text("nc")
        && u32::from_str_radix(&nc, 16) != Ok(1)
    {
        return Err(format!("nonce count {nc:?}, not 1"));
    }
    let qop = text("qop").unwrap_or_else(|| "auth".into());
    if qop != "auth" {
        return Err(format!("qop {qop:?}: only auth is offered"));
    }
    let uri = d.get("digest-uri").ok_or("no digest-uri")?;
    if !uri.eq_ignore_ascii_case(sasl::DIGEST_URI.as_bytes()) {
        return Err(format!(
            "digest-uri {:?}, not {:?}",
            String::from_utf8_lossy(uri),
            sasl::DIGEST_URI
        ));
    }
    let response = d.get("response").ok_or("no response")?;
    let password = users
        .password(&username)
        .ok_or_else(|| format!("no user {username:?}"))?;
    let digest = Digest {
        username: username.as_bytes(),
        realm: realm.as_bytes(),
        password: password.as_bytes(),
        nonce: nonce.as_bytes(),
        cnonce,
        nc: "00000001",
        qop: "auth",
        digest_uri: uri,
        authzid: d.get("authzid"),
    };
    if response != sasl::response_value("AUTHENTICATE", &digest).as_bytes() {
        return Err(format!("a wrong password for {username:?}"));
    }
    Ok((
        format!("rspauth={}", sasl::response_value("", &digest)),
        username,
    ))
}

/// The JAAS login configuration's syntax, as far as users need it:
/// `Name { module flag key=value ... ; ... };`, with `//` and `/* */` comments and quoted values
/// (`\` escaping the next character).
mod jaas {
    /// A section's name and the options (`key`, `value`) of all its login modules, in order.
    pub(super) type Section = (String, Vec<(String, String)>);

    /// Each section of `text`.
    pub(super) fn parse(text: &str) -> Result<Vec<Section>, String> {
        let tokens = tokenize(text)?;
        let mut sections = Vec::new();
        let mut at = 0;
        let next = |at: &mut usize| -> Result<&(Token, usize), String> {
            let token = tokens
                .get(*at)
                .ok_or("the file ends in the middle of a section")?;
            *at += 1;
            Ok(token)
        };
        while at < tokens.len() {
            let (Token::Word(name), line) = next(&mut at)? else {
                return Err(format!(
                    "line {}: a section name expected",
                    tokens[at - 1].1
                ));
            };
            let (name, line) = (name.clone(), *line);
            if !matches!(next(&mut at)?, (Token::Open, _)) {
                return Err(format!("line {line}: '{{' expected after {name:?}"));
            }
            let mut options = Vec::new();
            loop {
                match next(&mut at)? {
                    (Token::Close, _) => break,
                    // A login module: its class, its flag, then options up to ';'.
                    (Token::Word(_), line) => {
                        let line = *line;
                        let (Token::Word(_flag), _) = next(&mut at)? else {
                            return Err(format!("line {line}: a flag (required, ...) expected"));
                        };
                        loop {
                            match next(&mut at)? {
                                (Token::Semicolon, _) => break,
                                (Token::Word(key), line) => {
                                    let line = *line;
                                    if !matches!(next(&mut at)?, (Token::Equals, _)) {
                                        return Err(format!(
                                            "line {line}: '=' expected after {key:?}"
                                        ));
                                    }
                                    let (Token::Word(value) | Token::Quoted(value), _) =
                                        next(&mut at)?
                                    else {
                                        return Err(format!(
                                            "line {line}: a value expected for {key:?}"
                                        ));
                                    };
                                    options.push((key.clone(), value.clone()));
                                }
                                (_, line) => {
                                    return Err(format!("line {line}: an option or ';' expected"));
                                }
                            }
                        }
                    }
                    (_, line) => {
                        return Err(format!("line {line}: a login module or '}}' expected"));
                    }
                }
            }
            if !matches!(next(&mut at)?, (Token::Semicolon, _)) {
                return Err(format!("section {name:?}: ';' expected after '}}'"));
            }
            sections.push((name, options));
        }
        Ok(sections)
    }

    #[derive(Debug, PartialEq)]
    enum Token {
        Word(String),
        Quoted(String),
        Open,
        Close,
        Semicolon,
        Equals,
    }

    /// Tokens with their line numbers.
    fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, String> {
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        let mut line = 1;
        while let Some(c) = chars.next() {
            match c {
                '\n' => line += 1,
                c if c.is_whitespace() => {}
                '{' => tokens.push((Token::Open, line)),
                '}' => tokens.push((Token::Close, line)),
                ';' => tokens.push((Token::Semicolon, line)),
                '=' => tokens.push((Token::Equals, line)),
                '/' if chars.peek() == Some(&'/') => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            line += 1;
                            break;
                        }
                    }
                }
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    let mut last = ' ';
                    loop {
                        let Some(c) = chars.next() else {
                            return Err(format!("line {line}: a comment is not closed"));
                        };
                        if c == '\n' {
                            line += 1;
                        }
                        if last == '*' && c == '/' {
                            break;
                        }
                        last = c;
                    }
                }
                '"' => {
                    let start = line;
                    let mut value = String::new();
                    loop {
                        match chars.next() {
                            None => {
                                return Err(format!("line {start}: a quoted value is not closed"));
                            }
                            Some('"') => break,
                            Some('\\') => match chars.next() {
                                Some('n') => value.push('\n'),
                                Some('t') => value.push('\t'),
                                Some(c) => value.push(c),
                                None => {
                                    return Err(format!(
                                        "line {start}: a quoted value is not closed"
                                    ));
                                }
                            },
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                value.push(c);
                            }
                        }
                    }
                    tokens.push((Token::Quoted(value), start));
                }
                c => {
                    let mut word = String::from(c);
                    while let Some(&c) = chars.peek() {
                        if c.is_whitespace() || matches!(c, '{' | '}' | ';' | '=' | '"') {
                            break;
                        }
                        word.push(c);
                        chars.next();
                    }
                    tokens.push((Token::Word(word), line));
                }
            }
        }
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kazoo's test harness writes this for its SASL tests.
    const KAZOO_JAAS: &str = r#"
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_jaasuser="jaas_password";
};"#;

    #[test]
    fn jaas_files_give_their_servers_users() {
        let users = SaslUsers::from_jaas(KAZOO_JAAS, "Server").unwrap();
        assert_eq!(users.password("jaasuser"), Some("jaas_password"));
        assert_eq!(users.password("super"), Some("super_secret"));
        assert!(!format!("{users:?}").contains("secret"), "{users:?}");
        let two = r#"
            // the client's section comes first here
            Client { org.apache.zookeeper.server.auth.DigestLoginModule required
                     username="bob" password="x"; };
            /* the server's */
            Server { a.B required user_bob="p\"w" debug=true; c.D optional user_eve="e"; };"#;
        let users = SaslUsers::from_jaas(two, "Server").unwrap();
        assert_eq!(users.password("bob"), Some("p\"w"));
        assert_eq!(users.password("eve"), Some("e"));
        assert_eq!(users.password("x"), None);
        for (bad, fault) in [
            ("Client { a.B required; };", "no \"Server\" section"),
            ("Server { a.B required debug=true; };", "names no user"),
            ("Server { a.B required user_x=\"p\" }", "line 1"),
            ("Server {\n a.B required user_x=\"p;\n};", "not closed"),
            ("Server a.B", "'{' expected"),
        ] {
            let err = SaslUsers::from_jaas(bad, "Server").unwrap_err();
            assert!(err.contains(fault), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_jaas_file_is_read_and_a_bad_one_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jaas.conf");
        std::fs::write(&path, KAZOO_JAAS).unwrap();
        let users = SaslUsers::from_jaas_file(&path).unwrap();
        assert_eq!(users.password("jaasuser"), Some("jaas_password"));
        let missing = SaslUsers::from_jaas_file(&dir.path().join("none.conf")).unwrap_err();
        assert!(missing.to_string().contains("none.conf"), "{missing}");
        std::fs::write(&path, "Client { a.B required; };").unwrap();
        let wrong = SaslUsers::from_jaas_file(&path).unwrap_err();
        assert!(wrong.to_string().contains("jaas.conf"), "{wrong}");
        assert!(
            wrong.to_string().contains("no \"Server\" section"),
            "{wrong}"
        );
    }

    /// Step 1, then a digest-response as kazoo's library computes it.
    fn exchange(user: &str, password: &str) -> (Exchange, Result<(Bytes, Option<String>), String>) {
        let users = SaslUsers::from_jaas(KAZOO_JAAS, "Server").unwrap();
        let mut exchange = Exchange::default();
        let (challenge, done) = exchange.step(b"", Some(&users)).unwrap();
        assert!(done.is_none());
        let (response, _) = sasl::client_response(&challenge, user, password, "cnonce").unwrap();
        let answer = exchange.step(response.as_bytes(), Some(&users));
        (exchange, answer)
    }

    #[test]
    fn the_right_password_authenticates_its_user_and_proves_the_server() {
        let users = SaslUsers::from_jaas(KAZOO_JAAS, "Server").unwrap();
        let mut server = Exchange::default();
        let (challenge, _) = server.step(b"", Some(&users)).unwrap();
        let challenge_text = String::from_utf8_lossy(&challenge).into_owned();
        assert!(
            challenge_text.starts_with("realm=\"zk-sasl-md5\",nonce=\""),
            "{challenge_text}"
        );
        assert!(challenge_text.ends_with("\",charset=utf-8,algorithm=md5-sess"));
        let (response, rspauth) =
            sasl::client_response(&challenge, "jaasuser", "jaas_password", "c").unwrap();
        let (answer, user) = server.step(response.as_bytes(), Some(&users)).unwrap();
        assert_eq!(user.as_deref(), Some("jaasuser"));
        assert_eq!(answer, rspauth.as_bytes());
        let again = server.step(b"", Some(&users));
        assert!(again.unwrap_err().contains("after the exchange completed"));
    }

    #[test]
    fn wrong_credentials_and_forged_fields_fail_at_the_response() {
        assert!(
            exchange("jaasuser", "wrong")
                .1
                .unwrap_err()
                .contains("wrong password")
        );
        assert!(
            exchange("baduser", "badpassword")
                .1
                .unwrap_err()
                .contains("no user")
        );
        let users = SaslUsers::from_jaas(KAZOO_JAAS, "Server").unwrap();
        let forged = |edit: &dyn Fn(String) -> String, fault: &str| {
            let mut server = Exchange::default();
            let (challenge, _) = server.step(b"", Some(&users)).unwrap();
            let (response, _) =
                sasl::client_response(&challenge, "jaasuser", "jaas_password", "c").unwrap();
            let err = server
                .step(edit(response).as_bytes(), Some(&users))
                .unwrap_err();
            assert!(err.contains(fault), "{fault}: {err}");
        };
        forged(&|r| r.replace("nonce=\"", "nonce=\"x"), "not the nonce");
        forged(
            &|r| r.replace("zk-sasl-md5\",nonce", "other\",nonce"),
            "realm",
        );
        forged(&|r| r.replace("nc=00000001", "nc=00000002"), "nonce count");
        forged(&|r| r.replace("qop=auth", "qop=auth-conf"), "qop");
        forged(
            &|r| r.replace("zookeeper/zk-sasl-md5", "http/zk-sasl-md5"),
            "digest-uri",
        );
        forged(&|r| r.replace("charset=utf-8", "charset=latin1"), "charset");
        forged(&|r| format!("{r},username=\"x\""), "twice");
        forged(&|r| r.replace("cnonce=\"c\",", ""), "no cnonce");
        forged(&|r| format!("{r},{}", "x".repeat(5000)), "more than");
        // The limit itself is allowed: a response padded to exactly it authenticates.
        let mut server = Exchange::default();
        let (challenge, _) = server.step(b"", Some(&users)).unwrap();
        let (response, _) =
            sasl::client_response(&challenge, "jaasuser", "jaas_password", "c").unwrap();
        let pad = sasl::MAX_RESPONSE - response.len() - ",x=".len();
        let padded = format!("{response},x={}", "y".repeat(pad));
        assert_eq!(padded.len(), sasl::MAX_RESPONSE);
        let (_, user) = server.step(padded.as_bytes(), Some(&users)).unwrap();
        assert_eq!(user.as_deref(), Some("jaasuser"));
        let mut unset = Exchange::default();
        assert!(unset.step(b"", None).unwrap_err().contains("not set up"));
    }
}
