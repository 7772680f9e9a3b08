"""redis-py's side of `lockkeeper-bench --redis`.

Runs the same two workloads as the Rust side, with `redis.lock.Lock` as a Python service would
use it (blocking acquire, the default 0.1 s sleep between tries), and prints one flat JSON
object of numbers on stdout. The benchmark embeds this file and runs it with `python3 -c`.

Usage: python3 -c SCRIPT URL PREFIX CLIENTS WARMUP_S DURATION_S HOLD_S MAX_OPS
"""

import json
import sys
import threading
import time

import redis

# The same fixed lease as the Rust side: both sides set `SET NX PX 30000`.
LEASE_S = 30


def quantile_us(sorted_samples, q):
    """Nearest-rank quantile of sorted seconds, in microseconds (0 when there are none)."""
    if not sorted_samples:
        return 0
    index = min(len(sorted_samples) - 1, int(q * len(sorted_samples)))
    return sorted_samples[index] * 1e6


def uncontended(url, name, warmup, duration, max_ops):
    """One client: acquire, release, as fast as it goes."""
    client = redis.Redis.from_url(url)
    lock = client.lock(name, timeout=LEASE_S, sleep=0.1, blocking=True)
    warm_until = time.monotonic() + warmup
    while time.monotonic() < warm_until:
        lock.acquire()
        lock.release()
    samples = []
    start = time.monotonic()
    end = start + duration
    while len(samples) < max_ops:
        began = time.perf_counter()
        if time.monotonic() >= end:
            break
        lock.acquire()
        lock.release()
        samples.append(time.perf_counter() - began)
    elapsed = time.monotonic() - start
    samples.sort()
    client.close()
    return {
        "uncontended_cycles": len(samples),
        "uncontended_elapsed_s": elapsed,
        "uncontended_p50_us": quantile_us(samples, 0.50),
        "uncontended_p99_us": quantile_us(samples, 0.99),
    }


def contended(url, name, clients, warmup, duration, hold, max_ops):
    """`clients` threads, one lock: lock, hold, release, again. A wait still unfinished when
    the window closes is recorded as it stands (starvation must show, not vanish)."""
    start = time.monotonic() + 0.05
    measure_from = start + warmup
    end = measure_from + duration
    waits = []
    holders = []
    state = {"acquired": 0, "stopped_at": None}
    guard = threading.Lock()

    def client_loop(ident):
        client = redis.Redis.from_url(url)
        lock = client.lock(name, timeout=LEASE_S, sleep=0.1, blocking=True)
        while time.monotonic() < start:
            time.sleep(0.001)
        while True:
            began = time.monotonic()
            with guard:
                if began >= end or state["stopped_at"] is not None:
                    break
            ok = lock.acquire(blocking=True, blocking_timeout=max(end - began, 0.001))
            got = time.monotonic()
            measured = began >= measure_from
            if not ok:
                if measured:
                    with guard:
                        if state["stopped_at"] is None:
                            waits.append(got - began)
                break
            if measured:
                with guard:
                    # Past --max-ops the window is closed: acquisitions no longer count.
                    if state["stopped_at"] is None:
                        waits.append(got - began)
                        holders.append(ident)
                        state["acquired"] += 1
                        if state["acquired"] >= max_ops:
                            state["stopped_at"] = got
            time.sleep(hold)
            lock.release()
        client.close()

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=warmup + duration + 120)
    stopped = state["stopped_at"] or end
    waits.sort()
    changes = sum(1 for a, b in zip(holders, holders[1:]) if a != b)
    return {
        "contended_acquisitions": len(holders),
        "contended_holder_changes": changes,
        "contended_elapsed_s": max(stopped - measure_from, 1e-9),
        "contended_wait_samples": len(waits),
        "contended_wait_p50_us": quantile_us(waits, 0.50),
        "contended_wait_p99_us": quantile_us(waits, 0.99),
        "contended_wait_p999_us": quantile_us(waits, 0.999),
        "contended_wait_max_us": quantile_us(waits, 1.0),
    }


def main():
    url, prefix = sys.argv[1], sys.argv[2]
    clients = int(sys.argv[3])
    warmup, duration, hold = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    max_ops = int(sys.argv[7])
    result = {"redis_py_version": redis.__version__}
    result.update(uncontended(url, prefix + ":uncontended", warmup, duration, max_ops))
    result.update(contended(url, prefix + ":contended", clients, warmup, duration, hold, max_ops))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
