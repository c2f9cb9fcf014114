/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File operations on a session's workspace for the API: confined, never racing the sandbox (no
 * sandbox process runs while they do), files owned by the sandbox user. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "outputs.h"

#define WORKSPACE_LIST_DEPTH_MAX 6
#define WORKSPACE_LIST_ENTRIES_MAX 500
/* How much of the tree a listing looks at (entries of any type, directories weigh
 * OUTPUTS_DIR_COST more): the listing is cut, never slow. */
#define WORKSPACE_LIST_SCAN_MAX 8192

typedef struct Workspace {
        int fd;         /* the workspace's root directory */
        int view_fd;    /* a directory holding the workspace at "workspace", as the sandbox sees
                         * it, to resolve absolute links to /workspace/...; -EBADF: none */
        uid_t uid;      /* owner of what we create */
        gid_t gid;
} Workspace;

/* 'relative' is already normalised (workspace_path_normalize()). Errors: -EXDEV when the path
 * resolves outside the workspace, -EISDIR when it names a directory, -ENOSPC at the quota. */
int workspace_write(const Workspace *w, const char *relative, int data_fd);
/* A sealed memfd with the file's content. -ENOENT when missing or not a regular file, -EFBIG
 * when larger than max, -EXDEV when it resolves outside. */
int workspace_read(const Workspace *w, const char *relative, uint64_t max, int *ret_memfd);
/* Regular files, not following symlinks, at most WORKSPACE_LIST_DEPTH_MAX components deep,
 * sorted; names that are not UTF-8 are left out. Truncated to WORKSPACE_LIST_ENTRIES_MAX. */
int workspace_list(const Workspace *w, OutputSet *ret);
/* Empties and recreates uploads/ and skills/. */
int workspace_reset_inputs(const Workspace *w);
/* The workspace as a new session's: nothing but empty uploads/, outputs/ and skills/ (after a
 * restore that failed half-way). Only while no process of the session runs. */
int workspace_clear(const Workspace *w);
