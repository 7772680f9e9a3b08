//! The seeded generator of operations.
//!
//! It draws from a deliberately small path universe so that operations collide all the time:
//! creates race deletes on the same names, sequential children pile up under a few parents,
//! ephemerals end up as parents, and versions are as often right as wrong.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::compare::{MultiItem, Outcome};
use super::ops::{
    AclChoice, NodeKind, Op, PERSISTENT_SLOT, ReadOp, SLOTS, SubOp, USERS, WatchKind,
};

/// Fixed node names; every one of them is created, deleted and recreated many times.
const FIXED: [&str; 8] = [
    "/a", "/a/b", "/a/b/c", "/a/x", "/d", "/d/e", "/d/e/f", "/a/b/c/z",
];

/// Paths whose parent never exists (`/m`) or rarely exists: creates get `NoNode`.
const ORPHANS: [&str; 2] = ["/m/n", "/d/e/f/g/h"];

/// Prefixes for sequential creates. `/d/` asks ZooKeeper for a name made of the number alone.
const SEQ_PREFIXES: [&str; 4] = ["/a/s-", "/d/q-", "/a/b/n-", "/d/"];

/// String prefixes for `getEphemerals`, which matches by string, not by path component.
const EPHEMERAL_PREFIXES: [&str; 5] = ["/", "/a", "/a/s", "/d", "/a/b"];

/// Draws operations for one seed.
///
/// It learns from the reference server's (normalized) outcomes, through [`Generator::observe`],
/// which sequential names exist and which versions nodes are at, so that deletes and version
/// checks hit real nodes and right versions often. Both servers run the very same drawn
/// operation, so what the generator learned from one server is only used to choose the next
/// operation, never to judge the other.
pub(crate) struct Generator {
    rng: StdRng,
    /// Sequential nodes the reference server reported as created (and not since deleted).
    sequential: Vec<String>,
    /// The last data version seen per path.
    versions: BTreeMap<String, i32>,
    /// The last ACL version seen per path.
    acl_versions: BTreeMap<String, i32>,
    /// Paths the reference server last said exist. Only a bias for drawing (so that the tree
    /// grows deep enough for collisions to matter); it can be stale and that is fine.
    known: BTreeSet<String>,
    /// Ephemerals created per slot, forgotten when that slot's session closes.
    ephemerals: BTreeMap<String, usize>,
    /// The addWatch mode (recursive or not) drawn for each path, kept for the whole run:
    /// ZooKeeper 3.8 keeps one mode per path and connection, the last one asked for
    /// (ZOOKEEPER-4466), which is not behaviour worth pinning.
    watch_modes: BTreeMap<String, bool>,
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl Generator {
    pub(crate) fn new(seed: u64) -> Generator {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            sequential: Vec::new(),
            versions: BTreeMap::new(),
            acl_versions: BTreeMap::new(),
            known: BTreeSet::new(),
            ephemerals: BTreeMap::new(),
            watch_modes: BTreeMap::new(),
        }
    }

    fn exists(&self, path: &str) -> bool {
        path == "/" || self.known.contains(path)
    }

    /// Mostly moves a create up to the nearest ancestor whose parent exists, so that the tree
    /// fills in from the top instead of every deep create failing with `NoNode`.
    fn reachable(&mut self, mut path: String) -> String {
        while !self.exists(parent(&path)) && self.rng.gen_bool(0.8) {
            path = parent(&path).to_string();
        }
        path
    }

    fn slot(&mut self) -> usize {
        self.rng.gen_range(0..SLOTS)
    }

    fn data(&mut self) -> Vec<u8> {
        const ALPHABET: &[u8] = b"xyz0123";
        let len = if self.rng.gen_bool(0.15) {
            0
        } else {
            self.rng.gen_range(1..=6)
        };
        (0..len)
            .map(|_| ALPHABET[self.rng.gen_range(0..ALPHABET.len())])
            .collect()
    }

