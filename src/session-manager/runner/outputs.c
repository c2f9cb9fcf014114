/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Snapshots of /workspace/outputs and the artifact selection: what an exec created or changed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc-util.h"
#include "fs-util.h"
#include "macro.h"
#include "outputs.h"

int output_set_add(OutputSet *s, const char *path, uint64_t size, int64_t mtime_nsec) {
        char *p;
        int r;

        if (s->n >= OUTPUTS_SET_MAX) {
                s->truncated = true;
                return 0;
        }
        r = ARRAY_GROW(s->entries, s->allocated, s->n, 64);
        if (r < 0)
                return r;
        p = strdup(path);
        if (!p)
                return -ENOMEM;
        s->entries[s->n++] = (OutputEntry) { .path = p, .size = size, .mtime_nsec = mtime_nsec };
        return 0;
}

static int entry_compare(const void *a, const void *b) {
        return strcmp(((const OutputEntry *) a)->path, ((const OutputEntry *) b)->path);
}

void output_set_sort(OutputSet *s) {
        if (s->n > 1)
                qsort(s->entries, s->n, sizeof(OutputEntry), entry_compare);
}

void output_set_done(OutputSet *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->entries[i].path);
        free(s->entries);
        *s = (OutputSet) {};
}

static int scan_dir(int dir_fd, const char *prefix, unsigned depth, unsigned max_depth, size_t max_entries,
                    OutputSet *s) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        int r;

        r = opendir_at(dir_fd, &d);
        if (r < 0)
                return r;

        FOREACH_DIRENT(de, d, return -errno) {
                _cleanup_free_ char *path = NULL;
                struct stat st;

                if (s->visited >= max_entries) {
                        s->truncated = true;
                        return 0;
                }
                s->visited++;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* vanished */
                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name) < 0)
                        return -ENOMEM;

                if (S_ISREG(st.st_mode)) {
                        r = output_set_add(s, path, (uint64_t) st.st_size,
                                           (int64_t) st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
                        if (r < 0)
                                return r;
                } else if (S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub = -EBADF;

                        if (depth + 1 >= max_depth) {
                                s->truncated = true;
                                continue;
                        }
                        if (s->visited + OUTPUTS_DIR_COST > max_entries) {
                                s->truncated = true;
                                return 0;
                        }
                        s->visited += OUTPUTS_DIR_COST;
                        sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                continue;
                        r = scan_dir(sub, path, depth + 1, max_depth, max_entries, s);
                        if (r < 0)
                                return r;
                }
                /* Symlinks, fifos, sockets and devices are never artifacts. */
        }
        return 0;
}

int output_set_scan(int dir_fd, OutputSet *ret) {
        return output_set_scan_bounded(dir_fd, OUTPUTS_DEPTH_MAX, OUTPUTS_ENTRIES_MAX, ret);
}

int output_set_scan_bounded(int dir_fd, unsigned max_depth, size_t max_entries, OutputSet *ret) {
        OutputSet s = {};
        int r;

        r = scan_dir(dir_fd, "", 0, max_depth, max_entries, &s);
        if (r < 0) {
                output_set_done(&s);
                return r;
        }
        output_set_sort(&s);
        *ret = s;
        return 0;
}

int output_set_diff(const OutputSet *before, const OutputSet *after, OutputEntry ***ret, size_t *ret_n) {
        _cleanup_free_ OutputEntry **list = NULL;
        size_t i = 0, n = 0;

        list = calloc(after->n + 1, sizeof(OutputEntry *));
        if (!list)
                return -ENOMEM;

        for (size_t j = 0; j < after->n; j++) {
                const OutputEntry *a = &after->entries[j];
                int c = 1;

                /* Both lists are sorted: advance through 'before' in step. */
                while (i < before->n && (c = strcmp(before->entries[i].path, a->path)) < 0)
                        i++;
                if (i < before->n && c == 0 && before->entries[i].size == a->size &&
                    before->entries[i].mtime_nsec == a->mtime_nsec)
                        continue;
                list[n++] = (OutputEntry *) a;
        }
        *ret = TAKE_PTR(list);
        *ret_n = n;
        return 0;
}

size_t artifacts_select(OutputEntry *const *changed, size_t n, const ArtifactLimits *limits, bool *chosen) {
        uint64_t files = 0, total = 0;
        size_t skipped = 0;

        for (size_t i = 0; i < n; i++) {
                uint64_t size = changed[i]->size;

                chosen[i] = size <= limits->max_file_bytes && files < limits->max_files &&
                            total + size <= limits->max_total_bytes;
                if (chosen[i]) {
                        files++;
                        total += size;
                } else
                        skipped++;
        }
        return skipped;
}
