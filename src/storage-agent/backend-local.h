/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "local" storage provider: objects as files below SANDBOX_LOCAL_STORAGE_DIR, written
 * atomically (temporary file + rename), never outside that directory. */
#pragma once

#include <stdint.h>

/* A staged object: written through 'fd', published by local_commit(). */
typedef struct LocalStaged {
        int dir_fd;        /* the object's directory */
        char *tmp_name;    /* temporary name in it */
        char *name;        /* final name */
        int fd;            /* open for writing */
} LocalStaged;

int local_stage(const char *root, const char *full_key, LocalStaged *ret);
int local_commit(LocalStaged *s, uint64_t *ret_size);
void local_abort(LocalStaged *s);
/* -ENOENT when absent. */
int local_open(const char *root, const char *full_key, int *ret_fd);
/* Missing objects are not an error. */
int local_delete(const char *root, const char *full_key);

typedef struct GcCounters {
        uint64_t deleted;
        uint64_t scanned;
        uint64_t freed_bytes;
} GcCounters;

/* Deletes regular files below root/dir_key strictly older than 'cutoff' (unix seconds); only
 * names ending in 'suffix' when given. A missing directory scans nothing. */
int local_gc(const char *root, const char *dir_key, const char *suffix, int64_t cutoff, GcCounters *c);
