// The Curator side of `lockkeeper-bench --locks`: Apache Curator's InterProcessMutex measured the
// way the Rust side measures lockkeeper's Mutex, so the figures can be set side by side.
//
// The benchmark binary carries this file, compiles it with javac into a temporary directory and
// runs it on Debian's Curator and ZooKeeper jars. One JVM serves every measurement of a run, so
// the JIT has warmed up by the time it matters; commands arrive on stdin, one per line, and each
// is answered by result lines and a final `END`:
//
//   uncontended <connect> <path> <warmupCycles> <warmupMs> <cycles> <limitMs>
//       one session; up to `warmupCycles` unmeasured acquire+release cycles within `warmupMs`,
//       then up to `cycles` measured ones or until `limitMs` passed. Answers
//       `RESULT cycles=<n> elapsed_us=<us>`.
//   contended <connect> <path> <clients> <cycles> <limitMs>
//       `clients` sessions on one lock, each looping acquire -> release up to `cycles` times or
//       until `limitMs` passed (then it finishes the acquisition it waits for). Answers one
//       `WAITS <us> <us> ...` line per session (time from calling acquire to holding the lock),
//       then `RESULT cycles=<total> elapsed_us=<us>`.
//
// A failed command answers `ERROR <reason>` before `END`. The JVM ends when stdin closes, on
// `quit`, or when its watchdog (first argument, seconds) fires, whichever comes first. The command
// loop, the watchdog and the sessions are CuratorBenchSupport's, compiled with this file.

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;

public final class CuratorLockBench extends CuratorBenchSupport {
    /** Bound on one acquisition; an acquisition that takes longer fails the measurement. */
    private static final long ACQUIRE_LIMIT_S = 60;

    /** Long, so that a scheduling hiccup on a loaded machine loses no session. */
    private static final int SESSION_TIMEOUT_MS = 30_000;

    public static void main(String[] argv) throws Exception {
        watchdog(argv.length > 0 ? Long.parseLong(argv[0]) : 600);
        serve(Map.of(
                "uncontended", w -> uncontended(w[1], w[2], Integer.parseInt(w[3]), Long.parseLong(w[4]),
                        Integer.parseInt(w[5]), Long.parseLong(w[6])),
                "contended", w -> contended(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                        Long.parseLong(w[5]))));
    }

    private static void cycle(InterProcessMutex mutex) throws Exception {
        if (!mutex.acquire(ACQUIRE_LIMIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no lock within " + ACQUIRE_LIMIT_S + " s");
        }
        mutex.release();
    }

    private static void uncontended(String connect, String path, int warmup, long warmupMs, int cycles,
            long limitMs) throws Exception {
        CuratorFramework client = client(connect, SESSION_TIMEOUT_MS);
        try {
            InterProcessMutex mutex = new InterProcessMutex(client, path);
            long warmupEnd = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(warmupMs);
            for (int i = 0; i < warmup && System.nanoTime() < warmupEnd; i++) {
                cycle(mutex);
            }
            long start = System.nanoTime();
            long deadline = start + TimeUnit.MILLISECONDS.toNanos(limitMs);
            int done = 0;
            while (done < cycles && System.nanoTime() < deadline) {
                cycle(mutex);
                done++;
            }
            long elapsed = System.nanoTime() - start;
            say("RESULT cycles=" + done + " elapsed_us=" + elapsed / 1000);
        } finally {
            client.close();
        }
    }

    private static void contended(String connect, String path, int clients, int cycles, long limitMs)
            throws Exception {
        List<CuratorFramework> sessions = clients(connect, clients, SESSION_TIMEOUT_MS);
        try {
            long[][] waits = new long[clients][cycles];
            int[] counts = new int[clients];
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(limitMs);
            long startedAt = together(clients, limitMs + TimeUnit.SECONDS.toMillis(ACQUIRE_LIMIT_S * 2), i -> {
                InterProcessMutex mutex = new InterProcessMutex(sessions.get(i), path);
                int n = 0;
                while (n < cycles && System.nanoTime() < deadline) {
                    long asked = System.nanoTime();
                    if (!mutex.acquire(ACQUIRE_LIMIT_S, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("no lock within " + ACQUIRE_LIMIT_S + " s");
                    }
                    waits[i][n] = (System.nanoTime() - asked) / 1000;
                    n++;
                    mutex.release();
                }
                counts[i] = n;
            });
            long elapsed = System.nanoTime() - startedAt;
            int total = 0;
            for (int i = 0; i < clients; i++) {
                say(line("WAITS", waits[i], counts[i]));
                total += counts[i];
            }
            say("RESULT cycles=" + total + " elapsed_us=" + elapsed / 1000);
        } finally {
            close(sessions);
        }
    }
}