    /// A path that names (or named, or will name) a node: mostly fixed names, then known
    /// sequential names, then the odd root or orphan.
    fn path(&mut self) -> String {
        if !self.known.is_empty() && self.rng.gen_bool(0.4) {
            let n = self.rng.gen_range(0..self.known.len());
            return self.known.iter().nth(n).expect("n < len").clone();
        }
        let roll = self.rng.gen_range(0..100);
        if roll < 68 || (roll < 90 && self.sequential.is_empty()) {
            FIXED
                .choose(&mut self.rng)
                .expect("FIXED is not empty")
                .to_string()
        } else if roll < 90 {
            // Prefer recent names: they are the ones most likely to still exist.
            let n = self.sequential.len();
            let from = n.saturating_sub(6);
            self.sequential[self.rng.gen_range(from..n)].clone()
        } else if roll < 95 {
            "/".to_string()
        } else {
            ORPHANS
                .choose(&mut self.rng)
                .expect("ORPHANS is not empty")
                .to_string()
        }
    }

    fn create_path(&mut self, kind: NodeKind) -> String {
        if kind.is_sequential() {
            if self.rng.gen_bool(0.9) {
                let prefix = SEQ_PREFIXES.choose(&mut self.rng).expect("not empty");
                if self.exists(parent(prefix)) || self.rng.gen_bool(0.3) {
                    prefix.to_string()
                } else {
                    // The prefix's parent is missing: create toward it instead.
                    self.reachable(parent(prefix).to_string())
                }
            } else {
                // A sequential create on a fixed name: a sibling `/a/b0000000007`.
                let path = FIXED[..7]
                    .choose(&mut self.rng)
                    .expect("not empty")
                    .to_string();
                self.reachable(path)
            }
        } else if self.rng.gen_bool(0.92) {
            let path = FIXED.choose(&mut self.rng).expect("not empty").to_string();
            self.reachable(path)
        } else {
            ORPHANS
                .choose(&mut self.rng)
                .expect("not empty")
                .to_string()
        }
    }

    fn kind(&mut self) -> NodeKind {
        match self.rng.gen_range(0..100) {
            0..=34 => NodeKind::Persistent,
            35..=54 => NodeKind::Ephemeral,
            55..=66 => NodeKind::PersistentSequential,
            67..=80 => NodeKind::EphemeralSequential,
            81..=88 => NodeKind::Container,
            89..=95 => NodeKind::Ttl,
            _ => NodeKind::TtlSequential,
        }
    }

    fn acl(&mut self, for_create: bool) -> AclChoice {
        if for_create && self.rng.gen_bool(0.8) {
            return AclChoice::AnyoneAll;
        }
        *[
            AclChoice::AnyoneAll,
            AclChoice::AnyoneRead,
            AclChoice::CreatorAll,
            AclChoice::Alice,
            AclChoice::Mixed,
            AclChoice::Loopback,
            AclChoice::ForeignNetOrBob,
            AclChoice::NoDelete,
            AclChoice::Malformed,
        ]
        .choose(&mut self.rng)
        .expect("not empty")
    }

    /// -1 (any version) or the version last seen, or a plausible wrong one.
    fn version(&mut self, path: &str) -> Option<i32> {
        let seen = self.versions.get(path).copied().unwrap_or(0);
        match self.rng.gen_range(0..10) {
            0..=3 => None,
            4..=7 => Some(seen),
            8 => Some(seen + 1),
            _ => Some(self.rng.gen_range(0..4)),
        }
    }

    fn acl_version(&mut self, path: &str) -> Option<i32> {
        let seen = self.acl_versions.get(path).copied().unwrap_or(0);
        match self.rng.gen_range(0..10) {
            0..=4 => None,
            5..=8 => Some(seen),
            _ => Some(seen + 1),
        }
    }

    /// A path for a delete, setData or check inside a multi: mostly one that exists, so that
    /// transactions succeed about as often as they fail.
    fn existing_path(&mut self) -> String {
        if !self.known.is_empty() && self.rng.gen_bool(0.6) {
            let n = self.rng.gen_range(0..self.known.len());
            return self.known.iter().nth(n).expect("n < len").clone();
        }
        self.path()
    }

