// A Curator client for the revocation interop of `tests/zk_revoke.rs`: it holds a lock made
// revocable with Curator's `makeRevocable`, or asks a holder to give its lock up with Curator's
// `Revoker.attemptRevoke`.
//
// Usage: Revoke <connect>, then one command per line on stdin:
//   hold <mutex|read|write> <path>   acquire(60 s) a revocable lock         -> `OK held`
//                                    then, once revocation is requested,
//                                    release it                             -> `REVOKED released`
//   revoke <node>                    Revoker.attemptRevoke(client, node)   -> `OK`
//   quit                                                                    -> `BYE`
// A command that throws answers `ERR <exception>`. `READY` is printed once connected. The lock
// is released on the main thread (Curator's locks belong to the thread that took them): the
// revocation listener, called on a watcher thread, only hands the request over.

import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.Revoker;

public final class Revoke {
    public static void main(String[] argv) {
        Interop.watchdog("revoke", 300);
        try {
            CuratorFramework client = Interop.client(argv[0]);
            Interop.serve(words -> {
                switch (words[0]) {
                    case "hold" -> hold(client, words[1], words[2]);
                    case "revoke" -> {
                        Revoker.attemptRevoke(client, words[1]);
                        Interop.say("OK");
                    }
                    default -> throw new IllegalArgumentException("unknown command: " + String.join(" ", words));
                }
            });
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL revoke: " + t);
            Interop.exit(2);
        }
    }

    private static void hold(CuratorFramework client, String kind, String path) throws Exception {
        InterProcessMutex lock = switch (kind) {
            case "mutex" -> new InterProcessMutex(client, path);
            case "read" -> new InterProcessReadWriteLock(client, path).readLock();
            case "write" -> new InterProcessReadWriteLock(client, path).writeLock();
            default -> throw new IllegalArgumentException("unknown lock kind " + kind);
        };
        BlockingQueue<Boolean> requests = new ArrayBlockingQueue<>(1);
        lock.makeRevocable(revoked -> requests.offer(true));
        if (!lock.acquire(60, TimeUnit.SECONDS)) {
            Interop.say("ERR not acquired");
            return;
        }
        Interop.say("OK held");
        if (requests.poll(60, TimeUnit.SECONDS) == null) {
            lock.release();
            Interop.say("ERR no revocation request within 60 s");
            return;
        }
        lock.release();
        Interop.say("REVOKED released");
    }
}
