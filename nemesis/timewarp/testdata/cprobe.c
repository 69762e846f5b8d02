/* cprobe reports its clocks through libc, one line per command on stdin:
 *   now    -> "<clock_gettime(REALTIME) ns> <monotonic ns>"
 *   all    -> "<clock_gettime REALTIME ns> <REALTIME_COARSE ns> <gettimeofday us> <time s> <monotonic ns>"
 *   watch  -> "armed", then reads CLOCK_REALTIME in a loop until it jumps by
 *             more than 500 ms against CLOCK_MONOTONIC: "seen <monotonic ns>"
 */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static long long ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
    char line[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "now", 3)) {
            printf("%lld %lld\n", ns(CLOCK_REALTIME), ns(CLOCK_MONOTONIC));
        } else if (!strncmp(line, "all", 3)) {
            struct timeval tv;
            struct timezone tz;
            gettimeofday(&tv, &tz);
            printf("%lld %lld %lld %lld %lld\n", ns(CLOCK_REALTIME), ns(CLOCK_REALTIME_COARSE),
                   (long long)tv.tv_sec * 1000000LL + tv.tv_usec, (long long)time(NULL), ns(CLOCK_MONOTONIC));
        } else if (!strncmp(line, "watch", 5)) {
            long long base = ns(CLOCK_REALTIME) - ns(CLOCK_MONOTONIC), d;
            printf("armed\n");
            for (;;) {
                long long m = ns(CLOCK_MONOTONIC);
                d = ns(CLOCK_REALTIME) - m - base;
                if (d > 500000000LL || d < -500000000LL) {
                    printf("seen %lld\n", ns(CLOCK_MONOTONIC));
                    break;
                }
            }
        } else {
            printf("error unknown command\n");
        }
    }
    return 0;
}
