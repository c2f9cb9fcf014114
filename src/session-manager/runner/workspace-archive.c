/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Workspace archives: a gzip'd tar of /workspace ("./" entries, without uploads/ and skills/),
 * and the restore that lets nothing out of the workspace. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "workspace-archive.h"
#include "fs-util.h"
#include "io-util.h"
#include "macro.h"
#include "string-util.h"

#define ARCHIVE_DEPTH_MAX 64

DEFINE_CLEANUP_FUNC(struct archive *, archive_write_free);
DEFINE_CLEANUP_FUNC(struct archive_entry *, archive_entry_free);

/* Entries the archive never carries: Aivory re-syncs inputs into a new session. */
static bool name_is_excluded(const char *rel) {
        static const char *const excluded[] = { "uploads", "skills" };
        for (size_t i = 0; i < ELEMENTSOF(excluded); i++) {
                size_t l = strlen(excluded[i]);
                if (strneq(rel, excluded[i], l) && (rel[l] == 0 || rel[l] == '/'))
                        return true;
        }
        return false;
}

/* "a/./b" → not canonical: every component must be a plain name. */
static bool relative_path_is_plain(const char *p) {
        if (isempty(p) || p[0] == '/')
                return false;
        for (const char *c = p; *c;) {
                size_t l = strcspn(c, "/");
                if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += l;
                if (*c == '/')
                        c++;
        }
        return true;
}

ArchiveVerdict archive_entry_check(const char *name, mode_t type, const char *symlink,
                                   const char *hardlink) {
        const char *rel;

        /* Any bytes a Linux file name can hold (not only UTF-8): users name files in any
         * language, and what GNU tar stored must come back. Only the shape is judged. */
        if (!name)
                return ARCHIVE_ENTRY_REFUSE;
        rel = startswith(name, "./") ?: name;
        while (*rel == '/' && rel == name)
                return ARCHIVE_ENTRY_REFUSE; /* absolute */
        if (streq(name, ".") || streq(name, "./"))
                return ARCHIVE_ENTRY_SKIP;    /* the root itself */
        {
                /* Tolerate one trailing slash on directories. */
                char buf[4097];
                size_t l = strlen(rel);
                if (l == 0 || l >= sizeof(buf))
                        return ARCHIVE_ENTRY_REFUSE;
                memcpy(buf, rel, l + 1);
                if (buf[l - 1] == '/')
                        buf[l - 1] = 0;
                if (!relative_path_is_plain(buf))
                        return ARCHIVE_ENTRY_REFUSE;
                if (name_is_excluded(buf))
                        return ARCHIVE_ENTRY_SKIP;
        }
        if (hardlink)
                return ARCHIVE_ENTRY_REFUSE;  /* could name a file we must not touch */
        switch (type) {
        case S_IFREG:
        case S_IFDIR:
                return ARCHIVE_ENTRY_EXTRACT;
        case S_IFLNK:
                /* Only links that stay inside: relative, no "..". Absolute ones would point into
                 * the host as soon as anything outside the sandbox followed them. */
                if (!symlink || !relative_path_is_plain(symlink))
                        return ARCHIVE_ENTRY_REFUSE;
                return ARCHIVE_ENTRY_EXTRACT;
        case S_IFIFO:
                return ARCHIVE_ENTRY_SKIP;
        default:
                return ARCHIVE_ENTRY_REFUSE;  /* devices, sockets, unknown */
        }
}

/* ---- create ---- */

typedef struct WriteState {
        int fd;
        uint64_t written;
        uint64_t max;
        bool too_big;
} WriteState;

static la_ssize_t write_callback(struct archive *a, void *userdata, const void *buf, size_t n) {
        WriteState *w = userdata;

        if (w->written + n > w->max) {
                w->too_big = true;
                archive_set_error(a, EFBIG, "archive too large");
                return -1;
        }
        if (write_all(w->fd, buf, n) < 0) {
                archive_set_error(a, errno, "write failed");
                return -1;
        }
        w->written += n;
        return (la_ssize_t) n;
}