    fn sub_op(&mut self) -> SubOp {
        match self.rng.gen_range(0..4) {
            0 => {
                let kind = match self.kind() {
                    // Containers and TTL nodes inside transactions are rarer in practice; keep
                    // them, but let plain kinds dominate.
                    k @ (NodeKind::Container | NodeKind::Ttl | NodeKind::TtlSequential)
                        if self.rng.gen_bool(0.5) =>
                    {
                        k
                    }
                    NodeKind::Container | NodeKind::Ttl | NodeKind::TtlSequential => {
                        NodeKind::Persistent
                    }
                    k => k,
                };
                let path = self.create_path(kind);
                SubOp::Create {
                    path,
                    data: self.data(),
                    kind,
                }
            }
            1 => {
                let path = self.existing_path();
                let version = self.version(&path);
                SubOp::Delete { path, version }
            }
            2 => {
                let path = self.existing_path();
                let version = self.version(&path);
                SubOp::SetData {
                    path,
                    data: self.data(),
                    version,
                }
            }
            _ => {
                let path = self.existing_path();
                let version = self.version(&path).unwrap_or(-1);
                SubOp::Check { path, version }
            }
        }
    }

    /// Draws the next operation.
    pub(crate) fn next_op(&mut self) -> Op {
        let s = self.slot();
        let roll = self.rng.gen_range(0..1000);
        match roll {
            0..=219 => {
                let kind = self.kind();
                let path = self.create_path(kind);
                let data = self.data();
                let acl = self.acl(true);
                Op::Create {
                    s,
                    path,
                    data,
                    kind,
                    acl,
                }
            }
            220..=339 => {
                let path = self.path();
                let version = self.version(&path);
                Op::Delete { s, path, version }
            }
            340..=449 => {
                let path = self.path();
                let version = self.version(&path);
                Op::SetData {
                    s,
                    path,
                    data: self.data(),
                    version,
                }
            }
            450..=499 => Op::GetData {
                s,
                path: self.path(),
            },
            500..=529 => Op::Exists {
                s,
                path: self.path(),
            },
            530..=554 => Op::ListChildren {
                s,
                path: self.path(),
            },
            555..=579 => Op::GetChildren {
                s,
                path: self.path(),
            },
            580..=604 => Op::GetAcl {
                s,
                path: self.path(),
            },
            605..=644 => {
                let path = self.path();
                let acl = self.acl(false);
                let version = self.acl_version(&path);
                Op::SetAcl {
                    s,
                    path,
                    acl,
                    version,
                }
            }
            645..=744 => {
                let n = self.rng.gen_range(1..=4);
                let ops = (0..n).map(|_| self.sub_op()).collect();
                Op::Multi { s, ops }
            }
            745..=774 => {
                let n = self.rng.gen_range(1..=3);
                let ops = (0..n)
                    .map(|_| {
                        let path = self.path();
                        if self.rng.gen_bool(0.5) {
                            ReadOp::GetData(path)
                        } else {
                            ReadOp::GetChildren(path)
                        }
                    })
                    .collect();
                Op::MultiRead { s, ops }
            }
            775..=799 => {
                let prefix = EPHEMERAL_PREFIXES
                    .choose(&mut self.rng)
                    .expect("not empty")
                    .to_string();
                Op::GetEphemerals { s, prefix }
            }
            800..=819 => Op::AllChildrenNumber {
                s,
                path: self.path(),
            },
            820..=829 => Op::Sync {
                s,
                path: self.path(),
            },
            830..=841 => Op::AddAuth {
                s,
                user: self.rng.gen_range(0..USERS.len()),
            },
            842..=851 => Op::WhoAmI { s },
            852..=934 => {
                let kind = *[WatchKind::Exists, WatchKind::Data, WatchKind::Children]
                    .choose(&mut self.rng)
                    .expect("not empty");
                Op::Watch {
                    // Never the persistent slot; see PERSISTENT_SLOT.
                    s: s % PERSISTENT_SLOT,
                    path: self.path(),
                    kind,
                }
            }
            935..=959 => {
                let path = self.path();
                let fresh = self.rng.gen_bool(0.5);
                let recursive = *self.watch_modes.entry(path.clone()).or_insert(fresh);
                Op::AddWatch {
                    s: PERSISTENT_SLOT,
                    path,
                    recursive,
                }
            }
            960..=984 => Op::CloseSession { s },
            _ => Op::Dump,
        }
    }

