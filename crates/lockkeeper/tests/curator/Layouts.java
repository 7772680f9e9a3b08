// Curator participants that stay in their queues, for `tests/zk_inspect_layouts.rs`: the test
// inspects the nodes real Curator recipes wrote and checks kinds, order and verdicts.
//
// Usage: Layouts <connect>, then one command per line on stdin, each answered `OK` at once:
//   latch <path> <id>        a LeaderLatch with participant id <id>, started
//   mutex <path>             InterProcessMutex.acquire() on a thread of its own
//   read <path>              InterProcessReadWriteLock.readLock().acquire(), likewise
//   write <path>             InterProcessReadWriteLock.writeLock().acquire(), likewise
//   lease <path> <max>       InterProcessSemaphoreV2(max).acquire(), likewise
//   quit                     -> `BYE`, then the JVM ends (its sessions' nodes go with it)
// Every participant has a client (so a session) of its own, so the test can tell them apart by
// owner. Acquisitions block on their own threads: the test watches the queue on the server.

import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;

public final class Layouts {
    public static void main(String[] argv) {
        Interop.watchdog("layouts", 300);
        try {
            String connect = argv[0];
            Interop.serve(words -> {
                CuratorFramework client = Interop.client(connect);
                String path = words[1];
                switch (words[0]) {
                    case "latch" -> new LeaderLatch(client, path, words[2]).start();
                    case "mutex" -> hold(new InterProcessMutex(client, path)::acquire);
                    case "read" -> hold(new InterProcessReadWriteLock(client, path).readLock()::acquire);
                    case "write" -> hold(new InterProcessReadWriteLock(client, path).writeLock()::acquire);
                    case "lease" -> {
                        InterProcessSemaphoreV2 semaphore =
                                new InterProcessSemaphoreV2(client, path, Integer.parseInt(words[2]));
                        hold(() -> {
                            semaphore.acquire(300, TimeUnit.SECONDS);
                        });
                    }
                    default -> throw new IllegalArgumentException("unknown command: " + String.join(" ", words));
                }
                Interop.say("OK");
            });
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL layouts: " + t);
            Interop.exit(2);
        }
    }

    interface Acquire {
        void acquire() throws Exception;
    }

    /** Acquires on a daemon thread and keeps what it got until the JVM ends. */
    private static void hold(Acquire acquire) {
        Thread thread = new Thread(() -> {
            try {
                acquire.acquire();
            } catch (Exception e) {
                Interop.say("ERR acquire: " + e);
            }
        }, "holder");
        thread.setDaemon(true);
        thread.start();
    }
}
