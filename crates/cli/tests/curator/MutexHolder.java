// A Curator InterProcessMutex holder for tests/lock_command.rs: it contends for the same lock
// path as `lockkeeper lock` processes and checks mutual exclusion the same way they do.
//
// Usage: MutexHolder CONNECT PATH ROUNDS MARKER. It says READY once connected and waits for
// `go` on stdin, so that it starts together with the other contenders. Each round it takes
// the mutex, creates MARKER exclusively (O_EXCL: failing means someone else is inside too),
// holds it briefly, deletes it and releases. It ends by saying `DONE <rounds> <overlaps>`;
// a watchdog halts it if it has not finished within two minutes.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

final class MutexHolder {
    private MutexHolder() {}

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String lockPath = args[1];
        int rounds = Integer.parseInt(args[2]);
        Path marker = Paths.get(args[3]);
        Thread dog = new Thread(() -> {
            try {
                Thread.sleep(120_000);
            } catch (InterruptedException e) {
                return;
            }
            say("FAIL did not finish within 120 s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        dog.setDaemon(true);
        dog.start();

        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, 10_000, 5_000, new ExponentialBackoffRetry(50, 5));
        client.start();
        client.blockUntilConnected();
        InterProcessMutex mutex = new InterProcessMutex(client, lockPath);
        say("READY");
        BufferedReader stdin =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line = stdin.readLine();
        if (line == null || !line.trim().equals("go")) {
            say("FAIL expected go, got " + line);
            return;
        }
        int overlaps = 0;
        for (int i = 0; i < rounds; i++) {
            mutex.acquire();
            try {
                try {
                    Files.createFile(marker);
                } catch (FileAlreadyExistsException e) {
                    overlaps++;
                    continue;
                }
                Thread.sleep(20);
                Files.delete(marker);
            } finally {
                mutex.release();
            }
        }
        client.close();
        say("DONE " + rounds + " " + overlaps);
    }
}
