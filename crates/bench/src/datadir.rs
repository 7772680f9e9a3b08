//! What a server has written to its data directory: complete snapshots, snapshots still being
//! written, and transaction log segments, read off the file names.
//!
//! Keeper keeps `snapshot.<zxid>` (written as `snapshot.<zxid>.tmp`, then renamed) and
//! `log.<zxid>` directly in its data directory; Apache ZooKeeper keeps files of the same names in
//! `version-2/` below it. The recovery and snapshot benchmarks poll this to know when a snapshot
//! exists or is in progress, and report the sizes they found.

use std::fs;
use std::io;
use std::path::Path;

/// One snapshot or log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataFile {
    /// The zxid in the file name: the last txn in a snapshot, the first in a log segment.
    pub zxid: i64,
    /// Apparent size; log segments are preallocated, so this is an upper bound of what they hold.
    pub bytes: u64,
}

/// The snapshot and log files of a data directory, each list sorted by zxid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    pub snapshots: Vec<DataFile>,
    /// Snapshots being written (`.tmp`): present only while a snapshot is in progress.
    pub partial_snapshots: Vec<DataFile>,
    pub logs: Vec<DataFile>,
}

/// What a file name says about the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    Snapshot(i64),
    PartialSnapshot(i64),
    Log(i64),
}

/// `snapshot.<hex>`, `snapshot.<hex>.tmp`, `log.<hex>`; anything else is not ours to count.
fn parse_name(name: &str) -> Option<Name> {
    let hex = |s: &str| {
        (!s.is_empty() && s.len() <= 16)
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
            .map(|v| v as i64)
    };
    if let Some(rest) = name.strip_prefix("snapshot.") {
        return match rest.strip_suffix(".tmp") {
            Some(zxid) => hex(zxid).map(Name::PartialSnapshot),
            None => hex(rest).map(Name::Snapshot),
        };
    }
    name.strip_prefix("log.").and_then(hex).map(Name::Log)
}

impl Layout {
    /// Reads `data_dir` and, if present, `data_dir/version-2` (ZooKeeper's place).
    pub(crate) fn scan(data_dir: &Path) -> io::Result<Layout> {
        let mut layout = Layout::default();
        layout.add_dir(data_dir)?;
        let zookeeper = data_dir.join("version-2");
        if zookeeper.is_dir() {
            layout.add_dir(&zookeeper)?;
        }
        layout.snapshots.sort_by_key(|f| f.zxid);
        layout.partial_snapshots.sort_by_key(|f| f.zxid);
        layout.logs.sort_by_key(|f| f.zxid);
        Ok(layout)
    }

    fn add_dir(&mut self, dir: &Path) -> io::Result<()> {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().and_then(parse_name) else {
                continue;
            };
            // A file renamed or removed between the listing and here is simply skipped.
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let file = |zxid| DataFile {
                zxid,
                bytes: meta.len(),
            };
            match name {
                Name::Snapshot(z) => self.snapshots.push(file(z)),
                Name::PartialSnapshot(z) => self.partial_snapshots.push(file(z)),
                Name::Log(z) => self.logs.push(file(z)),
            }
        }
        Ok(())
    }

    /// The complete snapshot with the highest zxid.
    pub(crate) fn newest_snapshot(&self) -> Option<DataFile> {
        self.snapshots.last().copied()
    }

    pub(crate) fn snapshot_bytes(&self) -> u64 {
        self.snapshots.iter().map(|f| f.bytes).sum()
    }

    pub(crate) fn log_bytes(&self) -> u64 {
        self.logs.iter().map(|f| f.bytes).sum()
    }
}

/// The epoch half of a zxid (it changes at every start of Keeper, at every election in ZooKeeper).
pub(crate) fn epoch(zxid: i64) -> i64 {
    zxid >> 32
}

/// Txns between two zxids of the same epoch, `None` across epochs (the counter restarts).
pub(crate) fn txns_between(from: i64, to: i64) -> Option<i64> {
    (epoch(from) == epoch(to) && to >= from).then_some(to - from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_both_servers_parse() {
        assert_eq!(
            parse_name("snapshot.0000000100000abc"),
            Some(Name::Snapshot(0x1_0000_0abc))
        );
        assert_eq!(
            parse_name("snapshot.0000000100000abc.tmp"),
            Some(Name::PartialSnapshot(0x1_0000_0abc))
        );
        assert_eq!(parse_name("log.100000001"), Some(Name::Log(0x1_0000_0001)));
        // ZooKeeper's initial snapshot and unpadded names.
        assert_eq!(parse_name("snapshot.0"), Some(Name::Snapshot(0)));
        assert_eq!(parse_name("acceptedEpoch"), None);
        assert_eq!(parse_name("snapshot."), None);
        assert_eq!(parse_name("snapshot.xyz"), None);
        assert_eq!(parse_name("log.1.tmp"), None);
        assert_eq!(parse_name("snapshot.11112222333344445"), None, "17 digits");
    }

    #[test]
    fn scan_finds_files_in_either_place_sorted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        fs::write(d.join("snapshot.0000000100000010"), [0u8; 10]).expect("write");
        fs::write(d.join("snapshot.0000000100000002"), [0u8; 3]).expect("write");
        fs::write(d.join("snapshot.0000000100000020.tmp"), [0u8; 5]).expect("write");
        fs::write(d.join("log.0000000100000001"), [0u8; 7]).expect("write");
        fs::write(d.join("README"), [0u8; 100]).expect("write");
        fs::create_dir(d.join("version-2")).expect("mkdir");
        fs::write(d.join("version-2/log.1"), [0u8; 11]).expect("write");
        let layout = Layout::scan(d).expect("scan");
        assert_eq!(
            layout.snapshots.iter().map(|f| f.zxid).collect::<Vec<_>>(),
            vec![0x1_0000_0002, 0x1_0000_0010]
        );
        assert_eq!(
            layout.newest_snapshot(),
            Some(DataFile {
                zxid: 0x1_0000_0010,
                bytes: 10
            })
        );
        assert_eq!(layout.partial_snapshots.len(), 1);
        assert_eq!(
            layout.logs.iter().map(|f| f.zxid).collect::<Vec<_>>(),
            vec![1, 0x1_0000_0001]
        );
        assert_eq!(layout.snapshot_bytes(), 13);
        assert_eq!(layout.log_bytes(), 18);
    }

    #[test]
    fn txn_counts_only_within_an_epoch() {
        assert_eq!(txns_between(0x1_0000_0010, 0x1_0000_0110), Some(0x100));
        assert_eq!(txns_between(0x1_0000_0010, 0x2_0000_0110), None);
        assert_eq!(txns_between(0x1_0000_0010, 0x1_0000_0001), None);
    }
}
