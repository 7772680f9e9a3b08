"""kazoo basics: CRUD with versions and errors, sequential names, DataWatch and ChildrenWatch,
one-shot watches, ephemeral nodes vanishing with their client, transactions that are all or
nothing, a version-checked Counter under contention, and digest ACLs."""

import threading

from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType
from kazoo.security import make_digest_acl

from harness import (
    check,
    check_eq,
    expect_raises,
    join_all,
    new_client,
    run,
    spawn,
    step,
    stop_all,
    unique_root,
    wait_until,
)


def crud(client, root):
    step("create / get / set / delete with versions")
    client.create(root, b"root")
    path = root + "/node"
    check_eq(client.create(path, b"v0"), path, "create returns the path")
    data, stat = client.get(path)
    check_eq(data, b"v0", "data after create")
    check_eq(stat.version, 0, "version after create")
    check_eq(stat.dataLength, 2, "dataLength")
    check_eq(stat.czxid, stat.mzxid, "czxid == mzxid before any set")
    stat = client.set(path, b"v1", version=0)
    check_eq(stat.version, 1, "version after set")
    check(stat.mzxid > stat.czxid, "mzxid grows with set")
    expect_raises(BadVersionError, "set with stale version", client.set, path, b"x", version=0)
    expect_raises(NodeExistsError, "create existing", client.create, path, b"x")
    expect_raises(NoNodeError, "create under missing parent", client.create, root + "/a/b", b"x")
    expect_raises(NoNodeError, "get missing", client.get, root + "/missing")
    check(client.exists(root + "/missing") is None, "exists on missing is None")
    check_eq(client.exists(path).version, 1, "exists returns the stat")
    client.create(path + "/child", b"")
    expect_raises(NotEmptyError, "delete non-empty", client.delete, path)
    expect_raises(BadVersionError, "delete with wrong version", client.delete, path + "/child", version=7)
    client.delete(path, recursive=True)
    check(client.exists(path) is None, "recursive delete removed the node")
    client.ensure_path(root + "/deep/er/path")
    check(client.exists(root + "/deep/er/path") is not None, "ensure_path")

    step("sequential nodes")
    seq_parent = root + "/seq"
    client.create(seq_parent)
    names = [client.create(seq_parent + "/n-", b"", sequence=True) for _ in range(5)]
    suffixes = [name.rsplit("-", 1)[1] for name in names]
    check(all(len(s) == 10 and s.isdigit() for s in suffixes), "10-digit suffixes: {}".format(names))
    numbers = [int(s) for s in suffixes]
    check_eq(numbers, list(range(numbers[0], numbers[0] + 5)), "consecutive sequence numbers")
    check_eq(sorted(client.get_children(seq_parent)), [n.rsplit("/", 1)[1] for n in names], "children")
    data, stat = client.get(seq_parent)
    check_eq(stat.numChildren, 5, "numChildren")
    check_eq(stat.cversion, 5, "cversion counts child creations")


def watches(client, other, root):
    step("DataWatch sees every value and the deletion")
    path = root + "/watched"
    client.create(path, b"first")
    seen = []
    cond = threading.Condition()

    @client.DataWatch(path)
    def on_data(data, stat):
        with cond:
            seen.append(None if stat is None else (data, stat.version))
            cond.notify_all()

    wait_until(lambda: (b"first", 0) in seen, "DataWatch initial call")
    other.set(path, b"second")
    wait_until(lambda: (b"second", 1) in seen, "DataWatch after set from another client")
    other.set(path, b"third")
    wait_until(lambda: (b"third", 2) in seen, "DataWatch after second set")
    other.delete(path)
    wait_until(lambda: seen and seen[-1] is None, "DataWatch after delete")
    versions = [s[1] for s in seen if s is not None]
    check_eq(versions, sorted(versions), "DataWatch never goes back in time")

    step("ChildrenWatch follows the children")
    parent = root + "/kids"
    client.create(parent)
    lists = []

    @client.ChildrenWatch(parent)
    def on_children(children):
        lists.append(sorted(children))

    wait_until(lambda: [] in lists, "ChildrenWatch initial call")
    for name in ("a", "b", "c"):
        other.create(parent + "/" + name)
    wait_until(lambda: lists and lists[-1] == ["a", "b", "c"], "ChildrenWatch sees a, b, c")
    other.delete(parent + "/b")
    wait_until(lambda: lists and lists[-1] == ["a", "c"], "ChildrenWatch sees b go")

    step("a plain watch fires once, with the right type")
    path = root + "/once"
    client.create(path, b"")
    events = []
    client.get(path, watch=events.append)
    other.set(path, b"1")
    wait_until(lambda: len(events) == 1, "one data watch event")
    other.set(path, b"2")
    # Prove the second change was processed before checking that no second event came.
    check_eq(client.get(path)[0], b"2", "second value visible")
    client.sync(path)
    check_eq(len(events), 1, "a fired watch stays fired")
    check_eq(events[0].type, EventType.CHANGED, "event type")
    check_eq(events[0].path, path, "event path")

    created = []
    client.exists(root + "/later", watch=created.append)
    other.create(root + "/later")
    wait_until(lambda: len(created) == 1, "exists watch on a missing node")
    check_eq(created[0].type, EventType.CREATED, "exists watch fires CREATED")

    child_events = []
    client.get_children(root + "/kids", watch=child_events.append)
    other.create(root + "/kids/d")
    wait_until(lambda: len(child_events) == 1, "child watch event")
    check_eq(child_events[0].type, EventType.CHILD, "child watch fires CHILD")


