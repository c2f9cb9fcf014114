/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The filesystem calls of E2B's envd on a session's workspace (docs/e2b.md "Files"; runner-fs.c
 * takes the requests): stat, list to a depth, make a directory with its parents, move, remove.
 * The runner is root, and although no process of the session runs while these do (they wait
 * behind its execs like every file call), each is safe against one racing it: nothing here
 * follows a path the sandbox can change. A directory is resolved once, by the kernel, into an fd
 * of the workspace — links that stay inside followed, relative ones with RESOLVE_BENEATH,
 * absolute ones with the view of the workspace as the root (RESOLVE_IN_ROOT: nothing but the
 * workspace exists there), the result checked to lie on the workspace's filesystem — and all
 * after that is done on that fd, the last name never followed (fstatat, readlinkat, renameat,
 * unlinkat, openat O_NOFOLLOW). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "path-util.h"
#include "string-util.h"
#include "workspace-fs.h"

/* A listing's bounds besides RUNNER_FS_ENTRIES_MAX: the names it reads at all, how long it takes,
 * and roughly how large its answer grows. Any of them reached: the listing is cut (truncated). */
#define FS_SCAN_MAX (4U * RUNNER_FS_ENTRIES_MAX)
#define FS_LIST_USEC (2U * 1000000U)
#define FS_LIST_BYTES_MAX (16U << 20)
/* What an entry weighs in the answer beside its path and target. */
#define FS_ENTRY_COST 192U

static uint64_t fs_now_usec(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000U + (uint64_t) ts.tv_nsec / 1000U;
}

/* The directory 'relative' of the workspace ("": its root), links resolved as inside the sandbox;
 * -EXDEV when that leads out of the workspace, -ENOENT, -ENOTDIR. Every fd comes from the view's
 * mount of the workspace, so that a rename between two of them is no rename across mounts. */
