/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Filesystem helpers: directory cleanup, recursive removal that never follows symlinks. */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <sys/types.h>

#include "macro.h"

static inline void closedirp(DIR **d) {
        if (*d)
                (void) closedir(*d);
}
#define _cleanup_closedir_ _cleanup_(closedirp)

/* The next entry of d other than "." and "..", or NULL: at its end with errno 0, on an error with
 * errno set. */
struct dirent *readdir_no_dot(DIR *d);

/* Every entry of d but "." and "..". When readdir() fails, on_error runs with errno set (it may
 * return or break); the loop ends there either way, so a failure is never mistaken for the end. */
#define FOREACH_DIRENT(de, d, on_error)                                                   \
        for ((de) = readdir_no_dot(d);; (de) = readdir_no_dot(d))                     \
                if (!(de)) {                                                              \
                        if (errno > 0) {                                                  \
                                on_error;                                                 \
                        }                                                                 \
                        break;                                                            \
                } else

/* Opens the directory dir_fd refers to for reading from its start (not sharing dir_fd's offset). */
int opendir_at(int dir_fd, DIR **ret);
int mkdir_p(const char *path, mode_t mode);
/* Removes everything below dir_fd (not dir_fd itself), never following symlinks and never
 * crossing into other mounts. */
int rm_rf_children(int dir_fd);
/* Removes path and everything below it, same rules. Missing path is success. */
int rm_rf(const char *path);
/* Writes a whole file relative to dir_fd (O_CREAT|O_EXCL|O_NOFOLLOW). */
int write_file_at(int dir_fd, const char *name, const void *data, size_t len, mode_t mode);

/* openat2() confined below dir_fd: no "..", no symlinks, no magic links, no mount crossing. */
int openat_beneath(int dir_fd, const char *path, int flags, mode_t mode);
/* Same, but symlinks are followed as long as they resolve below dir_fd (-EXDEV otherwise). */
int openat_beneath_follow(int dir_fd, const char *path, int flags, mode_t mode);
/* The fallback of openat_beneath() where openat2() is unavailable (exported for tests). */
int openat_beneath_walk(int dir_fd, const char *path, int flags, mode_t mode);
