//! Znode path rules: what a valid path is.
//!
//! The rules are ZooKeeper's (`PathUtils.validatePath`), so a path the Java client rejects is
//! rejected by Keeper when a raw client sends it, and by lockkeeper's client before it is sent.

/// Checks `path` as ZooKeeper does before any write. `Err` carries the reason for logs; the
/// client sees `BadArguments`.
pub fn validate(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("path length must be > 0");
    }
    if !path.starts_with('/') {
        return Err("path must start with / character");
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("path must not end with / character");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return Err("empty node name specified"),
            "." | ".." => return Err("relative paths not allowed"),
            _ => {}
        }
    }
    if path.chars().any(is_forbidden_char) {
        return Err("invalid character in path");
    }
    Ok(())
}

/// ZooKeeper refuses the Java `char`s `\u0000`-`\u001F` (controls), `\u007F`-`\u009F` (DEL and
/// the C1 block), `\uD800`-`\uF8FF` (surrogates and the private use area) and `\uFFF0`-`\uFFFF`
/// (specials, U+FFFD among them: a path that is not UTF-8 decodes to it, here as in Java).
///
/// A Rust `char` is never a surrogate, but every character outside the Basic Multilingual Plane
/// is a surrogate pair to Java, so ZooKeeper refuses all of them, emoji included.
fn is_forbidden_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}' | '\u{10000}'..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_zookeeper_accepts() {
        for ok in [
            "/",
            "/a",
            "/a/b",
            "/a.b",
            "/..a",
            "/a..",
            "/zookeeper",
            "/ünïcode",
            "/\u{20}\u{a0}",
            "/\u{d7ff}",
            "/\u{f900}",
            "/\u{ffef}",
        ] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_what_zookeeper_rejects() {
        for bad in [
            "",
            "a",
            "/a/",
            "//a",
            "/a//b",
            "/.",
            "/a/..",
            "/a/./b",
            "/a\u{0}b",
            "/a\u{1}",
            "/\u{85}",
            "/\u{fff5}",
            "/\u{1f}",
            "/\u{7f}",
            "/\u{9f}",
            "/\u{e000}",
            "/\u{f8ff}",
            "/\u{fff0}",
            "/\u{fffd}",
            "/\u{ffff}",
            "/\u{10000}",
            "/a\u{1f512}b",
            "/\u{10ffff}",
        ] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
    }
}
