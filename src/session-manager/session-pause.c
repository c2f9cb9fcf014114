/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's pause (PauseSession, ResumeSession; the E2B API's pause, docs/e2b.md): its memory
 * kept without a hypervisor. Every sandbox of the session — the stateful kernel, a cell running, a
 * prepared sandbox, a command — lives in the cgroup RUNNER_PAYLOAD_CGROUP below the scope from its
 * first instruction (its PID 1 moves itself in, a template child joins it; runner.h), and the
 * pause writes 1 to that cgroup's cgroup.freeze: the cgroup v2 freezer stops them where they are
 * (also on a hybrid host, where cgroup.freeze is a core file of the unified hierarchy without any
 * controller). No process is ever moved here, so none by a number that might be another's by then.
 * The runner stays in the scope and keeps answering, so a release archives and ends a paused
 * session as any other; what is frozen is killed where it is, never thawed first.
 *
 * The scope's directory is found from names alone (systemd's root cgroup, scopebox.slice, the
 * unit) and walked one component at a time, O_NOFOLLOW, each a directory of a cgroup file system
 * owned by root: no path a sandbox could make or change is followed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "cgroup-events.h"
#include "io-util.h"
#include "log.h"
#include "manager.h"
#include "parse-util.h"
#include "session-pause.h"
#include "session-private.h"
#include "session.h"
#include "string-util.h"
#include "time-util.h"

#define PROC_FILE_MAX (64U * 1024U)

/* A directory of a cgroup file system owned by root, below 'dir_fd', never through a symlink. */
static int cgroup_open_dir(int dir_fd, const char *name) {
        _cleanup_close_ int fd = -EBADF;
        struct statfs sfs;
        struct stat st;

        if (isempty(name) || streq(name, ".") || streq(name, "..") || strchr(name, '/'))
                return -EINVAL;
        fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstatfs(fd, &sfs) < 0 || fstat(fd, &st) < 0)
                return -errno;
        if ((sfs.f_type != CGROUP2_SUPER_MAGIC && sfs.f_type != CGROUP_SUPER_MAGIC) || st.st_uid != 0)
                return -EPERM;
        return TAKE_FD(fd);
}

/* The root of a hierarchy: the unified one ("" : /sys/fs/cgroup itself on v2, its "unified" on a
 * hybrid host), or a v1 one by its directory ("memory"). */
