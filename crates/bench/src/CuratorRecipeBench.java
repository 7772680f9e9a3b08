// The Curator side of `lockkeeper-bench --recipes`: Apache Curator's LeaderLatch and
// DistributedAtomicLong measured the way the Rust side measures lockkeeper's leader latch and
// atomic long, so the figures can be set side by side.
//
// The benchmark binary carries this file, compiles it with javac into a temporary directory and
// runs it on Debian's Curator and ZooKeeper jars, in one of two modes:
//
//   commands <watchdogS> <sessionTimeoutMs>
//       One JVM for the in-process measurements of a run. Commands arrive on stdin, one per
//       line, each answered by result lines and a final `END` (`ERROR <reason>` before `END`
//       when it failed):
//
//       counter <connect> <path> <sessions> <increments> <limitMs> <backoff|spin>
//           `sessions` sessions, each incrementing one DistributedAtomicLong up to
//           `increments` times or until `limitMs` passed. An increment that loses to a
//           concurrent one tries again: `backoff` after a jittered sleep from 5 ms doubling to at
//           most 500 ms, 20 tries in all (lockkeeper's default); `spin` at once, up to
//           10,000 tries. Answers
//           `RESULT increments=<n> elapsed_us=<us> tries=<optimistic tries>` (the benchmark
//           then reads the counter's final value itself).
//       queue <connect> <path> <producers> <consumers> <items> <limitMs>
//           `producers` sessions putting `items` items (named `item-<n>`, each n once) into one
//           DistributedQueue at `path` until done or `limitMs` passed, and `consumers` sessions
//           consuming them at least once (lock path `<path>-locks`: an item is removed only after
//           consumeMessage returned), Curator's defaults otherwise (puts in the background,
//           flushed before the producers count as done). Answers `RESULT items=<consumed>
//           produced=<n> distinct=<distinct items consumed> elapsed_us=<from the start to the
//           last item consumed>`; the benchmark checks that every item came exactly once.
//       handoff <connect> <path> <participants> <handoffs> <limitMs>
//           `participants` sessions in one LeaderLatch election; the leader closes its latch
//           and joins again with a new one (at the back of the line) until `handoffs` handoffs
//           or `limitMs` passed. Answers `GAPS <us> <us> ...` (from the leader's close() to the
//           next leader's grant, one per handoff), then `RESULT handoffs=<n> elapsed_us=<us>`.
//
//   participant <connect> <path> <id> <sessionTimeoutMs> <watchdogS>
//       One election participant in a JVM of its own, so that the benchmark can SIGKILL the
//       leader's whole process. Prints `SESSION <negotiated timeout ms>`, then `LEADER` when its
//       LeaderLatch is granted, then waits for stdin to close.
//
// A JVM ends when stdin closes, on `quit`, or when its watchdog fires, whichever comes first. The
// command loop, the watchdog and the sessions are CuratorBenchSupport's, compiled with this file.

