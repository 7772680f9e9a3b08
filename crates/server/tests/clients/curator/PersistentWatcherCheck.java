// Persistent watches (ZooKeeper 3.6+ addWatch) through Curator against the server under test.
// A recursive watch sees every create, data change and delete below its path, in order, and keeps
// firing after each event; a plain persistent watch sees its own node's data and children
// changes but nothing deeper; after removal, neither fires.
//
// Usage: PersistentWatcherCheck <connect> <rootPath>

import java.nio.charset.StandardCharsets;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.watch.PersistentWatcher;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.Watcher.Event.EventType;

public final class PersistentWatcherCheck {
    public static void main(String[] argv) {
        Harness.run("persistent-watch", 120, argv, PersistentWatcherCheck::check);
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String describe(EventType type, String path) {
        return type + " " + path;
    }

    private static void expect(LinkedBlockingQueue<String> q, EventType type, String path) throws InterruptedException {
        String got = q.poll(15, TimeUnit.SECONDS);
        Harness.checkEq(describe(type, path), got, "next watch event");
    }

    private static void expectNone(LinkedBlockingQueue<String> q, String why) throws InterruptedException {
        String got = q.poll(400, TimeUnit.MILLISECONDS);
        Harness.check(got == null, "unexpected watch event (" + why + "): " + got);
    }

    static void check(String connect, String[] args) throws Exception {
        String root = args[0];
        CuratorFramework writer = Harness.client(connect);
        // One session per watch: ZooKeeper 3.8's client hands a child event that arrives for a
        // plain persistent watch to a recursive watch on the same path too, which would blur what
        // the server sent.
        CuratorFramework watching = Harness.client(connect);
        CuratorFramework watchingShallow = Harness.client(connect);
        writer.create().creatingParentsIfNeeded().forPath(root);

        // Recursive, through Curator's recipe.
        LinkedBlockingQueue<String> recursive = new LinkedBlockingQueue<>();
        PersistentWatcher deep = new PersistentWatcher(watching, root, true);
        deep.getListenable().addListener(e -> {
            if (e.getType() != EventType.None) {
                recursive.add(describe(e.getType(), e.getPath()));
            }
        });
        deep.start();

        // Non-recursive, through the raw addWatch builder.
        LinkedBlockingQueue<String> shallow = new LinkedBlockingQueue<>();
        Watcher shallowWatcher = (WatchedEvent e) -> {
            if (e.getType() != EventType.None) {
                shallow.add(describe(e.getType(), e.getPath()));
            }
        };
        watchingShallow.watchers().add().withMode(AddWatchMode.PERSISTENT).usingWatcher(shallowWatcher).forPath(root);
        // PersistentWatcher registers in the background; a sync round-trip orders it before writes.
        Harness.eventually(10_000, "recursive watch registered", () -> {
            try {
                watching.sync().forPath(root);
                return true;
            } catch (Exception e) {
                return false;
            }
        });
        Thread.sleep(300);

        writer.create().forPath(root + "/a", bytes("1"));
        writer.create().forPath(root + "/a/b", bytes("2"));
        writer.setData().forPath(root + "/a/b", bytes("3"));
        writer.setData().forPath(root + "/a/b", bytes("4"));
        writer.setData().forPath(root, bytes("r"));
        writer.delete().forPath(root + "/a/b");
        writer.delete().forPath(root + "/a");

        expect(recursive, EventType.NodeCreated, root + "/a");
        expect(recursive, EventType.NodeCreated, root + "/a/b");
        expect(recursive, EventType.NodeDataChanged, root + "/a/b");
        expect(recursive, EventType.NodeDataChanged, root + "/a/b");
        expect(recursive, EventType.NodeDataChanged, root);
        expect(recursive, EventType.NodeDeleted, root + "/a/b");
        expect(recursive, EventType.NodeDeleted, root + "/a");
        expectNone(recursive, "recursive watch after the last change");

        // A plain persistent watch: children changes and data changes of the node itself only.
        expect(shallow, EventType.NodeChildrenChanged, root);
        expect(shallow, EventType.NodeDataChanged, root);
        expect(shallow, EventType.NodeChildrenChanged, root);
        expectNone(shallow, "persistent watch on grandchildren changes");

        // Removing a persistent watch is acknowledged with PersistentWatchRemoved and stops the
        // events. (The recipe's close() removes its watch in the background and drops its
        // listeners first, so only the directly removed watch can show what the server does.)
        deep.close();
        watchingShallow.watchers().remove(shallowWatcher).forPath(root);
        expect(shallow, EventType.PersistentWatchRemoved, root);
        writer.create().forPath(root + "/after", bytes("x"));
        writer.setData().forPath(root, bytes("r2"));
        expectNone(shallow, "after the persistent watch was removed");
    }
}
