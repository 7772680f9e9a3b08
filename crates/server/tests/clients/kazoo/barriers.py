"""kazoo's Barrier and DoubleBarrier recipes: waiters block until the barrier is removed; a
double barrier lets nobody in before everyone has arrived and nobody out before everyone is
leaving."""

import threading
import time

from harness import (
    check,
    check_eq,
    join_all,
    new_client,
    run_scenarios,
    spawn,
    step,
    stop_all,
    wait_until,
)

PARTIES = 3


def barrier(root):
    step("Barrier: waiters block until it is removed")
    path = root + "/barrier"
    owner = new_client()
    waiters = [new_client() for _ in range(PARTIES)]
    released = []
    guard = threading.Lock()
    try:
        check(owner.Barrier(path).wait(timeout=5), "no barrier: wait returns at once")
        gate = owner.Barrier(path)
        gate.create()
        check(not waiters[0].Barrier(path).wait(timeout=0.5), "wait times out while the barrier stands")

        def wait(index, client):
            passed = client.Barrier(path).wait(timeout=60)
            with guard:
                released.append((index, passed))

        threads = [spawn(wait, i, c) for i, c in enumerate(waiters)]
        time.sleep(1.0)
        check_eq(released, [], "nobody passes a standing barrier")
        gate.remove()
        join_all(threads, "barrier waiters", 60)
        check_eq(sorted(released), [(i, True) for i in range(PARTIES)], "everyone passed after removal")
    finally:
        stop_all(waiters + [owner])


def double_barrier(root):
    step("DoubleBarrier: enter waits for all {}, leave waits for all".format(PARTIES))
    path = root + "/double"
    clients = [new_client() for _ in range(PARTIES)]
    guard = threading.Lock()
    log = []
    may_arrive = [threading.Event() for _ in range(PARTIES)]
    may_leave = [threading.Event() for _ in range(PARTIES)]

    def note(event):
        with guard:
            log.append(event)

    def party(index, client):
        b = client.DoubleBarrier(path, PARTIES, identifier="party-{}".format(index))
        check(may_arrive[index].wait(60), "arrival signal")
        note(("arrive", index))
        b.enter()
        note(("inside", index))
        check(may_leave[index].wait(60), "leave signal")
        note(("leaving", index))
        b.leave()
        note(("left", index))

    def count(kind):
        with guard:
            return sum(1 for k, _ in log if k == kind)

    try:
        threads = [spawn(party, i, c) for i, c in enumerate(clients)]
        # Everyone but the last arrives; nobody may get in yet.
        for i in range(PARTIES - 1):
            may_arrive[i].set()
        wait_until(lambda: count("arrive") == PARTIES - 1, "the first parties arrive")
        wait_until(
            lambda: clients[0].exists(path) is not None
            and len(clients[0].get_children(path)) >= PARTIES - 1,
            "their nodes exist",
        )
        time.sleep(1.0)
        check_eq(count("inside"), 0, "nobody inside before the last party arrived")
        may_arrive[PARTIES - 1].set()
        wait_until(lambda: count("inside") == PARTIES, "everyone inside once all arrived")

        # Everyone but the last starts leaving; nobody may get out yet.
        for i in range(PARTIES - 1):
            may_leave[i].set()
        wait_until(lambda: count("leaving") == PARTIES - 1, "the first parties start leaving")
        time.sleep(1.0)
        check_eq(count("left"), 0, "nobody out before the last party leaves")
        may_leave[PARTIES - 1].set()
        join_all(threads, "double barrier parties", 60)
        check_eq(count("left"), PARTIES, "everyone out")
        with guard:
            last_arrival = max(i for i, e in enumerate(log) if e[0] == "arrive")
            first_inside = min(i for i, e in enumerate(log) if e[0] == "inside")
            last_leaving = max(i for i, e in enumerate(log) if e[0] == "leaving")
            first_left = min(i for i, e in enumerate(log) if e[0] == "left")
        check(first_inside > last_arrival, "entered before all arrived: {}".format(log))
        check(first_left > last_leaving, "left before all were leaving: {}".format(log))
        check(clients[0].exists(path) is None or clients[0].get_children(path) == [], "no party nodes left")
    finally:
        for ev in may_arrive + may_leave:
            ev.set()
        stop_all(clients)


if __name__ == "__main__":
    run_scenarios("barrier", barrier, double_barrier)
