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

        // A burst with no waiting in between: per node, creation is seen before deletion, and the
        // cache converges to the writer's final state.
        int burst = 20;
        for (int i = 0; i < burst; i++) {
            writer.create().forPath(root + "/n" + i, bytes("v" + i));
        }
        for (int i = 0; i < burst; i += 2) {
            writer.delete().forPath(root + "/n" + i);
        }
        Map<String, Integer> created = new HashMap<>();
        Map<String, Integer> deleted = new HashMap<>();
        int position = 0;
        int expectedEvents = burst + burst / 2;
        while (position < expectedEvents) {
            Seen s = next(events, "burst event " + position + " of " + expectedEvents);
            switch (s.kind()) {
                case "CREATED" -> Harness.check(created.put(s.path(), position) == null, "created twice: " + s);
                case "DELETED" -> {
                    Harness.check(created.containsKey(s.path()), "deleted before created: " + s);
                    Harness.check(deleted.put(s.path(), position) == null, "deleted twice: " + s);
                }
                default -> throw new Harness.CheckFailed("unexpected event in burst: " + s);
            }
            position++;
        }
        Harness.checkEq(burst, created.size(), "nodes seen created in the burst");
        Harness.checkEq(burst / 2, deleted.size(), "nodes seen deleted in the burst");
        for (int i = 0; i < burst; i++) {
            String p = root + "/n" + i;
            boolean gone = i % 2 == 0;
            Harness.checkEq(gone, cache.get(p).isEmpty(), "cache has " + p + " deleted");
            if (!gone) {
                Harness.checkEq("v" + i, text(cache.get(p).get()), "cached data of " + p);
            }
        }
        Harness.checkEq("root2", text(cache.get(root).orElse(null)), "cached data of the root");
        Harness.checkEq(1 + burst / 2, cache.size(), "cache size after the burst");
        Seen stray = events.poll(300, TimeUnit.MILLISECONDS);
        Harness.check(stray == null, "unexpected extra event: " + stray);
        cache.close();
    }
}