def ephemerals(client, root):
    step("ephemeral nodes vanish when their client stops")
    owner = new_client()
    path = root + "/eph"
    owner.create(path, b"mine", ephemeral=True)
    seq = owner.create(root + "/eph-seq-", b"", ephemeral=True, sequence=True)
    stat = client.exists(path)
    check(stat is not None, "ephemeral visible to another client")
    check_eq(stat.ephemeralOwner, owner.client_id[0], "ephemeralOwner is the owner's session id")
    expect_raises(Exception, "ephemerals cannot have children", owner.create, path + "/kid")
    deleted = []
    client.exists(path, watch=deleted.append)
    owner.stop()
    owner.close()
    wait_until(lambda: client.exists(path) is None, "ephemeral gone after its client stopped", 15)
    wait_until(lambda: client.exists(seq) is None, "ephemeral sequential gone too", 15)
    wait_until(lambda: len(deleted) == 1, "exists watch saw the deletion")
    check_eq(deleted[0].type, EventType.DELETED, "deletion event type")


def transactions(client, root):
    step("a transaction that succeeds applies every op")
    base = root + "/txn"
    client.create(base, b"")
    t = client.transaction()
    t.create(base + "/a", b"A")
    t.create(base + "/b", b"B")
    t.set_data(base, b"changed")
    t.check(base + "/a", 0)
    results = t.commit()
    check_eq(len(results), 4, "one result per op")
    check_eq(results[0], base + "/a", "create result")
    check_eq(results[1], base + "/b", "create result")
    check_eq(results[2].version, 1, "set_data result is the new stat")
    check_eq(results[3], True, "check result")
    check_eq(sorted(client.get_children(base)), ["a", "b"], "both created")

    step("a transaction with one failing op applies nothing")
    before = client.get(base)[1]
    t = client.transaction()
    t.create(base + "/c", b"C")
    t.delete(base + "/a")
    t.set_data(base + "/missing", b"x")
    t.create(base + "/d", b"D")
    results = t.commit()
    check_eq(len(results), 4, "one result per op")
    check(isinstance(results[0], RolledBackError), "ops before the failure roll back: {!r}".format(results))
    check(isinstance(results[1], RolledBackError), "ops before the failure roll back: {!r}".format(results))
    check(isinstance(results[2], NoNodeError), "the failing op reports its error: {!r}".format(results))
    # ZooKeeper marks the ops after the failing one RuntimeInconsistency, not RolledBack.
    check(isinstance(results[3], RuntimeInconsistency), "ops after the failure: {!r}".format(results))
    check_eq(sorted(client.get_children(base)), ["a", "b"], "nothing created or deleted")
    after = client.get(base)[1]
    check_eq(after.cversion, before.cversion, "parent cversion untouched")
    check_eq(after.pzxid, before.pzxid, "parent pzxid untouched")

    step("a failed version check rolls the rest back")
    t = client.transaction()
    t.check(base + "/a", 5)
    t.create(base + "/e", b"")
    results = t.commit()
    check(isinstance(results[0], BadVersionError), "check fails: {!r}".format(results))
    check(isinstance(results[1], RuntimeInconsistency), "create not run: {!r}".format(results))
    check(client.exists(base + "/e") is None, "create not applied")

    step("sequential ephemeral in a transaction")
    t = client.transaction()
    t.create(base + "/s-", b"", sequence=True, ephemeral=True)
    results = t.commit()
    check(results[0].startswith(base + "/s-") and len(results[0]) == len(base) + 13, "sequential name {!r}".format(results))
    check_eq(client.exists(results[0]).ephemeralOwner, client.client_id[0], "owned by this session")


def counter(root):
    step("Counter: concurrent increments from several clients are all counted")
    clients = [new_client() for _ in range(3)]
    path = root + "/counter"
    per_client = 20

    def bump(c):
        ctr = c.Counter(path)
        for _ in range(per_client):
            ctr += 1

    try:
        join_all([spawn(bump, c) for c in clients], "counter increments", 90)
        check_eq(clients[0].Counter(path).value, per_client * len(clients), "counter value")
    finally:
        stop_all(clients)


def acls(client, root):
    step("digest ACLs")
    path = root + "/secret"
    acl = make_digest_acl("alice", "secret", all=True)
    client.create(path, b"hidden", acl=[acl])
    stranger = new_client()
    friend = new_client()
    try:
        expect_raises(NoAuthError, "read without auth", stranger.get, path)
        expect_raises(NoAuthError, "write without auth", stranger.set, path, b"x")
        friend.add_auth("digest", "alice:secret")
        check_eq(friend.get(path)[0], b"hidden", "read with auth")
        friend.set(path, b"shown")
        acl_list, stat = friend.get_acls(path)
        check_eq(len(acl_list), 1, "one ACL entry")
        check_eq(acl_list[0].id.scheme, "digest", "scheme")
        check_eq(acl_list[0].id.id, acl.id.id, "digest id")
        check_eq(acl_list[0].perms, 31, "all permissions")
        # Recursive cleanup lists the node's children, which needs READ on it.
        client.add_auth("digest", "alice:secret")
    finally:
        stranger.stop()
        stranger.close()
        friend.stop()
        friend.close()


def main():
    root = unique_root("crud")
    client = new_client()
    other = new_client()
    try:
        crud(client, root)
        watches(client, other, root)
        ephemerals(client, root)
        transactions(client, root)
        counter(root)
        acls(client, root)
        client.delete(root, recursive=True)
        check(client.exists(root) is None, "cleanup")
    finally:
        other.stop()
        other.close()
        client.stop()
        client.close()


if __name__ == "__main__":
    run(main)
