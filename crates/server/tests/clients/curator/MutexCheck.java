// InterProcessMutex against the server under test.
//
// Modes:
//   <connect> contend <lockPath> <threads> <rounds>  each thread has its own session and takes the
//       lock `rounds` times; inside it, it creates an ephemeral "holder" node (creation fails if
//       anybody else is inside, in this JVM or another) and does a slow read-modify-write of a
//       counter node (lost updates show a second holder). Run in several JVMs at once.
//   <connect> verify <lockPath> <expected>  the counter equals `expected` and no lock node is left.
//   <connect> reentrant <lockPath>  a holder can re-acquire; the lock is released only by the last
//       release; releasing what is not held is an error.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;

public final class MutexCheck {
    public static void main(String[] argv) {
        // The mode follows the connect string; Harness.run wants the connect string first.
        String mode = argv.length > 1 ? argv[1] : "";
        List<String> rest = new ArrayList<>(List.of(argv));
        if (rest.size() > 1) {
            rest.remove(1);
        }
        switch (mode) {
            case "contend" -> Harness.run("mutex-contend", 150, rest.toArray(new String[0]), MutexCheck::contend);
            case "verify" -> Harness.run("mutex-verify", 60, rest.toArray(new String[0]), MutexCheck::verify);
            case "reentrant" -> Harness.run("mutex-reentrant", 60, rest.toArray(new String[0]), MutexCheck::reentrant);
            default -> {
                System.out.println("FAIL mutex: unknown mode '" + mode + "'");
                System.exit(2);
            }
        }
    }

    static String counterPath(String lockPath) {
        return lockPath + "-counter";
    }

    static String holderPath(String lockPath) {
        return lockPath + "-holder";
    }

    static void contend(String connect, String[] args) throws Exception {
        String lockPath = args[0];
        int threads = Integer.parseInt(args[1]);
        int rounds = Integer.parseInt(args[2]);
        CuratorFramework setup = Harness.client(connect);
        try {
            setup.create().creatingParentsIfNeeded().forPath(counterPath(lockPath), "0".getBytes(StandardCharsets.UTF_8));
        } catch (KeeperException.NodeExistsException alreadyMadeByAnotherJvm) {
            // Several JVMs share the counter; whoever comes first creates it.
        }
        List<Thread> workers = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            CuratorFramework client = Harness.client(connect);
            String name = "worker-" + ProcessHandle.current().pid() + "-" + i;
            Thread t = new Thread(() -> {
                try {
                    work(client, lockPath, rounds, name);
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            }, name);
            workers.add(t);
        }
        workers.forEach(Thread::start);
        Harness.joinAll(workers, failures, 140_000);
    }

    private static void work(CuratorFramework client, String lockPath, int rounds, String name) throws Exception {
        InterProcessMutex mutex = new InterProcessMutex(client, lockPath);
        for (int r = 0; r < rounds; r++) {
            Harness.check(mutex.acquire(60, TimeUnit.SECONDS), name + " did not get the lock within 60 s (round " + r + ")");
            try {
                Harness.check(mutex.isOwnedByCurrentThread(), name + ": lock not owned after acquire");
                try {
                    client.create().withMode(CreateMode.EPHEMERAL).forPath(holderPath(lockPath), name.getBytes(StandardCharsets.UTF_8));
                } catch (KeeperException.NodeExistsException e) {
                    byte[] other = client.getData().forPath(holderPath(lockPath));
                    throw new Harness.CheckFailed(name + " got the lock while " + new String(other, StandardCharsets.UTF_8) + " holds it");
                }
                byte[] raw = client.getData().forPath(counterPath(lockPath));
                int value = Integer.parseInt(new String(raw, StandardCharsets.UTF_8));
                Thread.sleep(5);
                client.setData().forPath(counterPath(lockPath), Integer.toString(value + 1).getBytes(StandardCharsets.UTF_8));
                client.delete().forPath(holderPath(lockPath));
            } finally {
                mutex.release();
            }
        }
        Harness.check(!mutex.isAcquiredInThisProcess(), name + ": still marked as holder after the last release");
    }

    static void verify(String connect, String[] args) throws Exception {
        String lockPath = args[0];
        int expected = Integer.parseInt(args[1]);
        CuratorFramework client = Harness.client(connect);
        byte[] raw = client.getData().forPath(counterPath(lockPath));
        Harness.checkEq(expected, Integer.parseInt(new String(raw, StandardCharsets.UTF_8)), "counter after all rounds (a lost update means two holders at once)");
        Harness.checkEq(List.of(), Harness.childrenOrNone(client, lockPath), "lock nodes left after every contender released");
        Harness.check(client.checkExists().forPath(holderPath(lockPath)) == null, "holder marker left behind");
    }

    static void reentrant(String connect, String[] args) throws Exception {
        String lockPath = args[0];
        CuratorFramework a = Harness.client(connect);
        CuratorFramework b = Harness.client(connect);
        InterProcessMutex mine = new InterProcessMutex(a, lockPath);
        InterProcessMutex theirs = new InterProcessMutex(b, lockPath);

        Harness.check(mine.acquire(10, TimeUnit.SECONDS), "first acquire failed");
        Harness.check(mine.acquire(10, TimeUnit.SECONDS), "re-entrant acquire by the holder failed");
        Harness.checkEq(1, a.getChildren().forPath(lockPath).size(), "lock nodes while held twice by one thread");
        Harness.check(mine.getParticipantNodes().size() == 1, "participants while held twice: " + mine.getParticipantNodes());

        mine.release();
        Harness.check(mine.isAcquiredInThisProcess(), "one release of two dropped the lock");
        Harness.check(!theirs.acquire(300, TimeUnit.MILLISECONDS), "another session got the lock while it was still held once");
        Harness.checkEq(1, a.getChildren().forPath(lockPath).size(), "a timed-out waiter left its node behind");

        mine.release();
        Harness.check(!mine.isAcquiredInThisProcess(), "still held after the matching number of releases");
        Harness.check(theirs.acquire(10, TimeUnit.SECONDS), "another session could not get the released lock");
        boolean rejected = false;
        try {
            mine.release();
        } catch (IllegalMonitorStateException expected) {
            rejected = true;
        }
        Harness.check(rejected, "releasing a lock this thread does not hold was accepted");
        theirs.release();
        Harness.checkEq(List.of(), Harness.childrenOrNone(a, lockPath), "lock nodes after the final release");
    }
}