static int add_tree(struct archive *a, int dir_fd, const char *prefix, unsigned depth, uint64_t *entries,
                    const ArchiveLimits *limits) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        int r;

        if (depth > ARCHIVE_DEPTH_MAX)
                return 0;
        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;
        FOREACH_DIRENT(de, d, return -errno) {
                _cleanup_(archive_entry_freep) struct archive_entry *e = NULL;
                _cleanup_free_ char *rel = NULL, *name = NULL;
                struct stat st;

                if (asprintf(&rel, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name) < 0 ||
                    asprintf(&name, "./%s", rel) < 0)
                        return -ENOMEM;
                if (depth == 0 && name_is_excluded(rel))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode))
                        continue;
                if (++*entries > limits->max_entries)
                        return -EFBIG;

                e = archive_entry_new();
                if (!e)
                        return -ENOMEM;
                archive_entry_copy_pathname(e, name);
                archive_entry_copy_stat(e, &st);
                /* No owners: the restore gives everything to the sandbox user anyway. */
                archive_entry_set_uid(e, 0);
                archive_entry_set_gid(e, 0);
                archive_entry_set_perm(e, st.st_mode & 0777);

                if (S_ISLNK(st.st_mode)) {
                        char target[4097];
                        ssize_t k = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
                        if (k < 0)
                                continue;
                        target[k] = 0;
                        archive_entry_copy_symlink(e, target);
                        archive_entry_set_size(e, 0);
                }
                /* ARCHIVE_WARN is a warning: a name that is no UTF-8 goes out as raw bytes
                 * (pax hdrcharset=BINARY), as GNU tar keeps it. */
                if (archive_write_header(a, e) < ARCHIVE_WARN)
                        return -EIO;

                if (S_ISREG(st.st_mode)) {
                        _cleanup_close_ int fd =
                                openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                        char buf[64 * 1024];
                        uint64_t left = (uint64_t) st.st_size;

                        if (fd < 0)
                                return -errno;
                        while (left > 0) {
                                ssize_t k = read(fd, buf, MIN(sizeof(buf), left));
                                if (k < 0)
                                        return -errno;
                                if (k == 0) {
                                        /* Shrank while we read: pad, the header promised the size. */
                                        memset(buf, 0, sizeof(buf));
                                        k = (ssize_t) MIN(sizeof(buf), left);
                                }
                                if (archive_write_data(a, buf, (size_t) k) < 0)
                                        return -EIO;
                                left -= (uint64_t) k;
                        }
                } else if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = openat(dirfd(d), de->d_name,
                                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                continue;
                        r = add_tree(a, sub, rel, depth + 1, entries, limits);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int archive_create(int dir_fd, int out_fd, const ArchiveLimits *limits) {
        _cleanup_(archive_write_freep) struct archive *a = NULL;
        WriteState w = { .fd = out_fd, .max = limits->max_bytes };
        uint64_t entries = 0;
        int r;

        a = archive_write_new();
        if (!a)
                return -ENOMEM;
        if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
            archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
            archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
            archive_write_open(a, &w, NULL, write_callback, NULL) != ARCHIVE_OK)
                return w.too_big ? -EFBIG : -EIO;

        r = add_tree(a, dir_fd, "", 0, &entries, limits);
        if (r >= 0 && archive_write_close(a) < ARCHIVE_WARN)
                r = -EIO;
        if (w.too_big)
                return -EFBIG;
        return r;
}

/* ---- extract ---- */

DEFINE_CLEANUP_FUNC(struct archive *, archive_read_free);

/* Whether a refused entry is one no archive of a workspace holds (ArchiveLimits.refuse_forged):
 * its name is absolute or not plain, or it is of a type a workspace's archive never carries (a hard
 * link has none: GNU tar writes them). Its name as stored, its S_IFMT bits. */
