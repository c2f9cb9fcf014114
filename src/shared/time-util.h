/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Clock readings and struct timespec/timeval conversions, all in microseconds. */
#pragma once

#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* Microseconds in 'ts' / 'tv'. Meant for clock readings and rusage figures, which are never
 * negative. */
uint64_t timespec_load(const struct timespec *ts);
uint64_t timeval_load(const struct timeval *tv);

/* The current time of 'clock' (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). 0 if the clock can't be
 * read, which for those two only happens with a bad clock id: no caller has to handle it. */
uint64_t now_usec(clockid_t clock);
