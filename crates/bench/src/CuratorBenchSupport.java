// What the Curator sides of `lockkeeper-bench` (CuratorLockBench, CuratorRecipeBench) share: the
// command loop on stdin/stdout, the watchdog, Curator sessions, and threads started together.
// The benchmark compiles this file with each program (see bench/jvm.rs); each program extends
// this class, so that its static helpers read unqualified (a class in the unnamed package cannot
// be imported).
//
// The command loop prints `READY`, then reads one command a line; each is answered by its result
// lines and a final `END`, with `ERROR <reason>` before `END` when it failed. It ends when stdin
// closes or on `quit`, and then halts the JVM: a client thread that did not stop must not keep
// it alive.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;

abstract class CuratorBenchSupport {
    CuratorBenchSupport() {
    }

    /** One command of the loop, given the words of its line (the command's name first). */
    @FunctionalInterface
    interface Command {
        void run(String[] words) throws Exception;
    }

    /** The body of one of the threads of {@link #together}. */
    @FunctionalInterface
    interface IntBody {
        void run(int index) throws Exception;
    }

    /** Serves `commands` on stdin until it closes or says `quit`, then halts the JVM. */
    static void serve(Map<String, Command> commands) throws Exception {
        BufferedReader in = stdin();
        say("READY");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("quit")) {
                break;
            }
            try {
                Command command = commands.get(w[0]);
                if (command == null) {
                    say("ERROR unknown command " + w[0]);
                } else {
                    command.run(w);
                }
            } catch (Throwable t) {
                say("ERROR " + t.toString().replace('\n', ' '));
            }
            say("END");
        }
        Runtime.getRuntime().halt(0);
    }

    /** Halts the JVM after `seconds`, saying why, whatever it is doing then. */
    static void watchdog(long seconds) {
        Thread dog = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
            } catch (InterruptedException e) {
                return;
            }
            say("ERROR watchdog: no end after " + seconds + " s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        dog.setDaemon(true);
        dog.start();
    }

    static BufferedReader stdin() {
        return new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    }

    /** One line on stdout, whole, whichever thread says it. */
    static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** A started Curator client with a session, or an exception after 30 s without one. */
    static CuratorFramework client(String connect, int sessionTimeoutMs) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionTimeoutMs)
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

    /** `n` clients; none is left open when one of them fails. */
    static List<CuratorFramework> clients(String connect, int n, int sessionTimeoutMs)
            throws InterruptedException {
        List<CuratorFramework> sessions = new ArrayList<>();
        try {
            for (int i = 0; i < n; i++) {
                sessions.add(client(connect, sessionTimeoutMs));
            }
        } catch (InterruptedException | RuntimeException e) {
            close(sessions);
            throw e;
        }
        return sessions;
    }

    static void close(List<CuratorFramework> sessions) {
        for (CuratorFramework c : sessions) {
            c.close();
        }
    }

    /**
     * Runs `body(i)` on `n` threads started together, each joined within `joinLimitMs`; returns
     * the nanoTime of the common start, and rethrows the first failure.
     */
    static long together(int n, long joinLimitMs, IntBody body) throws Exception {
        CountDownLatch start = new CountDownLatch(1);
        Throwable[] failure = new Throwable[1];
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int index = i;
            Thread t = new Thread(() -> {
                try {
                    start.await();
                    body.run(index);
                } catch (Throwable e) {
                    synchronized (failure) {
                        if (failure[0] == null) {
                            failure[0] = e;
                        }
                    }
                }
            }, "worker-" + i);
            threads.add(t);
            t.start();
        }
        long startedAt = System.nanoTime();
        start.countDown();
        for (Thread t : threads) {
            t.join(joinLimitMs);
            if (t.isAlive()) {
                throw new IllegalStateException(t.getName() + " did not finish");
            }
        }
        synchronized (failure) {
            if (failure[0] != null) {
                throw new IllegalStateException("a worker failed: " + failure[0], failure[0]);
            }
        }
        return startedAt;
    }

    /** `PREFIX v v v ...`: the first `n` values. */
    static String line(String prefix, long[] values, int n) {
        StringBuilder line = new StringBuilder(prefix);
        for (int k = 0; k < n; k++) {
            line.append(' ').append(values[k]);
        }
        return line.toString();
    }
}
