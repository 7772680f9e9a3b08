"""Scaffolding shared by the kazoo interop scripts.

Each script is run as ``python3 SCRIPT.py HOST:PORT`` against one backend (Keeper or Apache
ZooKeeper) and must end by itself: every wait is bounded, and a hard alarm ends the process if
something still hangs. Exit status 0 means every check passed; anything else prints why.
"""

import logging
import os
import signal
import sys
import threading
import time
import traceback
import uuid

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

# The whole script, including every client it starts, must be done within this many seconds.
HARD_LIMIT_SECONDS = 240

# Session timeout asked of the server; it is negotiated within 2..20 ticks (4..40 s at 2 s ticks).
SESSION_TIMEOUT_SECONDS = 10.0


def connect_string():
    if len(sys.argv) < 2:
        sys.exit("usage: {} HOST:PORT".format(sys.argv[0]))
    return sys.argv[1]


def new_client():
    """A started KazooClient whose connection attempts and retries are bounded."""
    client = KazooClient(
        hosts=connect_string(),
        timeout=SESSION_TIMEOUT_SECONDS,
        connection_retry=KazooRetry(max_tries=10, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=10, delay=0.1, max_delay=1.0),
    )
    client.start(timeout=30)
    return client


def unique_root(name):
    """A fresh path per run, so scripts never see each other's nodes."""
    return "/kazoo-{}-{}".format(name, uuid.uuid4().hex[:8])


class CheckFailed(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def check_eq(actual, expected, what):
    if actual != expected:
        raise CheckFailed("{}: expected {!r}, got {!r}".format(what, expected, actual))


def wait_until(predicate, what, timeout=30.0):
    """Polls `predicate` until it is true; fails the script after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise CheckFailed("timed out after {}s waiting for {}".format(timeout, what))
        time.sleep(0.05)


def expect_raises(exception, what, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exception:
        return
    except Exception as other:  # noqa: BLE001 - report the wrong kind of failure
        raise CheckFailed(
            "{}: expected {}, got {!r}".format(what, exception.__name__, other)
        )
    raise CheckFailed("{}: expected {}, but it succeeded".format(what, exception.__name__))


def spawn(target, *args):
    """A daemon thread running `target(*args)`; its exception is kept for `join_all`."""
    box = {"error": None}

    def run():
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001 - carried to the main thread
            box["error"] = (e, traceback.format_exc())

    thread = threading.Thread(target=run, daemon=True)
    thread.box = box
    thread.start()
    return thread


def join_all(threads, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise CheckFailed("{}: a thread did not finish within {}s".format(what, timeout))
        if thread.box["error"] is not None:
            error, trace = thread.box["error"]
            raise CheckFailed("{}: a thread failed: {!r}\n{}".format(what, error, trace))


def run(main):
    """Runs `main()` under the hard limit; exits 0 on success, 1 on a failed check."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    def on_alarm(signum, frame):
        sys.stderr.write("HARD LIMIT of {}s reached; stacks:\n".format(HARD_LIMIT_SECONDS))
        for thread_id, stack in sys._current_frames().items():
            sys.stderr.write("--- thread {}\n{}".format(thread_id, "".join(traceback.format_stack(stack))))
        sys.stderr.flush()
        os._exit(3)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HARD_LIMIT_SECONDS)
    started = time.monotonic()
    try:
        main()
    except BaseException:  # noqa: BLE001 - any failure ends the script with its trace
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    print("OK in {:.1f}s".format(time.monotonic() - started))
    sys.stdout.flush()
    # Leftover daemon threads of stopped clients must not keep the process alive.
    os._exit(0)


def stop_all(clients):
    """Stops and closes every client (in a `finally`: each must go, whatever failed)."""
    for c in clients:
        c.stop()
        c.close()


def run_scenarios(name, *scenarios):
    """Runs each scenario with a fresh root of its own under the hard limit, then removes it."""

    def main():
        root = unique_root(name)
        admin = new_client()
        try:
            for scenario in scenarios:
                scenario(root)
            admin.delete(root, recursive=True)
        finally:
            admin.stop()
            admin.close()

    run(main)


def step(message):
    print("-", message)
    sys.stdout.flush()
