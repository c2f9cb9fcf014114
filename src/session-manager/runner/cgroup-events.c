/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel's limit event counters of the runner's own cgroup (cgroup v1, v2 and hybrid). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup-events.h"
#include "io-util.h"
#include "macro.h"
#include "parse-util.h"
#include "string-util.h"

#define PROC_CGROUP_MAX (64U * 1024U)
#define EVENTS_FILE_MAX 4096U

static bool controller_listed(const char *list, size_t n, const char *controller) {
        size_t l = strlen(controller);

        /* "cpu,cpuacct": whole words only. */
        for (const char *p = list; p < list + n;) {
                const char *comma = memchr(p, ',', (size_t) (list + n - p));
                size_t w = comma ? (size_t) (comma - p) : (size_t) (list + n - p);

                if (w == l && memcmp(p, controller, l) == 0)
                        return true;
                if (!comma)
                        break;
                p = comma + 1;
        }
        return false;
}

int cgroup_path_for_controller(const char *proc_cgroup, const char *controller, char **ret_hierarchy,
                               char **ret_path) {
        const char *unified = NULL, *unified_end = NULL;

        for (const char *line = proc_cgroup; line && *line;) {
                const char *end = strchrnul(line, '\n'), *c1, *c2;

                c1 = memchr(line, ':', (size_t) (end - line));
                c2 = c1 ? memchr(c1 + 1, ':', (size_t) (end - c1 - 1)) : NULL;
                if (c2 && c2[1] == '/') {
                        if (c2 == c1 + 1 && strncmp(line, "0:", 2) == 0) {
                                unified = c2 + 1;
                                unified_end = end;
                        } else if (controller_listed(c1 + 1, (size_t) (c2 - c1 - 1), controller)) {
                                char *h = strndup(c1 + 1, (size_t) (c2 - c1 - 1)),
                                     *p = strndup(c2 + 1, (size_t) (end - c2 - 1));
                                if (!h || !p) {
                                        free(h);
                                        free(p);
                                        return -ENOMEM;
                                }
                                *ret_hierarchy = h;
                                *ret_path = p;
                                return 0;
                        }
                }
                line = *end ? end + 1 : NULL;
        }
        if (!unified)
                return -ENOENT;

        *ret_hierarchy = strdup("");
        *ret_path = strndup(unified, (size_t) (unified_end - unified));
        if (!*ret_hierarchy || !*ret_path) {
                free(*ret_hierarchy);
                free(*ret_path);
                return -ENOMEM;
        }
        return 0;
}

int cgroup_keyed_value(const char *text, const char *key, uint64_t *ret) {
        size_t l = strlen(key);

        for (const char *line = text; line && *line;) {
                const char *end = strchrnul(line, '\n');

                if ((size_t) (end - line) > l + 1 && strncmp(line, key, l) == 0 && line[l] == ' ') {
                        char number[32];
                        size_t n = (size_t) (end - line) - l - 1;

                        if (n >= sizeof(number))
                                return -EBADMSG;
                        memcpy(number, line + l + 1, n);
                        number[n] = 0;
                        return safe_atou64(number, ret) < 0 ? -EBADMSG : 0;
                }
                line = *end ? end + 1 : NULL;
        }
        return -ENOENT;
}

/* The counter's file in the hierarchy that has 'controller'. The unified hierarchy is at the root
 * itself (v2) or at "unified" below it (hybrid). */
static int cgroup_events_open_one(const char *root, const char *proc_cgroup, const char *controller,
                                  const char *v1_file, const char *v2_file) {
        _cleanup_free_ char *hierarchy = NULL, *path = NULL, *file = NULL;
        int fd;

        if (cgroup_path_for_controller(proc_cgroup, controller, &hierarchy, &path) < 0)
                return -ENOENT;
        if (*hierarchy) {
                if (asprintf(&file, "%s/%s%s/%s", root, hierarchy, path, v1_file) < 0)
                        return -ENOMEM;
                fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                return fd < 0 ? -errno : fd;
        }
        if (asprintf(&file, "%s%s/%s", root, path, v2_file) < 0)
                return -ENOMEM;
        fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd >= 0)
                return fd;
        free(file);
        if (asprintf(&file, "%s/unified%s/%s", root, path, v2_file) < 0)
                return -ENOMEM;
        fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        return fd < 0 ? -errno : fd;
}

void cgroup_events_open(const char *root, CgroupEvents *ret) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;

        *ret = (CgroupEvents) CGROUP_EVENTS_NULL;
        fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read_full_fd(fd, PROC_CGROUP_MAX, &text, NULL) < 0)
                return;
        ret->fd[CGROUP_EVENT_OOM_KILL] = cgroup_events_open_one(root, text, "memory", "memory.oom_control",
                                                                "memory.events");
        ret->fd[CGROUP_EVENT_PIDS_MAX] =
                cgroup_events_open_one(root, text, "pids", "pids.events", "pids.events");
}

void cgroup_events_close(CgroupEvents *e) {
        for (unsigned i = 0; i < _CGROUP_EVENT_MAX; i++)
                e->fd[i] = safe_close(e->fd[i]);
}

uint64_t cgroup_events_get(const CgroupEvents *e, CgroupEventKind kind) {
        static const char *const keys[_CGROUP_EVENT_MAX] = {
                [CGROUP_EVENT_OOM_KILL] = "oom_kill",
                [CGROUP_EVENT_PIDS_MAX] = "max",
        };
        _cleanup_free_ char *text = NULL;
        uint64_t v;

        if (e->fd[kind] < 0 || lseek(e->fd[kind], 0, SEEK_SET) < 0 ||
            read_full_fd(e->fd[kind], EVENTS_FILE_MAX, &text, NULL) < 0 ||
            cgroup_keyed_value(text, keys[kind], &v) < 0)
                return 0;
        return v;
}
