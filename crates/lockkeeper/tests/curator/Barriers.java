// Curator's DistributedBarrier and DistributedDoubleBarrier, for `tests/zk_barrier.rs`, where they
// share barriers with lockkeeper's Barrier and DoubleBarrier.
//
// Usage: Barriers <connect> <path> <memberQty> <members>
//
// <members> Curator sessions, each with one DistributedDoubleBarrier(path, memberQty) and one
// DistributedBarrier(path + "-gate"). `READY` is printed once every session is connected.
// Commands on stdin; blocking ones run on a thread of their own and report when done:
//   enter <i>  -> `OK enter <i>` at once, then `ENTERED <i>` when member i's enter() returns
//   leave <i>  -> `OK leave <i>` at once, then `LEFT <i>` when member i's leave() returns
//   set        -> `OK set`: setBarrier() on session 0
//   remove     -> `OK remove`: removeBarrier() on session 0
//   wait <i>   -> `OK wait <i>` at once, then `PASSED <i>` when waitOnBarrier() on session i returns
//   quit       -> `BYE`, then the JVM ends
// A command that throws answers (or reports) `ERR <exception>`.

import java.util.ArrayList;
import java.util.List;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;

public final class Barriers {
    public static void main(String[] argv) {
        Interop.watchdog("barriers", 400);
        try {
            run(argv);
            Interop.exit(0);
        } catch (Throwable t) {
            Interop.say("FAIL barriers: " + t);
            t.printStackTrace(System.out);
            Interop.exit(1);
        }
    }

    private static void run(String[] argv) throws Exception {
        if (argv.length != 4) {
            throw new IllegalArgumentException("expected 4 arguments, got " + argv.length);
        }
        String connect = argv[0];
        String path = argv[1];
        int quantity = Integer.parseInt(argv[2]);
        int count = Integer.parseInt(argv[3]);
        List<DistributedDoubleBarrier> doubles = new ArrayList<>();
        List<DistributedBarrier> gates = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            CuratorFramework client = Interop.client(connect);
            doubles.add(new DistributedDoubleBarrier(client, path, quantity));
            gates.add(new DistributedBarrier(client, path + "-gate"));
        }
        Interop.say("READY");

        String line;
        commands:
        while ((line = Interop.hear()) != null) {
            String[] words = line.trim().split(" ");
            try {
                switch (words[0]) {
                    case "enter" -> {
                        int i = Integer.parseInt(words[1]);
                        background("ENTERED " + i, () -> doubles.get(i).enter());
                        Interop.say("OK enter " + i);
                    }
                    case "leave" -> {
                        int i = Integer.parseInt(words[1]);
                        background("LEFT " + i, () -> doubles.get(i).leave());
                        Interop.say("OK leave " + i);
                    }
                    case "set" -> {
                        gates.get(0).setBarrier();
                        Interop.say("OK set");
                    }
                    case "remove" -> {
                        gates.get(0).removeBarrier();
                        Interop.say("OK remove");
                    }
                    case "wait" -> {
                        int i = Integer.parseInt(words[1]);
                        background("PASSED " + i, () -> gates.get(i).waitOnBarrier());
                        Interop.say("OK wait " + i);
                    }
                    case "quit" -> {
                        Interop.say("BYE");
                        break commands;
                    }
                    default -> throw new IllegalArgumentException("unknown command " + line);
                }
            } catch (Exception e) {
                Interop.say("ERR " + e);
            }
        }
    }

    /** A blocking recipe call. */
    private interface Call {
        void run() throws Exception;
    }

    /** Runs `call` on a thread of its own and says `done` when it returns. */
    private static void background(String done, Call call) {
        Thread thread = new Thread(() -> {
            try {
                call.run();
                Interop.say(done);
            } catch (Exception e) {
                Interop.say("ERR " + e);
            }
        }, done);
        thread.setDaemon(true);
        thread.start();
    }
}
