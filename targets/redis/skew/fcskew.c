/*
 * fcskew: fencecheck's clock-skew library, loaded into C programs (Redis)
 * with LD_PRELOAD. It shifts the wall clock -- clock_gettime for
 * CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday and time -- by an
 * offset in nanoseconds (decimal, may be negative) read from the file named
 * by FENCECHECK_CLOCK_FILE. The file is re-read at most every
 * FENCECHECK_CLOCK_REFRESH_MS milliseconds (default 5), so the harness moves
 * the clock of a running process by rewriting the file (atomically, by
 * rename, in a bind-mounted directory). Monotonic clocks are left alone:
 * like a real NTP step, only wall time jumps.
 *
 * Why not libfaketime: it finds the real functions with dlsym, and with
 * Debian's jemalloc-linked Redis dlsym allocates from inside the allocator's
 * own initialisation and deadlocks. This library calls the kernel directly
 * with syscall(SYS_clock_gettime) and only ever uses raw syscalls, so it
 * needs no dlsym, no malloc and no libc state.
 *
 * Build: gcc -O2 -shared -fPIC -o fcskew.so fcskew.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t offset_ns;      /* the offset in force */
static int64_t next_refresh_ns; /* monotonic time of the next file read */
static int refreshing;          /* one thread re-reads the file at a time */

static int64_t env_ms(const char *name, int64_t def);
static const char *env_get(const char *name);

static int raw_clock(clockid_t clk, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

/* parse_offset reads "[-+]digits" with surrounding whitespace; 0 on error. */
static int parse_offset(const char *s, long n, int64_t *out) {
    long i = 0;
    int neg = 0, digits = 0;
    int64_t v = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (s[i] - '0');
    }
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    if (!digits || i != n) return 0;
    *out = neg ? -v : v;
    return 1;
}

static void refresh(void) {
    static const char *path;
    static int64_t interval_ns = -1;
    struct timespec now;
    char buf[64];
    long n;
    int fd;
    int64_t v, t;

    if (raw_clock(CLOCK_MONOTONIC, &now) != 0) return;
    t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (t < __atomic_load_n(&next_refresh_ns, __ATOMIC_RELAXED)) return;
    if (__atomic_exchange_n(&refreshing, 1, __ATOMIC_ACQUIRE)) return;
    if (interval_ns < 0) {
        path = env_get("FENCECHECK_CLOCK_FILE");
        interval_ns = env_ms("FENCECHECK_CLOCK_REFRESH_MS", 5) * 1000000;
    }
    __atomic_store_n(&next_refresh_ns, t + interval_ns, __ATOMIC_RELAXED);
    if (path) {
        fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            /* No file: no skew (the harness removes it to reset). */
            __atomic_store_n(&offset_ns, 0, __ATOMIC_RELAXED);
        } else {
            n = (long)syscall(SYS_read, fd, buf, sizeof buf);
            syscall(SYS_close, fd);
            /* A file caught half-written keeps the previous offset. */
            if (n >= 0 && n < (long)sizeof buf && parse_offset(buf, n, &v))
                __atomic_store_n(&offset_ns, v, __ATOMIC_RELAXED);
        }
    }
    __atomic_store_n(&refreshing, 0, __ATOMIC_RELEASE);
}

static void shift(struct timespec *ts) {
    int64_t off;
    refresh();
    off = __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    ts->tv_sec += off / 1000000000;
    ts->tv_nsec += off % 1000000000;
    if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000; ts->tv_sec--; }
    if (ts->tv_nsec >= 1000000000) { ts->tv_nsec -= 1000000000; ts->tv_sec++; }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = raw_clock(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    if (tz) {
        /* The kernel's timezone is always reported as UTC here. */
        ((int *)tz)[0] = 0;
        ((int *)tz)[1] = 0;
    }
    /* glibc declares tv nonnull, but Linux accepts NULL and so must we. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnonnull-compare"
    if (!tv) return 0;
#pragma GCC diagnostic pop
    if (raw_clock(CLOCK_REALTIME, &ts) != 0) return -1;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (raw_clock(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    shift(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}

/* environ is read directly: getenv is safe too, but this keeps the library
 * free of any libc call that could take a lock during early start-up. */
extern char **environ;

static const char *env_get(const char *name) {
    char **e;
    const char *a, *b;
    if (!environ) return 0;
    for (e = environ; *e; e++) {
        for (a = name, b = *e; *a && *a == *b; a++, b++) {}
        if (!*a && *b == '=') return b + 1;
    }
    return 0;
}

static int64_t env_ms(const char *name, int64_t def) {
    const char *s = env_get(name);
    int64_t v = 0;
    long n = 0;
    if (!s) return def;
    while (s[n]) n++;
    if (!parse_offset(s, n, &v) || v < 0) return def;
    return v;
}
