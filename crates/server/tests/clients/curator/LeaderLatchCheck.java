// LeaderLatch against the server under test: N latches, each on its own session, elect exactly one
// leader; every participant agrees on who it is; closing the leader's latch elects another, until
// one latch is left.
//
// Usage: LeaderLatchCheck <connect> <latchPath> <participants>

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;

public final class LeaderLatchCheck {
    public static void main(String[] argv) {
        Harness.run("leader-latch", 120, argv, LeaderLatchCheck::check);
    }

    private static List<LeaderLatch> leaders(List<LeaderLatch> open) {
        List<LeaderLatch> out = new ArrayList<>();
        for (LeaderLatch l : open) {
            if (l.hasLeadership()) {
                out.add(l);
            }
        }
        return out;
    }

    static void check(String connect, String[] args) throws Exception {
        String path = args[0];
        int n = Integer.parseInt(args[1]);
        List<LeaderLatch> open = new ArrayList<>();
        AtomicInteger elected = new AtomicInteger();
        AtomicInteger deposed = new AtomicInteger();
        for (int i = 0; i < n; i++) {
            CuratorFramework client = Harness.client(connect);
            LeaderLatch latch = new LeaderLatch(client, path, "p" + i);
            latch.addListener(new LeaderLatchListener() {
                @Override
                public void isLeader() {
                    elected.incrementAndGet();
                }

                @Override
                public void notLeader() {
                    deposed.incrementAndGet();
                }
            });
            latch.start();
            open.add(latch);
        }

        int rounds = 0;
        while (!open.isEmpty()) {
            Harness.eventually(20_000, "no leader among " + open.size() + " latches", () -> !leaders(open).isEmpty());
            // Leadership must stay with one participant: watch for a second leader for a while.
            for (int i = 0; i < 10; i++) {
                List<LeaderLatch> now = leaders(open);
                Harness.checkEq(1, now.size(), "number of leaders among " + open.size() + " latches");
                Thread.sleep(30);
            }
            LeaderLatch leader = leaders(open).get(0);
            Harness.check(leader.await(1, TimeUnit.SECONDS), "leader's await() did not return");
            for (LeaderLatch l : open) {
                Participant p = l.getLeader();
                Harness.checkEq(leader.getId(), p.getId(), "leader as seen by " + l.getId());
                Harness.check(p.isLeader(), "getLeader() of " + l.getId() + " is not marked leader");
                Collection<Participant> all = l.getParticipants();
                Harness.checkEq(open.size(), all.size(), "participants seen by " + l.getId());
            }
            for (LeaderLatch l : open) {
                if (l != leader) {
                    Harness.check(!l.await(50, TimeUnit.MILLISECONDS), l.getId() + " returned from await() while not leader");
                }
            }
            open.remove(leader);
            leader.close();
            rounds++;
        }
        Harness.checkEq(n, rounds, "leaders elected in turn");
        Harness.eventually(5_000, "isLeader callbacks", () -> elected.get() == n);
        Harness.checkEq(n, elected.get(), "isLeader callbacks");
        CuratorFramework observer = Harness.client(connect);
        Harness.checkEq(List.of(), Harness.childrenOrNone(observer, path), "latch nodes left after every latch closed");
    }
}
