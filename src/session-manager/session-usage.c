/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a session uses (GetSessionUsage; the E2B API's metrics, docs/e2b.md): read from its scope's
 * cgroup files, which count every process of the session, paused or not. CPU time from the unified
 * hierarchy's cpu.stat (a core file, there without the cpu controller too); memory from the
 * hierarchy that has the memory controller: memory.current and memory.stat's "file" and "shmem"
 * on cgroup v2, memory.usage_in_bytes and memory.stat's "total_cache" and "total_shmem" on v1.
 * The session's file systems are tmpfs: what they hold is its shmem. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include "cgroup-events.h"
#include "io-util.h"
#include "macro.h"
#include "parse-util.h"
#include "session-pause.h"
#include "session-usage.h"
#include "session.h"
#include "string-util.h"
#include "time-util.h"

#define CGROUP_FILE_MAX (64U * 1024U)

static int cgroup_read_file(int dir_fd, const char *name, char **ret) {
        _cleanup_close_ int fd = -EBADF;

        fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return read_full_fd(fd, CGROUP_FILE_MAX, ret, NULL);
}

static int cgroup_read_number(int dir_fd, const char *name, uint64_t *ret) {
        _cleanup_free_ char *text = NULL;
        int r;

        r = cgroup_read_file(dir_fd, name, &text);
        if (r < 0)
                return r;
        text[strcspn(text, "\n")] = 0;
        return safe_atou64(text, ret) < 0 ? -EBADMSG : 0;
}

static int cgroup_read_key(int dir_fd, const char *name, const char *key, uint64_t *ret) {
        _cleanup_free_ char *text = NULL;
        int r;

        r = cgroup_read_file(dir_fd, name, &text);
        if (r < 0)
                return r;
        return cgroup_keyed_value(text, key, ret);
}

static int session_memory_usage(Session *s, SessionUsage *u) {
        _cleanup_close_ int fd = -EBADF;
        struct statfs sfs;
        bool v2;
        int r;

        fd = session_scope_cgroup_open(s, "memory");
        if (fd < 0)
                return fd;
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        v2 = sfs.f_type == CGROUP2_SUPER_MAGIC;
        r = cgroup_read_number(fd, v2 ? "memory.current" : "memory.usage_in_bytes", &u->memory_bytes);
        if (r >= 0)
                r = cgroup_read_key(fd, "memory.stat", v2 ? "file" : "total_cache", &u->memory_cache_bytes);
        if (r >= 0)
                r = cgroup_read_key(fd, "memory.stat", v2 ? "shmem" : "total_shmem", &u->files_bytes);
        return r;
}

int session_usage(Session *s, SessionUsage *ret, SessionUsage *ret_previous) {
        _cleanup_close_ int fd = -EBADF;
        SessionUsage u = { .sampled_usec = now_usec(CLOCK_REALTIME) };
        int r;

        fd = session_scope_cgroup_open(s, NULL);
        if (fd < 0)
                return fd;
        r = cgroup_read_key(fd, "cpu.stat", "usage_usec", &u.cpu_usec);
        if (r < 0)
                return r;
        r = session_memory_usage(s, &u);
        if (r < 0)
                return r;
        *ret_previous = s->usage.sampled_usec > 0
                                ? s->usage
                                : (SessionUsage) { .sampled_usec = s->created_realtime_usec };
        s->usage = u;
        *ret = u;
        return 0;
}
