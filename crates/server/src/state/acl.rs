//! Access control: who a connection is (its auth ids) and what a node's ACL lets it do.
//!
//! Auth ids belong to the *connection*, as in ZooKeeper: a client re-sends its `auth` packets
//! after reconnecting, and a session moved to a new connection does not inherit them.
//! Schemes: `world` (anyone), `auth` (whoever created the node; expanded at write time), `digest`
//! (user:base64(sha1(user:password))), `ip` (address or CIDR block) and `x509` (the subject of
//! the client certificate a connection to the secure port presented, in RFC 2253 form, as
//! ZooKeeper's `X509AuthenticationProvider` names it) and `sasl` (the user name a SASL exchange
//! authenticated; the SASL user `super` matches every `sasl` entry, as in ZooKeeper), plus a
//! super user whose digest is given at start.

use std::net::IpAddr;

use base64::Engine;
use lockkeeper_proto::{Acl, ErrorCode, Id};
use sha1::{Digest, Sha1};

/// The identities one connection has proven.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuthIds {
    ids: Vec<Id>,
    is_super: bool,
}

impl AuthIds {
    /// Every connection is implicitly authenticated by its address under the `ip` scheme, and
    /// by its client certificate's subject, if it presented one, under `x509`.
    pub(crate) fn for_peer(peer: IpAddr, x509: Option<String>) -> AuthIds {
        let mut ids = vec![Id {
            scheme: "ip".into(),
            id: peer.to_string(),
        }];
        ids.extend(x509.map(|subject| Id {
            scheme: "x509".into(),
            id: subject,
        }));
        AuthIds {
            ids,
            is_super: false,
        }
    }

    /// Handles an `auth` packet. `Err(AuthFailed)` for a scheme Keeper does not know; ZooKeeper
    /// closes the connection after that answer, and so does the caller.
    pub(crate) fn add(
        &mut self,
        scheme: &str,
        auth: &[u8],
        super_digest: Option<&str>,
    ) -> Result<(), ErrorCode> {
        match scheme {
            "digest" => {
                let id = digest(&String::from_utf8_lossy(auth));
                if super_digest == Some(id.as_str()) {
                    self.is_super = true;
                    self.push(Id {
                        scheme: "super".into(),
                        id: String::new(),
                    });
                }
                self.push(Id {
                    scheme: "digest".into(),
                    id,
                });
                Ok(())
            }
            // Proving an address you already connect from adds nothing, but is accepted.
            "ip" => Ok(()),
            _ => Err(ErrorCode::AuthFailed),
        }
    }

    /// The connection authenticated as `user` with SASL.
    pub(crate) fn add_sasl(&mut self, user: String) {
        self.push(Id {
            scheme: "sasl".into(),
            id: user,
        });
    }

    fn push(&mut self, id: Id) {
        if !self.ids.contains(&id) {
            self.ids.push(id);
        }
    }

    pub(crate) fn ids(&self) -> &[Id] {
        &self.ids
    }

    /// ZooKeeper's `checkACL`: an empty ACL or the super user passes; otherwise some entry must
    /// grant `perm` to `world:anyone` or to one of this connection's ids.
    pub(crate) fn check(&self, acl: &[Acl], perm: i32) -> Result<(), ErrorCode> {
        if acl.is_empty() || self.is_super {
            return Ok(());
        }
        let granted = acl.iter().filter(|a| a.perms & perm != 0).any(|a| {
            (a.id.scheme == "world" && a.id.id == "anyone")
                || self
                    .ids
                    .iter()
                    .any(|mine| mine.scheme == a.id.scheme && id_matches(&a.id, &mine.id))
        });
        if granted {
            Ok(())
        } else {
            Err(ErrorCode::NoAuth)
        }
    }

