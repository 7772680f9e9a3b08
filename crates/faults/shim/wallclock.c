/*
 * wallclock.c: an LD_PRELOAD library that shifts a running program's wall clock by a whole
 * number of seconds read from a file, so the fault-injection suite can step the clock of a
 * server it started (redis-server) the way an NTP step or an operator's `date -s` would.
 *
 * Why not libfaketime: Debian's redis-server is linked with jemalloc, which calls
 * clock_gettime() while libfaketime is still initialising (libfaketime looks the real
 * functions up with dlsym(), and dlsym() allocates), and the server never starts. This library
 * has nothing to initialise: it gets the real time with the raw system call, never through
 * dlsym() or the C library's own clock functions, and never allocates.
 *
 * Invariants:
 * - Only the wall clock moves: clock_gettime() shifts CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
 *   and gettimeofday() and time() follow them; every other clock (CLOCK_MONOTONIC, BOOTTIME,
 *   the CPU-time clocks, ...) passes through unchanged, as it does on a real machine whose
 *   wall clock is stepped.
 * - No allocation, no locks, no dlsym(): only the clock_gettime, gettimeofday, openat, read
 *   and close system calls and atomics, so it is safe to call from inside malloc() and from
 *   any thread.
 * - The offset file is re-read at most every 100 ms of CLOCK_MONOTONIC, so a jump takes
 *   effect within 100 ms of the file being rewritten. While one thread re-reads it, the
 *   others keep using the previous offset.
 * - A missing, empty or malformed file keeps the last good offset (0 before the first good
 *   read): a reader racing a writer must not see the clock snap back to real time.
 *
 * The file: its name is in the environment variable LOCKKEEPER_WALLCLOCK_FILE (unset: the
 * library does nothing). Its content is one signed decimal integer, the offset in seconds
 * from the real wall clock, optionally surrounded by blanks and a newline: "+60\n", "-3600",
 * "0". At most 12 digits; anything else is malformed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OFFSET_ENV "LOCKKEEPER_WALLCLOCK_FILE"
#define RECHECK_NS 100000000LL /* 100 ms */
#define MAX_DIGITS 12

static _Atomic long long offset_seconds;
/* CLOCK_MONOTONIC nanoseconds at or after which the file is read again; 0 reads at once. */
static _Atomic long long next_check_ns;

static long real_clock_gettime(clockid_t clock, struct timespec *ts) {
    return syscall(SYS_clock_gettime, clock, ts);
}

static int is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses "[blanks][+|-]digits[blanks]" from buf[0..len); 0 on success. */
static int parse_offset(const char *buf, long len, long long *out) {
    long i = 0;
    while (i < len && is_blank(buf[i])) i++;
    int negative = 0;
    if (i < len && (buf[i] == '+' || buf[i] == '-')) {
        negative = buf[i] == '-';
        i++;
    }
    long long value = 0;
    int digits = 0;
    while (i < len && buf[i] >= '0' && buf[i] <= '9') {
        if (++digits > MAX_DIGITS) return -1;
        value = value * 10 + (buf[i] - '0');
        i++;
    }
    while (i < len && is_blank(buf[i])) i++;
    if (digits == 0 || i != len) return -1;
    *out = negative ? -value : value;
    return 0;
}

/* Reads the offset file into offset_seconds; keeps the old value if it cannot. */
static void read_offset(const char *path) {
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    long len = 0;
    while (len < (long)sizeof buf) {
        long n = syscall(SYS_read, fd, buf + len, sizeof buf - len);
        if (n <= 0) break;
        len += n;
    }
    syscall(SYS_close, fd);
    long long value;
    if (len < (long)sizeof buf && parse_offset(buf, len, &value) == 0) {
        atomic_store_explicit(&offset_seconds, value, memory_order_relaxed);
    }
}

/* The current offset, re-reading the file if the last read is 100 ms old (getenv() only
 * then: it scans the whole environment, too slow for every clock read). */
static long long current_offset(void) {
    struct timespec now;
    if (real_clock_gettime(CLOCK_MONOTONIC, &now) == 0) {
        long long now_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
        long long due = atomic_load_explicit(&next_check_ns, memory_order_relaxed);
        /* Whoever moves next_check_ns forward reads the file; the others use the old offset. */
        if (now_ns >= due &&
            atomic_compare_exchange_strong(&next_check_ns, &due, now_ns + RECHECK_NS)) {
            const char *path = getenv(OFFSET_ENV);
            if (path != NULL && path[0] != '\0') read_offset(path);
        }
    }
    return atomic_load_explicit(&offset_seconds, memory_order_relaxed);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long result = real_clock_gettime(clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        ts->tv_sec += current_offset();
    }
    return (int)result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    if (tz != NULL && syscall(SYS_gettimeofday, NULL, tz) != 0) return -1;
    /* glibc declares tv nonnull, but the kernel accepts NULL and so do callers in practice. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnonnull-compare"
    if (tv == NULL) return 0;
#pragma GCC diagnostic pop
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
