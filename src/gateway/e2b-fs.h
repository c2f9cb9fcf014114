/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The wire forms of envd's filesystem RPCs (docs/e2b.md "Files"), apart from any request: a path as
 * the SDK names it turned into the workspace's, an entry in EntryInfo's protobuf-JSON form, and the
 * events of a watch between two looks at a directory. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json-writer.h"

/* The E2B user's home, which is the workspace in every sandbox. */
#define E2B_HOME "/home/user"
/* The one user of a sandbox (envd's default user). */
#define E2B_USER "user"

/* An entry as the session manager reports it (docs/dbus-api.md StatPath). */
typedef struct E2bFsEntry {
        const char *path; /* relative to the workspace, "" for its root */
        const char *type; /* "file", "dir", "symlink" or "other" */
        uint64_t size;
        uint32_t mode; /* st_mode */
        const char *owner, *group;
        int64_t mtime_nsec;
        const char *target; /* "" when none */
} E2bFsEntry;

/* The path 'p' of 'n' bytes as the SDK sends it (relative and "" are the home's, "~" is it) as a
 * path of the workspace: *ret_relative is relative to /workspace ("" for itself), *ret_root the
 * directory the client named it under ("/home/user" or "/workspace", static), which answers name
 * it under again. -EINVAL for a NUL byte, -EILSEQ for invalid UTF-8, -ENAMETOOLONG, -EPERM for a
 * path outside the workspace (also one whose ".." leaves it). */
int e2b_fs_path(const char *p, size_t n, char **ret_relative, const char **ret_root);

/* 'relative' of the workspace as the client sees it under 'root' (allocated). */
char *e2b_fs_path_show(const char *root, const char *relative);

/* Go's FileMode.String() of an st_mode, as envd writes "permissions": "-rw-r--r--",
 * "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx", "urwxr-xr-x"... */
void e2b_fs_permissions(uint32_t mode, char ret[static 24]);

/* A google.protobuf.Timestamp in JSON: RFC 3339 in UTC, nanoseconds when there are any. -ERANGE
 * for a time outside years 1..9999. */
int e2b_fs_timestamp(int64_t nsec, char ret[static 40]);

/* EntryInfo as envd writes it ("type" FILE_TYPE_..., "size" a string, "mode" the permission bits,
 * "modifiedTime", "symlinkTarget" if any), the entry shown under 'root'. */
int e2b_fs_entry_append(JsonWriter *w, const E2bFsEntry *e, const char *root);

/* What a watch (WatchDir) knows of a directory between two looks: its entries, sorted by path. */
typedef struct E2bFsSeen {
        char *path; /* relative to the workspace */
        char type; /* 'f', 'd', 's', 'o': E2bFsEntry's type's first letter */
        uint64_t size;
        uint32_t mode;
        int64_t mtime_nsec;
} E2bFsSeen;

typedef struct E2bFsSnapshot {
        E2bFsSeen *items;
        size_t n, allocated;
        bool truncated; /* the listing was cut: what is missing may only be past the cut */
} E2bFsSnapshot;

void e2b_fs_snapshot_done(E2bFsSnapshot *s);
int e2b_fs_snapshot_add(E2bFsSnapshot *s, const E2bFsEntry *e);
/* Sorts it by path, as the comparison of two snapshots needs. */
void e2b_fs_snapshot_sort(E2bFsSnapshot *s);

/* The events that lead from 'old' to 'new' (both sorted), as envd's WatchDir messages, each in a
 * Connect envelope (connect-rpc.h): CREATE (and WRITE for a file that has bytes), REMOVE, WRITE
 * (a file's size or time changed), CHMOD, REMOVE then CREATE for an entry that changed its type.
 * Names are relative to the watched directory 'prefix' (relative to the workspace). Where a
 * snapshot was cut, entries it lacks are neither created nor removed. Returns the number of
 * events, or < 0. */
int e2b_fs_watch_diff(const E2bFsSnapshot *old, const E2bFsSnapshot *new, const char *prefix, JsonWriter *w);