static int cgroup_open_hierarchy(const char *hierarchy) {
        _cleanup_close_ int fd = -EBADF;
        struct statfs sfs;
        int r;

        fd = open("/sys/fs/cgroup", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        if (isempty(hierarchy) && sfs.f_type == CGROUP2_SUPER_MAGIC)
                return TAKE_FD(fd);
        r = cgroup_open_dir(fd, isempty(hierarchy) ? "unified" : hierarchy);
        return r == -ENOENT || r == -EPERM ? -EOPNOTSUPP : r;
}

/* systemd's root cgroup in the hierarchy that has 'controller' (NULL: the unified one), and that
 * hierarchy's directory: PID 1's cgroup there without "/init.scope" (as systemd finds its own). */
static int systemd_root_cgroup(const char *controller, char **ret_hierarchy, char **ret_root) {
        _cleanup_free_ char *text = NULL, *hierarchy = NULL, *path = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = open("/proc/1/cgroup", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = read_full_fd(fd, PROC_FILE_MAX, &text, NULL);
        if (r < 0)
                return r;
        /* No v1 hierarchy has a controller named so: the unified one. */
        r = cgroup_path_for_controller(text, controller ?: "-", &hierarchy, &path);
        if (r == -ENOENT)
                return -EOPNOTSUPP;
        if (r < 0)
                return r;
        if (endswith(path, "/init.scope"))
                path[strlen(path) - strlen("/init.scope")] = 0;
        *ret_hierarchy = TAKE_PTR(hierarchy);
        *ret_root = TAKE_PTR(path);
        return 0;
}

int session_scope_cgroup_open(Session *s, const char *controller) {
        _cleanup_free_ char *hierarchy = NULL, *root = NULL, *path = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r;

        if (!controller && s->pause.scope_fd >= 0) {
                int copy = fcntl(s->pause.scope_fd, F_DUPFD_CLOEXEC, 3);
                return copy < 0 ? -errno : copy;
        }
        r = systemd_root_cgroup(controller, &hierarchy, &root);
        if (r < 0)
                return r;
        if (asprintf(&path, "%s/" MANAGER_SLICE "/%s", root, s->unit) < 0)
                return -ENOMEM;
        fd = cgroup_open_hierarchy(startswith(hierarchy, "name=") ?: hierarchy);
        if (fd < 0)
                return fd;
        for (char *p = path, *slash; p && *p; p = slash ? slash + 1 : NULL) {
                int next;

                slash = strchr(p, '/');
                if (slash)
                        *slash = 0;
                if (*p == 0)
                        continue;
                next = cgroup_open_dir(fd, p);
                if (next < 0)
                        return next;
                safe_close(fd);
                fd = next;
        }
        return TAKE_FD(fd);
}

/* The scope's directory in the unified hierarchy, kept. */
static int session_open_scope_cgroup(Session *s) {
        int fd;

        if (s->pause.scope_fd >= 0)
                return 0;
        fd = session_scope_cgroup_open(s, NULL);
        if (fd < 0)
                return fd;
        s->pause.scope_fd = fd;
        return 0;
}

/* The sandboxes' cgroup, made by the session's runner: -EOPNOTSUPP for a session whose runner
 * made none (it predates the pause, or the host has no unified hierarchy). */
static int session_open_payload_cgroup(Session *s) {
        int r;

        if (s->pause.payload_fd >= 0)
                return 0;
        r = session_open_scope_cgroup(s);
        if (r < 0)
                return r;
        r = cgroup_open_dir(s->pause.scope_fd, SESSION_PAUSE_CGROUP);
        if (r == -ENOENT)
                return -EOPNOTSUPP;
        if (r < 0)
                return r;
        s->pause.payload_fd = r;
        return 0;
}

static int cgroup_write(int dir_fd, const char *file, const char *value) {
        _cleanup_close_ int fd = -EBADF;

        fd = openat(dir_fd, file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        if (write(fd, value, strlen(value)) < 0)
                return -errno;
        return 0;
}

/* The value of 'key' in /proc/<pid>/status text (up to its newline), or NULL. */
/* Client calls still queued: they would run on a frozen session. Our own (queued in front, no
 * queue timer: an archive's, a ping) stay. */
static void session_pause_fail_queued(Session *s) {
        for (;;) {
                RunnerRequest *q = s->queue_head;

                /* From the head again after each: a callback may change the queue. */
                while (q && !q->queue_timer)
                        q = q->queue_next;
                if (!q)
                        return;
                (void) session_unqueue(s, q);
                q->callback(s, -ESTRPIPE, BUS_MESSAGE_SESSION_PAUSED, NULL, -EBADF, q->userdata);
                runner_request_free(q);
        }
}

int session_pause(Session *s) {
        int r;

        if (s->pause.paused)
                return -EALREADY;
        r = session_open_payload_cgroup(s);
        if (r >= 0)
                r = cgroup_write(s->pause.payload_fd, "cgroup.freeze", "1");
        if (r < 0)
                return r;
        s->pause.paused = true;
        session_pause_fail_queued(s);
        r = session_save_state(s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to record that session %s is paused: %m", s->id);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-paused"),
                   "Paused session %s.", s->id);
        return 0;
}

int session_resume(Session *s) {
        int r;

        if (!s->pause.paused)
                return 0;
        r = session_open_payload_cgroup(s);
        if (r >= 0)
                r = cgroup_write(s->pause.payload_fd, "cgroup.freeze", "0");
        if (r < 0)
                return r;
        s->pause.paused = false;
        r = session_save_state(s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to record that session %s runs again: %m", s->id);
        session_touch(s);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-resumed"),
                   "Resumed session %s.", s->id);
        /* Calls of ours that waited (none of a client's: they were refused). */
        session_kick(s);
        return 1;
}

void session_pause_end(Session *s) {
        int r;

        if (!s->pause.paused)
                return;
        s->pause.paused = false;
        r = session_open_payload_cgroup(s);
        if (r >= 0)
                r = cgroup_write(s->pause.payload_fd, "cgroup.kill", "1");
        /* Otherwise (Linux before 5.14: no cgroup.kill) the scope's stop kills them: the runner
         * ends its sandboxes at SIGTERM, systemd sends SIGKILL after TimeoutStopUSec=, and either
         * reaches a frozen process. */
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to kill the frozen processes of session %s, its scope's stop will: %m",
                           s->id);
}

void session_pause_done(SessionPause *p) {
        p->scope_fd = safe_close(p->scope_fd);
        p->payload_fd = safe_close(p->payload_fd);
}

void session_pause_load(Session *s, json_object *o) {
        json_object *v;

        if (!json_object_object_get_ex(o, "paused", &v) || !json_object_is_type(v, json_type_boolean) ||
            !json_object_get_boolean(v))
                return;
        s->pause.paused = true;
}
