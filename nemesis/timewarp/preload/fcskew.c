/*
 * fcskew: fencecheck's clock-skew library, loaded into dynamically linked
 * programs with LD_PRELOAD. It shifts the wall clock -- clock_gettime for
 * CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday and time -- by an
 * offset in nanoseconds (decimal, may be negative) read from the file named
 * by FENCECHECK_SKEW_FILE. The file is re-read at most every
 * FENCECHECK_SKEW_REFRESH_MS milliseconds (default 5), so the harness moves
 * the clock of a running process by rewriting the file (atomically, by
 * rename, in a directory the process sees). Monotonic clocks are left alone:
 * like a real NTP step, only wall time jumps.
 *
 * It depends on nothing, not even libc (no DT_NEEDED, raw system calls), so
 * it loads into a program on glibc or musl alike; environ and errno are
 * reached through weak references that either libc provides.
 *
 * Wall-clock reads go to the kernel with the system call, never to the
 * vDSO: fencecheck may also have redirected the process's vDSO to the same
 * offset (package timewarp), and a read through both would be shifted
 * twice. Every other clock goes to the vDSO's clock_gettime, found through
 * the auxiliary vector, so that monotonic reads cost what they always did.
 *
 * Why not libfaketime: it finds the real functions with dlsym, and with
 * Debian's jemalloc-linked Redis dlsym allocates from inside the allocator's
 * own initialisation and deadlocks.
 *
 * Build: gcc -O2 -shared -fPIC -nostdlib -ffreestanding -fno-stack-protector -o fcskew.so fcskew.c
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>

/* Provided by whichever libc the program runs on, if any. */
extern char **environ __attribute__((weak));
extern int *__errno_location(void) __attribute__((weak));
extern unsigned long getauxval(unsigned long type) __attribute__((weak));

static long raw3(long n, long a, long b, long c) {
#if defined(__x86_64__)
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
#else
#error "fcskew: unsupported architecture"
#endif
}

/* fail sets errno (when the program has a libc to hold it) and returns -1,
 * as libc's wrappers do. */
static int fail(long ret) {
    if (__errno_location) *__errno_location() = (int)-ret;
    return -1;
}

static int raw_clock(clockid_t clk, struct timespec *ts) {
    return (int)raw3(SYS_clock_gettime, clk, (long)ts, 0);
}

/* The vDSO's clock_gettime, for the clocks this library does not shift. */
typedef int (*clock_fn)(clockid_t, struct timespec *);
static clock_fn vdso_clock;
static int vdso_looked_up;

static int names_equal(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static clock_fn find_vdso_clock(void) {
#if defined(__x86_64__)
    static const char name[] = "__vdso_clock_gettime";
#else
    static const char name[] = "__kernel_clock_gettime";
#endif
    const Elf64_Ehdr *eh;
    const Elf64_Phdr *ph;
    const Elf64_Dyn *dyn = 0;
    const Elf64_Sym *sym = 0;
    const char *str = 0;
    const uint32_t *hash = 0;
    uintptr_t base, bias = 0;
    int i, loaded = 0;

    if (!getauxval) return 0;
    base = getauxval(AT_SYSINFO_EHDR);
    if (!base) return 0;
    eh = (const Elf64_Ehdr *)base;
    ph = (const Elf64_Phdr *)(base + eh->e_phoff);
    for (i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !loaded) {
            bias = base + ph[i].p_offset - ph[i].p_vaddr;
            loaded = 1;
        } else if (ph[i].p_type == PT_DYNAMIC) {
            dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
        }
    }
    if (!loaded || !dyn) return 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB) sym = (const Elf64_Sym *)(bias + dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_STRTAB) str = (const char *)(bias + dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_HASH) hash = (const uint32_t *)(bias + dyn->d_un.d_ptr);
    }
    if (!sym || !str || !hash) return 0;
    for (i = 0; i < (int)hash[1]; i++) { /* hash[1] is the symbol count */
        if (ELF64_ST_TYPE(sym[i].st_info) == STT_FUNC && sym[i].st_shndx != SHN_UNDEF &&
            names_equal(str + sym[i].st_name, name))
            return (clock_fn)(bias + sym[i].st_value);
    }
    return 0;
}

static int other_clock(clockid_t clk, struct timespec *ts) {
    clock_fn f;
    if (!__atomic_load_n(&vdso_looked_up, __ATOMIC_ACQUIRE)) {
        /* Two threads may both look it up: they find the same address. */
        __atomic_store_n(&vdso_clock, find_vdso_clock(), __ATOMIC_RELAXED);
        __atomic_store_n(&vdso_looked_up, 1, __ATOMIC_RELEASE);
    }
    f = __atomic_load_n(&vdso_clock, __ATOMIC_RELAXED);
    if (f) return f(clk, ts); /* the vDSO returns 0 or -errno, like the kernel */
    return raw_clock(clk, ts);
}

static int64_t offset_ns;       /* the offset in force */
static int64_t next_refresh_ns; /* monotonic time of the next file read */
static int refreshing;          /* one thread re-reads the file at a time */

static int64_t env_ms(const char *name, int64_t def);
static const char *env_get(const char *name);

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

    if (other_clock(CLOCK_MONOTONIC, &now) != 0) return;
    t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (t < __atomic_load_n(&next_refresh_ns, __ATOMIC_RELAXED)) return;
    if (__atomic_exchange_n(&refreshing, 1, __ATOMIC_ACQUIRE)) return;
    if (interval_ns < 0) {
        path = env_get("FENCECHECK_SKEW_FILE");
        interval_ns = env_ms("FENCECHECK_SKEW_REFRESH_MS", 5) * 1000000;
    }
    __atomic_store_n(&next_refresh_ns, t + interval_ns, __ATOMIC_RELAXED);
    if (path) {
        fd = (int)raw3(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            /* No file: no skew (the harness removes it to reset). */
            __atomic_store_n(&offset_ns, 0, __ATOMIC_RELAXED);
        } else {
            n = raw3(SYS_read, fd, (long)buf, sizeof buf);
            raw3(SYS_close, fd, 0, 0);
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
    int rc;
    if (clk != CLOCK_REALTIME && clk != CLOCK_REALTIME_COARSE) {
        rc = other_clock(clk, ts);
        return rc < 0 ? fail(rc) : rc;
    }
    rc = raw_clock(clk, ts);
    if (rc < 0) return fail(rc);
    shift(ts);
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int rc;
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
    rc = raw_clock(CLOCK_REALTIME, &ts);
    if (rc < 0) return fail(rc);
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    int rc = raw_clock(CLOCK_REALTIME, &ts);
    if (rc < 0) return (time_t)fail(rc);
    shift(&ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}

/* environ is read directly: getenv is safe too, but this keeps the library
 * free of any libc call that could take a lock during early start-up. */
static const char *env_get(const char *name) {
    char **e;
    const char *a, *b;
    if (!&environ || !environ) return 0;
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
