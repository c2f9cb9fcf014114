/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "local" storage provider: objects as files below SANDBOX_LOCAL_STORAGE_DIR, written
 * atomically and durably (staged, fsynced, renamed into place, directory fsynced), never outside
 * that directory. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

/* Archives are staged in this directory below the root (0700), one file per staging named by its
 * token, and renamed into their key's directory on commit: the same mount, so the rename is atomic.
 * A key whose directory is on another mount (something mounted below the root) is staged in that
 * directory instead, as ".staging-<token>". Keys under it are refused. */
#define LOCAL_STAGING_DIR ".staging"
#define LOCAL_STAGING_PREFIX ".staging-"
/* Such in-place stagings left behind by a killed agent (and those of versions before the staging
 * directory) are deleted by garbage collection once this old and older than its cutoff. */
#define LOCAL_STAGING_STALE_SEC (24 * 3600)

/* A staged object: written through 'fd', published by local_publish() once fsynced. */
typedef struct LocalStaged {
        int staging_fd;    /* the directory the file is staged in */
        int dir_fd;        /* the object's directory */
        char *tmp_name;    /* the staged file's name in staging_fd */
        char *name;        /* final name in dir_fd */
        int fd;            /* open for writing */
} LocalStaged;

#define LOCAL_STAGED_NULL ((LocalStaged) { .staging_fd = -EBADF, .dir_fd = -EBADF, .fd = -EBADF })

/* Whether a full key names something of ours rather than an object (the staging directory). */
bool local_key_is_reserved(const char *full_key);

/* token: [0-9a-f]+, names the staged file. */
int local_stage(const char *root, const char *full_key, const char *token, LocalStaged *ret);
/* The durable commit, in steps so that no fsync() runs in the event loop (the agent has it done by
 * a child, sync-child.h): fsync(s->fd); local_publish() renames the staged file into place (or
 * discards the staging and changes nothing on failure); fsync(s->dir_fd), which makes the name
 * durable; local_staged_done(). A crash leaves the old object or the complete new one. */
int local_publish(LocalStaged *s, uint64_t *ret_size);
void local_staged_done(LocalStaged *s);
void local_abort(LocalStaged *s);
/* Removes whatever is left in the staging directory: at startup nothing there belongs to anyone
 * (only one agent runs). Returns the number of files removed. */
int local_sweep_staging(const char *root);
/* -ENOENT when absent. */
int local_open(const char *root, const char *full_key, int *ret_fd);
/* Missing objects are not an error. */
int local_delete(const char *root, const char *full_key);

/* Moves the archive at 'full_key' aside to 'quarantined_key' (the same key with a suffix: the same
 * directory), without following links and without replacing anything (-EEXIST). -ENOENT when there
 * is no archive (as local_open() sees it). */
int local_quarantine(const char *root, const char *full_key, const char *quarantined_key);

/* Calls cb for each quarantined archive (quarantine.h) directly in root/dir_key: its name there, size
 * and quarantine time (Unix seconds). Returns how many, or the first negative errno (cb's too). */
typedef int (*LocalQuarantinedCallback)(const char *name, uint64_t size, int64_t when, void *userdata);
int local_list_quarantined(const char *root, const char *dir_key, LocalQuarantinedCallback cb,
                           void *userdata);

typedef struct GcCounters {
        uint64_t deleted;
        uint64_t scanned;
        uint64_t freed_bytes;
} GcCounters;

/* Deletes regular files below root/dir_key strictly older than 'cutoff' (unix seconds); only
 * names ending in 'suffix' when given, never a quarantined archive. A missing directory scans nothing.
 * In-place stagings are only deleted when also older than LOCAL_STAGING_STALE_SEC. */
int local_gc(const char *root, const char *dir_key, const char *suffix, int64_t cutoff, GcCounters *c);
