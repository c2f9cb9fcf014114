/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The wire forms of envd's filesystem RPCs (e2b-fs.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "connect-rpc.h"
#include "e2b-fs.h"
#include "macro.h"
#include "path-util.h"
#include "string-util.h"

/* The directories of the sandbox that are the workspace: its home, and the workspace itself. */
static const char *const e2b_fs_roots[] = { E2B_HOME, WORKSPACE_PATH };

int e2b_fs_path(const char *p, size_t n, char **ret_relative, const char **ret_root) {
        _cleanup_free_ char *abs = NULL, *inside = NULL;
        int r;

        if (memchr(p, 0, n))
                return -EINVAL;
        if (!utf8_is_valid_n(p, n))
                return -EILSEQ;
        if (n > WORKSPACE_PATH_MAX)
                return -ENAMETOOLONG;
        /* As envd resolves them: "~" is the home, a relative path (also "") is below it. */
        if (n == 0 || streq(p, "~"))
                abs = strdup(E2B_HOME);
        else if (p[0] == '/')
                abs = strdup(p);
        else if (asprintf(&abs, "%s/%s", E2B_HOME, p + (startswith(p, "~/") ? 2 : 0)) < 0)
                abs = NULL;
        if (!abs)
                return -ENOMEM;

        /* The name it starts with, component by component ("/home/username" is not the home); then
         * the rest as the workspace's, normalised: ".." may not leave it. */
        for (size_t i = 0; i < ELEMENTSOF(e2b_fs_roots); i++) {
                const char *rest = startswith(abs, e2b_fs_roots[i]);

                if (!rest || (*rest != 0 && *rest != '/'))
                        continue;
                if (asprintf(&inside, "%s%s", WORKSPACE_PATH, rest) < 0)
                        return -ENOMEM;
                r = workspace_path_normalize(inside, ret_relative);
                if (r == -EXDEV)
                        return -EPERM;
                if (r < 0)
                        return r;
                *ret_root = e2b_fs_roots[i];
                return 0;
        }
        return -EPERM;
}

char *e2b_fs_path_show(const char *root, const char *relative) {
        char *s;

        if (asprintf(&s, "%s%s%s", root, *relative ? "/" : "", relative) < 0)
                return NULL;
        return s;
}

void e2b_fs_permissions(uint32_t mode, char ret[static 24]) {
        /* Go's FileMode letters in Go's order ("dalTLDpSugct?"; the kernel sets no 'a', 'l', 'T' or
         * '?'), then the nine permission bits. */
        const char *rwx = "rwxrwxrwx";
        size_t o = 0;

        switch (mode & S_IFMT) {
        case S_IFDIR:
                ret[o++] = 'd';
                break;
        case S_IFLNK:
                ret[o++] = 'L';
                break;
        case S_IFBLK:
        case S_IFCHR:
                ret[o++] = 'D';
                break;
        case S_IFIFO:
                ret[o++] = 'p';
                break;
        case S_IFSOCK:
                ret[o++] = 'S';
                break;
        default:
                break;
        }
        if (mode & S_ISUID)
                ret[o++] = 'u';
        if (mode & S_ISGID)
                ret[o++] = 'g';
        if ((mode & S_IFMT) == S_IFCHR)
                ret[o++] = 'c';
        if (mode & S_ISVTX)
                ret[o++] = 't';
        if (o == 0)
                ret[o++] = '-';
        for (unsigned i = 0; i < 9; i++)
                ret[o++] = mode & (1U << (8 - i)) ? rwx[i] : '-';
        ret[o] = 0;
}

int e2b_fs_timestamp(int64_t nsec, char ret[static 40]) {
        int64_t sec = nsec / 1000000000, frac = nsec % 1000000000;
        time_t t;
        struct tm tm;
        int k;

        if (frac < 0) {
                frac += 1000000000;
                sec--;
        }
        t = (time_t) sec;
        if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 1 || tm.tm_year + 1900 > 9999)
                return -ERANGE;
        k = snprintf(ret, 40, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
        if (frac != 0)
                k += snprintf(ret + k, (size_t) (40 - k), ".%09d", (int) frac);
        (void) snprintf(ret + k, (size_t) (40 - k), "Z");
        return 0;
}

static const char *e2b_fs_file_type(const char *type) {
        if (streq(type, "file"))
                return "FILE_TYPE_FILE";
        if (streq(type, "dir"))
                return "FILE_TYPE_DIRECTORY";
        if (streq(type, "symlink"))
                return "FILE_TYPE_SYMLINK";
        /* Devices, sockets, pipes: the SDK leaves such entries out of a listing. */
        return "FILE_TYPE_UNSPECIFIED";
}

static int e2b_fs_append_member(JsonWriter *w, const char *key, const char *value) {
        (void) json_writer_appendf(w, ",\"%s\":", key);
        return json_writer_append_string_lossy(w, value, strlen(value));
}

