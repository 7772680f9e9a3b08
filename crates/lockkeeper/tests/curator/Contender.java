// Curator contenders for `tests/zk_curator.rs`: several sessions in one JVM take one lock over
// and over, alongside lockkeeper sessions in the test process, and report what they saw.
//
// Usage: Contender <connect> <mutex|rw> <lockPath> <markerDir> <sessions> <iterations> <holdMs> <label>
//
// Each session is a CuratorFramework of its own (its own ZooKeeper session) on its own thread,
// using InterProcessMutex (`mutex`) or InterProcessReadWriteLock (`rw`: a write every third
// iteration, staggered by the session's index, reads otherwise). Inside the lock it holds the
// marker directory (see Markers) for `holdMs`. Output: `READY` once connected, then after `go`
// on stdin one `DONE <who> completed=<n> violations=<m>` per session and `PASS contend` (or a
// `FAIL` line and a non-zero exit).

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;

public final class Contender {
    /** Bound on one acquisition: far beyond what a whole run needs. */
    private static final int ACQUIRE_LIMIT_S = 120;

    public static void main(String[] argv) {
        Interop.watchdog("contend", 400);
        try {
            run(argv);
            Interop.say("PASS contend");
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL contend: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }

    private static void run(String[] argv) throws Exception {
        if (argv.length != 8) {
            throw new IllegalArgumentException("expected 8 arguments, got " + argv.length);
        }
        String connect = argv[0];
        boolean readWrite = switch (argv[1]) {
            case "mutex" -> false;
            case "rw" -> true;
            default -> throw new IllegalArgumentException("unknown lock kind " + argv[1]);
        };
        String lockPath = argv[2];
        Path markers = Path.of(argv[3]);
        int sessions = Integer.parseInt(argv[4]);
        int iterations = Integer.parseInt(argv[5]);
        long holdMs = Long.parseLong(argv[6]);
        String label = argv[7];

        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            clients.add(Interop.client(connect));
        }
        Interop.say("READY");
        String go = Interop.hear();
        if (!"go".equals(go)) {
            throw new IllegalStateException("expected `go` on stdin, got " + go);
        }

        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            CuratorFramework client = clients.get(i);
            int index = i;
            String who = label + "-" + i;
            Thread t = new Thread(() -> {
                try {
                    contend(client, readWrite, lockPath, markers, index, iterations, holdMs, who);
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            }, who);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join(TimeUnit.SECONDS.toMillis(380));
            if (t.isAlive()) {
                throw new IllegalStateException(t.getName() + " still running");
            }
        }
        synchronized (failures) {
            if (!failures.isEmpty()) {
                throw new IllegalStateException("a contender failed", failures.get(0));
            }
        }
    }

    private static void contend(CuratorFramework client, boolean readWrite, String lockPath, Path markers,
            int index, int iterations, long holdMs, String who) throws Exception {
        InterProcessMutex mutex = readWrite ? null : new InterProcessMutex(client, lockPath);
        InterProcessReadWriteLock rw = readWrite ? new InterProcessReadWriteLock(client, lockPath) : null;
        int completed = 0;
        int violations = 0;
        for (int i = 0; i < iterations; i++) {
            boolean write = !readWrite || (index + i) % 3 == 0;
            InterProcessMutex lock = readWrite ? (write ? rw.writeLock() : rw.readLock()) : mutex;
            if (!lock.acquire(ACQUIRE_LIMIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException(who + " did not get the lock within " + ACQUIRE_LIMIT_S
                        + " s (iteration " + i + ")");
            }
            try {
                violations += write
                        ? Markers.asWriter(markers, who, holdMs)
                        : Markers.asReader(markers, who, holdMs);
            } finally {
                lock.release();
            }
            completed++;
        }
        Interop.say("DONE " + who + " completed=" + completed + " violations=" + violations);
    }
}
