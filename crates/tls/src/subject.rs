//! A certificate's subject as ZooKeeper's `x509` ACL scheme names it: what its
//! `X509AuthenticationProvider` takes as the id, Java's `X500Principal.getName()`, which is RFC
//! 2253's form: the most specific name first, `CN=client,O=Example`; attribute types outside
//! RFC 2253's list as the dotted OID with the value's DER in hex (`1.2.840.113549.1.9.1=#16...`).

/// The subject of the DER certificate `cert` in RFC 2253 form (see the module doc); `None` if
/// it does not parse (a verified chain always does).
pub fn x509_id(cert: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(rfc2253(cert.subject()))
}

fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    use x509_parser::der_parser::asn1_rs::ToDer;
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type();
                    let value = attr.attr_value();
                    match (short_name(&oid.to_id_string()), value.as_str()) {
                        (Some(key), Ok(text)) => format!("{key}={}", escape(text)),
                        // Unknown types, or values that are not strings: the OID and the
                        // value's DER in hex, as RFC 2253 says.
                        _ => format!(
                            "{}=#{}",
                            oid.to_id_string(),
                            hex(&value.to_der_vec().unwrap_or_default())
                        ),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// RFC 2253's keywords, which Java's `X500Principal.getName()` also uses.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// RFC 2253's escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
