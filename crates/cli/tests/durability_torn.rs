//! Damaged data directories: a torn log tail is cut off and the server starts; corruption
//! anywhere else makes it refuse to start, naming the file and offset; a corrupt snapshot is
//! never loaded. `lockkeeper verify` must agree with the server in every case.
//!
//! The damage is done offline to a data directory written by a real server (kill -9 after some
//! acknowledged writes), at record boundaries found by parsing the segment with the format the
//! log is specified in (16-byte header, then `len | crc32c | payload` records until a len of 0).
//! Knowing each record's zxid and each node's czxid tells exactly which nodes must survive a
//! given cut. Positions are drawn from a seeded RNG: the seed is printed and
//! `LOCKKEEPER_TORN_SEED` replays it.

mod support;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::rngs::StdRng;
use zookeeper_client::{Acls, Client, CreateMode};

use support::{
    KeeperProcess, NamedFile, OP_LIMIT, RecordSpan, SegmentEnd, connect, copy_dir, epoch,
    log_segments, read_nodes, read_segment, seeded_rng, snapshots, verify, within,
};

const SEED_ENV: &str = "LOCKKEEPER_TORN_SEED";

/// A node written and acknowledged before the damage.
#[derive(Debug, Clone)]
struct Node {
    path: String,
    data: Vec<u8>,
    czxid: i64,
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// Creates `count` nodes under `parent` one after another (so each has a log record of its
/// own) and returns them with their czxids.
async fn write_nodes(client: &Client, parent: &str, count: usize) -> Vec<Node> {
    within(
        "create",
        OP_LIMIT,
        client.create(parent, b"", &persistent()),
    )
    .await
    .unwrap_or_else(|e| panic!("create {parent}: {e}"));
    let mut nodes = Vec::with_capacity(count);
    for i in 0..count {
        let path = format!("{parent}/n{i:04}");
        let data = format!("{path} written before the damage").into_bytes();
        let (stat, _) = within(
            "create",
            OP_LIMIT,
            client.create(&path, &data, &persistent()),
        )
        .await
        .unwrap_or_else(|e| panic!("create {path}: {e}"));
        nodes.push(Node {
            path,
            data,
            czxid: stat.czxid,
        });
    }
    nodes
}

/// Starts a server on `dir`, writes `count` nodes under `parent`, kills it with SIGKILL.
async fn record_run(dir: &Path, parent: &str, count: usize, extra: &[&str]) -> Vec<Node> {
    let mut server = KeeperProcess::start(dir, extra);
    let client = connect(&server.connect_string()).await;
    let nodes = write_nodes(&client, parent, count).await;
    drop(client);
    server.kill9();
    nodes
}

/// Asserts that exactly the nodes `expect_present` says are there, with their data.
async fn assert_nodes(
    client: &Client,
    nodes: &[Node],
    expect_present: impl Fn(&Node) -> bool,
    case: &str,
) {
    let paths: Vec<String> = nodes.iter().map(|n| n.path.clone()).collect();
    let found = read_nodes(client, &paths, 128).await;
    for (node, found) in nodes.iter().zip(found) {
        match (expect_present(node), found) {
            (true, None) => panic!(
                "{case}: {} (czxid {:#x}) is missing after recovery",
                node.path, node.czxid
            ),
            (true, Some((data, _))) => assert_eq!(
                data, node.data,
                "{case}: {} holds other data after recovery",
                node.path
            ),
            (false, Some(_)) => panic!(
                "{case}: {} (czxid {:#x}) was in the damaged part of the log but is present",
                node.path, node.czxid
            ),
            (false, None) => {}
        }
    }
}

/// The numbers that follow `offset` (as in "at offset 1234") in `text`.
fn offsets_named(text: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("offset") {
        rest = &rest[at + "offset".len()..];
        let digits: String = rest
            .trim_start_matches([' ', ':', '='])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse() {
            found.push(n);
        }
    }
    found
}

/// The last segment and its records, checked to be a clean end left by kill -9.
fn last_segment(dir: &Path) -> (NamedFile, Vec<RecordSpan>) {
    let segments = log_segments(dir);
    let last = segments
        .last()
        .unwrap_or_else(|| panic!("no log segment in {}", dir.display()))
        .clone();
    let parsed = read_segment(&last.path);
    assert!(
        matches!(parsed.end, SegmentEnd::EndMarker(_) | SegmentEnd::Eof(_)),
        "{} as left by kill -9 should end cleanly, parse ended with {:?}",
        last.file_name(),
        parsed.end
    );
    (last, parsed.records)
}

#[derive(Debug, Clone, Copy)]
enum Tear {
    /// The file is cut at this offset (a write that never reached the end, file size included).
    Truncate(u64),
    /// The bytes from this offset to the end of the record are zeros (a partial write into the
    /// preallocated part of the file).
    ZeroFrom(u64),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tail_is_cut_off_and_the_server_starts() {
    let (seed, mut rng) = seeded_rng(SEED_ENV);
    let scratch = tempfile::Builder::new()
        .prefix("lockkeeper-torn-")
        .tempdir()
        .expect("scratch dir");
    let recorded = scratch.path().join("recorded");
    let nodes = record_run(&recorded, "/torn", 120, &[]).await;
    let (segment, records) = last_segment(&recorded);
    assert!(
        records.len() > 100,
        "expected a record per create, got {}",
        records.len()
    );
    let original = fs::read(&segment.path).expect("read the recorded segment");
    // Truncations anywhere in one of the last three records (those after it go too), then
    // inside the len field and inside the crc field of the last record, where a reader has
    // the least to go on; then zero-filled tears of the last record, where a crash mid-write
    // into the preallocated zeros leaves it.
    let trials = [
        "truncate",
        "truncate",
        "truncate in len",
        "truncate in crc",
        "zero",
        "zero",
    ];
    for (trial, kind) in trials.into_iter().enumerate() {
        let back = if kind == "truncate" {
            rng.gen_range(0..3)
        } else {
            0
        };
        let victim = records[records.len() - 1 - back];
        let tear = match kind {
            "truncate" => Tear::Truncate(rng.gen_range(victim.offset + 1..victim.end())),
            "truncate in len" => {
                Tear::Truncate(rng.gen_range(victim.offset + 1..victim.offset + 4))
            }
            "truncate in crc" => {
                Tear::Truncate(rng.gen_range(victim.offset + 4..=victim.offset + 8))
            }
            _ => {
                // Past the len field, so the record still claims its length; moved back to
                // the crc if the bytes there happen to be zeros already (no damage at all).
                let mut from = rng.gen_range(victim.offset + 4..victim.end());
                if original[from as usize..victim.end() as usize]
                    .iter()
                    .all(|&b| b == 0)
                {
                    from = victim.offset + 4;
                }
                Tear::ZeroFrom(from)
            }
        };
        let dir = scratch.path().join(format!("trial-{trial}"));
        copy_dir(&recorded, &dir);
        let file = dir.join(segment.file_name());
        match tear {
            Tear::Truncate(cut) => OpenOptions::new()
                .write(true)
                .open(&file)
                .and_then(|f| f.set_len(cut))
                .expect("truncate the segment"),
            Tear::ZeroFrom(from) => {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&file)
                    .expect("open the segment");
                f.write_all_at(&vec![0u8; (victim.end() - from) as usize], from)
                    .expect("zero the record's tail");
            }
        }
        let case = format!(
            "trial {trial}: {tear:?} in record at offset {} (zxid {:#x}) of {} (seed \
             {SEED_ENV}={seed})",
            victim.offset,
            victim.zxid,
            segment.file_name()
        );
        let reparsed = read_segment(&file);
        assert!(
            matches!(reparsed.end, SegmentEnd::CutShort(at) | SegmentEnd::BadChecksum(at) if at == victim.offset),
            "{case}: the damage is not where intended: {:?}",
            reparsed.end
        );
        // Where the tail is cut, in the words of the spec ("the file name and offset"): the
        // torn record's start, or the first byte the tear destroyed.
        let acceptable = match tear {
            Tear::Truncate(cut) => vec![victim.offset, cut],
            Tear::ZeroFrom(from) => vec![victim.offset, from],
        };

        let verdict = verify(&dir);
        assert_eq!(
            verdict.code,
            Some(0),
            "{case}: verify must accept a torn tail (exit 0); it said:\n{}",
            verdict.text()
        );
        let text = verdict.text();
        assert!(
            text.contains(&segment.file_name())
                && offsets_named(&text).iter().any(|o| acceptable.contains(o)),
            "{case}: verify must say which file and offset a torn tail would be cut at (one \
             of {acceptable:?}); it said:\n{text}"
        );

        let mut server = KeeperProcess::start(&dir, &[]);
        let log = server.stderr_containing("truncated torn tail", Duration::from_secs(10));
        let line = log
            .lines()
            .find(|l| l.contains("truncated torn tail"))
            .unwrap_or_else(|| panic!("{case}: no `truncated torn tail` warning; stderr:\n{log}"));
        assert!(
            line.contains(&segment.file_name())
                && offsets_named(line).iter().any(|o| acceptable.contains(o)),
            "{case}: the warning must name {} and the offset (one of {acceptable:?}): {line}",
            segment.file_name()
        );
        let client = connect(&server.connect_string()).await;
        assert_nodes(&client, &nodes, |n| n.czxid < victim.zxid, &case).await;

        // The server goes on from the cut: a new write, a crash, and a restart that must find
        // a clean log (nothing appended after leftover garbage) with the new write in it.
        let (stat, _) = within(
            "create",
            OP_LIMIT,
            client.create("/after-tear", b"after", &persistent()),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: write after recovery: {e}"));
        assert!(
            epoch(stat.czxid) > epoch(victim.zxid),
            "{case}: zxid {:#x} after restart is not in a new epoch",
            stat.czxid
        );
        drop(client);
        server.kill9();
        let verdict = verify(&dir);
        assert_eq!(
            verdict.code,
            Some(0),
            "{case}: verify after recovery and a new write:\n{}",
            verdict.text()
        );
        let server = KeeperProcess::try_start(&dir, &[]).unwrap_or_else(|failure| {
            panic!("{case}: restart after recovery plus one write failed: {failure}")
        });
        let client = connect(&server.connect_string()).await;
        assert_nodes(&client, &nodes, |n| n.czxid < victim.zxid, &case).await;
        let (data, _) = within("get", OP_LIMIT, client.get_data("/after-tear"))
            .await
            .unwrap_or_else(|e| panic!("{case}: the write made after recovery is lost: {e}"));
        assert_eq!(data, b"after");
        eprintln!("{case}: ok");
    }
}

/// Where a corruption test damages the log.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// A byte of a record's payload, in the middle of the last segment.
    Payload,
    /// A byte of a record's checksum, in the middle of the last segment.
    Crc,
    /// A byte of a record's length, in the middle of the last segment (never to 0, which
    /// would read as the end of the log).
    Len,
    /// A byte of the last segment's magic or version.
    Header,
    /// The last record of an older segment cut short: a torn tail, but not at the end of the
    /// log (a start after a crash cuts a torn tail off before it opens the next segment).
    OlderSegmentTail,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_before_valid_records_refuses_to_start() {
    let (seed, mut rng) = seeded_rng(SEED_ENV);
    let scratch = tempfile::Builder::new()
        .prefix("lockkeeper-corrupt-")
        .tempdir()
        .expect("scratch dir");
    let recorded = scratch.path().join("recorded");
    // Two runs: a short one, then a longer one whose segment is the last.
    record_run(&recorded, "/older", 20, &[]).await;
    record_run(&recorded, "/corrupt", 120, &[]).await;
    let (segment, records) = last_segment(&recorded);
    assert!(
        records.len() > 100,
        "expected a record per create, got {}",
        records.len()
    );
    let segments = log_segments(&recorded);
    let older = segments[..segments.len() - 1]
        .iter()
        .rev()
        .map(|s| (s.clone(), read_segment(&s.path).records))
        .find(|(_, records)| !records.is_empty());
    let trials = [
        Damage::Payload,
        Damage::Payload,
        Damage::Crc,
        Damage::Len,
        Damage::Header,
        Damage::OlderSegmentTail,
    ];
    for (trial, damage) in trials.into_iter().enumerate() {
        let dir = scratch.path().join(format!("trial-{trial}"));
        copy_dir(&recorded, &dir);
        // Which file is damaged, which byte offsets name the damage, and what was done.
        let (damaged, named, what) = match damage {
            Damage::OlderSegmentTail => {
                let Some((older, older_records)) = older.clone() else {
                    // The layout is the server's choice; with one segment there is no older
                    // tail to damage.
                    eprintln!(
                        "trial {trial}: {damage:?} skipped: one segment only ({:?})",
                        segments
                            .iter()
                            .map(NamedFile::file_name)
                            .collect::<Vec<_>>()
                    );
                    continue;
                };
                let victim = *older_records.last().expect("a record");
                let cut = rng.gen_range(victim.offset + 1..victim.end());
                let file = dir.join(older.file_name());
                OpenOptions::new()
                    .write(true)
                    .open(&file)
                    .and_then(|f| f.set_len(cut))
                    .expect("truncate the older segment");
                (
                    older,
                    victim.offset..victim.end(),
                    format!(
                        "{} cut at {cut}, inside its last record (offset {}), with {} after it",
                        segment_label(&segments, &older_records),
                        victim.offset,
                        segment.file_name()
                    ),
                )
            }
            _ => {
                let file = dir.join(segment.file_name());
                let mut bytes = fs::read(&file).expect("read the segment");
                // A record with many valid ones after it: not a tail.
                let victim = records[rng.gen_range(records.len() / 4..records.len() * 3 / 4)];
                let (range, at) = match damage {
                    Damage::Header => (0..12, rng.gen_range(0..12)),
                    Damage::Len => (
                        victim.offset..victim.end(),
                        rng.gen_range(victim.offset..victim.offset + 4),
                    ),
                    Damage::Crc => (
                        victim.offset..victim.end(),
                        rng.gen_range(victim.offset + 4..victim.offset + 8),
                    ),
                    _ => (
                        victim.offset..victim.end(),
                        rng.gen_range(victim.offset + 8..victim.end()),
                    ),
                };
                let at = at as usize;
                let mut flip: u8 = rng.gen_range(1..=255);
                if matches!(damage, Damage::Len) {
                    let len_at = victim.offset as usize;
                    while {
                        let mut len = [0u8; 4];
                        len.copy_from_slice(&bytes[len_at..len_at + 4]);
                        len[at - len_at] ^= flip;
                        u32::from_be_bytes(len) == 0
                    } {
                        flip = flip.wrapping_add(1).max(1);
                    }
                }
                bytes[at] ^= flip;
                fs::write(&file, &bytes).expect("write the damaged segment");
                let what = match damage {
                    Damage::Header => format!("header byte {at} xor {flip:#04x}"),
                    _ => format!(
                        "byte {at} xor {flip:#04x} (record at offset {}, {} more records after \
                         it)",
                        victim.offset,
                        records.iter().filter(|r| r.offset > victim.offset).count()
                    ),
                };
                (segment.clone(), range, what)
            }
        };
        let name = damaged.file_name();
        let file = dir.join(&name);
        let evidence = fs::read(&file).expect("read the damaged file");
        let case = format!("trial {trial}: {damage:?}: {name} {what} (seed {SEED_ENV}={seed})");
        let in_damage = |o: &u64| named.contains(o);

        let verdict = verify(&dir);
        let verify_text = verdict.text();
        assert_eq!(
            verdict.code,
            Some(1),
            "{case}: verify must report corruption (exit 1); it said:\n{verify_text}"
        );
        let verify_offsets: Vec<u64> = verify_text
            .lines()
            .filter(|l| l.contains(&name))
            .flat_map(offsets_named)
            .filter(in_damage)
            .collect();
        assert!(
            !verify_offsets.is_empty(),
            "{case}: verify must name {name} and an offset in {named:?}; it said:\n{verify_text}"
        );

        match KeeperProcess::try_start(&dir, &[]) {
            Ok(server) => panic!(
                "{case}: the server started on a corrupt log; stderr:\n{}",
                server.stderr_text()
            ),
            Err(failure) => {
                let status = failure.status.and_then(|s| s.code());
                assert_eq!(status, Some(1), "{case}: exit status; {failure}");
                let stderr = &failure.stderr;
                let line = stderr
                    .lines()
                    .find(|l| l.contains("corrupt") && l.contains(&name))
                    .unwrap_or_else(|| {
                        panic!("{case}: stderr must say `corrupt ... {name}`:\n{stderr}")
                    });
                let server_offsets: Vec<u64> =
                    offsets_named(line).into_iter().filter(in_damage).collect();
                assert!(
                    server_offsets.iter().any(|o| verify_offsets.contains(o)),
                    "{case}: the refusal must name the offset verify names ({verify_offsets:?}): \
                     {line}"
                );
                assert!(
                    stderr.contains("lockkeeper verify"),
                    "{case}: the refusal should point at `lockkeeper verify`:\n{stderr}"
                );
            }
        }
        // Refusing must not repair: the evidence stays as it was.
        assert!(
            fs::read(&file).expect("reread the damaged file") == evidence,
            "{case}: a refused start modified {name}"
        );
        eprintln!("{case}: ok");
    }
}

/// "segment N of M" for messages.
fn segment_label(segments: &[NamedFile], records: &[RecordSpan]) -> String {
    let first = records.first().map(|r| r.zxid).unwrap_or(0);
    let index = segments.iter().rposition(|s| s.zxid <= first).unwrap_or(0);
    format!(
        "segment {} of {} ({})",
        index + 1,
        segments.len(),
        segments[index].file_name()
    )
}

/// Flips one byte in the middle of `file`.
fn flip_middle_byte(file: &Path, rng: &mut StdRng) -> u64 {
    let mut bytes = fs::read(file).expect("read the snapshot");
    assert!(
        bytes.len() > 32,
        "{} is too short to be a snapshot",
        file.display()
    );
    let at = rng.gen_range(bytes.len() / 4..bytes.len() * 3 / 4);
    bytes[at] ^= rng.gen_range(1..=255u8);
    fs::write(file, &bytes).expect("write the damaged snapshot");
    at as u64
}

/// Waits (bounded) until `dir` holds at least `count` snapshots and no `.tmp` one is being
/// written.
fn wait_for_snapshots(dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let writing = fs::read_dir(dir)
            .expect("list data dir")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"));
        if snapshots(dir).len() >= count && !writing {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {count} snapshots in {} after 30 s: {:?}",
            dir.display(),
            fs::read_dir(dir).map(|d| d
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect::<Vec<_>>())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_snapshots_are_never_loaded() {
    let (seed, mut rng) = seeded_rng(SEED_ENV);
    let scratch = tempfile::Builder::new()
        .prefix("lockkeeper-snapdamage-")
        .tempdir()
        .expect("scratch dir");
    let recorded = scratch.path().join("recorded");
    let flags = ["--snap-count", "30", "--snap-retain", "2"];
    // Three runs, each ending in kill -9, so snapshots, segments and purges pile up.
    let mut nodes = Vec::new();
    for run in 0..3 {
        let mut server = KeeperProcess::start(&recorded, &flags);
        let client = connect(&server.connect_string()).await;
        nodes.extend(write_nodes(&client, &format!("/snap{run}"), 80).await);
        drop(client);
        wait_for_snapshots(&recorded, 2);
        server.kill9();
    }
    let snaps = snapshots(&recorded);
    let segments = log_segments(&recorded);
    eprintln!(
        "recorded: snapshots {:?}, segments {:?}",
        snaps.iter().map(NamedFile::file_name).collect::<Vec<_>>(),
        segments
            .iter()
            .map(NamedFile::file_name)
            .collect::<Vec<_>>()
    );
    assert!(snaps.len() >= 2, "snap-retain 2 should keep two snapshots");
    assert!(
        snaps.len() <= 2,
        "snap-retain 2 keeps the newest 2 snapshots, found {}",
        snaps.len()
    );

    // The newest snapshot damaged: the server must fall back to an older one plus the logs.
    {
        let dir = scratch.path().join("newest-bad");
        copy_dir(&recorded, &dir);
        let newest = snapshots(&dir).pop().expect("a snapshot");
        let at = flip_middle_byte(&newest.path, &mut rng);
        let case = format!(
            "byte {at} of the newest snapshot {} flipped (seed {SEED_ENV}={seed})",
            newest.file_name()
        );
        let verdict = verify(&dir);
        eprintln!(
            "{case}: verify exit {:?}:\n{}",
            verdict.code,
            verdict.text()
        );
        assert!(
            matches!(verdict.code, Some(0 | 1)),
            "{case}: verify must check the dir (exit 0 or 1):\n{}",
            verdict.text()
        );
        let named = verdict.text().lines().any(|line| {
            let lower = line.to_lowercase();
            line.contains(&newest.file_name())
                && [
                    "corrupt", "invalid", "bad", "checksum", "crc", "damaged", "mismatch",
                ]
                .iter()
                .any(|w| lower.contains(w))
        });
        assert!(
            named,
            "{case}: verify must flag {} as damaged:\n{}",
            newest.file_name(),
            verdict.text()
        );
        let server = KeeperProcess::try_start(&dir, &[]).unwrap_or_else(|failure| {
            panic!("{case}: an older valid snapshot and the logs remain, so the server must start: {failure}")
        });
        let client = connect(&server.connect_string()).await;
        assert_nodes(&client, &nodes, |_| true, &case).await;
        eprintln!("{case}: ok");
    }

    // Every snapshot damaged: only a log that goes back to the very first txn can rebuild the
    // state; otherwise the server must refuse rather than start with a hole.
    {
        let dir = scratch.path().join("all-bad");
        copy_dir(&recorded, &dir);
        let damaged: Vec<String> = snapshots(&dir)
            .iter()
            .map(|s| {
                flip_middle_byte(&s.path, &mut rng);
                s.file_name()
            })
            .collect();
        let first_czxid = nodes[0].czxid;
        let oldest = log_segments(&dir)
            .into_iter()
            .next()
            .expect("a log segment");
        let complete = oldest.zxid <= first_czxid && epoch(oldest.zxid) == epoch(first_czxid);
        let case = format!(
            "every snapshot {damaged:?} damaged, oldest log {} (logs {} from the start; seed \
             {SEED_ENV}={seed})",
            oldest.file_name(),
            if complete { "complete" } else { "not complete" }
        );
        let verdict = verify(&dir);
        match KeeperProcess::try_start(&dir, &[]) {
            Ok(server) if complete => {
                let client = connect(&server.connect_string()).await;
                assert_nodes(&client, &nodes, |_| true, &case).await;
            }
            Ok(server) => panic!(
                "{case}: the server started without a valid snapshot and without the logs \
                 from the start; stderr:\n{}",
                server.stderr_text()
            ),
            Err(failure) if complete => {
                panic!("{case}: the logs alone can rebuild the state, yet: {failure}")
            }
            Err(failure) => {
                assert_eq!(
                    failure.status.and_then(|s| s.code()),
                    Some(1),
                    "{case}: exit status; {failure}"
                );
                assert!(
                    damaged
                        .iter()
                        .any(|name| failure.stderr.contains(name.as_str())),
                    "{case}: the refusal must name a damaged snapshot:\n{}",
                    failure.stderr
                );
                assert_eq!(
                    verdict.code,
                    Some(1),
                    "{case}: the server refuses, so verify must report corruption:\n{}",
                    verdict.text()
                );
            }
        }
        eprintln!("{case}: ok (verify exit {:?})", verdict.code);
    }

    // A snapshot left half-written by a crash (still `.tmp`) is not a snapshot.
    {
        let dir = scratch.path().join("leftover-tmp");
        copy_dir(&recorded, &dir);
        let newest = snapshots(&dir).pop().expect("a snapshot");
        let tmp = dir.join(format!("snapshot.{:016x}.tmp", newest.zxid + 1_000));
        fs::write(&tmp, b"half a snapshot, cut off by a crash").expect("write the leftover");
        let verdict = verify(&dir);
        assert_eq!(
            verdict.code,
            Some(0),
            "a leftover .tmp snapshot is not corruption:\n{}",
            verdict.text()
        );
        let server = KeeperProcess::try_start(&dir, &[]).unwrap_or_else(|failure| {
            panic!("a leftover .tmp snapshot must be ignored: {failure}")
        });
        let client = connect(&server.connect_string()).await;
        assert_nodes(&client, &nodes, |_| true, "leftover .tmp snapshot").await;
    }
}

/// `verify` on something that is not a readable data dir is a usage error (exit 2), neither
/// "valid" nor "corrupt".
#[test]
fn verify_of_no_data_dir_is_a_usage_error() {
    let scratch = tempfile::Builder::new()
        .prefix("lockkeeper-verify-")
        .tempdir()
        .expect("scratch dir");
    let missing = scratch.path().join("no-such-dir");
    let verdict = verify(&missing);
    assert_eq!(
        verdict.code,
        Some(2),
        "verify of a missing dir:\n{}",
        verdict.text()
    );
    let file = scratch.path().join("a-file");
    fs::write(&file, b"not a directory").expect("write a file");
    let verdict = verify(&file);
    assert_eq!(
        verdict.code,
        Some(2),
        "verify of a plain file:\n{}",
        verdict.text()
    );
}