import java.io.BufferedReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.RetryPolicy;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorRecipeBench extends CuratorBenchSupport {
    /** Bound on one wait for leadership; a longer wait fails the measurement. */
    private static final long GRANT_LIMIT_S = 60;

    /** Tries of one increment under the `spin` policy, with no sleep in between. */
    private static final int SPIN_TRIES = 10_000;

    private static int sessionTimeoutMs = 4_000;

    public static void main(String[] argv) throws Exception {
        if (argv.length >= 6 && argv[0].equals("participant")) {
            sessionTimeoutMs = Integer.parseInt(argv[4]);
            watchdog(Long.parseLong(argv[5]));
            participant(argv[1], argv[2], argv[3]);
            return;
        }
        if (argv.length < 3 || !argv[0].equals("commands")) {
            say("ERROR usage: commands <watchdogS> <sessionTimeoutMs> | participant ...");
            Runtime.getRuntime().halt(2);
        }
        watchdog(Long.parseLong(argv[1]));
        sessionTimeoutMs = Integer.parseInt(argv[2]);
        serve(Map.of(
                "counter", w -> counter(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                        Long.parseLong(w[5]), w[6]),
                "handoff", w -> handoff(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                        Long.parseLong(w[5])),
                "queue", w -> queue(w[1], w[2], Integer.parseInt(w[3]), Integer.parseInt(w[4]),
                        Integer.parseInt(w[5]), Long.parseLong(w[6]))));
    }

    private static CuratorFramework client(String connect) throws InterruptedException {
        return client(connect, sessionTimeoutMs);
    }

    private static List<CuratorFramework> clients(String connect, int n) throws InterruptedException {
        return clients(connect, n, sessionTimeoutMs);
    }

    private static RetryPolicy counterRetry(String mode) {
        return switch (mode) {
            // Curator's sleep before retry n is base * random(1 .. 2^(n+1)), capped; 19 retries
            // make the 20 tries of lockkeeper's default.
            case "backoff" -> new ExponentialBackoffRetry(5, 19, 500);
            case "spin" -> new RetryNTimes(SPIN_TRIES - 1, 0);
            default -> throw new IllegalArgumentException("unknown counter retry " + mode);
        };
    }

    private static void counter(String connect, String path, int sessions, int increments, long limitMs,
            String retry) throws Exception {
        counterRetry(retry);
        List<CuratorFramework> clients = clients(connect, sessions);
        try {
            AtomicLong done = new AtomicLong();
            AtomicLong tries = new AtomicLong();
            long[] deadline = new long[1];
            deadline[0] = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(limitMs);
            long startedAt = together(sessions, limitMs + TimeUnit.SECONDS.toMillis(120), i -> {
                DistributedAtomicLong counter = new DistributedAtomicLong(clients.get(i), path, counterRetry(retry));
                for (int n = 0; n < increments && System.nanoTime() < deadline[0]; n++) {
                    AtomicValue<Long> value = counter.increment();
                    if (!value.succeeded()) {
                        throw new IllegalStateException("increment gave up (" + retry + ")");
                    }
                    tries.addAndGet(value.getStats().getOptimisticTries());
                    done.incrementAndGet();
                }
            });
            long elapsed = System.nanoTime() - startedAt;
            say("RESULT increments=" + done.get() + " elapsed_us=" + elapsed / 1000 + " tries=" + tries.get());
        } finally {
            close(clients);
        }
    }

    private static void handoff(String connect, String path, int participants, int handoffs, long limitMs)
            throws Exception {
        List<CuratorFramework> clients = clients(connect, participants);
        try {
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(limitMs);
            // The nanoTime of the leader's close(), 0 when there is none to hand off from.
            AtomicLong resignedAt = new AtomicLong();
            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger count = new AtomicInteger();
            long[] gaps = new long[handoffs];
            long[] lastGrant = new long[1];
            long startedAt = together(participants, limitMs + TimeUnit.SECONDS.toMillis(GRANT_LIMIT_S * 2), i -> {
                while (!stop.get()) {
                    LeaderLatch latch = new LeaderLatch(clients.get(i), path, "participant-" + i);
                    latch.start();
                    try {
                        if (!latch.await(GRANT_LIMIT_S, TimeUnit.SECONDS)) {
                            throw new IllegalStateException("not leader within " + GRANT_LIMIT_S + " s");
                        }
                        // Only the leader runs from here to close(): the fields below are its own.
                        long now = System.nanoTime();
                        long resigned = resignedAt.getAndSet(0);
                        if (resigned != 0 && !stop.get()) {
                            int n = count.getAndIncrement();
                            gaps[n] = (now - resigned) / 1000;
                            lastGrant[0] = now;
                            if (n + 1 >= handoffs || now >= deadline) {
                                stop.set(true);
                            }
                        }
                        if (!stop.get()) {
                            resignedAt.set(System.nanoTime());
                        }
                    } finally {
                        latch.close();
                    }
                }
            });
            int n = count.get();
            say(line("GAPS", gaps, n));
            long elapsed = n > 0 ? lastGrant[0] - startedAt : 0;
            say("RESULT handoffs=" + n + " elapsed_us=" + elapsed / 1000);
        } finally {
            close(clients);
        }
    }

    /** Bound on draining the queue after the producers stopped. */
    private static final long DRAIN_LIMIT_S = 60;

    private static final QueueSerializer<String> UTF8 = new QueueSerializer<>() {
        @Override
        public byte[] serialize(String item) {
            return item.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public String deserialize(byte[] bytes) {
            return new String(bytes, StandardCharsets.UTF_8);
        }
    };

    private static void queue(String connect, String path, int producers, int consumers, int items, long limitMs)
            throws Exception {
        List<CuratorFramework> clients = clients(connect, producers + consumers);
        List<DistributedQueue<String>> queues = new ArrayList<>();
        try {
            ConcurrentHashMap<String, Integer> seen = new ConcurrentHashMap<>();
            AtomicLong consumed = new AtomicLong();
            AtomicLong produced = new AtomicLong();
            AtomicLong lastConsumed = new AtomicLong();
            QueueConsumer<String> consumer = new QueueConsumer<>() {
                @Override
                public void consumeMessage(String item) {
                    seen.merge(item, 1, Integer::sum);
                    lastConsumed.accumulateAndGet(System.nanoTime(), Math::max);
                    consumed.incrementAndGet();
                }

                @Override
                public void stateChanged(CuratorFramework client, ConnectionState state) {
                }
            };
            for (int i = 0; i < producers + consumers; i++) {
                QueueBuilder<String> builder = QueueBuilder.builder(clients.get(i), i < producers ? null : consumer,
                        UTF8, path);
                DistributedQueue<String> queue = builder.lockPath(path + "-locks").buildQueue();
                queues.add(queue);
            }
            // Consumers first: they wait on the queue's children before the first item comes.
            for (int i = producers; i < producers + consumers; i++) {
                queues.get(i).start();
            }
            for (int i = 0; i < producers; i++) {
                queues.get(i).start();
            }
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(limitMs);
            long startedAt = together(producers, limitMs + TimeUnit.SECONDS.toMillis(DRAIN_LIMIT_S), p -> {
                DistributedQueue<String> queue = queues.get(p);
                for (long n = p; n < items && System.nanoTime() < deadline; n += producers) {
                    queue.put("item-" + n);
                    produced.incrementAndGet();
                }
                if (!queue.flushPuts(DRAIN_LIMIT_S, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("puts not flushed within " + DRAIN_LIMIT_S + " s");
                }
            });
            long drainBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(DRAIN_LIMIT_S);
            while (consumed.get() < produced.get() && System.nanoTime() < drainBy) {
                Thread.sleep(1);
            }
            long last = lastConsumed.get();
            long elapsed = consumed.get() > 0 ? last - startedAt : 0;
            say("RESULT items=" + consumed.get() + " produced=" + produced.get() + " distinct=" + seen.size()
                    + " elapsed_us=" + elapsed / 1000);
        } finally {
            for (DistributedQueue<String> queue : queues) {
                queue.close();
            }
            close(clients);
        }
    }

    private static void participant(String connect, String path, String id) throws Exception {
        CuratorFramework client = client(connect);
        say("SESSION " + client.getZookeeperClient().getZooKeeper().getSessionTimeout());
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.start();
        // Waits as long as the watchdog lets it: the benchmark decides when this one should lead.
        latch.await();
        say("LEADER");
        BufferedReader in = stdin();
        while (in.readLine() != null) {
            // Nothing to do but stay leader until stdin closes or the process is killed.
        }
        Runtime.getRuntime().halt(0);
    }
}
