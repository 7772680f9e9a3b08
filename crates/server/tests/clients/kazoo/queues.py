"""kazoo's Queue and LockingQueue recipes: nothing put is lost or delivered twice, each
producer's items come out in the order it put them, priorities are honoured, and a LockingQueue
entry taken by a consumer that goes away becomes available again."""

import threading

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

PRODUCERS = 3
ITEMS_EACH = 20


def plain_queue(root):
    step("Queue: {} producers x {} items, two consumers".format(PRODUCERS, ITEMS_EACH))
    path = root + "/queue"
    producers = [new_client() for _ in range(PRODUCERS)]
    consumers = [new_client() for _ in range(2)]
    guard = threading.Lock()
    received = {0: [], 1: []}
    total = PRODUCERS * ITEMS_EACH

    def produce(index, client):
        queue = client.Queue(path)
        for n in range(ITEMS_EACH):
            queue.put("p{}-{:03d}".format(index, n).encode())

    def consume(index, client):
        queue = client.Queue(path)
        while True:
            with guard:
                if sum(len(v) for v in received.values()) >= total:
                    return
            item = queue.get()
            if item is None:
                threading.Event().wait(0.02)
                continue
            with guard:
                received[index].append(item.decode())

    try:
        threads = [spawn(produce, i, c) for i, c in enumerate(producers)]
        threads += [spawn(consume, i, c) for i, c in enumerate(consumers)]
        join_all(threads, "queue producers and consumers", 120)
        everything = received[0] + received[1]
        check_eq(len(everything), total, "items received")
        check_eq(len(set(everything)), total, "no item delivered twice")
        check_eq(
            sorted(everything),
            sorted("p{}-{:03d}".format(p, n) for p in range(PRODUCERS) for n in range(ITEMS_EACH)),
            "every item put came out",
        )
        # Each consumer takes the lowest sequence number first, so what one consumer saw of a
        # producer is in that producer's order.
        for consumer, items in received.items():
            for p in range(PRODUCERS):
                mine = [i for i in items if i.startswith("p{}-".format(p))]
                check_eq(mine, sorted(mine), "consumer {} saw producer {} in order".format(consumer, p))
        check_eq(len(consumers[0].Queue(path)), 0, "queue empty")

        step("Queue: one producer, one consumer keep exact FIFO; priorities first")
        queue = producers[0].Queue(root + "/fifo")
        for n in range(10):
            queue.put(str(n).encode())
        out = consumers[0].Queue(root + "/fifo")
        check_eq([out.get().decode() for _ in range(10)], [str(n) for n in range(10)], "FIFO order")
        check(out.get() is None, "an empty queue gives None")
        queue.put(b"low", priority=200)
        queue.put(b"normal")
        queue.put(b"urgent", priority=1)
        check_eq([out.get() for _ in range(3)], [b"urgent", b"normal", b"low"], "priority order")
    finally:
        stop_all(producers + consumers)


def locking_queue(root):
    step("LockingQueue: get locks an entry; release returns it; consume removes it")
    path = root + "/locking"
    a = new_client()
    b = new_client()
    try:
        qa = a.LockingQueue(path)
        qb = b.LockingQueue(path)
        qa.put_all([b"one", b"two", b"three"])
        check_eq(len(qa), 3, "three entries")
        check_eq(qa.get(timeout=10), b"one", "first entry to a")
        check(qa.holds_lock(), "a holds its entry")
        check_eq(qb.get(timeout=10), b"two", "b skips the entry a holds")
        check(qa.release(), "a releases without consuming")
        check_eq(len(qa), 3, "a released entry stays queued")
        check(qb.consume(), "b consumes its entry")
        check_eq(qb.get(timeout=10), b"one", "the released entry is available again")
        check(qb.consume(), "b consumes it")
        check_eq(len(qa), 1, "one entry left")

        step("LockingQueue: an entry held by a consumer that goes away is taken by another")
        c = new_client()
        qc = c.LockingQueue(path)
        check_eq(qc.get(timeout=10), b"three", "c takes the last entry")
        check(qa.get(timeout=0.5) is None, "nothing free while c holds it")
        c.stop()
        c.close()
        got = []
        wait_until(lambda: got.append(qa.get(timeout=1)) or got[-1] == b"three", "the entry freed by c", 30)
        check(qa.consume(), "a consumes it")
        check_eq(len(qa), 0, "queue empty")
    finally:
        a.stop()
        a.close()
        b.stop()
        b.close()


if __name__ == "__main__":
    run_scenarios("queue", plain_queue, locking_queue)
