// Curator over TLS, for `tests/zk_tls.rs`: ZooKeeper's Java client with its Netty socket and PEM
// files, against Keeper's secure listener.
//
// Usage: TlsClient <connect> <keyStore: PKCS#8 key + certificate, PEM> <trustStore: CA, PEM> <dir>
//
// One Curator session over TLS (zookeeper.client.secure, ClientCnxnSocketNetty), then, each
// step printing one line:
//   LOCKED                 an InterProcessMutex on <dir>/lock acquired
//   CREATED <acl>          <dir>/node created with CREATOR_ALL_ACL (the server expands it to this
//                          client's x509 id), its ACL as the server answers getACL: scheme:id
//   WATCHED <type>         a data watch on the node fired after setData
//   RELEASED               the mutex released
// and exits 0; any failure prints `ERR <exception>` and exits 1.

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.ACL;

public final class TlsClient {
    public static void main(String[] args) {
        try {
            run(args[0], args[1], args[2], args[3]);
            System.exit(0);
        } catch (Throwable e) {
            System.out.println("ERR " + e);
            System.exit(1);
        }
    }

    private static void run(String connect, String keyStore, String trustStore, String dir)
            throws Exception {
        ZKClientConfig tls = new ZKClientConfig();
        tls.setProperty(ZKClientConfig.SECURE_CLIENT, "true");
        tls.setProperty(ZKClientConfig.ZOOKEEPER_CLIENT_CNXN_SOCKET,
                "org.apache.zookeeper.ClientCnxnSocketNetty");
        tls.setProperty("zookeeper.ssl.keyStore.location", keyStore);
        tls.setProperty("zookeeper.ssl.keyStore.type", "PEM");
        tls.setProperty("zookeeper.ssl.trustStore.location", trustStore);
        tls.setProperty("zookeeper.ssl.trustStore.type", "PEM");
        try (CuratorFramework curator = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(10_000)
                .connectionTimeoutMs(15_000)
                .retryPolicy(new ExponentialBackoffRetry(200, 3))
                .zkClientConfig(tls)
                .build()) {
            curator.start();
            if (!curator.blockUntilConnected(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no TLS session with " + connect);
            }
            InterProcessMutex mutex = new InterProcessMutex(curator, dir + "/lock");
            if (!mutex.acquire(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("the mutex was not acquired");
            }
            System.out.println("LOCKED");
            String node = curator.create().creatingParentsIfNeeded()
                    .withMode(CreateMode.PERSISTENT)
                    .withACL(ZooDefs.Ids.CREATOR_ALL_ACL)
                    .forPath(dir + "/node", "v1".getBytes());
            StringBuilder acl = new StringBuilder();
            for (ACL entry : curator.getACL().forPath(node)) {
                acl.append(entry.getId().getScheme()).append(':').append(entry.getId().getId());
            }
            System.out.println("CREATED " + acl);
            CountDownLatch fired = new CountDownLatch(1);
            AtomicReference<String> type = new AtomicReference<>();
            curator.getData()
                    .usingWatcher((Watcher) (WatchedEvent event) -> {
                        type.set(event.getType().toString());
                        fired.countDown();
                    })
                    .forPath(node);
            curator.setData().forPath(node, "v2".getBytes());
            if (!fired.await(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("the watch did not fire");
            }
            System.out.println("WATCHED " + type.get());
            mutex.release();
            System.out.println("RELEASED");
        }
    }
}