    /// Validates an ACL given in a create or setACL and expands the `auth` scheme into this
    /// connection's authenticated ids (`digest` and `x509`, not `ip`, as ZooKeeper does),
    /// dropping duplicates.
    pub(crate) fn fixup(&self, acl: &[Acl]) -> Result<Vec<Acl>, ErrorCode> {
        if acl.is_empty() {
            return Err(ErrorCode::InvalidAcl);
        }
        let mut out: Vec<Acl> = Vec::with_capacity(acl.len());
        let mut add = |a: Acl| {
            if !out.contains(&a) {
                out.push(a);
            }
        };
        for a in acl {
            match a.id.scheme.as_str() {
                "world" if a.id.id == "anyone" => add(a.clone()),
                "digest" if a.id.id.split(':').count() == 2 => add(a.clone()),
                "ip" if parse_ip_pattern(&a.id.id).is_some() => add(a.clone()),
                "x509" if !a.id.id.is_empty() => add(a.clone()),
                "sasl" if valid_sasl_id(&a.id.id) => add(a.clone()),
                "auth" => {
                    let mut any = false;
                    for id in self
                        .ids
                        .iter()
                        .filter(|id| matches!(id.scheme.as_str(), "digest" | "x509" | "sasl"))
                    {
                        any = true;
                        add(Acl {
                            perms: a.perms,
                            id: id.clone(),
                        });
                    }
                    if !any {
                        return Err(ErrorCode::InvalidAcl);
                    }
                }
                _ => return Err(ErrorCode::InvalidAcl),
            }
        }
        Ok(out)
    }
}

