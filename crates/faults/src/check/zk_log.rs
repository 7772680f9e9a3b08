//! Apache ZooKeeper's transaction log, read as Keeper's is ([`crate::check::standing`] walks
//! either): the server's own order of creates, deletes and session ends.
//!
//! Format (`FileTxnLog`, files `DATADIR/version-2/log.<first zxid, hex>`): a header (`int`
//! magic `ZKLG`, `int` version 2, `long` dbid), then records `long` checksum, `int` length,
//! that many bytes of txn, one `0x42` byte; a zero length ends the file (the rest is
//! preallocated zeros). A txn is a `TxnHeader` (`long` clientId, `int` cxid, `long` zxid,
//! `long` time, `int` type) and the type's record, in jute (big-endian numbers, strings and
//! buffers as an `int` length and bytes, vectors as an `int` count and elements); a digest may
//! follow, which is not read. Only what the checkers need is decoded: creates (an ephemeral
//! one is owned by the header's client id), deletes, session ends and multis of those; every
//! other type becomes a check (changes nothing).

use std::path::Path;

use bytes::Bytes;
use lockkeeper_proto::OpCode;
use lockkeeper_server::Txn;

const MAGIC: &[u8; 4] = b"ZKLG";

/// Every txn in the log files of `dir` (a `version-2` directory), in zxid order, with its
/// zxid. A file that is not a ZooKeeper log, or a record cut short, is an error naming it.
pub(crate) fn history(dir: &Path) -> Result<Vec<(i64, Txn)>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("log."))
        })
        .collect();
    files.sort_by_key(|path| {
        path.extension()
            .and_then(|e| e.to_str())
            .and_then(|hex| i64::from_str_radix(hex, 16).ok())
            .unwrap_or(0)
    });
    let mut history = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        read_file(&bytes, &mut history).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    history.sort_by_key(|(zxid, _)| *zxid);
    Ok(history)
}

fn read_file(bytes: &[u8], out: &mut Vec<(i64, Txn)>) -> Result<(), String> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(4)? != MAGIC {
        return Err("not a ZooKeeper transaction log (no ZKLG magic)".into());
    }
    r.int()?; // version
    r.long()?; // dbid
    while r.at + 12 <= bytes.len() {
        let at = r.at;
        r.long()?; // checksum
        let len = r.int()?;
        if len <= 0 {
            break; // preallocated zeros: the end
        }
        let txn = r
            .take(len as usize)
            .map_err(|_| format!("record at {at} cut short"))?;
        if r.take(1)? != [0x42] {
            return Err(format!("record at {at} has no end-of-record byte"));
        }
        let mut t = Reader { bytes: txn, at: 0 };
        let (client, zxid, kind) = header(&mut t)?;
        out.push((zxid, record(&mut t, kind, client)?));
    }
    Ok(())
}

/// The header's client id, zxid and type.
fn header(t: &mut Reader) -> Result<(i64, i64, i32), String> {
    let client = t.long()?;
    t.int()?; // cxid
    let zxid = t.long()?;
    t.long()?; // time
    Ok((client, zxid, t.int()?))
}

/// A txn of type `kind` (an [`OpCode`], as ZooKeeper logs them).
fn record(t: &mut Reader, kind: i32, client: i64) -> Result<Txn, String> {
    Ok(match OpCode::try_from(kind) {
        Ok(OpCode::Create | OpCode::Create2 | OpCode::CreateTtl) => {
            let path = t.string()?;
            let data = t.buffer()?;
            t.acls()?;
            let ephemeral = t.take(1)? != [0];
            Txn::Create {
                path,
                data: Some(Bytes::copy_from_slice(data)),
                acl: Vec::new(),
                ephemeral_owner: if ephemeral { client } else { 0 },
            }
        }
        Ok(OpCode::CreateContainer) => {
            let path = t.string()?;
            let data = t.buffer()?;
            Txn::Create {
                path,
                data: Some(Bytes::copy_from_slice(data)),
                acl: Vec::new(),
                ephemeral_owner: 0,
            }
        }
        Ok(OpCode::Delete) => Txn::Delete { path: t.string()? },
        Ok(OpCode::CloseSession) => Txn::CloseSession { session_id: client },
        Ok(OpCode::Multi) => {
            let count = t.int()?;
            let mut parts = Vec::new();
            for _ in 0..count.max(0) {
                let kind = t.int()?;
                let data = t.buffer()?;
                let mut part = Reader { bytes: data, at: 0 };
                parts.push(record(&mut part, kind, client)?);
            }
            Txn::Multi(parts)
        }
        _ => Txn::Check {
            path: String::new(),
        },
    })
}

