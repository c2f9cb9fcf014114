/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Filesystem helpers: directory cleanup, recursive removal that never follows symlinks. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <string.h>
#include <linux/openat2.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "fs-util.h"
#include "io-util.h"

int mkdir_p(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int opendir_at(int dir_fd, DIR **ret) {
        DIR *d;
        int fd;

        /* A new open file description: a dup would share (and move) the caller's offset. */
        fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                safe_close(fd);
                return -errno;
        }
        *ret = d;
        return 0;
}

struct dirent *readdir_no_dot(DIR *d) {
        for (;;) {
                struct dirent *de;

                errno = 0;
                de = readdir(d);
                if (!de || !(streq(de->d_name, ".") || streq(de->d_name, "..")))
                        return de;
        }
}

#define RM_RF_DEPTH_MAX 256

static int rm_rf_children_internal(int dir_fd, int top_fd, dev_t dev, unsigned depth, bool *hoisted) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        int r;

        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        FOREACH_DIRENT(de, d, if (r == 0) r = -errno) {
                struct stat st;

                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT && r == 0)
                                r = -errno;
                        continue;
                }
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = -EBADF;
                        int q;

                        if (st.st_dev != dev)
                                continue; /* a mount point: not ours to empty */
                        if (depth >= RM_RF_DEPTH_MAX) {
                                /* Too deep to descend with an fd per level: move the subtree up
                                 * to the top, where the next pass removes it. */
                                char name[64];
                                uint64_t rnd;

                                if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) {
                                        if (r == 0)
                                                r = -EIO;
                                        continue;
                                }
                                snprintf(name, sizeof(name), ".rm-rf-%016" PRIx64, rnd);
                                if (renameat(dirfd(d), de->d_name, top_fd, name) < 0) {
                                        if (r == 0)
                                                r = -errno;
                                } else
                                        *hoisted = true;
                                continue;
                        }
                        sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0) {
                                if (errno != ENOENT && r == 0)
                                        r = -errno;
                                continue;
                        }
                        q = rm_rf_children_internal(sub, top_fd, dev, depth + 1, hoisted);
                        if (q < 0 && r == 0)
                                r = q;
                        if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                                r = -errno;
                } else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT && r == 0)
                        r = -errno;
        }
        return r;
}

int rm_rf_children(int dir_fd) {
        struct stat st;
        if (fstat(dir_fd, &st) < 0)
                return -errno;
        for (;;) {
                bool hoisted = false;
                int r = rm_rf_children_internal(dir_fd, dir_fd, st.st_dev, 0, &hoisted);
                if (r < 0 || !hoisted)
                        return r;
        }
}

int rm_rf(const char *path) {
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 0;
                if (errno == ENOTDIR || errno == ELOOP)
                        return unlink(path) < 0 ? -errno : 0;
                return -errno;
        }
        r = rm_rf_children(fd);
        if (r < 0)
                return r;
        if (rmdir(path) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

int write_file_at(int dir_fd, const char *name, const void *data, size_t len, mode_t mode) {
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0)
                return -errno;
        r = write_all(fd, data, len);
        if (r < 0)
                return r;
        if (fchmod(fd, mode) < 0)
                return -errno;
        return 0;
}

/* The same confinement without openat2(): one component at a time, never following a symlink,
 * refusing "..", and staying on dir_fd's filesystem. Used where openat2() answers ENOSYS (old
 * kernels, or seccomp filters that predate it). */
int openat_beneath_walk(int dir_fd, const char *path, int flags, mode_t mode) {
        _cleanup_free_ char *copy = NULL;
        _cleanup_close_ int cur = -EBADF;
        struct stat root_st, st;
        char *p, *next;

        if (isempty(path) || path[0] == '/')
                return -EXDEV;
        if (fstat(dir_fd, &root_st) < 0)
                return -errno;
        copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        cur = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return -errno;

        for (p = copy;; p = next) {
                int fd;

                while (*p == '/')
                        p++;
                next = strchr(p, '/');
                if (next)
                        *next++ = 0;
                while (next && *next == '/')
                        next++;
                if (streq(p, ".."))
                        return -EXDEV;
                if (next && *next) {
                        if (*p == 0 || streq(p, "."))
                                continue;
                        fd = openat(cur, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd < 0)
                                return errno == ELOOP ? -ELOOP : -errno;
                        safe_close(cur);
                        cur = fd;
                        if (fstat(cur, &st) < 0)
                                return -errno;
                        if (st.st_dev != root_st.st_dev)
                                return -EXDEV;
                        continue;
                }
                /* Last component. */
                if (*p == 0 || streq(p, "."))
                        p = (char *) ".";
                fd = openat(cur, p, flags | O_CLOEXEC | O_NOFOLLOW, mode);
                if (fd < 0)
                        return -errno;
                if (fstat(fd, &st) < 0 || st.st_dev != root_st.st_dev) {
                        safe_close(fd);
                        return -EXDEV;
                }
                return fd;
        }
}

static int openat2_beneath(int dir_fd, const char *path, int flags, mode_t mode, bool follow) {
        struct open_how how = {
                .flags = (uint64_t) (flags | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW)),
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV |
                           (follow ? 0 : RESOLVE_NO_SYMLINKS),
        };
        long fd;

        fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));
        if (fd < 0 && (errno == ENOSYS || errno == EPERM))
                /* Without openat2() symlinks can't be followed safely: refuse them all. */
                return openat_beneath_walk(dir_fd, path, flags, mode);
        return fd < 0 ? -errno : (int) fd;
}

int openat_beneath(int dir_fd, const char *path, int flags, mode_t mode) {
        return openat2_beneath(dir_fd, path, flags, mode, false);
}

int openat_beneath_follow(int dir_fd, const char *path, int flags, mode_t mode) {
        return openat2_beneath(dir_fd, path, flags, mode, true);
}