    /// Learns from the reference server's answer to `op`.
    pub(crate) fn observe(&mut self, op: &Op, outcome: &Outcome) {
        match (op, outcome) {
            (Op::Create { s, kind, .. }, Outcome::Created { path, stat }) => {
                self.learn_created(path, *kind, *s);
                self.versions.insert(path.clone(), stat.version);
                self.acl_versions.insert(path.clone(), stat.aversion);
            }
            (Op::Create { path, kind, .. }, Outcome::Error(e))
                if e == "NodeExists" && !kind.is_sequential() =>
            {
                self.known.insert(path.clone());
            }
            (Op::Delete { path, .. }, Outcome::Done) => self.forget(path),
            (Op::SetData { path, .. }, Outcome::Stat(stat))
            | (Op::GetData { path, .. }, Outcome::Data { stat, .. })
            | (Op::Exists { path, .. }, Outcome::Exists(Some(stat))) => {
                self.known.insert(path.clone());
                self.versions.insert(path.clone(), stat.version);
                self.acl_versions.insert(path.clone(), stat.aversion);
            }
            (Op::Exists { path, .. }, Outcome::Exists(None)) => self.forget(path),
            (
                Op::Delete { path, .. } | Op::SetData { path, .. } | Op::GetData { path, .. },
                Outcome::Error(e),
            ) if e == "NoNode" => self.forget(path),
            (Op::SetAcl { path, .. }, Outcome::Stat(stat)) => {
                self.acl_versions.insert(path.clone(), stat.aversion);
            }
            (Op::Multi { s, ops }, Outcome::Multi(results)) => {
                for (sub, result) in ops.iter().zip(results) {
                    match (sub, result) {
                        (SubOp::Create { kind, .. }, MultiItem::Create { path, .. }) => {
                            self.learn_created(path, *kind, *s);
                            self.versions.insert(path.clone(), 0);
                        }
                        (SubOp::Delete { path, .. }, _) => self.forget(path),
                        (SubOp::SetData { path, .. }, MultiItem::SetData(stat)) => {
                            self.versions.insert(path.clone(), stat.version);
                        }
                        _ => {}
                    }
                }
            }
            (Op::CloseSession { s }, _) => {
                let gone: Vec<String> = self
                    .ephemerals
                    .iter()
                    .filter(|&(_, owner)| owner == s)
                    .map(|(path, _)| path.clone())
                    .collect();
                for path in gone {
                    self.forget(&path);
                }
            }
            (Op::Dump, Outcome::Tree(entries)) => {
                // The whole truth: start over from it.
                self.known = entries
                    .iter()
                    .map(|e| e.path.clone())
                    .filter(|p| p != "/")
                    .collect();
                self.sequential.retain(|p| self.known.contains(p));
                self.ephemerals.retain(|p, _| self.known.contains(p));
            }
            _ => {}
        }
    }

    fn learn_created(&mut self, path: &str, kind: NodeKind, slot: usize) {
        if kind.is_sequential() {
            self.sequential.push(path.to_string());
        }
        if matches!(kind, NodeKind::Ephemeral | NodeKind::EphemeralSequential) {
            self.ephemerals.insert(path.to_string(), slot);
        }
        self.known.insert(path.to_string());
    }

    fn forget(&mut self, path: &str) {
        self.known.remove(path);
        self.ephemerals.remove(path);
        self.sequential.retain(|p| p != path);
        self.versions.remove(path);
        self.acl_versions.remove(path);
    }
}
