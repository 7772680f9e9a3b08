// Shared plumbing of the Java side of `tests/zk_curator.rs`: a watchdog, Curator sessions, and
// line-oriented talk with the Rust test over stdin and stdout.
//
// The Rust test owns the timing. A Java program says `READY` once its sessions are connected and
// waits for `go` on stdin, so that Curator and lockkeeper contenders start together instead of
// one side finishing before the JVM has even started. Every program ends itself (halt) when its
// watchdog fires, so a stuck recipe can never outlive the test.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;

final class Interop {
    private static final List<CuratorFramework> CLIENTS = new ArrayList<>();
    private static final BufferedReader STDIN =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    private Interop() {}

    /** Halts the JVM with a FAIL line after `seconds`: a recipe blocked in the client cannot be interrupted reliably. */
    static void watchdog(String name, int seconds) {
        Thread dog = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
            } catch (InterruptedException e) {
                return;
            }
            say("FAIL " + name + ": did not finish within " + seconds + " s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        dog.setDaemon(true);
        dog.start();
    }

    /** One line to the Rust side, flushed at once (it waits for it). */
    static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    /** One command line, split into words; may throw, which answers `ERR <exception>`. */
    interface Command {
        void run(String[] words) throws Exception;
    }

    /**
     * The command loop of the programs the Rust tests drive: says `READY`, then runs one command
     * per line until `quit` (answered `BYE`) or the end of stdin. A command that throws answers
     * `ERR <exception>` and the loop goes on.
     */
    static void serve(Command command) throws IOException {
        say("READY");
        String line;
        while ((line = hear()) != null) {
            String[] words = line.trim().split(" ");
            if (words.length == 1 && words[0].equals("quit")) {
                say("BYE");
                return;
            }
            try {
                command.run(words);
            } catch (Exception e) {
                say("ERR " + e);
            }
        }
    }

    /** The next line from the Rust side, or null once it closed stdin. */
    static String hear() throws IOException {
        return STDIN.readLine();
    }

    /**
     * A started client with its own session, waited on until connected. The session timeout is
     * long so that a JVM paused by a busy machine does not lose its locks mid-test.
     */
    static CuratorFramework client(String connectString) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connectString)
                .sessionTimeoutMs(30_000)
                .connectionTimeoutMs(20_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no connection to " + connectString + " within 60 s");
        }
        synchronized (CLIENTS) {
            CLIENTS.add(client);
        }
        return client;
    }

    /** Closes every client (best effort) and ends the JVM with `code`. */
    static void exit(int code) {
        synchronized (CLIENTS) {
            for (CuratorFramework c : CLIENTS) {
                try {
                    c.close();
                } catch (Throwable ignored) {
                    // The JVM ends right after; the server reaps what a failed close leaves.
                }
            }
            CLIENTS.clear();
        }
        System.out.flush();
        // halt, not exit: a lingering client thread must not keep the JVM alive.
        Runtime.getRuntime().halt(code);
    }
}