static int fs_open_dir(const Workspace *w, const char *relative) {
        _cleanup_close_ int base = -EBADF;
        _cleanup_free_ char *inside = NULL;
        struct stat ws_st, st;
        int fd;

        base = w->view_fd >= 0
                       ? openat(w->view_fd, "workspace", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                       : fcntl(w->fd, F_DUPFD_CLOEXEC, 3);
        if (base < 0)
                return -errno;
        if (*relative == 0) {
                fd = openat(base, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                return fd < 0 ? -errno : fd;
        }
        /* Relative links that stay inside, first; an absolute one ("/workspace/x", as the sandbox
         * writes them) then once more with the view as the root, where nothing but the workspace
         * exists. Whatever leaves: -EXDEV, also when it leads to nothing. */
        fd = openat_beneath_follow(base, relative, O_RDONLY | O_DIRECTORY, 0);
        if ((fd != -EXDEV && fd != -ELOOP) || w->view_fd < 0)
                return fd == -ELOOP ? -EXDEV : fd;
        if (strlen(relative) >= PATH_MAX - sizeof("workspace/"))
                return -ENAMETOOLONG;
        if (asprintf(&inside, "workspace/%s", relative) < 0)
                return -ENOMEM;
        fd = (int) syscall(SYS_openat2, w->view_fd, inside,
                           &(struct open_how) { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS },
                           sizeof(struct open_how));
        if (fd < 0)
                return -EXDEV;
        /* A link to "/" or ".." ends on the view's own directory: not the workspace's filesystem. */
        if (fstat(w->fd, &ws_st) < 0 || fstat(fd, &st) < 0 || st.st_dev != ws_st.st_dev) {
                safe_close(fd);
                return -EXDEV;
        }
        return fd;
}

/* Splits 'relative' (not "") into its directory (allocated, "" for the root) and last name. */
static int fs_split(const char *relative, char **ret_dir, const char **ret_name) {
        const char *slash = strrchr(relative, '/');

        *ret_dir = slash ? strndup(relative, (size_t) (slash - relative)) : strdup("");
        if (!*ret_dir)
                return -ENOMEM;
        *ret_name = slash ? slash + 1 : relative;
        return 0;
}

/* The directory that holds 'relative', opened; a missing or non-directory parent is -ENOENT. */
static int fs_open_parent(const Workspace *w, const char *relative, const char **ret_name) {
        _cleanup_free_ char *dir = NULL;
        int fd, r;

        r = fs_split(relative, &dir, ret_name);
        if (r < 0)
                return r;
        fd = fs_open_dir(w, dir);
        return fd == -ENOTDIR ? -ENOENT : fd;
}

/* ---- entries ---- */

static void fs_entry_done(RunnerFsEntry *e) {
        free((char *) e->path);
        free((char *) e->owner);
        free((char *) e->group);
        free((char *) e->target);
}

void workspace_fs_list_done(WorkspaceFsList *l) {
        for (size_t i = 0; i < l->listing.n_entries; i++)
                fs_entry_done(&l->listing.entries[i]);
        free(l->listing.entries);
        *l = (WorkspaceFsList) {};
}

/* The sandbox user by the name E2B gives it, root by its own, anyone else by number. */
static char *fs_id_name(unsigned id, unsigned sandbox_id) {
        char *s;

        if (id == sandbox_id)
                return strdup("user");
        if (id == 0)
                return strdup("root");
        return asprintf(&s, "%u", id) < 0 ? NULL : s;
}

static const char *fs_type_name(mode_t mode) {
        return S_ISREG(mode) ? "file" : S_ISDIR(mode) ? "dir" : S_ISLNK(mode) ? "symlink" : "other";
}

/* The entry 'name' of dir_fd ("": dir_fd itself), never followed, as 'path'. */
static int fs_entry_make(const Workspace *w, int dir_fd, const char *name, const char *path,
                         RunnerFsEntry *ret, struct stat *ret_st) {
        RunnerFsEntry e = {};
        struct stat st;

        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH)) < 0)
                return -errno;
        e = (RunnerFsEntry) {
                .type = fs_type_name(st.st_mode),
                .size = (uint64_t) st.st_size,
                .mode = (uint32_t) st.st_mode,
                .mtime_nsec = (int64_t) st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                .path = strdup(path),
                .owner = fs_id_name(st.st_uid, w->uid),
                .group = fs_id_name(st.st_gid, w->gid),
        };
        if (!e.path || !e.owner || !e.group) {
                fs_entry_done(&e);
                return -ENOMEM;
        }
        if (S_ISLNK(st.st_mode) && *name) {
                char buf[PATH_MAX];
                ssize_t k = readlinkat(dir_fd, name, buf, sizeof(buf) - 1);

                /* Its text only, never what it leads to; a text no client can read is left out. */
                if (k > 0 && utf8_is_valid_n(buf, (size_t) k) && memchr(buf, 0, (size_t) k) == NULL) {
                        buf[k] = 0;
                        e.target = strdup(buf);
                        if (!e.target) {
                                fs_entry_done(&e);
                                return -ENOMEM;
                        }
                }
        }
        *ret = e;
        if (ret_st)
                *ret_st = st;
        return 0;
}

static int fs_list_add(WorkspaceFsList *l, RunnerFsEntry *e) {
        if (l->listing.n_entries == l->allocated) {
                size_t n = MAX(l->allocated * 2, (size_t) 64);
                RunnerFsEntry *p = reallocarray(l->listing.entries, n, sizeof(RunnerFsEntry));

                if (!p) {
                        fs_entry_done(e);
                        return -ENOMEM;
                }
                l->listing.entries = p;
                l->allocated = n;
        }
        l->bytes += FS_ENTRY_COST + strlen(e->path) + (e->target ? strlen(e->target) : 0);
        l->listing.entries[l->listing.n_entries++] = *e;
        return 0;
}

/* Whether the listing must stop here (and say so). */
static bool fs_list_full(WorkspaceFsList *l) {
        if (l->listing.n_entries >= RUNNER_FS_ENTRIES_MAX || l->scanned >= FS_SCAN_MAX ||
            l->bytes >= FS_LIST_BYTES_MAX || fs_now_usec() >= l->deadline_usec)
                l->listing.truncated = true;
        return l->listing.truncated;
}

