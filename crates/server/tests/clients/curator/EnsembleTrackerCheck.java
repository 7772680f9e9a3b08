// Curator's EnsembleTracker against the server: no error in Curator's own log.
//
// Curator 5.4 builds every client with ensemble tracking on. The tracker reads /zookeeper/config
// with getConfig when the client starts and again on every (re)connect, and parses the bytes as
// java.util.Properties. Null data there makes every client log "Background exception was not
// retry-able" with a NullPointerException ("buf" is null), which the client survives but which
// buries real errors in the log. This check runs with a real logger (slf4j-simple, to stderr),
// keeps a copy of what the logger writes, and fails when Curator logged any of those errors or
// reported one to its unhandled-error listeners. Run it with slf4j-simple on the classpath: the
// wait for the tracker's work reads the tracker's INFO line.
//
// Usage: EnsembleTrackerCheck <connect-string>

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public final class EnsembleTrackerCheck {
    /** What the tracker logs (INFO) each time it has parsed the config it read. */
    private static final String PARSED = "New config event received";

    /** What Curator logs when the tracker's callback throws on the config it was given. */
    private static final List<String> FORBIDDEN =
            List.of("\"buf\" is null", "NullPointerException", "not retry-able");

    /** Writes to two streams: the real stderr (for the test's transcript) and a copy. */
    private static final class Tee extends OutputStream {
        private final OutputStream first;
        private final OutputStream second;

        Tee(OutputStream first, OutputStream second) {
            this.first = first;
            this.second = second;
        }

        @Override
        public synchronized void write(int b) throws IOException {
            first.write(b);
            second.write(b);
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) throws IOException {
            first.write(b, off, len);
            second.write(b, off, len);
        }

        @Override
        public synchronized void flush() throws IOException {
            first.flush();
            second.flush();
        }
    }

    private EnsembleTrackerCheck() {}

    public static void main(String[] argv) {
        // Before any Curator class exists, so that every logger writes through the copy.
        ByteArrayOutputStream log = new ByteArrayOutputStream();
        System.setErr(new PrintStream(new Tee(System.err, log), true, StandardCharsets.UTF_8));
        Harness.run("ensemble-tracker", 90, argv, (connect, args) -> check(connect, log));
    }

    private static String text(ByteArrayOutputStream log) {
        return log.toString(StandardCharsets.UTF_8);
    }

    private static int count(String haystack, String needle) {
        int n = 0;
        for (int at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) {
            n++;
        }
        return n;
    }

    private static void check(String connect, ByteArrayOutputStream log) throws Exception {
        List<String> unhandled = Collections.synchronizedList(new ArrayList<>());
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(10_000)
                .connectionTimeoutMs(10_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .ensembleTracker(true)
                .build();
        // Before start: the tracker's first read is sent as the client starts.
        client.getUnhandledErrorListenable()
                .addListener((message, e) -> unhandled.add(message + ": " + e));
        client.start();
        try {
            Harness.check(client.blockUntilConnected(20, TimeUnit.SECONDS),
                    "client did not connect to " + connect + " within 20 s");

            // The tracker reads the config twice: as the client starts and on CONNECTED. Each
            // read ends in the INFO line or, when the data cannot be parsed, in an error.
            Harness.eventually(30_000, "the ensemble tracker never parsed the config twice",
                    () -> count(text(log), PARSED) >= 2 || !unhandled.isEmpty());
            assertNoErrors(unhandled, log);

            // A few ordinary operations beside the tracker.
            client.create().creatingParentsIfNeeded().forPath("/ensemble-check/a", "one".getBytes());
            client.setData().forPath("/ensemble-check/a", "two".getBytes());
            Harness.checkEq("two", new String(client.getData().forPath("/ensemble-check/a")),
                    "data read back");
            Stat stat = new Stat();
            byte[] config = client.getConfig().storingStatIn(stat).forEnsemble();
            Harness.check(config != null, "getConfig returned null data");
            Harness.checkEq(config.length, stat.getDataLength(), "getConfig's dataLength");
            client.delete().deletingChildrenIfNeeded().forPath("/ensemble-check");

            assertNoErrors(unhandled, log);
            System.out.println("tracker parsed the config " + count(text(log), PARSED)
                    + " times; getConfig data " + Arrays.toString(config));
        } finally {
            client.close();
        }
    }

    private static void assertNoErrors(List<String> unhandled, ByteArrayOutputStream log) {
        Harness.check(unhandled.isEmpty(), "Curator reported errors: " + unhandled);
        String logged = text(log);
        for (String needle : FORBIDDEN) {
            Harness.check(!logged.contains(needle), "Curator's log contains " + needle);
        }
    }
}
