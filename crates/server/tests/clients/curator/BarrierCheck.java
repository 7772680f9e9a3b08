// DistributedBarrier and DistributedDoubleBarrier against the server under test: waiters block
// while the barrier is set and all go through when it is removed; double-barrier members enter
// only together and leave only together.
//
// Usage: BarrierCheck <connect> <basePath>

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;

public final class BarrierCheck {
    public static void main(String[] argv) {
        Harness.run("barriers", 120, argv, BarrierCheck::check);
    }

    static void check(String connect, String[] args) throws Exception {
        String base = args[0];
        // A persistent base, so the server's container reaper never removes the parent of the
        // double barrier after the first barrier is gone.
        Harness.client(connect).create().creatingParentsIfNeeded().forPath(base);
        barrier(connect, base + "/barrier");
        doubleBarrier(connect, base + "/double");
    }

    private static void barrier(String connect, String path) throws Exception {
        DistributedBarrier controller = new DistributedBarrier(Harness.client(connect), path);
        controller.setBarrier();
        int waiters = 3;
        AtomicInteger through = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int i = 0; i < waiters; i++) {
            DistributedBarrier b = new DistributedBarrier(Harness.client(connect), path);
            threads.add(new Thread(() -> {
                try {
                    Harness.check(b.waitOnBarrier(30, TimeUnit.SECONDS), "waiter timed out after the barrier was removed");
                    through.incrementAndGet();
                } catch (Throwable t) {
                    synchronized (failures) {
                        failures.add(t);
                    }
                }
            }));
        }
        threads.forEach(Thread::start);
        Thread.sleep(700);
        Harness.checkEq(0, through.get(), "waiters through a barrier that is still set");
        controller.removeBarrier();
        Harness.joinAll(threads, failures, 35_000);
        Harness.checkEq(waiters, through.get(), "waiters through after removal");
        Harness.check(controller.waitOnBarrier(1, TimeUnit.SECONDS), "waiting on a removed barrier blocked");
    }

    private static void doubleBarrier(String connect, String path) throws Exception {
        int members = 3;
        CountDownLatch entered = new CountDownLatch(members - 1);
        AtomicInteger left = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            clients.add(Harness.client(connect));
        }
        for (int i = 0; i < members - 1; i++) {
            DistributedDoubleBarrier d = new DistributedDoubleBarrier(clients.get(i), path, members);
            threads.add(new Thread(() -> {
                try {
                    Harness.check(d.enter(30, TimeUnit.SECONDS), "member timed out entering");
                    entered.countDown();
                    Harness.check(d.leave(30, TimeUnit.SECONDS), "member timed out leaving");
                    left.incrementAndGet();
                } catch (Throwable t) {
                    synchronized (failures) {
                        failures.add(t);
                    }
                }
            }));
        }
        threads.forEach(Thread::start);
        Thread.sleep(700);
        Harness.checkEq((long) members - 1, entered.getCount(), "entry latch before the last member arrived (someone entered early)");
        DistributedDoubleBarrier last = new DistributedDoubleBarrier(clients.get(members - 1), path, members);
        Harness.check(last.enter(30, TimeUnit.SECONDS), "last member could not enter");
        boolean allEntered = entered.await(30, TimeUnit.SECONDS);
        synchronized (failures) {
            Harness.check(allEntered, "early members did not enter once all arrived; their failures: " + failures);
        }
        Thread.sleep(300);
        Harness.checkEq(0, left.get(), "members that left while one is still inside");
        Harness.check(last.leave(30, TimeUnit.SECONDS), "last member could not leave");
        Harness.joinAll(threads, failures, 35_000);
        Harness.checkEq(members - 1, left.get(), "members that left");
    }
}
