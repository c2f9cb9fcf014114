/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a session's processes use now, from its scope's cgroup counters (GetSessionUsage). */
#pragma once

#include <stdint.h>

typedef struct Session Session;

typedef struct SessionUsage {
        uint64_t sampled_usec;       /* CLOCK_REALTIME */
        uint64_t cpu_usec;           /* CPU time of every process of the scope since it started */
        uint64_t memory_bytes;       /* memory charged to the scope (its tmpfs files included) */
        uint64_t memory_cache_bytes; /* of which file pages */
        uint64_t files_bytes;        /* of which its tmpfs file systems (workspace, /tmp, home) */
} SessionUsage;

/* Also remembers the sample: the next call's 'previous' (the first's: the session's start, 0 CPU). */
int session_usage(Session *s, SessionUsage *ret, SessionUsage *ret_previous);
