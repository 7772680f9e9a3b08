// Shared plumbing for the Curator interoperability checks run by `tests/curator.rs`.
//
// Every check is a `main` that takes the server's connect string as its first argument, prints
// exactly one `PASS <name>` or `FAIL <name>: <reason>` line, and exits non-zero on failure. A
// watchdog ends the JVM if a check hangs, so the Rust side never waits forever on a stuck recipe.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;

final class Harness {
    /** A failed expectation; carries the reason printed on the FAIL line. */
    static final class CheckFailed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        CheckFailed(String message) {
            super(message);
        }
    }

    /** A check body; may throw anything, which counts as failure. */
    interface Body {
        void run(String connectString, String[] args) throws Exception;
    }

    private static final List<CuratorFramework> CLIENTS = new ArrayList<>();

    private Harness() {}

    /**
     * Runs one check with an overall deadline. The deadline is enforced by a daemon thread that
     * halts the JVM, because a recipe blocked inside the client cannot be interrupted reliably.
     */
    static void run(String name, int deadlineSeconds, String[] argv, Body body) {
        if (argv.length < 1) {
            System.out.println("FAIL " + name + ": missing connect string argument");
            System.exit(2);
        }
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(deadlineSeconds));
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("FAIL " + name + ": did not finish within " + deadlineSeconds + " s");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        String[] rest = new String[argv.length - 1];
        System.arraycopy(argv, 1, rest, 0, rest.length);
        int code = 0;
        try {
            body.run(argv[0], rest);
            System.out.println("PASS " + name);
        } catch (Throwable t) {
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
            code = 1;
        }
        System.out.flush();
        closeAll();
        // halt, not exit: a lingering client thread must not keep a failed run alive.
        Runtime.getRuntime().halt(code);
    }

    /** A started client with its own ZooKeeper session, waited on until connected. */
    static CuratorFramework client(String connectString) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connectString)
                .sessionTimeoutMs(10_000)
                .connectionTimeoutMs(10_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .build();
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new CheckFailed("client did not connect to " + connectString + " within 20 s");
        }
        synchronized (CLIENTS) {
            CLIENTS.add(client);
        }
        return client;
    }

    static void closeAll() {
        synchronized (CLIENTS) {
            for (CuratorFramework c : CLIENTS) {
                try {
                    c.close();
                } catch (Throwable ignored) {
                    // Closing is best effort; the JVM is about to end anyway.
                }
            }
            CLIENTS.clear();
        }
    }

    /**
     * The children of `path`, or none if it is gone: recipes make their parents containers,
     * which the server reaps once emptied, so "no node" and "no children" both mean clean.
     */
    static List<String> childrenOrNone(CuratorFramework client, String path) throws Exception {
        try {
            return client.getChildren().forPath(path);
        } catch (org.apache.zookeeper.KeeperException.NoNodeException gone) {
            return List.of();
        }
    }

    static void check(boolean condition, String message) {
        if (!condition) {
            throw new CheckFailed(message);
        }
    }

    static <T> void checkEq(T expected, T actual, String what) {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new CheckFailed(what + ": expected <" + expected + "> but was <" + actual + ">");
        }
    }

    /** Polls `condition` until it holds or `timeoutMs` passes; fails with `message` then. */
    static void eventually(long timeoutMs, String message, BooleanSupplier condition)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new CheckFailed(message + " (waited " + timeoutMs + " ms)");
            }
            Thread.sleep(20);
        }
    }

    /** Rejoins worker threads, rethrowing the first failure any of them recorded. */
    static void joinAll(List<Thread> threads, List<Throwable> failures, long timeoutMs)
            throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        for (Thread t : threads) {
            long left = Math.max(1, deadline - System.currentTimeMillis());
            t.join(left);
            if (t.isAlive()) {
                throw new CheckFailed("worker " + t.getName() + " still running after " + timeoutMs + " ms");
            }
        }
        synchronized (failures) {
            if (!failures.isEmpty()) {
                Throwable first = failures.get(0);
                throw new CheckFailed("worker failed: " + first);
            }
        }
    }
}
