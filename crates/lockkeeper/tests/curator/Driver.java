// A Curator client the Rust test drives step by step, to check that lockkeeper and Curator see
// each other's lock nodes (the layout check of `tests/zk_curator.rs`).
//
// Usage: Driver <connect>, then one command per line on stdin, one reply line each on stdout:
//   acquire <mutex|read|write> <path>   acquire(60 s)  -> `OK true` or `OK false`
//   try <mutex|read|write> <path>       acquire(0 ms)  -> `OK true` or `OK false`
//   release <mutex|read|write> <path>   release()      -> `OK`
//   quit                                               -> `BYE`, then the JVM ends
// A command that throws answers `ERR <exception>`. `READY` is printed once connected. Every
// command runs on the main thread, because Curator's locks belong to the thread that took them.

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;

public final class Driver {
    public static void main(String[] argv) {
        Interop.watchdog("driver", 300);
        try {
            CuratorFramework client = Interop.client(argv[0]);
            Map<String, InterProcessMutex> mutexes = new HashMap<>();
            Map<String, InterProcessReadWriteLock> rwLocks = new HashMap<>();
            Interop.serve(words -> {
                if (words.length != 3) {
                    throw new IllegalArgumentException("expected `<op> <kind> <path>`: " + String.join(" ", words));
                }
                String path = words[2];
                InterProcessMutex lock = switch (words[1]) {
                    case "mutex" -> mutexes.computeIfAbsent(path, p -> new InterProcessMutex(client, p));
                    case "read" -> rwLocks.computeIfAbsent(path, p -> new InterProcessReadWriteLock(client, p)).readLock();
                    case "write" -> rwLocks.computeIfAbsent(path, p -> new InterProcessReadWriteLock(client, p)).writeLock();
                    default -> throw new IllegalArgumentException("unknown lock kind " + words[1]);
                };
                switch (words[0]) {
                    case "acquire" -> Interop.say("OK " + lock.acquire(60, TimeUnit.SECONDS));
                    case "try" -> Interop.say("OK " + lock.acquire(0, TimeUnit.MILLISECONDS));
                    case "release" -> {
                        lock.release();
                        Interop.say("OK");
                    }
                    default -> throw new IllegalArgumentException("unknown operation " + words[0]);
                }
            });
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL driver: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }
}
