// The resource the contenders share, as the Java side touches it: a directory of marker files.
//
// Mutual exclusion is checked outside ZooKeeper, with something both languages and every process
// see the same way: creating a file with create-exclusive semantics. A writer (any mutex holder)
// creates `writer`, which fails if another writer is inside, then looks for `reader-*` files; a
// reader creates its own `reader-<who>`, then looks for `writer`. Directory operations on one
// directory are atomic and totally ordered, so of two holders that overlap, the later one sees
// the earlier one's marker; holders that do not overlap never see each other (each removes its
// marker before releasing). Each conflict seen is one violation. Every holder also appends its
// name to `log`, so the test can tell that the languages took turns. The Rust twin is
// `markers.rs`.

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

final class Markers {
    private Markers() {}

    /** Holds the resource exclusively for `holdMs`; returns the conflicts seen. */
    static int asWriter(Path dir, String who, long holdMs) throws IOException, InterruptedException {
        int violations = 0;
        Path mine = dir.resolve("writer");
        boolean created = false;
        try {
            Files.createFile(mine);
            created = true;
        } catch (FileAlreadyExistsException busy) {
            violations++;
            System.err.println("violation: writer " + who + " found another writer inside");
        }
        try (DirectoryStream<Path> readers = Files.newDirectoryStream(dir, "reader-*")) {
            for (Path reader : readers) {
                violations++;
                System.err.println("violation: writer " + who + " found " + reader.getFileName());
            }
        }
        log(dir, who);
        Thread.sleep(holdMs);
        if (created) {
            Files.delete(mine);
        }
        return violations;
    }

    /** Holds the resource shared with other readers for `holdMs`; returns the conflicts seen. */
    static int asReader(Path dir, String who, long holdMs) throws IOException, InterruptedException {
        int violations = 0;
        Path mine = dir.resolve("reader-" + who);
        // `who` is unique per contender, so this can only fail if the test itself is wrong.
        Files.createFile(mine);
        if (Files.exists(dir.resolve("writer"))) {
            violations++;
            System.err.println("violation: reader " + who + " found a writer inside");
        }
        log(dir, who);
        Thread.sleep(holdMs);
        Files.delete(mine);
        return violations;
    }

    /** Appends one line; appends of a few bytes are atomic, so lines from processes never mix. */
    private static void log(Path dir, String who) throws IOException {
        Files.write(dir.resolve("log"), (who + "\n").getBytes(java.nio.charset.StandardCharsets.UTF_8),
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }
}
