/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "local" storage provider: objects as files below SANDBOX_LOCAL_STORAGE_DIR, written
 * atomically (temporary file + rename), never outside that directory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend-local.h"
#include "fs-util.h"
#include "macro.h"
#include "string-util.h"

/* Opens the directory part of 'full_key' below root, creating it when asked; *ret_name points
 * at the last component inside 'full_key'. Keys are validated already (no "..", not absolute). */
static int open_key_dir(const char *root, const char *full_key, bool create, const char **ret_name) {
        _cleanup_close_ int cur = -EBADF;
        _cleanup_free_ char *copy = strdup(full_key);
        char *p, *slash;

        if (!copy)
                return -ENOMEM;
        cur = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return -errno;
        for (p = copy; (slash = strchr(p, '/')); p = slash + 1) {
                int fd;

                *slash = 0;
                if (*p == 0 || streq(p, ".") || streq(p, ".."))
                        return -EINVAL;
                if (create && mkdirat(cur, p, 0700) < 0 && errno != EEXIST)
                        return -errno;
                fd = openat(cur, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                safe_close(cur);
                cur = fd;
        }
        if (*p == 0 || streq(p, ".") || streq(p, ".."))
                return -EINVAL;
        *ret_name = full_key + (p - copy);
        return TAKE_FD(cur);
}

int local_stage(const char *root, const char *full_key, LocalStaged *ret) {
        _cleanup_close_ int dir_fd = -EBADF, fd = -EBADF;
        const char *name;
        uint8_t rnd[8];
        char tmp[64];

        dir_fd = open_key_dir(root, full_key, true, &name);
        if (dir_fd < 0)
                return dir_fd;
        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return -EIO;
        snprintf(tmp, sizeof(tmp), ".staging-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        *ret = (LocalStaged) { .dir_fd = TAKE_FD(dir_fd), .fd = TAKE_FD(fd) };
        ret->tmp_name = strdup(tmp);
        ret->name = strdup(name);
        if (!ret->tmp_name || !ret->name) {
                local_abort(ret);
                return -ENOMEM;
        }
        return 0;
}

int local_commit(LocalStaged *s, uint64_t *ret_size) {
        struct stat st;
        int r = 0;

        if (fsync(s->fd) < 0 || fstat(s->fd, &st) < 0 || renameat(s->dir_fd, s->tmp_name, s->dir_fd, s->name) < 0)
                r = -errno;
        if (r < 0) {
                local_abort(s);
                return r;
        }
        if (ret_size)
                *ret_size = (uint64_t) st.st_size;
        s->fd = safe_close(s->fd);
        s->dir_fd = safe_close(s->dir_fd);
        free(s->tmp_name);
        free(s->name);
        *s = (LocalStaged) { .dir_fd = -EBADF, .fd = -EBADF };
        return 0;
}

void local_abort(LocalStaged *s) {
        if (s->dir_fd >= 0 && s->tmp_name)
                (void) unlinkat(s->dir_fd, s->tmp_name, 0);
        s->fd = safe_close(s->fd);
        s->dir_fd = safe_close(s->dir_fd);
        free(s->tmp_name);
        free(s->name);
        *s = (LocalStaged) { .dir_fd = -EBADF, .fd = -EBADF };
}

int local_open(const char *root, const char *full_key, int *ret_fd) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *name;
        struct stat st;
        int fd;

        dir_fd = open_key_dir(root, full_key, false, &name);
        if (dir_fd < 0)
                return dir_fd == -ENOTDIR ? -ENOENT : dir_fd;
        fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                safe_close(fd);
                return -ENOENT;
        }
        *ret_fd = fd;
        return 0;
}

int local_delete(const char *root, const char *full_key) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *name;

        dir_fd = open_key_dir(root, full_key, false, &name);
        if (dir_fd == -ENOENT || dir_fd == -ENOTDIR)
                return 0;
        if (dir_fd < 0)
                return dir_fd;
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

#define GC_DEPTH_MAX 16

static int gc_dir(int dir_fd, const char *suffix, int64_t cutoff, unsigned depth, GcCounters *c) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        int r;

        if (depth > GC_DEPTH_MAX)
                return 0;
        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        while ((de = readdir(d))) {
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, "..") || startswith(de->d_name, ".staging-"))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0) {
                                r = gc_dir(sub, suffix, cutoff, depth + 1, c);
                                if (r < 0)
                                        return r;
                        }
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        continue;
                c->scanned++;
                if (suffix && !endswith(de->d_name, suffix))
                        continue;
                if ((int64_t) st.st_mtim.tv_sec >= cutoff)
                        continue;
                if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
                        if (errno == ENOENT)
                                continue;
                        return -errno;
                }
                c->deleted++;
                c->freed_bytes += (uint64_t) st.st_size;
        }
        return 0;
}

int local_gc(const char *root, const char *dir_key, const char *suffix, int64_t cutoff, GcCounters *c) {
        _cleanup_close_ int root_fd = -EBADF, fd = -EBADF;

        root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0)
                return -errno;
        /* dir_key is built from a validated prefix: no "..", not absolute. */
        fd = openat_beneath(root_fd, dir_key, O_RDONLY | O_DIRECTORY, 0);
        if (fd == -ENOENT || fd == -ENOTDIR)
                return 0;
        if (fd < 0)
                return fd;
        return gc_dir(fd, suffix, cutoff, 0, c);
}