int e2b_fs_entry_append(JsonWriter *w, const E2bFsEntry *e, const char *root) {
        _cleanup_free_ char *shown = e2b_fs_path_show(root, e->path);
        char permissions[24], when[40];
        const char *name;

        if (!shown)
                return -ENOMEM;
        name = strrchr(shown, '/') + 1;
        e2b_fs_permissions(e->mode, permissions);
        (void) json_writer_append_str(w, "{\"name\":");
        (void) json_writer_append_string_lossy(w, name, strlen(name));
        (void) json_writer_appendf(w, ",\"type\":\"%s\"", e2b_fs_file_type(e->type));
        (void) e2b_fs_append_member(w, "path", shown);
        /* int64 is a string in protobuf's JSON; mode is the permission bits only, as envd's. */
        (void) json_writer_appendf(w, ",\"size\":\"%" PRIu64 "\",\"mode\":%u", e->size, e->mode & 0777U);
        (void) e2b_fs_append_member(w, "permissions", permissions);
        (void) e2b_fs_append_member(w, "owner", e->owner);
        (void) e2b_fs_append_member(w, "group", e->group);
        if (e2b_fs_timestamp(e->mtime_nsec, when) >= 0)
                (void) e2b_fs_append_member(w, "modifiedTime", when);
        if (!isempty(e->target))
                (void) e2b_fs_append_member(w, "symlinkTarget", e->target);
        return json_writer_append_str(w, "}");
}

void e2b_fs_snapshot_done(E2bFsSnapshot *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->items[i].path);
        free(s->items);
        *s = (E2bFsSnapshot) {};
}

int e2b_fs_snapshot_add(E2bFsSnapshot *s, const E2bFsEntry *e) {
        char *path;

        if (s->n == s->allocated) {
                size_t n = MAX(s->allocated * 2, (size_t) 64);
                E2bFsSeen *p = reallocarray(s->items, n, sizeof(E2bFsSeen));

                if (!p)
                        return -ENOMEM;
                s->items = p;
                s->allocated = n;
        }
        path = strdup(e->path);
        if (!path)
                return -ENOMEM;
        s->items[s->n++] = (E2bFsSeen) { .path = path,
                                         .type = *e->type ?: 'o',
                                         .size = e->size,
                                         .mode = e->mode,
                                         .mtime_nsec = e->mtime_nsec };
        return 0;
}

static int e2b_fs_seen_cmp(const void *a, const void *b) {
        return strcmp(((const E2bFsSeen *) a)->path, ((const E2bFsSeen *) b)->path);
}

void e2b_fs_snapshot_sort(E2bFsSnapshot *s) {
        if (s->n > 1)
                qsort(s->items, s->n, sizeof(E2bFsSeen), e2b_fs_seen_cmp);
}

/* One message {"filesystem":{"name":...,"type":"EVENT_TYPE_<type>"}} in its envelope. */
static int e2b_fs_event_append(JsonWriter *w, const char *prefix, const char *path, const char *type) {
        _cleanup_(json_writer_done) JsonWriter m = {};
        const char *name = path + strlen(prefix) + (*prefix ? 1 : 0);
        int r;

        (void) json_writer_append_str(&m, "{\"filesystem\":{\"name\":");
        (void) json_writer_append_string_lossy(&m, name, strlen(name));
        r = json_writer_appendf(&m, ",\"type\":\"EVENT_TYPE_%s\"}}", type);
        return r < 0 ? r : connect_envelope_append(w, 0, m.buf.s, m.buf.len);
}

static int e2b_fs_event_created(JsonWriter *w, const char *prefix, const E2bFsSeen *e) {
        int r = e2b_fs_event_append(w, prefix, e->path, "CREATE");

        /* A file made with its bytes at once: what inotify reports as a creation and a write. */
        if (r >= 0 && e->type == 'f' && e->size > 0)
                r = e2b_fs_event_append(w, prefix, e->path, "WRITE");
        return r < 0 ? r : 1 + (e->type == 'f' && e->size > 0);
}

int e2b_fs_watch_diff(const E2bFsSnapshot *old, const E2bFsSnapshot *new, const char *prefix,
                      JsonWriter *w) {
        size_t i = 0, j = 0;
        int n = 0, r = 0;

        while (r >= 0 && (i < old->n || j < new->n)) {
                const E2bFsSeen *a = i < old->n ? &old->items[i] : NULL,
                                *b = j < new->n ? &new->items[j] : NULL;
                int c = !a ? 1 : !b ? -1 : strcmp(a->path, b->path);

                if (c < 0) {
                        /* Gone, unless the new listing was cut and it may be past the cut. */
                        if (!new->truncated)
                                r = e2b_fs_event_append(w, prefix, a->path, "REMOVE"), n += r >= 0;
                        i++;
                } else if (c > 0) {
                        if (!old->truncated)
                                r = e2b_fs_event_created(w, prefix, b), n += MAX(r, 0);
                        j++;
                } else {
                        if (a->type != b->type) {
                                r = e2b_fs_event_append(w, prefix, a->path, "REMOVE");
                                if (r >= 0)
                                        r = e2b_fs_event_created(w, prefix, b), n += 1 + MAX(r, 0);
                        } else if (a->type == 'f' && (a->size != b->size || a->mtime_nsec != b->mtime_nsec))
                                r = e2b_fs_event_append(w, prefix, b->path, "WRITE"), n += r >= 0;
                        if (r >= 0 && a->type == b->type && (a->mode & 07777) != (b->mode & 07777))
                                r = e2b_fs_event_append(w, prefix, b->path, "CHMOD"), n += r >= 0;
                        i++;
                        j++;
                }
        }
        return r < 0 ? r : n;
}
