//! Sessions: identity, password, negotiated timeout, and when each one expires.
//!
//! A session outlives its connections: a client that loses its TCP connection re-attaches with
//! its id and password and keeps its ephemerals, as long as it comes back within its timeout.
//! Expiry is checked on a timer by the core; any packet from the session pushes the deadline out.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::state::watch::ConnId;

/// A session as snapshots and recovery know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRecord {
    pub id: i64,
    pub timeout_ms: i32,
    pub passwd: [u8; 16],
}

#[derive(Debug, Clone)]
pub struct Session {
    pub id: i64,
    pub passwd: [u8; 16],
    pub timeout: Duration,
    pub deadline: Instant,
    /// The connection currently attached, if any.
    pub conn: Option<ConnId>,
    /// Whether its creation is in the log (false only for sessions opened while the disk failed).
    pub logged: bool,
}

pub struct Sessions {
    map: HashMap<i64, Session>,
    next_id: i64,
    min_timeout: Duration,
    max_timeout: Duration,
}

impl Sessions {
    /// Ids start from the clock as ZooKeeper's do (`(ms << 24) >>> 8`, server id 0 in the high
    /// byte), so ids from before a restart are not handed out again.
    pub fn new(min_timeout: Duration, max_timeout: Duration) -> Sessions {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let next_id = ((ms << 24) >> 8) as i64;
        Sessions {
            map: HashMap::new(),
            next_id,
            min_timeout,
            max_timeout,
        }
    }

    /// Clamps a requested timeout (ms) into [min, max], as the server negotiates it.
    pub fn negotiate(&self, requested_ms: i32) -> Duration {
        Duration::from_millis(requested_ms.max(0) as u64).clamp(self.min_timeout, self.max_timeout)
    }

    /// The bounds `negotiate` clamps into (a recovered table gets the configured ones).
    pub fn set_timeout_bounds(&mut self, min: Duration, max: Duration) {
        self.min_timeout = min;
        self.max_timeout = max;
    }

    /// Every session's deadline becomes `now` plus its timeout: after a restart or a reload, a
    /// session gets its whole timeout to come back.
    pub fn restart_deadlines(&mut self, now: Instant) {
        for s in self.map.values_mut() {
            s.deadline = now + s.timeout;
        }
    }

    /// Gives back the map's spare capacity after many sessions have gone.
    pub fn shrink(&mut self) {
        crate::memory::shrink(&mut self.map);
    }

    pub fn next_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Adds a session whose creation is logged; an existing one (opened while the disk failed)
    /// is just marked logged, keeping its connection.
    pub fn insert(&mut self, id: i64, passwd: [u8; 16], timeout: Duration, now: Instant) {
        if let Some(existing) = self.map.get_mut(&id) {
            existing.logged = true;
            return;
        }
        self.next_id = self.next_id.max(id + 1);
        let session = Session {
            id,
            passwd,
            timeout,
            deadline: now + timeout,
            conn: None,
            logged: true,
        };
        self.map.insert(id, session);
    }

    /// Adds a session that is not in the log yet (opened while the disk fails).
    pub fn insert_unlogged(&mut self, id: i64, passwd: [u8; 16], timeout: Duration, now: Instant) {
        self.insert(id, passwd, timeout, now);
        if let Some(s) = self.map.get_mut(&id) {
            s.logged = false;
        }
    }

    pub fn get(&self, id: i64) -> Option<&Session> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: i64) -> Option<&mut Session> {
        self.map.get_mut(&id)
    }

    pub fn remove(&mut self, id: i64) -> Option<Session> {
        self.map.remove(&id)
    }

    /// Any packet from the session proves it alive.
    pub fn touch(&mut self, id: i64, now: Instant) {
        if let Some(s) = self.map.get_mut(&id) {
            s.deadline = now + s.timeout;
        }
    }

    /// Sessions whose deadline has passed.
    pub fn expired(&self, now: Instant) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .map
            .values()
            .filter(|s| s.deadline <= now)
            .map(|s| s.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.map.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_clamped_to_the_tick_bounds() {
        let s = Sessions::new(Duration::from_millis(4000), Duration::from_millis(40000));
        assert_eq!(s.negotiate(100), Duration::from_millis(4000));
        assert_eq!(s.negotiate(-5), Duration::from_millis(4000));
        assert_eq!(s.negotiate(10000), Duration::from_millis(10000));
        assert_eq!(s.negotiate(100_000), Duration::from_millis(40000));
    }

    #[test]
    fn touch_postpones_expiry() {
        let mut s = Sessions::new(Duration::from_millis(10), Duration::from_millis(100));
        let t0 = Instant::now();
        let id = s.next_id();
        s.insert(id, [0; 16], Duration::from_millis(50), t0);
        assert!(s.expired(t0 + Duration::from_millis(40)).is_empty());
        s.touch(id, t0 + Duration::from_millis(40));
        assert!(s.expired(t0 + Duration::from_millis(60)).is_empty());
        assert_eq!(s.expired(t0 + Duration::from_millis(91)), vec![id]);
    }
}
