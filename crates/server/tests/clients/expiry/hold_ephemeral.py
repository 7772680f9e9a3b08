"""Holds a ZooKeeper session with ephemeral nodes until killed (driven by tests/session_expiry.rs).

Usage: hold_ephemeral.py CONNECT PATH... [--timeout SECONDS]

Connects with the requested session timeout, creates each PATH as an ephemeral node, prints one
line `READY session=0x... timeout_ms=N` (N is the timeout the server granted) and then keeps the
session alive (kazoo pings in the background) until the test kills or pauses this process.
Nothing here can close the session then: the server must expire it. Session state changes are
printed as `STATE <kazoo state>` lines. As a bound against a forgotten child, it exits by itself
after five minutes.
"""

import sys
import time

from kazoo.client import KazooClient


def main() -> int:
    args = sys.argv[1:]
    timeout = 4.0
    if "--timeout" in args:
        i = args.index("--timeout")
        timeout = float(args[i + 1])
        del args[i : i + 2]
    if len(args) < 2:
        print("usage: hold_ephemeral.py CONNECT PATH... [--timeout SECONDS]", file=sys.stderr)
        return 2
    connect, paths = args[0], args[1:]

    client = KazooClient(hosts=connect, timeout=timeout)
    # Every state change is reported, so a test that paused this process can see that the
    # server expired the session meanwhile (LOST) once the process runs again.
    client.add_listener(lambda state: print(f"STATE {state}", flush=True))
    client.start(timeout=30)
    for path in paths:
        client.create(path, b"held", ephemeral=True, makepath=True)
    session_id, _password = client.client_id
    # kazoo keeps the negotiated value (milliseconds) on the client after the handshake.
    granted = int(client._session_timeout)
    print(f"READY session={session_id:#x} timeout_ms={granted}", flush=True)

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