/// `user:password` -> `user:base64(sha1(user:password))`, the digest scheme's stored id.
pub(crate) fn digest(user_password: &str) -> String {
    let user = user_password.split(':').next().unwrap_or_default();
    let hash = Sha1::digest(user_password.as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// ZooKeeper's check of a `sasl` ACL id (a Kerberos name's shape): `user`, `service/host`,
/// `user@REALM` or `service/host@REALM`.
fn valid_sasl_id(id: &str) -> bool {
    let (name, realm) = match id.split_once('@') {
        Some((name, realm)) => (name, Some(realm)),
        None => (id, None),
    };
    let (user, host) = match name.split_once('/') {
        Some((user, host)) => (user, Some(host)),
        None => (name, None),
    };
    !id.is_empty()
        && !user.contains(['/', '@'])
        && host.is_none_or(|h| !h.contains(['/', '@']))
        && realm.is_none_or(|r| !r.contains(['/', '@']))
}

fn id_matches(acl_id: &Id, mine: &str) -> bool {
    match acl_id.scheme.as_str() {
        // ZooKeeper's SASLAuthenticationProvider: the SASL user `super` matches every entry.
        "sasl" => mine == "super" || acl_id.id == mine,
        "ip" => match (parse_ip_pattern(&acl_id.id), mine.parse::<IpAddr>()) {
            (Some((net, bits)), Ok(addr)) => ip_in(addr, net, bits),
            _ => false,
        },
        _ => acl_id.id == mine,
    }
}

/// "10.0.0.1" or "10.0.0.0/8" -> (address, prefix bits).
fn parse_ip_pattern(pattern: &str) -> Option<(IpAddr, u32)> {
    let (addr, bits) = match pattern.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits.parse::<u32>().ok()?)),
        None => (pattern, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some((addr, bits))
}

fn ip_in(addr: IpAddr, net: IpAddr, bits: u32) -> bool {
    let (a, n, width) = match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - bits;
    (a >> shift) == (n >> shift)
}

/// The ACL a client gets for `world:anyone` with every permission.
pub(crate) use lockkeeper_proto::open_acl;

#[cfg(test)]
mod tests {
    use super::*;
    use lockkeeper_proto::perms;

    fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            id: Id {
                scheme: scheme.into(),
                id: id.into(),
            },
        }
    }

    #[test]
    fn digest_matches_zookeepers_known_value() {
        // The super digest from ZooKeeper's Administrator's Guide example.
        assert_eq!(digest("super:test"), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
    }

    #[test]
    fn digest_acl_admits_only_its_user() {
        let mut alice = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        alice.add("digest", b"alice:secret", None).unwrap();
        let bob = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        let node = vec![acl(perms::READ, "digest", &digest("alice:secret"))];
        assert_eq!(alice.check(&node, perms::READ), Ok(()));
        assert_eq!(alice.check(&node, perms::WRITE), Err(ErrorCode::NoAuth));
        assert_eq!(bob.check(&node, perms::READ), Err(ErrorCode::NoAuth));
    }

    #[test]
    fn ip_acl_matches_cidr_blocks() {
        let local = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        assert_eq!(
            local.check(&[acl(perms::ALL, "ip", "127.0.0.0/8")], perms::READ),
            Ok(())
        );
        assert_eq!(
            local.check(&[acl(perms::ALL, "ip", "10.0.0.0/8")], perms::READ),
            Err(ErrorCode::NoAuth)
        );
    }

    #[test]
    fn super_digest_passes_everything() {
        let mut root = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        let sup = digest("super:test");
        root.add("digest", b"super:test", Some(&sup)).unwrap();
        assert_eq!(
            root.check(&[acl(perms::READ, "digest", "x:y")], perms::ADMIN),
            Ok(())
        );
    }

    #[test]
    fn fixup_expands_auth_and_rejects_bad_acls() {
        let anon = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        assert_eq!(
            anon.fixup(&[acl(perms::ALL, "auth", "")]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(anon.fixup(&[]), Err(ErrorCode::InvalidAcl));
        assert_eq!(
            anon.fixup(&[acl(perms::ALL, "world", "someone")]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            anon.fixup(&[acl(perms::ALL, "nope", "x")]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            anon.fixup(&[acl(perms::ALL, "ip", "300.1.1.1")]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            anon.fixup(&[acl(perms::ALL, "digest", "no-hash")]),
            Err(ErrorCode::InvalidAcl)
        );
        let given = [
            acl(perms::READ, "digest", "bob:aGFzaA=="),
            acl(perms::READ, "ip", "10.0.0.0/8"),
        ];
        assert_eq!(anon.fixup(&given), Ok(given.to_vec()));
        let mut alice = anon.clone();
        alice.add("digest", b"alice:pw", None).unwrap();
        let fixed = alice
            .fixup(&[acl(perms::ALL, "auth", ""), acl(perms::ALL, "auth", "")])
            .unwrap();
        assert_eq!(fixed, vec![acl(perms::ALL, "digest", &digest("alice:pw"))]);
    }

    #[test]
    fn x509_acl_admits_only_its_subject_and_auth_expands_to_it() {
        let alice = AuthIds::for_peer(
            "127.0.0.1".parse().unwrap(),
            Some("CN=alice,O=Example".into()),
        );
        let bob = AuthIds::for_peer(
            "127.0.0.1".parse().unwrap(),
            Some("CN=bob,O=Example".into()),
        );
        let plain = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
        let only_alice = [acl(perms::READ, "x509", "CN=alice,O=Example")];
        assert_eq!(alice.check(&only_alice, perms::READ), Ok(()));
        assert_eq!(bob.check(&only_alice, perms::READ), Err(ErrorCode::NoAuth));
        assert_eq!(
            plain.check(&only_alice, perms::READ),
            Err(ErrorCode::NoAuth)
        );
        // Only world's `anyone` is anyone: an x509 id that happens to read "anyone" is one
        // certificate's.
        let named_anyone = [acl(perms::READ, "x509", "anyone")];
        assert_eq!(
            plain.check(&named_anyone, perms::READ),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(alice.fixup(&only_alice), Ok(only_alice.to_vec()));
        assert_eq!(
            alice.fixup(&[acl(perms::ALL, "auth", "")]),
            Ok(vec![acl(perms::ALL, "x509", "CN=alice,O=Example")])
        );
        assert_eq!(
            plain.fixup(&[acl(perms::ALL, "x509", "")]),
            Err(ErrorCode::InvalidAcl)
        );
    }

    #[test]
    fn sasl_acl_admits_its_user_and_sasl_super_and_auth_expands_to_it() {
        let sasl = |user: &str| {
            let mut ids = AuthIds::for_peer("127.0.0.1".parse().unwrap(), None);
            ids.add_sasl(user.into());
            ids
        };
        let only = [acl(perms::READ, "sasl", "jaasuser")];
        assert_eq!(sasl("jaasuser").check(&only, perms::READ), Ok(()));
        assert_eq!(
            sasl("bob").check(&only, perms::READ),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(sasl("super").check(&only, perms::READ), Ok(()));
        assert_eq!(
            sasl("jaasuser").fixup(&[acl(perms::ALL, "auth", "")]),
            Ok(vec![acl(perms::ALL, "sasl", "jaasuser")])
        );
        for valid in ["user", "service/host.name.com", "user@KERB.REALM", "s/h@R"] {
            assert!(
                sasl("x").fixup(&[acl(perms::ALL, "sasl", valid)]).is_ok(),
                "{valid}"
            );
        }
        for invalid in ["", "user@KERB.REALM/server.com", "user@R1@R2"] {
            assert_eq!(
                sasl("x").fixup(&[acl(perms::ALL, "sasl", invalid)]),
                Err(ErrorCode::InvalidAcl),
                "{invalid}"
            );
        }
    }

    #[test]
    fn unknown_auth_scheme_fails() {
        let mut ids = AuthIds::default();
        assert_eq!(ids.add("kerberos", b"x", None), Err(ErrorCode::AuthFailed));
    }
}
