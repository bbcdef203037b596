/* One process's wall clock set off by UPCHECK_CLOCK_OFFSET_MS milliseconds (negative: behind),
 * loaded with LD_PRELOAD: what a machine whose clock is wrong shows the programs on it. Only the
 * wall clock moves (CLOCK_REALTIME and its coarse form, gettimeofday, time); the monotonic clocks
 * that timers run on do not, as on a machine whose NTP is broken. The clocks are read by system
 * call, so nothing here needs the real symbols or allocates while the allocator itself starts
 * (which is where Debian's libfaketime hangs an Envoy: its tcmalloc reads the clock first). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
    static int read;
    static long long offset;
    if (!read) {
        const char *ms = getenv("UPCHECK_CLOCK_OFFSET_MS");
        offset = ms ? atoll(ms) * 1000000LL : 0;
        read = 1;
    }
    return offset;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int r = (int)syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) {
        *t = ts.tv_sec;
    }
    return ts.tv_sec;
}
