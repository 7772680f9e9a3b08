// A Curator LeaderLatch participant for `tests/elect_command.rs`, standing in one election with
// `lockkeeper elect` participants.
//
// Usage: ElectInterop <connect> <electionPath> <markerDir> <id>
//
// One Curator session (4 s timeout, like the command's participants in the test) and one
// LeaderLatch with id <id>. While Curator says this participant leads (from isLeader until
// notLeader) it holds the marker file <markerDir>/leader, created exclusively: if the file is
// already there, another participant believes it leads too, and the clash is appended to
// <markerDir>/violations. Prints `READY` once the latch is started, `LEADER <id> <ms>` and
// `NOTLEADER <id>` at each change; stdin `quit` closes the latch and ends the JVM (`BYE`).
// A watchdog halts the JVM after 300 s so a stuck run never outlives the test. Self-contained:
// the other programs of this directory are compiled with it, but it shares no class with them.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class ElectInterop {
    public static void main(String[] argv) {
        Thread dog = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(300));
            } catch (InterruptedException e) {
                return;
            }
            say("FAIL watchdog: did not finish within 300 s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        dog.setDaemon(true);
        dog.start();
        try {
            run(argv[0], argv[1], Path.of(argv[2]), argv[3]);
            Runtime.getRuntime().halt(0);
        } catch (Throwable t) {
            say("FAIL " + t);
            Runtime.getRuntime().halt(2);
        }
    }

    private static void run(String connect, String path, Path markers, String id) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(4_000)
                .connectionTimeoutMs(20_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10))
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("no connection to " + connect);
        }
        Path marker = markers.resolve("leader");
        AtomicBoolean holding = new AtomicBoolean();
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                try {
                    Files.writeString(marker, id, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
                    holding.set(true);
                } catch (FileAlreadyExistsException e) {
                    clash(markers, id + " leads while the marker is held\n");
                } catch (IOException e) {
                    clash(markers, id + " cannot create the marker: " + e + "\n");
                }
                say("LEADER " + id + " " + System.currentTimeMillis());
            }

            @Override
            public void notLeader() {
                if (holding.getAndSet(false)) {
                    try {
                        Files.deleteIfExists(marker);
                    } catch (IOException e) {
                        clash(markers, id + " cannot delete the marker: " + e + "\n");
                    }
                }
                say("NOTLEADER " + id);
            }
        });
        latch.start();
        say("READY");
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = stdin.readLine()) != null) {
            if (line.trim().equals("quit")) {
                break;
            }
        }
        latch.close(LeaderLatch.CloseMode.NOTIFY_LEADER);
        client.close();
        say("BYE");
    }

    private static void clash(Path markers, String what) {
        try {
            Files.writeString(markers.resolve("violations"), what, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
        } catch (IOException e) {
            say("FAIL cannot record a violation: " + e);
        }
    }

    private static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }
}
