//! Constructors of the requests the recipes send, on the generated message types, and readers
//! of the answers they look into: so that a recipe says "the keys under this prefix, oldest
//! first, keys only" rather than filling in protobuf fields.
//!
//! Invariant: a range "under a prefix" is etcd's prefix range, `[prefix, prefix_end(prefix))`,
//! the same keys `etcdctl get --prefix` and Go's `clientv3.WithPrefix` read, so lockkeeper's
//! waiters and etcdctl's count the same keys.

use super::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use super::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::proto::etcdserverpb::request_op::Request;
use super::proto::etcdserverpb::response_op::Response;
use super::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp,
    WatchCreateRequest,
};
use super::proto::mvccpb::Event;
use super::proto::mvccpb::event::EventType;

/// The end of etcd's range of the keys that start with `prefix`: the smallest key greater than
/// all of them (the prefix without its trailing 0xff bytes, last byte plus one), or `[0]`,
/// "to the end of the keyspace", when there is no such key.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&byte| byte < 0xff) {
        Some(last) => {
            let mut end = prefix[..=last].to_vec();
            end[last] += 1;
            end
        }
        None => vec![0],
    }
}

impl RangeRequest {
    /// The one key `key`, with its value.
    pub(crate) fn key(key: impl Into<Vec<u8>>) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        }
    }

    /// Every key under `prefix`, with values, in key order.
    pub(crate) fn prefix(prefix: impl Into<Vec<u8>>) -> RangeRequest {
        let key = prefix.into();
        RangeRequest {
            range_end: prefix_end(&key),
            key,
            ..RangeRequest::default()
        }
    }

    /// Oldest key (lowest create revision) first.
    pub(crate) fn oldest_first(self) -> RangeRequest {
        self.by_creation(SortOrder::Ascend)
    }

    /// Newest key (highest create revision) first.
    pub(crate) fn newest_first(self) -> RangeRequest {
        self.by_creation(SortOrder::Descend)
    }

    fn by_creation(mut self, order: SortOrder) -> RangeRequest {
        self.set_sort_target(SortTarget::Create);
        self.set_sort_order(order);
        self
    }

    /// At most `limit` keys (after sorting).
    pub(crate) fn limit(mut self, limit: i64) -> RangeRequest {
        self.limit = limit;
        self
    }

    /// Only keys created at or before `revision`.
    pub(crate) fn created_by(mut self, revision: i64) -> RangeRequest {
        self.max_create_revision = revision;
        self
    }

    /// The store as it was at `revision` (an error once etcd has compacted it away).
    pub(crate) fn at_revision(mut self, revision: i64) -> RangeRequest {
        self.revision = revision;
        self
    }

    /// Keys and their revisions, without values.
    pub(crate) fn keys_only(mut self) -> RangeRequest {
        self.keys_only = true;
        self
    }

    /// Only the count of keys, no keys.
    pub(crate) fn count_only(mut self) -> RangeRequest {
        self.count_only = true;
        self
    }
}

impl PutRequest {
    /// `key` = `value`, attached to `lease` (0: no lease, the key stays until deleted).
    pub(crate) fn new(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> PutRequest {
        PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
        }
    }
}

impl Compare {
    /// True while `key` has the create revision `revision`: the key is still the one created
    /// then (0: the key does not exist).
    pub(crate) fn created_at(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
        Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.into(),
            target_union: Some(TargetUnion::CreateRevision(revision)),
        }
    }
}

impl RequestOp {
    /// A read inside a transaction.
    pub(crate) fn range(range: RangeRequest) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestRange(range)),
        }
    }

    /// A write inside a transaction.
    pub(crate) fn put(put: PutRequest) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestPut(put)),
        }
    }

    /// The deletion of the one key `key` inside a transaction.
    pub(crate) fn delete(key: impl Into<Vec<u8>>) -> RequestOp {
        RequestOp {
            request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.into(),
            })),
        }
    }
}

impl ResponseOp {
    /// The answer of a read inside a transaction; `None` for the answer of anything else.
    pub(crate) fn as_range(&self) -> Option<&RangeResponse> {
        match &self.response {
            Some(Response::ResponseRange(found)) => Some(found),
            _ => None,
        }
    }
}

impl WatchCreateRequest {
    /// A watch of the one key `key`, from now on.
    pub(crate) fn key(key: impl Into<Vec<u8>>) -> WatchCreateRequest {
        WatchCreateRequest {
            key: key.into(),
            ..WatchCreateRequest::default()
        }
    }

    /// A watch of every key under `prefix`, from now on.
    pub(crate) fn prefix(prefix: impl Into<Vec<u8>>) -> WatchCreateRequest {
        let key = prefix.into();
        WatchCreateRequest {
            range_end: prefix_end(&key),
            key,
            ..WatchCreateRequest::default()
        }
    }

    /// Reports the changes from `revision` on (included), past ones too.
    pub(crate) fn start_at(mut self, revision: i64) -> WatchCreateRequest {
        self.start_revision = revision;
        self
    }
}

impl Event {
    /// Whether the event is a deletion (anything else is a put).
    pub(crate) fn is_delete(&self) -> bool {
        self.r#type == EventType::Delete as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_end_past_every_key_of_the_prefix() {
        assert_eq!(prefix_end(b"locks/"), b"locks0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"a\xfe\xff\xff"), b"a\xff");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_end(b""), [0]);
        let range = RangeRequest::prefix("jobs/");
        assert_eq!(
            (range.key.as_slice(), range.range_end.as_slice()),
            (&b"jobs/"[..], &b"jobs0"[..])
        );
    }

    #[test]
    fn sorted_reads_set_etcds_enum_values() {
        let range = RangeRequest::prefix("n/")
            .newest_first()
            .limit(2)
            .created_by(9);
        assert_eq!(range.sort_target, 2, "CREATE");
        assert_eq!(range.sort_order, 2, "DESCEND");
        assert_eq!((range.limit, range.max_create_revision), (2, 9));
        assert_eq!(
            RangeRequest::key("k").oldest_first().sort_order,
            1,
            "ASCEND"
        );
        let compare = Compare::created_at("k", 0);
        assert_eq!((compare.result, compare.target), (0, 1), "EQUAL on CREATE");
    }
}