static int fs_strcmpp(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static void fs_names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}

/* The names of dir_fd, sorted as envd walks them; at most what the listing may still scan. */
static int fs_read_names(WorkspaceFsList *l, int dir_fd, char ***ret, size_t *ret_n) {
        _cleanup_closedir_ DIR *d = NULL;
        char **names = NULL;
        size_t n = 0, allocated = 0;
        struct dirent *de;
        int r;

        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        FOREACH_DIRENT(de, d, r = -errno) {
                if (l->scanned >= FS_SCAN_MAX || ((l->scanned & 255) == 0 && fs_list_full(l))) {
                        l->listing.truncated = true;
                        break;
                }
                l->scanned++;
                if (n == allocated) {
                        size_t k = MAX(allocated * 2, (size_t) 32);
                        char **p = reallocarray(names, k, sizeof(char *));

                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        names = p;
                        allocated = k;
                }
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        if (r < 0) {
                fs_names_free(names, n);
                return r;
        }
        if (n > 0)
                qsort(names, n, sizeof(char *), fs_strcmpp);
        *ret = names;
        *ret_n = n;
        return 0;
}

/* Entries below dir_fd (at 'prefix'), depth first in name order, 'depth' levels; symlinks and
 * other filesystems are listed, never entered. */
static int fs_walk(const Workspace *w, WorkspaceFsList *l, int dir_fd, dev_t dev, const char *prefix,
                   unsigned depth) {
        char **names = NULL;
        size_t n = 0;
        int r;

        r = fs_read_names(l, dir_fd, &names, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n && r >= 0 && !fs_list_full(l); i++) {
                _cleanup_free_ char *path = NULL;
                RunnerFsEntry e;
                struct stat st;
                int q;

                /* Names no client can read, or paths longer than any request may name, are left out. */
                if (!utf8_is_valid_n(names[i], strlen(names[i])))
                        continue;
                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", names[i]) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (strlen(path) > RUNNER_PATH_MAX)
                        continue;
                q = fs_entry_make(w, dir_fd, names[i], path, &e, &st);
                if (q == -ENOENT)
                        continue; /* gone meanwhile */
                if (q < 0) {
                        r = q;
                        break;
                }
                r = fs_list_add(l, &e);
                if (r < 0 || !S_ISDIR(st.st_mode) || depth <= 1 || st.st_dev != dev)
                        continue;

                _cleanup_close_ int sub =
                        openat(dir_fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0)
                        continue; /* replaced by something else meanwhile: listed as it was */
                if (fstat(sub, &st) < 0 || st.st_dev != dev)
                        continue;
                r = fs_walk(w, l, sub, dev, path, depth - 1);
        }
        fs_names_free(names, n);
        return r;
}

/* ---- the operations ---- */

int workspace_fs_stat(const Workspace *w, const char *relative, WorkspaceFsList *l) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *name = "";
        RunnerFsEntry e;
        int r;

        dir_fd = *relative ? fs_open_parent(w, relative, &name) : fs_open_dir(w, "");
        if (dir_fd < 0)
                return dir_fd;
        r = fs_entry_make(w, dir_fd, name, relative, &e, NULL);
        if (r < 0)
                return r;
        return fs_list_add(l, &e);
}

int workspace_fs_list(const Workspace *w, const char *relative, unsigned depth, WorkspaceFsList *l) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        fd = fs_open_dir(w, relative);
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        l->deadline_usec = fs_now_usec() + FS_LIST_USEC;
        return fs_walk(w, l, fd, st.st_dev, relative, depth);
}

/* Opens the directory 'relative', making it and its missing parents (the sandbox user's, 0755). A
 * name on the way that exists and is no directory: -ENOTDIR (-EEXIST for the last one). */
