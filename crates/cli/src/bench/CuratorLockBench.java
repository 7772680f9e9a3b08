// The Curator side of `lockkeeper bench --locks`: Apache Curator's InterProcessMutex measured the
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
// `quit`, or when its watchdog (first argument, seconds) fires, whichever comes first.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLockBench {
    /** Bound on one acquisition; an acquisition that takes longer fails the measurement. */
    private static final long ACQUIRE_LIMIT_S = 60;

    public static void main(String[] argv) throws Exception {
        long watchdogSeconds = argv.length > 0 ? Long.parseLong(argv[0]) : 600;
        Thread dog = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(watchdogSeconds));
            } catch (InterruptedException e) {
                return;
            }
            say("ERROR watchdog: no end after " + watchdogSeconds + " s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        dog.setDaemon(true);
        dog.start();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        say("READY");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("quit")) {
                break;
            }
            try {
                switch (w[0]) {
                    case "uncontended" -> uncontended(w[1], w[2], Integer.parseInt(w[3]), Long.parseLong(w[4]),
                            Integer.parseInt(w[5]), Long.parseLong(w[6]));
                    case "contended" -> contended(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                            Long.parseLong(w[5]));
                    default -> say("ERROR unknown command " + w[0]);
                }
            } catch (Throwable t) {
                say("ERROR " + t.toString().replace('\n', ' '));
            }
            say("END");
        }
        // halt, not exit: a client thread that did not stop must not keep the JVM alive.
        Runtime.getRuntime().halt(0);
    }

    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static CuratorFramework client(String connect) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(30_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            client.close();
            throw new IllegalStateException("no session with " + connect + " within 30 s");
        }
        return client;
    }

    private static void cycle(InterProcessMutex mutex) throws Exception {
        if (!mutex.acquire(ACQUIRE_LIMIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no lock within " + ACQUIRE_LIMIT_S + " s");
        }
        mutex.release();
    }

    private static void uncontended(String connect, String path, int warmup, long warmupMs, int cycles,
            long limitMs) throws Exception {
        CuratorFramework client = client(connect);
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
        List<CuratorFramework> sessions = new ArrayList<>();
        try {
            for (int i = 0; i < clients; i++) {
                sessions.add(client(connect));
            }
            CountDownLatch start = new CountDownLatch(1);
            long[][] waits = new long[clients][];
            int[] counts = new int[clients];
            Throwable[] failure = new Throwable[1];
            long[] startedAt = new long[1];
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < clients; i++) {
                int index = i;
                InterProcessMutex mutex = new InterProcessMutex(sessions.get(i), path);
                waits[i] = new long[cycles];
                Thread t = new Thread(() -> {
                    try {
                        start.await();
                        long deadline = startedAt[0] + TimeUnit.MILLISECONDS.toNanos(limitMs);
                        int n = 0;
                        while (n < cycles && System.nanoTime() < deadline) {
                            long asked = System.nanoTime();
                            if (!mutex.acquire(ACQUIRE_LIMIT_S, TimeUnit.SECONDS)) {
                                throw new IllegalStateException("no lock within " + ACQUIRE_LIMIT_S + " s");
                            }
                            waits[index][n] = (System.nanoTime() - asked) / 1000;
                            n++;
                            mutex.release();
                        }
                        counts[index] = n;
                    } catch (Throwable e) {
                        synchronized (failure) {
                            if (failure[0] == null) {
                                failure[0] = e;
                            }
                        }
                    }
                }, "contender-" + i);
                threads.add(t);
                t.start();
            }
            startedAt[0] = System.nanoTime();
            start.countDown();
            for (Thread t : threads) {
                t.join(limitMs + TimeUnit.SECONDS.toMillis(ACQUIRE_LIMIT_S * 2));
                if (t.isAlive()) {
                    throw new IllegalStateException(t.getName() + " did not finish");
                }
            }
            long elapsed = System.nanoTime() - startedAt[0];
            synchronized (failure) {
                if (failure[0] != null) {
                    throw new IllegalStateException("a contender failed: " + failure[0], failure[0]);
                }
            }
            int total = 0;
            for (int i = 0; i < clients; i++) {
                StringBuilder line = new StringBuilder("WAITS");
                for (int n = 0; n < counts[i]; n++) {
                    line.append(' ').append(waits[i][n]);
                }
                say(line.toString());
                total += counts[i];
            }
            say("RESULT cycles=" + total + " elapsed_us=" + elapsed / 1000);
        } finally {
            for (CuratorFramework c : sessions) {
                c.close();
            }
        }
    }
}
