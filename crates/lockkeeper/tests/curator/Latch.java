// A participant in a leader election with Curator's LeaderLatch, for `tests/zk_election_curator.rs`,
// where it stands in one election with lockkeeper participants.
//
// Usage: Latch <connect> <electionPath> <markerDir> <id>
//
// One Curator session (4 s timeout, as the lockkeeper participants ask for, so the test can bound
// how soon a killed participant is replaced) and one LeaderLatch with participant id <id>.
// `READY` is printed once connected and the latch is started (Curator queues its node in the
// background; the test waits for it on the server).
//
// While Curator says this participant leads (from `LeaderLatchListener.isLeader` until `notLeader`)
// it holds the leader marker of <markerDir> (see `LeaderMarker` below), and it prints
// `LEADER <id>` and `NOTLEADER <id>` at each change. Commands on stdin, one reply line each (event
// lines may come before it):
//   leader       -> `OK leader <id>`: Curator's getLeader().getId() (empty when nobody is queued)
//   participants -> `OK participants <id>,<id>,...`: getParticipants(), in queue order
//   close        -> `OK closed`: lets go of the marker, then closes the latch (its node goes)
//   quit         -> `BYE`, then the JVM ends
// A command that throws answers `ERR <exception>`.

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class Latch {
    /** The session timeout both languages use in the election test. */
    private static final int SESSION_TIMEOUT_MS = 4_000;

    public static void main(String[] argv) {
        Interop.watchdog("latch", 400);
        try {
            run(argv);
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL latch: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }

    private static void run(String[] argv) throws Exception {
        if (argv.length != 4) {
            throw new IllegalArgumentException("expected 4 arguments, got " + argv.length);
        }
        String connect = argv[0];
        String path = argv[1];
        String id = argv[3];
        LeaderMarker marker = new LeaderMarker(Path.of(argv[2]), id);

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(SESSION_TIMEOUT_MS)
                .connectionTimeoutMs(SESSION_TIMEOUT_MS)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no connection to " + connect + " within 60 s");
        }
        LeaderLatch latch = new LeaderLatch(client, path, id);
        // Without an executor Curator calls the listener on the thread that changes the latch's
        // leadership, one change at a time, so the marker follows Curator's own flag in order.
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                try {
                    marker.begin();
                    Interop.say("LEADER " + id);
                } catch (RuntimeException e) {
                    Interop.say("FAIL latch: the leader marker: " + e);
                }
            }

            @Override
            public void notLeader() {
                try {
                    marker.end();
                    Interop.say("NOTLEADER " + id);
                } catch (RuntimeException e) {
                    Interop.say("FAIL latch: the leader marker: " + e);
                }
            }
        });
        latch.start();
        Interop.say("READY");

        String line;
        commands:
        while ((line = Interop.hear()) != null) {
            try {
                switch (line.trim()) {
                    case "leader" -> Interop.say("OK leader " + latch.getLeader().getId());
                    case "participants" -> Interop.say("OK participants " + latch.getParticipants().stream()
                            .map(Participant::getId)
                            .collect(Collectors.joining(",")));
                    case "close" -> {
                        // Curator's close deletes the node before it drops its leadership flag
                        // (and, closing silently, never calls notLeader): a careful leader stops
                        // acting as one before it lets the next one in.
                        marker.end();
                        latch.close();
                        Interop.say("OK closed");
                    }
                    case "quit" -> {
                        Interop.say("BYE");
                        break commands;
                    }
                    default -> throw new IllegalArgumentException("unknown command " + line);
                }
            } catch (Exception e) {
                Interop.say("ERR " + e);
            }
        }
        client.close();
    }

    /**
     * The leader marker of the marker directory, as a Curator participant holds it (the Rust twin
     * is `LeaderMarker` in `zk_election_curator.rs`, with the same rules).
     *
     * `leader` is a symbolic link whose target is the holder's id: creating a link is atomic and
     * fails if the name exists, so of two participants that believe they lead at once, the later
     * one finds the earlier one's link and appends `overlap <id> <holder>` to `log`. Every belief
     * is also logged with the wall clock, `start <id> <ms>` and `end <id> <ms>`, for the test's
     * timing checks. A participant that found another's link does not remove it at its end.
     */
    static final class LeaderMarker {
        private final Path dir;
        private final String id;
        private boolean believes;
        private boolean created;

        LeaderMarker(Path dir, String id) {
            this.dir = dir;
            this.id = id;
        }

        synchronized void begin() {
            if (believes) {
                return;
            }
            believes = true;
            Path link = dir.resolve("leader");
            try {
                Files.createSymbolicLink(link, Path.of(id));
                created = true;
            } catch (FileAlreadyExistsException taken) {
                log("overlap " + id + " " + holder(link));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            log("start " + id + " " + System.currentTimeMillis());
        }

        synchronized void end() {
            if (!believes) {
                return;
            }
            believes = false;
            log("end " + id + " " + System.currentTimeMillis());
            if (created) {
                created = false;
                try {
                    Files.delete(dir.resolve("leader"));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
        }

        private static String holder(Path link) {
            try {
                return Files.readSymbolicLink(link).toString();
            } catch (NoSuchFileException gone) {
                return "?";
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        /** Appends one line; appends of a few bytes are atomic, so lines from processes never mix. */
        private void log(String line) {
            try {
                Files.write(dir.resolve("log"), (line + "\n").getBytes(StandardCharsets.UTF_8),
                        StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }
}
