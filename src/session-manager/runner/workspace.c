/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File operations on a session's workspace for the API: confined, never racing the sandbox (no
 * sandbox process runs while they do), files owned by the sandbox user. */
#include <errno.h>
#include <limits.h>
#include <linux/openat2.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "string-util.h"
#include "workspace.h"

/* Opens 'relative' below the workspace, following links as the sandbox would see them: relative
 * links and absolute links to /workspace/... that stay inside; -EXDEV for anything that leaves. */
static int workspace_open(const Workspace *w, const char *relative, int flags) {
        _cleanup_free_ char *inside = NULL;
        struct open_how how = {
                .flags = (uint64_t) (flags | O_CLOEXEC),
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        struct stat ws_st, st;
        int fd;

        /* The kernel takes at most PATH_MAX - 1 bytes per walk, and the view's walk below adds a
         * prefix: open long paths a directory at a time (the last step then treats an absolute
         * link as leaving the workspace). */
        if (strlen(relative) >= PATH_MAX - sizeof("workspace/")) {
                const char *slash = strrchr(relative, '/');
                _cleanup_free_ char *parent = NULL;
                _cleanup_close_ int dir_fd = -EBADF;

                if (!slash)
                        return -ENAMETOOLONG;
                parent = strndup(relative, (size_t) (slash - relative));
                if (!parent)
                        return -ENOMEM;
                dir_fd = workspace_open(w, parent, O_RDONLY | O_DIRECTORY);
                if (dir_fd < 0)
                        return dir_fd;
                fd = openat_beneath_follow(dir_fd, slash + 1, flags, 0);
                return fd == -ELOOP ? -EXDEV : fd;
        }

        fd = openat_beneath_follow(w->fd, relative, flags, 0);
        if (fd != -EXDEV || w->view_fd < 0)
                return fd == -ELOOP ? -EXDEV : fd;

        /* RESOLVE_BENEATH refuses every absolute link. Resolve again with the view as the root:
         * "/workspace/x" then means the workspace, anything else doesn't exist in the view. What
         * we get must be on the workspace's filesystem. */
        if (asprintf(&inside, "workspace/%s", relative) < 0)
                return -ENOMEM;
        fd = (int) syscall(SYS_openat2, w->view_fd, inside, &how, sizeof(how));
        if (fd < 0)
                return errno == ENOENT && (flags & O_CREAT) ? -ENOENT : -EXDEV;
        if (fstat(w->fd, &ws_st) < 0 || fstat(fd, &st) < 0 || st.st_dev != ws_st.st_dev) {
                safe_close(fd);
                return -EXDEV;
        }
        return fd;
}

/* Opens (creating as needed, owned by the sandbox user) the directory 'relative'. */
static int open_parent_dirs(const Workspace *w, const char *relative) {
        _cleanup_free_ char *prefix = strdup(relative);
        char *slash;
        int fd;

        if (!prefix)
                return -ENOMEM;
        if (*prefix == 0) {
                fd = openat(w->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                return fd < 0 ? -errno : fd;
        }

        /* Each prefix is resolved from the workspace root, following links only inside it. */
        for (slash = prefix;; slash++) {
                slash = strchr(slash, '/');
                if (slash)
                        *slash = 0;

                fd = workspace_open(w, prefix, O_RDONLY | O_DIRECTORY);
                if (fd == -ENOENT) {
                        _cleanup_close_ int parent = -EBADF;
                        char *name = strrchr(prefix, '/');
                        int r;

                        if (name) {
                                *name = 0;
                                parent = workspace_open(w, prefix, O_RDONLY | O_DIRECTORY);
                                *name++ = '/';
                        } else {
                                parent = openat(w->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                                name = prefix;
                                if (parent < 0)
                                        parent = -errno;
                        }
                        if (parent < 0)
                                return parent;
                        if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        r = fchownat(parent, name, w->uid, w->gid, AT_SYMLINK_NOFOLLOW);
                        if (r < 0)
                                return -errno;
                        fd = workspace_open(w, prefix, O_RDONLY | O_DIRECTORY);
                }
                if (fd < 0)
                        return fd == -ELOOP ? -EXDEV : fd;
                if (!slash)
                        return fd;
                safe_close(fd);
                *slash = '/';
        }
}

int workspace_write(const Workspace *w, const char *relative, int data_fd) {
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

        dir_fd = open_parent_dirs(w, dir);
        if (dir_fd < 0)
                return dir_fd == -ENOTDIR ? -EXDEV : dir_fd;

        /* What is there now? A directory can't be replaced; a symlink must not lead outside (we
         * then replace the link itself, never write through it). */
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                if (S_ISDIR(st.st_mode))
                        return -EISDIR;
                if (S_ISLNK(st.st_mode)) {
                        _cleanup_close_ int t = workspace_open(w, relative, O_PATH);
                        if (t == -EXDEV)
                                return -EXDEV;
                }
        }

        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return -EIO;
        snprintf(tmp, sizeof(tmp), ".scopebox-upload-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
                 rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
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
        if (fchown(fd, w->uid, w->gid) < 0 || fchmod(fd, 0644) < 0) {
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

int workspace_read(const Workspace *w, const char *relative, uint64_t max, int *ret_memfd) {
        _cleanup_close_ int fd = -EBADF, mfd = -EBADF;
        uint64_t size;
        off_t off = 0;
        int r;

        if (*relative == 0)
                return -ENOENT;
        fd = workspace_open(w, relative, O_RDONLY | O_NONBLOCK);
        if (fd == -ENOTDIR || fd == -EISDIR || fd == -ENXIO || fd == -ENODEV)
                return -ENOENT; /* not a regular file (opening a socket gives ENXIO) */
        if (fd < 0)
                return fd;
        r = fd_regular_size(fd, max, &size);
        if (r < 0)
                return r == -EBADFD ? -ENOENT : r;

        mfd = memfd_new_empty("workspace-file");
        if (mfd < 0)
                return mfd;
        while ((uint64_t) off < size) {
                ssize_t k = sendfile(mfd, fd, &off, (size_t) (size - (uint64_t) off));
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

int workspace_list(const Workspace *w, OutputSet *ret) {
        OutputSet s = {};
        int r;

        r = output_set_scan_bounded(w->fd, WORKSPACE_LIST_DEPTH_MAX, WORKSPACE_LIST_SCAN_MAX, &s);
        if (r < 0)
                return r;
        /* Names must survive JSON and D-Bus unchanged; others are left out. */
        size_t j = 0;
        for (size_t i = 0; i < s.n; i++) {
                if (utf8_is_valid_n(s.entries[i].path, strlen(s.entries[i].path)) &&
                    j < WORKSPACE_LIST_ENTRIES_MAX)
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

/* Opens the directory 'name' right below dir_fd, creating it if missing, never through a link:
 * whatever a process of the session puts there meanwhile (a symlink, a file) is removed and the
 * directory made anew. Everything after this works on the fd. */
static int open_or_make_dir(int dir_fd, const char *name) {
        for (unsigned attempt = 0; attempt < 16; attempt++) {
                int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0)
                        return fd;
                if (errno == ENOENT) {
                        if (mkdirat(dir_fd, name, 0700) < 0 && errno != EEXIST)
                                return -errno;
                        continue;
                }
                if (errno != ELOOP && errno != ENOTDIR)
                        return -errno;
                /* Not a directory (O_NOFOLLOW answers ELOOP for a symlink): away with it. */
                if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT && errno != EISDIR)
                        return -errno;
        }
        return -EBUSY; /* something keeps swapping it */
}

/* The directories named, right below the workspace, empty and the sandbox user's. */
static int workspace_empty_dirs(const Workspace *w, const char *const *dirs, size_t n) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_close_ int fd = open_or_make_dir(w->fd, dirs[i]);
                int r;

                if (fd < 0)
                        return fd;
                r = rm_rf_children(fd);
                if (r < 0)
                        return r;
                if (fchown(fd, w->uid, w->gid) < 0 || fchmod(fd, 0755) < 0)
                        return -errno;
        }
        return 0;
}

int workspace_reset_inputs(const Workspace *w) {
        static const char *const dirs[] = { "uploads", "skills" };

        return workspace_empty_dirs(w, dirs, ELEMENTSOF(dirs));
}

int workspace_clear(const Workspace *w) {
        static const char *const dirs[] = { "uploads", "outputs", "skills" };
        int r;

        r = rm_rf_children(w->fd);
        if (r < 0)
                return r;
        return workspace_empty_dirs(w, dirs, ELEMENTSOF(dirs));
}