/// Jute, big-endian, over a byte slice.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("{n} bytes wanted at {}", self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn int(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn long(&mut self) -> Result<i64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn buffer(&mut self) -> Result<&'a [u8], String> {
        let len = self.int()?;
        if len < 0 {
            return Ok(&[]);
        }
        self.take(len as usize)
    }

    fn string(&mut self) -> Result<String, String> {
        let bytes = self.buffer()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "a path that is not UTF-8".to_string())
    }

    /// A vector of ACLs (`int` perms, scheme, id), skipped.
    fn acls(&mut self) -> Result<(), String> {
        let count = self.int()?;
        for _ in 0..count.max(0) {
            self.int()?;
            self.string()?;
            self.string()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jute for a test record.
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as i32).to_be_bytes());
        out.extend(s.as_bytes());
    }

    fn create(path: &str, data: &str, ephemeral: bool) -> Vec<u8> {
        let mut out = Vec::new();
        string(&mut out, path);
        string(&mut out, data);
        out.extend(1i32.to_be_bytes()); // one ACL
        out.extend(31i32.to_be_bytes());
        string(&mut out, "world");
        string(&mut out, "anyone");
        out.push(u8::from(ephemeral));
        out.extend(0i32.to_be_bytes()); // parentCVersion
        out
    }

    fn record(client: i64, zxid: i64, kind: i32, body: &[u8]) -> Vec<u8> {
        let mut txn = Vec::new();
        txn.extend(client.to_be_bytes());
        txn.extend(0i32.to_be_bytes());
        txn.extend(zxid.to_be_bytes());
        txn.extend(0i64.to_be_bytes());
        txn.extend(kind.to_be_bytes());
        txn.extend(body);
        let mut out = Vec::new();
        out.extend(0i64.to_be_bytes()); // checksum, not checked
        out.extend((txn.len() as i32).to_be_bytes());
        out.extend(txn);
        out.push(0x42);
        out
    }

    #[test]
    fn creates_deletes_session_ends_and_multis_are_read_in_order() {
        let mut file = Vec::new();
        file.extend(MAGIC);
        file.extend(2i32.to_be_bytes());
        file.extend(0i64.to_be_bytes());
        file.extend(record(
            7,
            1,
            OpCode::Create2 as i32,
            &create("/v", "commit", true),
        ));
        let mut multi = Vec::new();
        multi.extend(2i32.to_be_bytes());
        multi.extend((OpCode::Delete as i32).to_be_bytes());
        let mut delete = Vec::new();
        string(&mut delete, "/old");
        multi.extend((delete.len() as i32).to_be_bytes());
        multi.extend(&delete);
        multi.extend((OpCode::Create as i32).to_be_bytes());
        let created = create("/d", "x", false);
        multi.extend((created.len() as i32).to_be_bytes());
        multi.extend(&created);
        file.extend(record(8, 2, OpCode::Multi as i32, &multi));
        file.extend(record(7, 3, OpCode::CloseSession as i32, &[]));
        file.extend([0u8; 64]); // preallocated
        let mut read = Vec::new();
        read_file(&file, &mut read).unwrap();
        assert_eq!(read.len(), 3);
        assert!(matches!(
            &read[0],
            (1, Txn::Create { path, ephemeral_owner: 7, .. }) if path == "/v"
        ));
        assert!(matches!(
            &read[1],
            (2, Txn::Multi(parts)) if matches!(&parts[0], Txn::Delete { path } if path == "/old")
                && matches!(&parts[1], Txn::Create { ephemeral_owner: 0, .. })
        ));
        assert_eq!(read[2], (3, Txn::CloseSession { session_id: 7 }));
        assert!(read_file(b"NOPE", &mut Vec::new()).is_err());
        let mut cut = file.clone();
        cut.truncate(40);
        assert!(read_file(&cut, &mut Vec::new()).is_err());
    }
}
