/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "local" storage provider: objects as files below SANDBOX_LOCAL_STORAGE_DIR, written
 * atomically and durably (staged, fsynced, renamed into place, directory fsynced), never outside
 * that directory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend-local.h"
#include "fs-util.h"
#include "macro.h"
#include "quarantine.h"
#include "string-util.h"

bool local_key_is_reserved(const char *full_key) {
        const char *rest = startswith(full_key, LOCAL_STAGING_DIR);
        return rest && (*rest == 0 || *rest == '/');
}

/* Opens the directory part of 'full_key' below root, creating it when asked (each new directory's
 * entry fsynced, so a committed object is never in a directory a crash forgets); *ret_name points
 * at the last component inside 'full_key'. Keys are validated already (no "..", not absolute). */
static int open_key_dir(const char *root, const char *full_key, bool create, const char **ret_name) {
        _cleanup_close_ int cur = -EBADF;
        _cleanup_free_ char *copy = strdup(full_key);
        char *p, *slash;

        if (!copy)
                return -ENOMEM;
        if (local_key_is_reserved(full_key))
                return -EINVAL;
        cur = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return -errno;
        for (p = copy; (slash = strchr(p, '/')); p = slash + 1) {
                bool created = false;
                int fd;

                *slash = 0;
                if (*p == 0 || streq(p, ".") || streq(p, ".."))
                        return -EINVAL;
                if (create) {
                        if (mkdirat(cur, p, 0700) >= 0)
                                created = true;
                        else if (errno != EEXIST)
                                return -errno;
                }
                if (created && fsync(cur) < 0)
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

/* root/.staging, created when missing; never a symlink. */
static int open_staging_dir(const char *root, bool create) {
        _cleanup_close_ int root_fd = -EBADF;
        int fd;

        root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0)
                return -errno;
        if (create && mkdirat(root_fd, LOCAL_STAGING_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = openat(root_fd, LOCAL_STAGING_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Whether a rename from one directory into the other can work: the same mount (hence file system). */
static int same_mount(int a, int b) {
        struct statx x = {}, y = {};

        if (statx(a, "", AT_EMPTY_PATH, STATX_MNT_ID, &x) < 0 ||
            statx(b, "", AT_EMPTY_PATH, STATX_MNT_ID, &y) < 0)
                return -errno;
        if ((x.stx_mask & STATX_MNT_ID) && (y.stx_mask & STATX_MNT_ID))
                return x.stx_mnt_id == y.stx_mnt_id;
        return x.stx_dev_major == y.stx_dev_major && x.stx_dev_minor == y.stx_dev_minor;
}

int local_stage(const char *root, const char *full_key, const char *token, LocalStaged *ret) {
        _cleanup_close_ int dir_fd = -EBADF, staging_fd = -EBADF, fd = -EBADF;
        _cleanup_free_ char *tmp = NULL, *name_copy = NULL;
        const char *name;
        int r;

        if (isempty(token) || strspn(token, "0123456789abcdef") != strlen(token))
                return -EINVAL;
        dir_fd = open_key_dir(root, full_key, true, &name);
        if (dir_fd < 0)
                return dir_fd;
        staging_fd = open_staging_dir(root, true);
        if (staging_fd < 0)
                return staging_fd;
        r = same_mount(staging_fd, dir_fd);
        if (r < 0)
                return r;
        /* rename() can't cross mounts: a key directory on another one stages in place. */
        if (r == 0) {
                safe_close(staging_fd);
                staging_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
                if (staging_fd < 0)
                        return -errno;
                if (asprintf(&tmp, "%s%s", LOCAL_STAGING_PREFIX, token) < 0)
                        tmp = NULL;
        } else
                tmp = strdup(token);
        name_copy = strdup(name);
        if (!tmp || !name_copy)
                return -ENOMEM;
        fd = openat(staging_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        *ret = (LocalStaged) { .staging_fd = TAKE_FD(staging_fd),
                               .dir_fd = TAKE_FD(dir_fd),
                               .fd = TAKE_FD(fd),
                               .tmp_name = TAKE_PTR(tmp),
                               .name = TAKE_PTR(name_copy) };
        return 0;
}

void local_staged_done(LocalStaged *s) {
        s->fd = safe_close(s->fd);
        s->dir_fd = safe_close(s->dir_fd);
        s->staging_fd = safe_close(s->staging_fd);
        free(s->tmp_name);
        free(s->name);
        *s = LOCAL_STAGED_NULL;
}

int local_publish(LocalStaged *s, uint64_t *ret_size) {
        struct stat st;
        int r;

        /* The data is durable already (fsynced by the caller), so the name can follow it. */
        if (fstat(s->fd, &st) < 0 || renameat(s->staging_fd, s->tmp_name, s->dir_fd, s->name) < 0) {
                r = -errno;
                local_abort(s);
                return r;
        }
        s->tmp_name = mfree(s->tmp_name); /* published: nothing to remove any more */
        if (ret_size)
                *ret_size = (uint64_t) st.st_size;
        return 0;
}

void local_abort(LocalStaged *s) {
        if (s->staging_fd >= 0 && s->tmp_name)
                (void) unlinkat(s->staging_fd, s->tmp_name, 0);
        local_staged_done(s);
}

/* Calls cb(dir_fd, name, userdata) for each entry of the directory 'fd' (an open() result of ours,
 * taken and closed here: -ENOENT, no such directory, has no entries). cb returns 1 for an entry
 * that counts, 0 for one that does not, or -errno to stop there. Returns the count, or -errno. */
static int dir_foreach(int fd, int (*cb)(int dir_fd, const char *name, void *userdata), void *userdata) {
        _cleanup_close_ int dir_fd = fd;
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        int r, n = 0;

        if (dir_fd == -ENOENT)
                return 0;
        if (dir_fd < 0)
                return dir_fd;
        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        FOREACH_DIRENT(de, d, return -errno) {
                r = cb(dirfd(d), de->d_name, userdata);
                if (r < 0)
                        return r;
                n += r > 0;
        }
        return n;
}

static int sweep_one(int dir_fd, const char *name, void *userdata) {
        if (unlinkat(dir_fd, name, 0) >= 0)
                return 1;
        if (errno == ENOENT || errno == EISDIR || errno == EPERM)
                return 0; /* not ours to remove (we never make directories there) */
        return -errno;
}

int local_sweep_staging(const char *root) {
        return dir_foreach(open_staging_dir(root, false), sweep_one, NULL);
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
        int64_t stale = MIN(cutoff, (int64_t) time(NULL) - LOCAL_STAGING_STALE_SEC);
        int r;

        if (depth > GC_DEPTH_MAX)
                return 0;
        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        FOREACH_DIRENT(de, d, return -errno) {
                bool staging;
                struct stat st;

                if (streq(de->d_name, LOCAL_STAGING_DIR))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = openat(dirfd(d), de->d_name,
                                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0) {
                                r = gc_dir(sub, suffix, cutoff, depth + 1, c);
                                if (r < 0)
                                        return r;
                        }
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        continue;
                /* A staging in place of a killed agent: no object, removed once surely abandoned. */
                staging = startswith(de->d_name, LOCAL_STAGING_PREFIX);
                c->scanned++;
                /* A damaged archive moved aside is kept, whatever its age and wherever it is. */
                if (quarantine_key_is(de->d_name))
                        continue;
                if (staging ? (int64_t) st.st_mtim.tv_sec >= stale
                            : (suffix && !endswith(de->d_name, suffix)) ||
                                      (int64_t) st.st_mtim.tv_sec >= cutoff)
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

/* The directory root/dir_key to look through, or -ENOENT when there is none (missing, not a
 * directory, or ours: the staging directory). dir_key is built from a validated prefix: no "..", not
 * absolute; it is opened beneath root all the same. */
static int open_dir_key(const char *root, const char *dir_key) {
        _cleanup_close_ int root_fd = -EBADF;
        int fd;

        if (local_key_is_reserved(dir_key))
                return -ENOENT;
        root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0)
                return -errno;
        fd = openat_beneath(root_fd, dir_key, O_RDONLY | O_DIRECTORY, 0);
        return fd == -ENOTDIR ? -ENOENT : fd;
}

int local_gc(const char *root, const char *dir_key, const char *suffix, int64_t cutoff, GcCounters *c) {
        _cleanup_close_ int fd = open_dir_key(root, dir_key);

        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return fd;
        return gc_dir(fd, suffix, cutoff, 0, c);
}

int local_quarantine(const char *root, const char *full_key, const char *quarantined_key) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *name, *qname = strrchr(quarantined_key, '/');
        struct stat st;

        qname = qname ? qname + 1 : quarantined_key;
        dir_fd = open_key_dir(root, full_key, false, &name);
        if (dir_fd == -ENOENT || dir_fd == -ENOTDIR)
                return -ENOENT;
        if (dir_fd < 0)
                return dir_fd;
        /* What local_open() would not take for an archive is none to move either. */
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -ENOENT;
        /* The entry itself moves, never what it may point to, and nothing is replaced. A file system
         * without RENAME_NOREPLACE gets the same from link() (which never replaces) and unlink(). No
         * fsync of the directory: should a crash forget the rename, the damaged archive is back under
         * its name, found damaged and moved aside again; and the next archive published into this
         * directory fsyncs it anyway. */
        if (renameat2(dir_fd, name, dir_fd, qname, RENAME_NOREPLACE) >= 0)
                return 0;
        if (errno != EINVAL && errno != ENOSYS)
                return -errno;
        if (linkat(dir_fd, name, dir_fd, qname, 0) < 0)
                return -errno;
        if (unlinkat(dir_fd, name, 0) < 0)
                return -errno;
        return 0;
}

typedef struct QuarantinedList {
        LocalQuarantinedCallback cb;
        void *userdata;
} QuarantinedList;

static int list_quarantined_one(int dir_fd, const char *name, void *userdata) {
        QuarantinedList *l = userdata;
        struct stat st;
        int64_t when;
        int r;

        if (!quarantine_key_parse(name, &when, NULL) ||
            fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                return 0;
        r = l->cb(name, (uint64_t) st.st_size, when, l->userdata);
        return r < 0 ? r : 1;
}

int local_list_quarantined(const char *root, const char *dir_key, LocalQuarantinedCallback cb,
                           void *userdata) {
        return dir_foreach(open_dir_key(root, dir_key), list_quarantined_one,
                           &(QuarantinedList) { cb, userdata });
}