static int fs_make_dirs(const Workspace *w, const char *relative, bool *ret_existed) {
        _cleanup_free_ char *prefix = strdup(relative);
        bool existed = true;
        char *slash;

        if (!prefix)
                return -ENOMEM;
        for (slash = prefix;; slash++) {
                _cleanup_close_ int parent = -EBADF, fd = -EBADF;
                const char *name;
                struct stat st;

                slash = strchr(slash, '/');
                if (slash)
                        *slash = 0;
                fd = fs_open_dir(w, prefix);
                if (fd == -ENOENT) {
                        parent = fs_open_parent(w, prefix, &name);
                        if (parent < 0)
                                return parent == -ENOENT ? -ENOTDIR : parent;
                        if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        /* What is there now, never followed: ours to hand to the sandbox user, or
                         * something the sandbox put there meanwhile. */
                        fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd < 0)
                                return errno == ELOOP || errno == ENOTDIR ? (slash ? -ENOTDIR : -EEXIST)
                                                                          : -errno;
                        if (fstat(fd, &st) < 0)
                                return -errno;
                        if (st.st_uid == 0 && (fchown(fd, w->uid, w->gid) < 0 || fchmod(fd, 0755) < 0))
                                return -errno;
                        existed = false;
                } else if (fd == -ENOTDIR)
                        return slash ? -ENOTDIR : -EEXIST;
                else if (fd < 0)
                        return fd;
                if (!slash) {
                        if (ret_existed)
                                *ret_existed = existed;
                        return TAKE_FD(fd);
                }
                *slash = '/';
        }
}

int workspace_fs_mkdir(const Workspace *w, const char *relative, WorkspaceFsList *l) {
        _cleanup_close_ int fd = -EBADF;

        if (*relative == 0) {
                l->listing.existed = true;
                return workspace_fs_stat(w, relative, l);
        }
        fd = fs_make_dirs(w, relative, &l->listing.existed);
        if (fd < 0)
                return fd;
        return workspace_fs_stat(w, relative, l);
}

int workspace_fs_move(const Workspace *w, const char *source, const char *destination, WorkspaceFsList *l) {
        _cleanup_close_ int from = -EBADF, to = -EBADF;
        _cleanup_free_ char *dir = NULL;
        const char *from_name, *to_name;
        int r;

        if (*source == 0 || *destination == 0)
                return -EPERM; /* the workspace itself */
        from = fs_open_parent(w, source, &from_name);
        if (from < 0)
                return from;
        r = fs_split(destination, &dir, &to_name);
        if (r < 0)
                return r;
        /* As envd: the destination's missing parents are made. */
        to = *dir ? fs_make_dirs(w, dir, NULL) : fs_open_dir(w, "");
        if (to < 0)
                return to == -EEXIST ? -ENOTDIR : to;
        if (renameat(from, from_name, to, to_name) < 0)
                return -errno;
        return workspace_fs_stat(w, destination, l);
}

int workspace_fs_remove(const Workspace *w, const char *relative) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *name;

        if (*relative == 0)
                return -EPERM; /* the workspace itself */
        dir_fd = fs_open_parent(w, relative, &name);
        if (dir_fd == -ENOENT)
                return 0; /* as envd: nothing there is nothing to remove */
        if (dir_fd < 0)
                return dir_fd;
        /* The name may change kind under us (the sandbox runs): look again, a few times. */
        for (unsigned attempt = 0; attempt < 4; attempt++) {
                _cleanup_close_ int fd = -EBADF;
                struct stat st, dir_st;
                int r;

                if (unlinkat(dir_fd, name, 0) >= 0 || errno == ENOENT)
                        return 0;
                if (errno != EISDIR)
                        return -errno;
                fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == ENOENT)
                                return 0;
                        if (errno == ELOOP || errno == ENOTDIR)
                                continue;
                        return -errno;
                }
                if (fstat(fd, &st) < 0 || fstat(dir_fd, &dir_st) < 0)
                        return -errno;
                if (st.st_dev != dir_st.st_dev)
                        return -EPERM; /* a mount point */
                r = rm_rf_children(fd);
                if (r < 0)
                        return r;
                if (unlinkat(dir_fd, name, AT_REMOVEDIR) >= 0 || errno == ENOENT)
                        return 0;
                if (errno != ENOTEMPTY && errno != ENOTDIR)
                        return -errno;
        }
        return -EAGAIN; /* something keeps filling or swapping it */
}
