// Curator's queues for `tests/queue/curator.rs`: producers and consumers the Rust test runs
// against lockkeeper's queues on the same paths.
//
// Usage: Queues <connect> <mode> <path> <lockPath|-> <count>, where mode is
//   produce           DistributedQueue.put of items `j-0` .. `j-<count-1>`, one node each, then
//                     one putMulti of `m-0` and `m-1`; says `PUT <n>` (items put)
//   consume           a DistributedQueue consumer (lockPath set: Curator's locking mode); says
//                     `GOT <item>` for every item it handles
//   priority-produce  DistributedPriorityQueue.put of `p<priority>` for the priorities listed
//                     on stdin (one line, separated by spaces); says `PUT <n>`
//   simple-produce    SimpleDistributedQueue.offer of `s-0` .. `s-<count-1>`; says `PUT <n>`
//   simple-take       SimpleDistributedQueue.take, <count> times; says `GOT <item>` each
// It says `READY` once connected, waits for `go`, and ends on `quit` (saying `BYE`).

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.queue.DistributedPriorityQueue;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.MultiItem;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.framework.state.ConnectionState;

public final class Queues {
    static final QueueSerializer<String> TEXT = new QueueSerializer<String>() {
        @Override
        public byte[] serialize(String item) {
            return item.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public String deserialize(byte[] bytes) {
            return new String(bytes, StandardCharsets.UTF_8);
        }
    };

    public static void main(String[] argv) {
        Interop.watchdog("queues", 300);
        try {
            CuratorFramework client = Interop.client(argv[0]);
            String mode = argv[1];
            String path = argv[2];
            String lockPath = argv[3].equals("-") ? null : argv[3];
            int count = Integer.parseInt(argv[4]);
            Interop.say("READY");
            String go = Interop.hear();
            if (go == null || !go.startsWith("go")) {
                Interop.exit(1);
            }
            AutoCloseable open = null;
            switch (mode) {
                case "produce" -> {
                    QueueBuilder<String> builder = QueueBuilder.builder(client, null, TEXT, path);
                    DistributedQueue<String> queue = builder.putInBackground(false).buildQueue();
                    queue.start();
                    for (int i = 0; i < count; i++) {
                        queue.put("j-" + i);
                    }
                    List<String> pair = new ArrayList<>(List.of("m-0", "m-1"));
                    queue.putMulti(new MultiItem<String>() {
                        @Override
                        public String nextItem() {
                            return pair.isEmpty() ? null : pair.remove(0);
                        }
                    });
                    Interop.say("PUT " + (count + 2));
                    open = queue;
                }
                case "consume" -> {
                    QueueConsumer<String> consumer = new QueueConsumer<String>() {
                        @Override
                        public void consumeMessage(String message) {
                            Interop.say("GOT " + message);
                        }

                        @Override
                        public void stateChanged(CuratorFramework c, ConnectionState s) {}
                    };
                    QueueBuilder<String> builder = QueueBuilder.builder(client, consumer, TEXT, path);
                    if (lockPath != null) {
                        builder = builder.lockPath(lockPath);
                    }
                    DistributedQueue<String> queue = builder.buildQueue();
                    queue.start();
                    open = queue;
                }
                case "priority-produce" -> {
                    QueueBuilder<String> builder = QueueBuilder.builder(client, null, TEXT, path);
                    DistributedPriorityQueue<String> queue =
                            builder.putInBackground(false).buildPriorityQueue(0);
                    queue.start();
                    String[] priorities = go.substring(2).trim().split(" ");
                    for (String p : priorities) {
                        queue.put("p" + p, Integer.parseInt(p));
                    }
                    Interop.say("PUT " + priorities.length);
                    open = queue;
                }
                case "simple-produce" -> {
                    SimpleDistributedQueue queue = new SimpleDistributedQueue(client, path);
                    for (int i = 0; i < count; i++) {
                        queue.offer(("s-" + i).getBytes(StandardCharsets.UTF_8));
                    }
                    Interop.say("PUT " + count);
                }
                case "simple-take" -> {
                    SimpleDistributedQueue queue = new SimpleDistributedQueue(client, path);
                    for (int i = 0; i < count; i++) {
                        Interop.say("GOT " + new String(queue.take(), StandardCharsets.UTF_8));
                    }
                }
                default -> throw new IllegalArgumentException("unknown mode " + mode);
            }
            String line;
            while ((line = Interop.hear()) != null && !line.trim().equals("quit")) {
                // Only `quit` is understood once running.
            }
            if (open != null) {
                open.close();
            }
            Interop.say("BYE");
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL queues: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }
}
