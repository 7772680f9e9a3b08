// Curator's GroupMember, driven by `tests/zk_member.rs` to check that lockkeeper's group
// membership and Curator's share one group: same layout, same view of who is in it.
//
// Usage: Members <connect> <session timeout ms>, then one command per line on stdin, one reply
// line each on stdout:
//   join <path> <id> <data>     new GroupMember(...).start()    -> `OK`
//   update <path> <id> <data>   setThisData(data)               -> `OK`
//   leave <path> <id>           close()                         -> `OK`
//   members <path> <id>         getCurrentMembers() of member id -> `OK id=data,id=data` (by id)
//   quit                                                        -> `BYE`, then the JVM ends
// Data is UTF-8 text without spaces. A command that throws answers `ERR <exception>`. `READY` is
// printed once connected. The session timeout is the test's (short), so that a killed JVM
// leaves the group within seconds; members() is Curator's cache and lags the server, so the
// test asks again until it sees what it expects.

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class Members {
    public static void main(String[] argv) {
        Interop.watchdog("members", 300);
        try {
            CuratorFramework client = CuratorFrameworkFactory.builder()
                    .connectString(argv[0])
                    .sessionTimeoutMs(Integer.parseInt(argv[1]))
                    .connectionTimeoutMs(20_000)
                    .retryPolicy(new ExponentialBackoffRetry(100, 10))
                    .build();
            client.start();
            if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no connection to " + argv[0] + " within 60 s");
            }
            Map<String, GroupMember> members = new HashMap<>();
            Interop.serve(words -> {
                if (words.length < 3) {
                    throw new IllegalArgumentException("expected `<op> <path> <id> [data]`: " + String.join(" ", words));
                }
                String key = words[1] + " " + words[2];
                switch (words[0]) {
                    case "join" -> {
                        GroupMember member = new GroupMember(client, words[1], words[2], bytes(words, 3));
                        member.start();
                        members.put(key, member);
                        Interop.say("OK");
                    }
                    case "update" -> {
                        member(members, key).setThisData(bytes(words, 3));
                        Interop.say("OK");
                    }
                    case "leave" -> {
                        member(members, key).close();
                        members.remove(key);
                        Interop.say("OK");
                    }
                    case "members" -> {
                        StringBuilder out = new StringBuilder("OK ");
                        Map<String, byte[]> current = new TreeMap<>(member(members, key).getCurrentMembers());
                        boolean first = true;
                        for (Map.Entry<String, byte[]> entry : current.entrySet()) {
                            if (!first) {
                                out.append(',');
                            }
                            first = false;
                            out.append(entry.getKey()).append('=')
                                    .append(new String(entry.getValue(), StandardCharsets.UTF_8));
                        }
                        Interop.say(out.toString());
                    }
                    default -> throw new IllegalArgumentException("unknown operation " + words[0]);
                }
            });
            for (GroupMember member : members.values()) {
                member.close();
            }
            client.close();
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL members: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }

    private static GroupMember member(Map<String, GroupMember> members, String key) {
        GroupMember member = members.get(key);
        if (member == null) {
            throw new IllegalStateException("no member " + key + " joined here");
        }
        return member;
    }

    private static byte[] bytes(String[] words, int index) {
        if (words.length <= index) {
            throw new IllegalArgumentException("missing data");
        }
        return words[index].getBytes(StandardCharsets.UTF_8);
    }
}
