/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Clock readings and struct timespec/timeval conversions, all in microseconds. */
#include "macro.h"
#include "time-util.h"

uint64_t timespec_load(const struct timespec *ts) {
        return (uint64_t) ts->tv_sec * USEC_PER_SEC + (uint64_t) ts->tv_nsec / NSEC_PER_USEC;
}

uint64_t timeval_load(const struct timeval *tv) {
        return (uint64_t) tv->tv_sec * USEC_PER_SEC + (uint64_t) tv->tv_usec;
}

uint64_t now_usec(clockid_t clock) {
        struct timespec ts;

        if (clock_gettime(clock, &ts) < 0)
                return 0;
        return timespec_load(&ts);
}
