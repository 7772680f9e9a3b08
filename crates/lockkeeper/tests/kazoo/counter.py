"""kazoo's Counter(support_curator=True) on command, for tests/zk_counter.rs.

Usage: counter.py HOST:PORT PATH read | add DELTA | add-each DELTA TIMES

Prints one line: the counter's value after the step (`read`, `add`), `done` (`add-each`), or
`error: <exception type>` when kazoo refuses the step (struct.error past the i32 range). Any
other failure is a traceback and a non-zero exit. A hard alarm ends a hung run.
"""

import signal
import struct
import sys

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry


def main():
    signal.alarm(120)
    connect, path, action = sys.argv[1], sys.argv[2], sys.argv[3]
    # Many attempts, short pauses: kazoo retries a counter change lost to a concurrent writer
    # through this policy.
    retry = KazooRetry(max_tries=1000, delay=0.001, max_delay=0.05)
    client = KazooClient(hosts=connect, timeout=10, command_retry=retry)
    client.start(timeout=30)
    try:
        counter = client.Counter(path, support_curator=True)
        if action == "read":
            print(counter.value)
        elif action == "add":
            try:
                counter += int(sys.argv[4])
            except struct.error:
                print("error: struct.error")
                return
            print(counter.post_value)
        elif action == "add-each":
            for _ in range(int(sys.argv[5])):
                counter += int(sys.argv[4])
            print("done")
        else:
            raise SystemExit("unknown action " + action)
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    main()
