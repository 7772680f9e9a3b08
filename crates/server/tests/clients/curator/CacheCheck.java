// CuratorCache against the server under test: a cache built on one session sees the creates,
// updates and deletes another session makes, in the order they were made, with the right data.
//
// Usage: CacheCheck <connect> <rootPath>

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;

public final class CacheCheck {
    public static void main(String[] argv) {
        Harness.run("curator-cache", 120, argv, CacheCheck::check);
    }

    /** One cache event as observed: kind, path and the data the cache reported. */
    record Seen(String kind, String path, String data) {
        @Override
        public String toString() {
            return kind + " " + path + " '" + data + "'";
        }
    }

    private static String text(ChildData d) {
        return d == null || d.getData() == null ? null : new String(d.getData(), StandardCharsets.UTF_8);
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static Seen next(LinkedBlockingQueue<Seen> events, String waitingFor) throws InterruptedException {
        Seen s = events.poll(15, TimeUnit.SECONDS);
        Harness.check(s != null, "no cache event within 15 s while waiting for " + waitingFor);
        return s;
    }

    private static void expect(LinkedBlockingQueue<Seen> events, Seen want) throws InterruptedException {
        Harness.checkEq(want, next(events, want.toString()), "next cache event");
    }

    /** Path to data of everything the cache holds now. */
    private static Map<String, String> snapshot(CuratorCache cache) {
        Map<String, String> out = new HashMap<>();
        cache.stream().forEach(d -> out.put(d.getPath(), text(d)));
        return out;
    }

    static void check(String connect, String[] args) throws Exception {
        String root = args[0];
        CuratorFramework writer = Harness.client(connect);
        CuratorFramework reader = Harness.client(connect);
        writer.create().creatingParentsIfNeeded().forPath(root, bytes("root"));
        writer.create().forPath(root + "/pre", bytes("before"));

        LinkedBlockingQueue<Seen> events = new LinkedBlockingQueue<>();
        CuratorCache cache = CuratorCache.build(reader, root);
        cache.listenable().addListener(CuratorCacheListener.builder()
                .forCreates(d -> events.add(new Seen("CREATED", d.getPath(), text(d))))
                .forChanges((before, after) -> events.add(new Seen("CHANGED", after.getPath(), text(after))))
                .forDeletes(d -> events.add(new Seen("DELETED", d.getPath(), text(d))))
                .forInitialized(() -> events.add(new Seen("INITIALIZED", "", null)))
                .build());
        cache.start();

        // The initial load reports what already exists (parent before child), then "initialized".
        expect(events, new Seen("CREATED", root, "root"));
        expect(events, new Seen("CREATED", root + "/pre", "before"));
        expect(events, new Seen("INITIALIZED", "", null));

        // Step by step: each change must surface before the next one is made.
        writer.create().forPath(root + "/a", bytes("1"));
        expect(events, new Seen("CREATED", root + "/a", "1"));
        writer.setData().forPath(root + "/a", bytes("2"));
        expect(events, new Seen("CHANGED", root + "/a", "2"));
        writer.create().forPath(root + "/a/b", bytes("3"));
        expect(events, new Seen("CREATED", root + "/a/b", "3"));
        writer.setData().forPath(root, bytes("root2"));
        expect(events, new Seen("CHANGED", root, "root2"));
        writer.delete().forPath(root + "/a/b");
        expect(events, new Seen("DELETED", root + "/a/b", "3"));
        writer.delete().forPath(root + "/a");
        expect(events, new Seen("DELETED", root + "/a", "2"));
        writer.delete().forPath(root + "/pre");
        expect(events, new Seen("DELETED", root + "/pre", "before"));

        // A burst with no waiting in between. The cache may legitimately skip a node that was
        // created and deleted before it fetched it, so the events are not counted; what must
        // hold is that the cache converges to the writer's final state, and that per node the
        // events it did report make sense (created once, before any deletion).
        int burst = 20;
        for (int i = 0; i < burst; i++) {
            writer.create().forPath(root + "/n" + i, bytes("v" + i));
        }
        for (int i = 0; i < burst; i += 2) {
            writer.delete().forPath(root + "/n" + i);
        }
        Map<String, String> expected = new HashMap<>();
        expected.put(root, "root2");
        for (int i = 1; i < burst; i += 2) {
            expected.put(root + "/n" + i, "v" + i);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        Map<String, String> cached = snapshot(cache);
        while (!cached.equals(expected)) {
            if (System.nanoTime() > deadline) {
                throw new Harness.CheckFailed("cache did not converge within 20 s: expected "
                        + expected + " but holds " + cached + "; events seen " + events);
            }
            Thread.sleep(50);
            cached = snapshot(cache);
        }
        Map<String, String> history = new HashMap<>();
        for (Seen s : events) {
            String before = history.getOrDefault(s.path(), "");
            switch (s.kind()) {
                case "CREATED" -> Harness.check(before.isEmpty(), "created again after '" + before + "': " + s + " in " + events);
                case "DELETED" -> Harness.check(before.equals("C"), "deleted without a creation before: " + s + " in " + events);
                default -> throw new Harness.CheckFailed("unexpected event in the burst: " + s + " in " + events);
            }
            history.put(s.path(), before + s.kind().charAt(0));
        }
        for (int i = 1; i < burst; i += 2) {
            Harness.checkEq("C", history.get(root + "/n" + i), "events of surviving node n" + i + " in " + events);
        }
        cache.close();
    }
}
