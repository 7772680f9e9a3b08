"""kazoo's lock recipes: Lock (mutual exclusion under contention, every contender gets it,
timeouts and non-blocking attempts, release when the holder's client stops), ReadLock and
WriteLock, and Semaphore (never more holders than leases)."""

import threading
import time

from kazoo.exceptions import LockTimeout

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

CONTENDERS = 4
ROUNDS = 5


class Occupancy:
    """Counts how many threads are inside a critical section, and the most ever seen at once."""

    def __init__(self):
        self._guard = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entries = []

    def enter(self, who):
        with self._guard:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.entries.append(who)

    def leave(self):
        with self._guard:
            self.inside -= 1


def contention(root):
    step("Lock: {} clients x {} rounds, one holder at a time".format(CONTENDERS, ROUNDS))
    path = root + "/mutex"
    counter_path = root + "/counter"
    clients = [new_client() for _ in range(CONTENDERS)]
    clients[0].create(counter_path, b"0", makepath=True)
    occupancy = Occupancy()
    saw_waiters = []

    def contend(index, client):
        lock = client.Lock(path, identifier="client-{}".format(index))
        for _ in range(ROUNDS):
            check(lock.acquire(timeout=60), "client-{} got the lock within 60 s".format(index))
            try:
                occupancy.enter(index)
                check(lock.is_acquired, "is_acquired while held")
                # A read-modify-write without a version: only mutual exclusion keeps it exact.
                value = int(client.get(counter_path)[0])
                waiting = lock.contenders()
                if len(waiting) > 1:
                    saw_waiters.append(waiting)
                time.sleep(0.01)
                client.set(counter_path, str(value + 1).encode())
            finally:
                occupancy.leave()
                lock.release()
        check(not lock.is_acquired, "released after the last round")

    try:
        join_all([spawn(contend, i, c) for i, c in enumerate(clients)], "lock contention", 180)
        check_eq(occupancy.most, 1, "most holders at once")
        check_eq(int(clients[0].get(counter_path)[0]), CONTENDERS * ROUNDS, "counter (lost updates mean two holders)")
        for index in range(CONTENDERS):
            check_eq(occupancy.entries.count(index), ROUNDS, "rounds won by client-{}".format(index))
        check(saw_waiters, "some holder saw other contenders waiting")
        check(all(w[0].startswith("client-") for w in saw_waiters), "contenders() names identifiers")
        check_eq(clients[0].get_children(path), [], "no lock nodes left behind")
    finally:
        stop_all(clients)


def timeouts_and_crashes(root):
    step("Lock: timeout, non-blocking attempt, release when the holder's client stops")
    path = root + "/held"
    holder_client = new_client()
    waiter_client = new_client()
    try:
        holder = holder_client.Lock(path, identifier="holder")
        check(holder.acquire(timeout=10), "first acquire")
        waiter = waiter_client.Lock(path, identifier="waiter")
        check(not waiter.acquire(blocking=False), "non-blocking acquire fails while held")
        started = time.monotonic()
        try:
            waiter.acquire(timeout=1.0)
            raise AssertionError("acquire with timeout succeeded while the lock was held")
        except LockTimeout:
            pass
        check(time.monotonic() - started >= 0.9, "the timeout was waited out")
        check_eq(len(waiter_client.get_children(path)), 1, "a timed-out waiter leaves no node")
        check_eq(holder.contenders(), ["holder"], "only the holder contends")

        acquired = threading.Event()

        def wait_for_it():
            if waiter.acquire(timeout=60):
                acquired.set()

        thread = spawn(wait_for_it)
        wait_until(lambda: len(waiter_client.get_children(path)) == 2, "the waiter queued")
        check(not acquired.is_set(), "the waiter waits while the holder holds")
        # The holder's process "dies": its session closes and its ephemeral lock node goes.
        holder_client.stop()
        holder_client.close()
        check(acquired.wait(30), "the waiter got the lock after the holder's client stopped")
        join_all([thread], "waiter thread")
        check_eq(waiter.contenders(), ["waiter"], "the waiter holds alone")
        waiter.release()
    finally:
        waiter_client.stop()
        waiter_client.close()


def read_write(root):
    step("ReadLock / WriteLock: readers share, a writer excludes")
    path = root + "/rw"
    clients = [new_client() for _ in range(3)]
    try:
        r1 = clients[0].ReadLock(path, identifier="r1")
        r2 = clients[1].ReadLock(path, identifier="r2")
        w = clients[2].WriteLock(path, identifier="w")
        check(r1.acquire(timeout=10), "first reader")
        check(r2.acquire(timeout=10), "second reader shares")
        check(not w.acquire(blocking=False), "writer blocked by readers")
        got_write = threading.Event()

        def write():
            if w.acquire(timeout=60):
                got_write.set()

        thread = spawn(write)
        wait_until(lambda: len(clients[0].get_children(path)) == 3, "the writer queued")
        r1.release()
        time.sleep(0.5)
        check(not got_write.is_set(), "writer still waits for the second reader")
        late_reader = clients[0].ReadLock(path, identifier="r3")
        check(not late_reader.acquire(blocking=False), "a reader after a waiting writer waits")
        r2.release()
        check(got_write.wait(30), "writer acquired once readers left")
        join_all([thread], "writer thread")
        w.release()
    finally:
        stop_all(clients)


def semaphore(root):
    step("Semaphore: at most max_leases holders")
    path = root + "/sem"
    clients = [new_client() for _ in range(4)]
    occupancy = Occupancy()

    def use(index, client):
        sem = client.Semaphore(path, identifier="s{}".format(index), max_leases=2)
        for _ in range(3):
            check(sem.acquire(timeout=60), "lease within 60 s")
            try:
                occupancy.enter(index)
                time.sleep(0.05)
            finally:
                occupancy.leave()
                sem.release()

    try:
        join_all([spawn(use, i, c) for i, c in enumerate(clients)], "semaphore", 120)
        check(occupancy.most <= 2, "more than 2 holders at once: {}".format(occupancy.most))
        check_eq(len(occupancy.entries), 12, "every lease was granted")
        check_eq(clients[0].Semaphore(path, max_leases=2).lease_holders(), [], "no lease left")
    finally:
        stop_all(clients)


if __name__ == "__main__":
    run_scenarios("lock", contention, timeouts_and_crashes, read_write, semaphore)