static bool entry_is_forged(const char *name, mode_t type, bool hardlink) {
        const char *rel;
        size_t l;

        if (!name || name[0] == '/')
                return true;
        rel = startswith(name, "./") ?: name;
        l = strlen(rel);
        if (l == 0 || l > 4096)
                return false; /* the root itself; a name too long is only left out */
        {
                char buf[4097];

                memcpy(buf, rel, l + 1);
                if (buf[l - 1] == '/')
                        buf[l - 1] = 0;
                if (buf[0] && !relative_path_is_plain(buf))
                        return true;
        }
        return !hardlink && !(type == S_IFREG || type == S_IFDIR || type == S_IFLNK || type == S_IFIFO);
}

/* The names of the symlink entries seen so far (as stored, without "./" and a trailing slash): an
 * entry below one is written through a link, which no real tree has. A hash set of FNV-1a hashes,
 * so that each entry's parents are looked up in one pass over its name. */
#define LINK_NAMES_BYTES_MAX (16U << 20)

typedef struct LinkName {
        uint64_t hash;
        char *name;             /* NULL: free slot */
        size_t len;
} LinkName;

typedef struct LinkSet {
        LinkName *slots;
        size_t n, n_slots;      /* n_slots: a power of two */
        uint64_t bytes;
} LinkSet;

static void link_set_done(LinkSet *set) {
        for (size_t i = 0; i < set->n_slots; i++)
                free(set->slots[i].name);
        free(set->slots);
}

static uint64_t fnv1a(uint64_t h, char c) {
        return (h ^ (uint8_t) c) * 0x100000001b3ULL;
}

#define FNV1A_INIT 0xcbf29ce484222325ULL

static bool link_set_has(const LinkSet *set, uint64_t hash, const char *name, size_t len) {
        if (set->n == 0)
                return false;
        for (size_t i = hash & (set->n_slots - 1);; i = (i + 1) & (set->n_slots - 1)) {
                const LinkName *e = &set->slots[i];
                if (!e->name)
                        return false;
                if (e->hash == hash && e->len == len && memcmp(e->name, name, len) == 0)
                        return true;
        }
}

static void link_set_put(LinkSet *set, LinkName e) {
        size_t i = e.hash & (set->n_slots - 1);

        while (set->slots[i].name)
                i = (i + 1) & (set->n_slots - 1);
        set->slots[i] = e;
        set->n++;
}

/* -EFBIG past LINK_NAMES_BYTES_MAX: over the limits, as too many entries are. */
static int link_set_add(LinkSet *set, uint64_t hash, const char *name, size_t len) {
        LinkName e = { .hash = hash, .len = len };

        if (link_set_has(set, hash, name, len))
                return 0;
        if (set->bytes + len > LINK_NAMES_BYTES_MAX)
                return -EFBIG;
        if ((set->n + 1) * 2 > set->n_slots) {
                LinkSet grown = { .n_slots = MAX(set->n_slots * 2, (size_t) 64), .bytes = set->bytes };

                grown.slots = calloc(grown.n_slots, sizeof(LinkName));
                if (!grown.slots)
                        return -ENOMEM;
                for (size_t i = 0; i < set->n_slots; i++)
                        if (set->slots[i].name)
                                link_set_put(&grown, set->slots[i]);
                free(set->slots);
                *set = grown;
        }
        e.name = strndup(name, len);
        if (!e.name)
                return -ENOMEM;
        link_set_put(set, e);
        set->bytes += len;
        return 0;
}

/* An entry below a symlink entry (-EPERM), or, the entry a symlink itself, recorded. */
static int check_written_through_link(LinkSet *set, const char *name, mode_t type) {
        const char *rel = startswith(name, "./") ?: name;
        size_t l = strlen(rel);
        uint64_t h = FNV1A_INIT;

        if (l > 0 && rel[l - 1] == '/')
                l--;
        for (size_t i = 0; i < l; i++) {
                if (rel[i] == '/' && link_set_has(set, h, rel, i))
                        return -EPERM;
                h = fnv1a(h, rel[i]);
        }
        return type == S_IFLNK && l > 0 ? link_set_add(set, h, rel, l) : 0;
}

