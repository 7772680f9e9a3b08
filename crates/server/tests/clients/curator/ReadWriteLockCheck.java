// InterProcessReadWriteLock against the server under test: readers share, a writer excludes
// readers and writers, a waiting writer gets the lock once readers leave, and the write holder
// may also take the read lock (downgrade).
//
// Curator's locks belong to the thread that took them, so every lock instance here is driven
// from its own single-thread executor.
//
// Usage: ReadWriteLockCheck <connect> <lockPath>

import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;

public final class ReadWriteLockCheck {
    public static void main(String[] argv) {
        Harness.run("read-write-lock", 90, argv, ReadWriteLockCheck::check);
    }

    /** A read-write lock on its own session, used from one dedicated thread. */
    static final class Party {
        final String name;
        final InterProcessReadWriteLock lock;
        final ExecutorService thread = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            return t;
        });

        Party(String name, CuratorFramework client, String path) {
            this.name = name;
            this.lock = new InterProcessReadWriteLock(client, path);
        }

        <T> Future<T> submit(Callable<T> op) {
            return thread.submit(op);
        }

        <T> T now(Callable<T> op) throws Exception {
            return thread.submit(op).get(60, TimeUnit.SECONDS);
        }

        boolean read(long ms) throws Exception {
            return now(() -> lock.readLock().acquire(ms, TimeUnit.MILLISECONDS));
        }

        boolean write(long ms) throws Exception {
            return now(() -> lock.writeLock().acquire(ms, TimeUnit.MILLISECONDS));
        }

        void releaseRead() throws Exception {
            now(() -> {
                lock.readLock().release();
                return null;
            });
        }

        void releaseWrite() throws Exception {
            now(() -> {
                lock.writeLock().release();
                return null;
            });
        }
    }

    static void check(String connect, String[] args) throws Exception {
        String path = args[0];
        Party r1 = new Party("r1", Harness.client(connect), path);
        Party r2 = new Party("r2", Harness.client(connect), path);
        Party w = new Party("w", Harness.client(connect), path);
        CuratorFramework observer = Harness.client(connect);

        Harness.check(r1.read(10_000), "first reader blocked");
        Harness.check(r2.read(10_000), "second reader blocked by the first");
        Harness.check(!w.write(300), "writer got the lock while two readers hold it");

        // A writer waiting in the background gets in once both readers are gone, not before.
        Future<Boolean> waiting = w.submit(() -> w.lock.writeLock().acquire(30, TimeUnit.SECONDS));
        Thread.sleep(300);
        Harness.check(!waiting.isDone(), "waiting writer returned while readers still hold the lock");
        r1.releaseRead();
        Thread.sleep(300);
        Harness.check(!waiting.isDone(), "waiting writer returned while one reader still holds the lock");
        r2.releaseRead();
        Harness.check(waiting.get(35, TimeUnit.SECONDS), "waiting writer did not get the lock after the readers left");

        Harness.check(!r1.read(300), "reader got in while a writer holds the lock");
        Harness.check(!r2.write(300), "second writer got in while a writer holds the lock");

        // Downgrade: the write holder may read; after it drops the write lock, readers share again
        // and writers still wait on its read lock.
        Harness.check(w.read(5_000), "write holder could not take the read lock");
        w.releaseWrite();
        Harness.check(r1.read(10_000), "reader blocked after the writer downgraded");
        Harness.check(!r2.write(300), "writer got in while the downgraded holder still reads");
        w.releaseRead();
        r1.releaseRead();
        Harness.check(r2.write(10_000), "writer blocked after every reader left");
        r2.releaseWrite();
        Harness.checkEq(List.of(), Harness.childrenOrNone(observer, path), "lock nodes left after every release");
    }
}
