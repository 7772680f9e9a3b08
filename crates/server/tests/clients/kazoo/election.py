"""kazoo's Election recipe: of several candidates exactly one leads; when the leader's client
stops, another candidate takes over, until every candidate has led once."""

import threading

from kazoo.exceptions import ConnectionClosedError

from harness import (
    check,
    check_eq,
    join_all,
    new_client,
    run,
    spawn,
    step,
    unique_root,
    wait_until,
)

CANDIDATES = 3


class Candidate:
    def __init__(self, name, path):
        self.name = name
        self.client = new_client()
        self.election = self.client.Election(path, identifier=name)
        # Set by the test to let this candidate's leadership function return.
        self.step_down = threading.Event()


def main():
    root = unique_root("election")
    path = root + "/leader"
    admin = new_client()
    candidates = [Candidate("candidate-{}".format(i), path) for i in range(CANDIDATES)]
    guard = threading.Lock()
    leading = []  # names currently inside their leadership function, in order of entry
    history = []  # every name that ever led, in order
    overlaps = []

    def lead(candidate):
        with guard:
            if leading:
                overlaps.append((list(leading), candidate.name))
            leading.append(candidate.name)
            history.append(candidate.name)
        candidate.step_down.wait(120)

    def campaign(candidate):
        try:
            candidate.election.run(lead, candidate)
        except ConnectionClosedError:
            # Leaving leadership tries to delete the election node through the client this test
            # stopped; the server already removed the node with the session.
            check(candidate.step_down.is_set(), "{} lost its connection".format(candidate.name))

    threads = []
    try:
        step("{} candidates campaign".format(CANDIDATES))
        for c in candidates:
            threads.append(spawn(campaign, c))
        wait_until(lambda: len(history) == 1, "a first leader")
        wait_until(lambda: len(admin.get_children(path)) == CANDIDATES, "every candidate registered")
        contenders = candidates[0].election.contenders()
        check_eq(len(contenders), CANDIDATES, "contenders()")
        check_eq(contenders[0], history[0], "the first contender is the leader")
        check_eq(sorted(contenders), sorted(c.name for c in candidates), "contenders are the candidates")

        by_name = {c.name: c for c in candidates}
        for round_ in range(CANDIDATES):
            wait_until(lambda: len(history) == round_ + 1, "leader number {}".format(round_ + 1))
            leader = by_name[history[round_]]
            step("round {}: {} leads; its client stops".format(round_ + 1, leader.name))
            with guard:
                check_eq(leading, [leader.name], "exactly one leader")
                leading.remove(leader.name)
            # The leader's process goes away: its session closes, so its election node goes.
            leader.client.stop()
            leader.client.close()
            leader.step_down.set()
            remaining = CANDIDATES - round_ - 1
            if remaining:
                wait_until(lambda: len(history) == round_ + 2, "a new leader after {} stopped".format(leader.name))
                check(history[-1] != leader.name, "a different candidate took over")
            wait_until(lambda: len(admin.get_children(path)) == remaining, "{} candidates left".format(remaining))
        check_eq(overlaps, [], "two leaders at once")
        check_eq(sorted(history), sorted(by_name), "every candidate led exactly once")
        join_all(threads, "candidates", 30)
        admin.delete(root, recursive=True)
    finally:
        for c in candidates:
            c.step_down.set()
            c.client.stop()
            c.client.close()
        admin.stop()
        admin.close()


if __name__ == "__main__":
    run(main)
