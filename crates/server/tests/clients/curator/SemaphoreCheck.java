// InterProcessSemaphoreV2 against the server under test: never more than maxLeases holders at
// once across sessions, a full semaphore makes acquire time out, returning a lease lets a waiter
// in, and every contender gets its turn.
//
// Usage: SemaphoreCheck <connect> <semaphorePath>

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;

public final class SemaphoreCheck {
    static final int MAX_LEASES = 2;

    public static void main(String[] argv) {
        Harness.run("semaphore-v2", 120, argv, SemaphoreCheck::check);
    }

    static void check(String connect, String[] args) throws Exception {
        String path = args[0];
        InterProcessSemaphoreV2 a = new InterProcessSemaphoreV2(Harness.client(connect), path, MAX_LEASES);
        InterProcessSemaphoreV2 b = new InterProcessSemaphoreV2(Harness.client(connect), path, MAX_LEASES);
        CuratorFramework observer = Harness.client(connect);

        Collection<Lease> both = a.acquire(MAX_LEASES, 10, TimeUnit.SECONDS);
        Harness.check(both != null && both.size() == MAX_LEASES, "could not take all " + MAX_LEASES + " leases of an idle semaphore");
        Harness.checkEq(MAX_LEASES, a.getParticipantNodes().size(), "lease nodes while full");
        Harness.check(b.acquire(300, TimeUnit.MILLISECONDS) == null, "got a lease from a full semaphore");
        Lease first = both.iterator().next();
        a.returnLease(first);
        Lease bLease = b.acquire(10, TimeUnit.SECONDS);
        Harness.check(bLease != null, "no lease after one was returned");
        a.returnAll(both.stream().filter(l -> l != first).toList());
        b.returnLease(bLease);

        // Contention: holders counted in this JVM, each on its own session.
        int workers = 4;
        int rounds = 6;
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger maxInside = new AtomicInteger();
        AtomicInteger done = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int i = 0; i < workers; i++) {
            CuratorFramework client = Harness.client(connect);
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, MAX_LEASES);
            String name = "sem-worker-" + i;
            threads.add(new Thread(() -> {
                try {
                    for (int r = 0; r < rounds; r++) {
                        Lease lease = sem.acquire(60, TimeUnit.SECONDS);
                        Harness.check(lease != null, name + " got no lease within 60 s");
                        try {
                            int now = inside.incrementAndGet();
                            maxInside.accumulateAndGet(now, Math::max);
                            Harness.check(now <= MAX_LEASES, now + " holders of a " + MAX_LEASES + "-lease semaphore");
                            Thread.sleep(15);
                            inside.decrementAndGet();
                        } finally {
                            sem.returnLease(lease);
                        }
                        done.incrementAndGet();
                    }
                } catch (Throwable t) {
                    synchronized (failures) {
                        failures.add(t);
                    }
                }
            }, name));
        }
        threads.forEach(Thread::start);
        Harness.joinAll(threads, failures, 100_000);
        Harness.checkEq(workers * rounds, done.get(), "leases taken and returned");
        Harness.check(maxInside.get() <= MAX_LEASES, "max concurrent holders " + maxInside.get());
        // Not a.getParticipantNodes(): that throws once the server has reaped the emptied
        // container holding the leases, which it may do at any moment now.
        Harness.checkEq(List.of(), Harness.childrenOrNone(observer, path + "/leases"), "lease nodes left after every lease was returned");
    }
}
