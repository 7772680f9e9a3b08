// Curator's shared counters on command, so that `tests/zk_counter.rs` can check that lockkeeper's
// SharedCount and AtomicLong read and write the same bytes as Curator's SharedCount and
// DistributedAtomicLong.
//
// Usage: Counters <connect>, then one command per line on stdin, one reply line each on stdout:
//   count-get <path> <seed>                 a new SharedCount started (seeding if absent):
//                                           `OK <count> <version>`
//   count-set <path> <value>                setCount                       -> `OK`
//   count-tryset <path> <version> <expected> <value>
//                                           trySetCount(VersionedValue)    -> `OK true|false`
//   count-await <path> <value>              a started SharedCount's listener, waiting (60 s)
//                                           for the count to become <value>: `WATCHING` once
//                                           listening, then `OK <value>` (or `OK timeout`)
//   long-get <path>                         DistributedAtomicLong.get      -> `OK <value>`
//   long-add <path> <delta>                 add                            -> `OK <new value>`
//   long-cas <path> <expected> <new>        compareAndSet                  -> `OK true|false`
//   long-inc-many <path> <lock> <n>         n increments promoted to the lock at <lock>, each
//                                           repeated until it succeeds     -> `OK <n>`
//   quit                                                                   -> `BYE`
// A command that throws answers `ERR <exception>`; `READY` is printed once connected.

import java.lang.reflect.Constructor;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.atomic.PromotedToLock;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.SharedCountListener;
import org.apache.curator.framework.recipes.shared.SharedCountReader;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.RetryNTimes;

public final class Counters {
    public static void main(String[] argv) {
        Interop.watchdog("counters", 600);
        try {
            CuratorFramework client = Interop.client(argv[0]);
            Interop.serve(words -> Interop.say(run(client, words)));
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL counters: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }

    private static String run(CuratorFramework client, String[] words) throws Exception {
        String path = words[1];
        switch (words[0]) {
            case "count-get": {
                try (SharedCount count = started(client, path, Integer.parseInt(words[2]))) {
                    VersionedValue<Integer> seen = count.getVersionedValue();
                    return "OK " + seen.getValue() + " " + seen.getVersion();
                }
            }
            case "count-set": {
                try (SharedCount count = started(client, path, 0)) {
                    count.setCount(Integer.parseInt(words[2]));
                    return "OK";
                }
            }
            case "count-tryset": {
                try (SharedCount count = started(client, path, 0)) {
                    VersionedValue<Integer> previous =
                            versioned(Integer.parseInt(words[2]), Integer.parseInt(words[3]));
                    return "OK " + count.trySetCount(previous, Integer.parseInt(words[4]));
                }
            }
            case "count-await": {
                int wanted = Integer.parseInt(words[2]);
                CountDownLatch seen = new CountDownLatch(1);
                try (SharedCount count = started(client, path, 0)) {
                    count.addListener(new SharedCountListener() {
                        @Override
                        public void countHasChanged(SharedCountReader reader, int newCount) {
                            if (newCount == wanted) {
                                seen.countDown();
                            }
                        }

                        @Override
                        public void stateChanged(CuratorFramework c, ConnectionState state) {}
                    });
                    if (count.getCount() == wanted) {
                        seen.countDown();
                    }
                    Interop.say("WATCHING");
                    return "OK " + (seen.await(60, TimeUnit.SECONDS) ? Integer.toString(wanted) : "timeout");
                }
            }
            case "long-get":
                return "OK " + value(optimistic(client, path).get());
            case "long-add":
                return "OK " + value(optimistic(client, path).add(Long.parseLong(words[2])));
            case "long-cas": {
                AtomicValue<Long> result = optimistic(client, path)
                        .compareAndSet(Long.parseLong(words[2]), Long.parseLong(words[3]));
                return "OK " + result.succeeded();
            }
            case "long-inc-many": {
                PromotedToLock promoted = PromotedToLock.builder()
                        .lockPath(words[2])
                        .timeout(60, TimeUnit.SECONDS)
                        .retryPolicy(new RetryNTimes(20, 5))
                        .build();
                DistributedAtomicLong counter =
                        new DistributedAtomicLong(client, path, new RetryNTimes(20, 5), promoted);
                int n = Integer.parseInt(words[3]);
                for (int i = 0; i < n; i++) {
                    int tries = 0;
                    while (!counter.increment().succeeded()) {
                        if (++tries == 100) {
                            throw new IllegalStateException("increment " + i + " failed 100 times");
                        }
                    }
                }
                return "OK " + n;
            }
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    private static SharedCount started(CuratorFramework client, String path, int seed) throws Exception {
        SharedCount count = new SharedCount(client, path, seed);
        count.start();
        return count;
    }

    private static DistributedAtomicLong optimistic(CuratorFramework client, String path) {
        return new DistributedAtomicLong(client, path, new RetryNTimes(20, 5));
    }

    private static long value(AtomicValue<Long> result) {
        if (!result.succeeded()) {
            throw new IllegalStateException("the operation did not succeed");
        }
        return result.postValue();
    }

    /** VersionedValue's constructor is package-private in Curator 5.4. */
    @SuppressWarnings("unchecked")
    private static VersionedValue<Integer> versioned(int version, int value) throws Exception {
        Constructor<?> make = VersionedValue.class.getDeclaredConstructor(int.class, Object.class);
        make.setAccessible(true);
        return (VersionedValue<Integer>) make.newInstance(version, value);
    }
}
