/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* E2B's filesystem calls on a session's workspace (workspace-fs.c), safe while the sandbox runs:
 * directories resolved once into fds of the workspace, last names never followed. Paths are
 * relative to the workspace and normalised ("" is its root). Errors: -ENOENT, -EXDEV (the path
 * leads out of the workspace), -ENOTDIR, -EEXIST, -EISDIR, -ENOTEMPTY, -EINVAL, -EPERM (the
 * workspace itself), -ENOSPC, -EAGAIN, -ENAMETOOLONG, -ENOMEM. */
#pragma once

#include "runner-protocol.h"
#include "workspace.h"

typedef struct WorkspaceFsList {
        RunnerFsListing listing; /* the answer: entries owned here */
        size_t allocated;
        size_t scanned, bytes;
        uint64_t deadline_usec;
} WorkspaceFsList;

void workspace_fs_list_done(WorkspaceFsList *l);

/* The entry itself (a link as a link), added to 'l'. */
int workspace_fs_stat(const Workspace *w, const char *relative, WorkspaceFsList *l);
/* The entries below the directory, 'depth' levels, depth first in name order, links listed and never
 * entered; bounded (RUNNER_FS_ENTRIES_MAX entries, names read, bytes, time: then truncated). */
int workspace_fs_list(const Workspace *w, const char *relative, unsigned depth, WorkspaceFsList *l);
/* Makes the directory and its missing parents (the sandbox user's); 'existed' says it was there. */
int workspace_fs_mkdir(const Workspace *w, const char *relative, WorkspaceFsList *l);
/* rename(2), the destination's missing parents made; the destination's entry added. */
int workspace_fs_move(const Workspace *w, const char *source, const char *destination, WorkspaceFsList *l);
/* Removes a file, a link or a directory with all it holds; nothing there is no error. */
int workspace_fs_remove(const Workspace *w, const char *relative);