/* Reading failed: the stream is no complete gzip'd tar (-EBADMSG), unless what failed was memory
 * (-ENOMEM: it may well be one). */
static int read_error(struct archive *in) {
        return archive_errno(in) == ENOMEM ? -ENOMEM : -EBADMSG;
}

int archive_extract(int in_fd, const ArchiveLimits *limits, uint64_t *ret_extracted) {
        _cleanup_(archive_read_freep) struct archive *in = NULL;
        _cleanup_(archive_write_freep) struct archive *out = NULL;
        _cleanup_(link_set_done) LinkSet links = {};
        struct archive_entry *e;
        uint64_t total = 0, entries = 0;
        int refused = 0, r;

        in = archive_read_new();
        out = archive_write_disk_new();
        if (!in || !out)
                return -ENOMEM;
        archive_read_support_format_tar(in);
        archive_read_support_format_gnutar(in);
        archive_read_support_filter_gzip(in);
        /* Belt and braces on top of our own checks; never owners, never set-id bits. */
        archive_write_disk_set_options(
                out, ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                             ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_TIME |
                             ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_UNLINK);
        if (archive_read_open_fd(in, in_fd, 64 * 1024) != ARCHIVE_OK)
                return read_error(in);

        /* ARCHIVE_WARN (a name not in the locale's charset, an unknown pax keyword) still gives
         * a complete entry; only ARCHIVE_FAILED and worse are not. */
        while ((r = archive_read_next_header(in, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
                const char *name = archive_entry_pathname(e);
                mode_t type = archive_entry_filetype(e);
                int64_t size = archive_entry_size(e);

                if (++entries > limits->max_entries)
                        return -EFBIG;
                if (limits->refuse_forged && name) {
                        r = check_written_through_link(&links, name, type);
                        if (r < 0)
                                return r;
                }
                switch (archive_entry_check(name, type, archive_entry_symlink(e),
                                            archive_entry_hardlink(e))) {
                case ARCHIVE_ENTRY_REFUSE:
                        if (limits->refuse_forged && entry_is_forged(name, type, archive_entry_hardlink(e)))
                                return -EPERM;
                        refused++;
                        _fallthrough_;
                case ARCHIVE_ENTRY_SKIP:
                        continue;
                case ARCHIVE_ENTRY_EXTRACT:
                        break;
                }
                if (size < 0 || total + (uint64_t) size > limits->max_bytes)
                        return -EFBIG;
                total += (uint64_t) size;

                archive_entry_set_perm(e, (archive_entry_perm(e) & 0777) | (type == S_IFDIR ? 0700 : 0600));
                archive_entry_set_uid(e, getuid());
                archive_entry_set_gid(e, getgid());
                if (archive_write_header(out, e) < ARCHIVE_WARN) {
                        refused++;
                        continue;
                }
                if (type == S_IFREG && size > 0) {
                        const void *buf;
                        size_t len;
                        la_int64_t off;

                        while ((r = archive_read_data_block(in, &buf, &len, &off)) == ARCHIVE_OK)
                                if (archive_write_data_block(out, buf, len, off) < ARCHIVE_WARN) {
                                        int error = archive_errno(out);

                                        /* A workspace that filled up holds less than the archive. */
                                        if (error == ENOSPC || error == EDQUOT || error == EFBIG)
                                                return -EFBIG;
                                        break;
                                }
                        if (r != ARCHIVE_EOF && r != ARCHIVE_OK)
                                return read_error(in);
                }
                if (archive_write_finish_entry(out) < ARCHIVE_WARN)
                        refused++;
        }
        if (r != ARCHIVE_EOF)
                return read_error(in);
        if (archive_write_close(out) < ARCHIVE_WARN)
                return -EIO;
        if (ret_extracted)
                *ret_extracted = total;
        return refused;
}
