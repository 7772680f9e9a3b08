"""A paused lock holder loses its session, and with it the lock and its ephemeral node.

The holder is a separate process (this script run with --hold). It is frozen with SIGSTOP, so it
stops heartbeating without closing anything, as a process in a long GC pause or on a stalled
host would. The server must expire its session after the negotiated timeout, not before, and
hand the lock to the waiter; when the holder is thawed it must learn its session is lost."""

import os
import signal
import subprocess
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from harness import (
    check,
    check_eq,
    connect_string,
    join_all,
    new_client,
    run,
    spawn,
    step,
    unique_root,
    wait_until,
)

# The shortest session a 2 s tick allows (2 ticks), so that expiry comes quickly.
HOLDER_SESSION_SECONDS = 4.0


def hold(lock_path, eph_path):
    """The holder process: take the lock, create an ephemeral, report, and wait to learn the
    session is gone."""
    client = KazooClient(hosts=connect_string(), timeout=HOLDER_SESSION_SECONDS)
    lost = threading.Event()

    def on_state(state):
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(on_state)
    client.start(timeout=30)
    lock = client.Lock(lock_path, identifier="holder")
    if not lock.acquire(timeout=30):
        print("NOLOCK", flush=True)
        os._exit(2)
    client.create(eph_path, b"", ephemeral=True)
    session_id, _ = client.client_id
    negotiated = client._session_timeout / 1000.0
    print("HELD {:x} {}".format(session_id, negotiated), flush=True)
    # Frozen somewhere in here; after the thaw the client finds its session expired.
    if lost.wait(120):
        print("LOST", flush=True)
        os._exit(0)
    print("NOT-LOST", flush=True)
    os._exit(3)


def main():
    root = unique_root("expiry")
    lock_path = root + "/lock"
    eph_path = root + "/holder-alive"
    waiter_client = new_client()
    waiter_client.ensure_path(root)
    holder = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), connect_string(), "--hold", lock_path, eph_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    holder_lines = []
    reader = threading.Thread(target=lambda: holder_lines.extend(holder.stdout), daemon=True)
    reader.start()
    try:
        step("the holder takes the lock")
        wait_until(lambda: any(l.startswith("HELD") for l in holder_lines), "the holder to report", 60)
        _, session_hex, negotiated = next(l for l in holder_lines if l.startswith("HELD")).split()
        negotiated = float(negotiated)
        check(negotiated <= 2 * HOLDER_SESSION_SECONDS, "negotiated timeout {}".format(negotiated))
        stat = waiter_client.exists(eph_path)
        check(stat is not None, "the holder's ephemeral exists")
        check_eq("{:x}".format(stat.ephemeralOwner), session_hex, "ephemeralOwner is the holder's session")

        acquired = threading.Event()
        lock = waiter_client.Lock(lock_path, identifier="waiter")

        def wait_for_lock():
            if lock.acquire(timeout=90):
                acquired.set()

        waiter = spawn(wait_for_lock)
        wait_until(lambda: len(waiter_client.get_children(lock_path)) == 2, "the waiter to queue")
        time.sleep(1.0)
        check(not acquired.is_set(), "the waiter waits while the holder is alive")

        step("the holder freezes (SIGSTOP); its session must expire")
        os.kill(holder.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        check(acquired.wait(60), "the waiter got the lock within 60 s of the freeze")
        waited = time.monotonic() - frozen_at
        step("lock handed over {:.1f}s after the freeze (session timeout {}s)".format(waited, negotiated))
        # Heartbeats go every third of the timeout, so the server heard from the holder at most
        # a third of it before the freeze; expiring sooner than the rest would be premature.
        check(waited >= negotiated * 2 / 3 - 0.5, "expired too early: {:.1f}s".format(waited))
        check(waiter_client.exists(eph_path) is None, "the holder's ephemeral went with its session")
        join_all([waiter], "waiter")

        step("the thawed holder learns its session is lost")
        os.kill(holder.pid, signal.SIGCONT)
        try:
            code = holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the thawed holder did not finish: {}".format(holder_lines))
        reader.join(5)
        check_eq(code, 0, "holder exit status (output: {})".format(holder_lines))
        check("LOST\n" in holder_lines, "the holder saw LOST: {}".format(holder_lines))
        check_eq(lock.contenders(), ["waiter"], "only the waiter holds the lock")
        lock.release()
        waiter_client.delete(root, recursive=True)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait(10)
        waiter_client.stop()
        waiter_client.close()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[2] == "--hold":
        hold(sys.argv[3], sys.argv[4])
    else:
        run(main)
