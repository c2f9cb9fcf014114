/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File operations on a session's workspace for the API: confined, never racing the sandbox (no
 * sandbox process runs while they do), files owned by the sandbox user. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "string-util.h"
#include "workspace.h"

/* Opens (creating as needed, owned by uid:gid) the directory 'relative' below ws_fd. */
static int open_parent_dirs(int ws_fd, const char *relative, uid_t uid, gid_t gid) {
        _cleanup_free_ char *prefix = strdup(relative);
        char *slash;
        int fd;

        if (!prefix)
                return -ENOMEM;
        if (*prefix == 0) {
                fd = openat(ws_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                return fd < 0 ? -errno : fd;
        }

        /* Each prefix is resolved from the workspace root, following links only inside it. */
        for (slash = prefix;; slash++) {
                slash = strchr(slash, '/');
                if (slash)
                        *slash = 0;

                fd = openat_beneath_follow(ws_fd, prefix, O_RDONLY | O_DIRECTORY, 0);
                if (fd == -ENOENT) {
                        _cleanup_close_ int parent = -EBADF;
                        char *name = strrchr(prefix, '/');
                        int r;

                        if (name) {
                                *name = 0;
                                parent = openat_beneath_follow(ws_fd, prefix, O_RDONLY | O_DIRECTORY, 0);
                                *name++ = '/';
                        } else {
                                parent = openat(ws_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                                name = prefix;
                                if (parent < 0)
                                        parent = -errno;
                        }
                        if (parent < 0)
                                return parent;
                        if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        r = fchownat(parent, name, uid, gid, AT_SYMLINK_NOFOLLOW);
                        if (r < 0)
                                return -errno;
                        fd = openat_beneath_follow(ws_fd, prefix, O_RDONLY | O_DIRECTORY, 0);
                }
                if (fd < 0)
                        return fd == -ELOOP ? -EXDEV : fd;
                if (!slash)
                        return fd;
                safe_close(fd);
                *slash = '/';
        }
}

int workspace_write(int ws_fd, const char *relative, int data_fd, uid_t uid, gid_t gid) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int dir_fd = -EBADF, fd = -EBADF;
        char *name;
        char tmp[64];
        struct stat st;
        uint8_t rnd[8];
        off_t off = 0;
        int r;

        if (*relative == 0)
                return -EISDIR;
        dir = strdup(relative);
        if (!dir)
                return -ENOMEM;
        name = strrchr(dir, '/');
        if (name)
                *name++ = 0;
        else {
                /* No directory part: the name is all of it, and the directory the root. */
                name = (char *) relative;
                *dir = 0;
        }

        dir_fd = open_parent_dirs(ws_fd, dir, uid, gid);
        if (dir_fd < 0)
                return dir_fd == -ENOTDIR ? -EXDEV : dir_fd;

        /* What is there now? A directory can't be replaced; a symlink must not lead outside (we
         * then replace the link itself, never write through it). */
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                if (S_ISDIR(st.st_mode))
                        return -EISDIR;
                if (S_ISLNK(st.st_mode)) {
                        _cleanup_close_ int t = openat_beneath_follow(ws_fd, relative, O_PATH, 0);
                        if (t == -EXDEV || t == -ELOOP)
                                return -EXDEV;
                }
        }

        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return -EIO;
        snprintf(tmp, sizeof(tmp), ".scopebox-upload-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3],
                 rnd[4], rnd[5], rnd[6], rnd[7]);
        fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (fstat(data_fd, &st) < 0) {
                r = -errno;
                goto fail;
        }
        while (off < st.st_size) {
                ssize_t k = sendfile(fd, data_fd, &off, (size_t) (st.st_size - off));
                if (k < 0) {
                        r = -errno;
                        goto fail;
                }
                if (k == 0) {
                        r = -EIO;
                        goto fail;
                }
        }
        if (fchown(fd, uid, gid) < 0 || fchmod(fd, 0644) < 0) {
                r = -errno;
                goto fail;
        }
        if (renameat(dir_fd, tmp, dir_fd, name) < 0) {
                r = -errno;
                goto fail;
        }
        return 0;

fail:
        (void) unlinkat(dir_fd, tmp, 0);
        return r == -EFBIG ? -ENOSPC : r;
}

int workspace_read(int ws_fd, const char *relative, uint64_t max, int *ret_memfd) {
        _cleanup_close_ int fd = -EBADF, mfd = -EBADF;
        struct stat st;
        off_t off = 0;
        int r;

        if (*relative == 0)
                return -ENOENT;
        fd = openat_beneath_follow(ws_fd, relative, O_RDONLY | O_NONBLOCK, 0);
        if (fd == -ELOOP)
                return -EXDEV;
        if (fd == -ENOTDIR || fd == -EISDIR)
                return -ENOENT;
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -ENOENT;
        if ((uint64_t) st.st_size > max)
                return -EFBIG;

        mfd = memfd_new_empty("workspace-file");
        if (mfd < 0)
                return mfd;
        while (off < st.st_size) {
                ssize_t k = sendfile(mfd, fd, &off, (size_t) (st.st_size - off));
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
        }
        r = memfd_seal(mfd);
        if (r < 0)
                return r;
        *ret_memfd = TAKE_FD(mfd);
        return 0;
}

int workspace_list(int ws_fd, OutputSet *ret) {
        OutputSet s = {};
        int r;

        r = output_set_scan_bounded(ws_fd, WORKSPACE_LIST_DEPTH_MAX, OUTPUTS_ENTRIES_MAX, &s);
        if (r < 0)
                return r;
        /* Names must survive JSON and D-Bus unchanged; others are left out. */
        size_t j = 0;
        for (size_t i = 0; i < s.n; i++) {
                if (utf8_is_valid_n(s.entries[i].path, strlen(s.entries[i].path)) && j < WORKSPACE_LIST_ENTRIES_MAX)
                        s.entries[j++] = s.entries[i];
                else {
                        if (j >= WORKSPACE_LIST_ENTRIES_MAX)
                                s.truncated = true;
                        free(s.entries[i].path);
                }
        }
        s.n = j;
        *ret = s;
        return 0;
}

int workspace_reset_inputs(int ws_fd, uid_t uid, gid_t gid) {
        static const char *const dirs[] = { "uploads", "skills" };

        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                struct stat st;
                int r;

                if (fstatat(ws_fd, dirs[i], &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                        if (S_ISDIR(st.st_mode)) {
                                _cleanup_close_ int fd = openat(ws_fd, dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                                if (fd < 0)
                                        return -errno;
                                r = rm_rf_children(fd);
                                if (r < 0)
                                        return r;
                        } else if (unlinkat(ws_fd, dirs[i], 0) < 0)
                                return -errno;
                } else if (errno != ENOENT)
                        return -errno;

                if (mkdirat(ws_fd, dirs[i], 0755) < 0 && errno != EEXIST)
                        return -errno;
                if (fchownat(ws_fd, dirs[i], uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
                    fchmodat(ws_fd, dirs[i], 0755, 0) < 0)
                        return -errno;
        }
        return 0;
}
