/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Workspace archives: a gzip'd tar of /workspace ("./" entries, without uploads/ and skills/),
 * and the restore that lets nothing out of the workspace. Both run in a child of the runner that
 * is chrooted into the workspace as the sandbox user (see archive-sandbox.c); these functions only
 * do the tar work and the entry checks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ArchiveLimits {
        uint64_t max_bytes;       /* archive size (create) / total extracted bytes (restore) */
        uint64_t max_entries;
        /* Restore: an entry no archive of a workspace holds, whoever made it (we, or the upstream
         * sidecar's GNU tar), fails the restore with -EPERM: a name that is absolute or not plain
         * ("..", "."), a device, a socket, an entry below one that was a symlink. Links leading out,
         * hard links and over-long names, which real workspaces' archives do hold, are left out. */
        bool refuse_forged;
} ArchiveLimits;

#define ARCHIVE_ENTRIES_MAX 100000

typedef enum ArchiveVerdict {
        ARCHIVE_ENTRY_EXTRACT,
        ARCHIVE_ENTRY_SKIP,       /* harmless but unwanted: uploads/, skills/, fifos... */
        ARCHIVE_ENTRY_REFUSE,     /* hostile: "..", absolute, links leading out, devices */
} ArchiveVerdict;

/* The decision for one entry. 'name' as stored, 'type' the S_IFMT bits, 'link' the symlink
 * target or hard link name (NULL if none). */
ArchiveVerdict archive_entry_check(const char *name, mode_t type, const char *symlink, const char *hardlink);

/* Writes the tree at dir_fd to out_fd. -EFBIG when the archive exceeds limits->max_bytes. */
int archive_create(int dir_fd, int out_fd, const ArchiveLimits *limits);

/* Extracts from in_fd into the current directory. Returns the number of refused entries
 * (≥ 0); -EFBIG when the content exceeds limits, -EBADMSG for a stream that is no complete
 * gzip'd tar, -EPERM for a forged entry (limits->refuse_forged). */
int archive_extract(int in_fd, const ArchiveLimits *limits, uint64_t *ret_extracted);
