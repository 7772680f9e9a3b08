//! What the differential test compares: normalized outcomes, and how two of them are told apart.
//!
//! Two servers can only be compared after removing what legitimately differs between them:
//!
//! * **Times** (`ctime`, `mtime`) are dropped.
//! * **Session ids** differ by construction. An `ephemeralOwner` that is one of our own sessions
//!   is replaced by the session's name in the run (`s2.1`: slot 2, second session opened there);
//!   any other value is kept in hex and must match exactly. (ZooKeeper stores markers there for
//!   containers and TTL nodes but shows clients 0; a server leaking its marker shows up here.)
//! * **Zxids** (`czxid`, `mzxid`, `pzxid`) are compared *relatively*. Absolute values depend on
//!   how many transactions a server spends on things a client cannot order against its own
//!   requests (session creation and close, failed writes that ZooKeeper still logs as error
//!   transactions), so they are replaced by labels: each distinct zxid a run sees gets the next
//!   label (`z0`, `z1`, …) in order of first appearance. Both runs see the same outcomes in the
//!   same order, so equal labels mean "the same transaction" on both servers: a node created in
//!   a multi shares its czxid with its siblings, a parent's pzxid is the zxid of the child
//!   create or delete, an untouched node keeps `mzxid == czxid`. Labels alone would hide a
//!   server that numbers transactions out of order, so each step also records, for every label
//!   it introduced, its rank among all zxids seen so far; those ranks must match too. Gaps
//!   between zxids are deliberately not compared.
//! * **Order inside sets** is not part of the protocol, so children lists, `getEphemerals`
//!   answers, `whoami` identities and ACL entries are sorted. ZooKeeper keeps children and a
//!   session's identities in hash sets; an `auth` ACL expands to the session's digest
//!   identities in that set's iteration order, and no ACL check depends on entry order.
//!
//! Everything else must be equal: error codes, data, every other stat field, created paths
//! (sequential names included), ACL entries, and the watch events each session received
//! after each step.

use std::collections::BTreeMap;
use std::fmt;

/// A zxid replaced by its label (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Zxid(pub usize);

impl fmt::Debug for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "z{}", self.0)
    }
}

/// A stat with times dropped, zxids labelled and the ephemeral owner named.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NStat {
    pub czxid: Zxid,
    pub mzxid: Zxid,
    pub pzxid: Zxid,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub owner: String,
    pub data_length: i32,
    pub num_children: i32,
}

impl fmt::Debug for NStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{cz={:?} mz={:?} pz={:?} v={} cv={} av={} owner={} len={} children={}}}",
            self.czxid,
            self.mzxid,
            self.pzxid,
            self.version,
            self.cversion,
            self.aversion,
            self.owner,
            self.data_length,
            self.num_children
        )
    }
}

/// The result of one operation in a successful multi.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MultiItem {
    /// The created path; the stat when the server sent one (see `run.rs` on multi creates).
    Create {
        path: String,
        stat: Option<NStat>,
    },
    Delete,
    SetData(NStat),
    Check,
}

/// The result of one operation in a multiRead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadItem {
    Data { data: String, stat: NStat },
    Children(Vec<String>),
    Error(String),
}

/// One node of a tree dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    pub path: String,
    /// Data and stat, or the error reading them (an ACL can hide a node even from the
    /// inspector when sessions do not authenticate).
    pub node: Result<(String, NStat), String>,
    pub acl: Result<Vec<String>, String>,
}

/// The normalized answer to one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The error the client reported, by name (`NoNode`, `BadVersion`, …).
    Error(String),
    Created {
        path: String,
        stat: NStat,
    },
    Done,
    Stat(NStat),
    Data {
        data: String,
        stat: NStat,
    },
    Exists(Option<NStat>),
    Children {
        names: Vec<String>,
        stat: Option<NStat>,
    },
    Acl {
        acl: Vec<String>,
        stat: NStat,
    },
    Multi(Vec<MultiItem>),
    /// The multi failed as a whole; `index` is the operation the client blames.
    MultiFailed {
        index: usize,
        error: String,
    },
    MultiRead(Vec<ReadItem>),
    Names(Vec<String>),
    Count(usize),
    Tree(Vec<TreeEntry>),
}

/// Everything one server produced for one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub outcome: Outcome,
    /// Watch events that reached any session during this step, sorted, as
    /// `s<slot>: <event type> <path> (watch #<op> <kind>)`. Sorted because the order in which
    /// one step's several events are handed to separate watcher futures is not observable
    /// through this client; which events arrive, and after which step, is.
    pub events: Vec<String>,
    /// For each zxid label introduced in this step, its rank among all zxids seen so far.
    pub zxid_ranks: Vec<(Zxid, usize)>,
}

/// Maps raw zxids to labels in order of first appearance and tracks their order.
#[derive(Default)]
pub(crate) struct ZxidLabels {
    labels: BTreeMap<i64, usize>,
    fresh: Vec<(Zxid, usize)>,
}

impl ZxidLabels {
    pub(crate) fn label(&mut self, zxid: i64) -> Zxid {
        if let Some(&label) = self.labels.get(&zxid) {
            return Zxid(label);
        }
        let label = self.labels.len();
        self.labels.insert(zxid, label);
        // BTreeMap keys are ordered: the rank is the number of smaller zxids seen so far.
        let rank = self.labels.range(..zxid).count();
        self.fresh.push((Zxid(label), rank));
        Zxid(label)
    }

    /// The labels introduced since the previous call, with their ranks.
    pub(crate) fn take_fresh(&mut self) -> Vec<(Zxid, usize)> {
        std::mem::take(&mut self.fresh)
    }
}

/// Says how two steps differ, or `None` when they agree.
pub(crate) fn difference(a: &Step, b: &Step) -> Option<String> {
    let mut out = Vec::new();
    if a.outcome != b.outcome {
        out.push("the results differ".to_string());
    }
    if a.events != b.events {
        out.push("the watch events differ".to_string());
    }
    if a.zxid_ranks != b.zxid_ranks {
        out.push("the zxids are ordered differently".to_string());
    }
    if out.is_empty() {
        None
    } else {
        Some(out.join(", "))
    }
}

/// A step, printed for a failure message.
pub(crate) fn show_step(step: &Step) -> String {
    let mut s = format!("{:?}", step.outcome);
    if !step.events.is_empty() {
        s.push_str(&format!("\n      events: {:?}", step.events));
    }
    if !step.zxid_ranks.is_empty() {
        s.push_str(&format!(
            "\n      new zxids (label, rank): {:?}",
            step.zxid_ranks
        ));
    }
    s
}
