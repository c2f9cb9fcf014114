/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The archive helper: the child of the runner that creates and restores workspace archives,
 * isolated like an exec (docs/security.md, "Root-side operations"). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

/* Namespaces of the helper: its own user namespace (the runner maps the sandbox user into it),
 * and new mount, PID, network, IPC, UTS and cgroup namespaces owned by it. */
#define ARCHIVE_SANDBOX_CLONE_FLAGS                                                                         \
        (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |          \
         CLONE_NEWCGROUP)

/* What one archive or restore may take beyond its byte and entry bounds. */
#define ARCHIVE_SANDBOX_MEMORY_MAX (1024ULL * 1024 * 1024)  /* RLIMIT_AS */
#define ARCHIVE_SANDBOX_FILES_MAX 256                       /* RLIMIT_NOFILE: the walk holds two
                                                             * fds per level, 64 levels at most */

typedef struct ArchiveSandbox {
        const char *workspace;    /* the workspace's mount point, in the runner's namespace */
        const char *newroot;      /* an empty directory to bind it onto (the session's newroot) */
        bool restore;
        int data_fd;              /* the archive: read on restore, written on create */
        int result_fd;            /* gets one ArchiveResult */
        int go_fd;                /* one byte arrives here once the runner has mapped our ids */
        uint64_t max_bytes;
        uint64_t max_entries;
        uint64_t timeout_sec;     /* RLIMIT_CPU; the runner's timer bounds the wall clock */
} ArchiveSandbox;

/* What the helper reports on result_fd (plain data). */
typedef struct ArchiveResult {
        int32_t error;            /* 0 or a negative errno */
        int32_t refused;          /* hostile entries left out (restore) */
        uint64_t bytes;
        char step[48];            /* where setting up the helper failed, if it did */
} ArchiveResult;

/* Runs in the child cloned with ARCHIVE_SANDBOX_CLONE_FLAGS; never returns. */
_noreturn_ void archive_sandbox_run(const ArchiveSandbox *a);
