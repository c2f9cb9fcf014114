/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's pause (PauseSession, ResumeSession; the E2B API's pause, docs/e2b.md): its memory
 * kept without a hypervisor. Every process of the session but its runner — the stateful kernel,
 * a cell running, a prepared sandbox, a template child — is moved into a cgroup below the scope,
 * SESSION_PAUSE_CGROUP, whose cgroup.freeze is 1: the cgroup v2 freezer stops them where they are
 * (also on a hybrid host, where cgroup.freeze is a core file of the unified hierarchy without any
 * controller). The runner stays in the scope and keeps answering, so a release archives and ends
 * a paused session as any other; what is frozen is killed where it is, never thawed first.
 *
 * The scope's directory is found from names alone (systemd's root cgroup, scopebox.slice, the
 * unit) and walked one component at a time, O_NOFOLLOW, each a directory of cgroup2 owned by
 * root: no path a sandbox could make or change is followed. The scope is not delegated; the
 * payload cgroup is ours. Its limits are the scope's (MemoryMax, TasksMax, CPUQuota bind every
 * descendant). */
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
/* cgroup.procs of a session: TasksMax processes at most, a line each. */
#define CGROUP_PROCS_MAX (4U * 1024U * 1024U)
/* A pass moves what the scope holds; only what forked in between is left for the next. */
#define PAUSE_SWEEP_PASSES_MAX 64U
/* While paused: what joined the scope since (a template child of a cell that was starting) is
 * moved into the frozen cgroup this soon. */
#define PAUSE_SWEEP_INTERVAL_USEC (250 * USEC_PER_MSEC)
/* The runner's name in /proc/<pid>/status (its comm, 15 characters at most). */
#define RUNNER_COMM "scopebox-runner"

/* A line of cgroup.procs. 0 stands for a process outside our PID namespace: none of a session's. */
static int parse_pid(const char *s, pid_t *ret) {
        uint64_t v;

        if (safe_atou64(s, &v) < 0 || v > INT32_MAX)
                return -EBADMSG;
        *ret = (pid_t) v;
        return 0;
}

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

static int session_open_payload_cgroup(Session *s, bool create) {
        int r;

        if (s->pause.payload_fd >= 0)
                return 0;
        r = session_open_scope_cgroup(s);
        if (r < 0)
                return r;
        if (create && mkdirat(s->pause.scope_fd, SESSION_PAUSE_CGROUP, 0755) < 0 && errno != EEXIST)
                return -errno;
        r = cgroup_open_dir(s->pause.scope_fd, SESSION_PAUSE_CGROUP);
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

static int cgroup_read(int dir_fd, const char *file, char **ret) {
        _cleanup_close_ int fd = -EBADF;

        fd = openat(dir_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return read_full_fd(fd, CGROUP_PROCS_MAX, ret, NULL);
}

/* The value of 'key' in /proc/<pid>/status text (up to its newline), or NULL. */
static const char *status_field(const char *text, const char *key, size_t *ret_len) {
        size_t l = strlen(key);

        for (const char *line = text; line && *line;) {
                const char *end = strchrnul(line, '\n');

                if ((size_t) (end - line) > l + 1 && strneq(line, key, l) && line[l] == ':' &&
                    line[l + 1] == '\t') {
                        *ret_len = (size_t) (end - line) - l - 2;
                        return line + l + 2;
                }
                line = *end ? end + 1 : NULL;
        }
        return NULL;
}

/* The runner (or a helper it forked without a new PID namespace): root, in our PID namespace (one
 * number in NSpid), named scopebox-runner. A sandbox's processes are in namespaces of their own
 * under their pool uid; a template child is named otherwise. A process we can't see (not root:
 * ProtectProc=) or that is gone is no runner. */
static bool process_is_runner(pid_t pid) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *name, *uid, *nspid;
        size_t n_name, n_uid, n_nspid;
        char path[64];

        (void) snprintf(path, sizeof(path), "/proc/%i/status", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read_full_fd(fd, PROC_FILE_MAX, &text, NULL) < 0)
                return false;
        name = status_field(text, "Name", &n_name);
        uid = status_field(text, "Uid", &n_uid);
        nspid = status_field(text, "NSpid", &n_nspid);
        return name && uid && nspid && n_name == strlen(RUNNER_COMM) && strneq(name, RUNNER_COMM, n_name) &&
               n_uid == strlen("0\t0\t0\t0") && strneq(uid, "0\t0\t0\t0", n_uid) &&
               !memchr(nspid, '\t', n_nspid);
}

/* Moves every process of the scope but the runner into the payload cgroup, until none is left.
 * Returns how many were moved. */
static int session_pause_sweep(Session *s) {
        _cleanup_close_ int procs_fd = -EBADF;
        int moved = 0;

        procs_fd = openat(s->pause.payload_fd, "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (procs_fd < 0)
                return -errno;
        for (unsigned pass = 0; pass < PAUSE_SWEEP_PASSES_MAX; pass++) {
                _cleanup_free_ char *text = NULL;
                int in_pass = 0, r;

                r = cgroup_read(s->pause.scope_fd, "cgroup.procs", &text);
                if (r < 0)
                        return r;
                for (char *line = text, *next; line && *line; line = next) {
                        char number[32];
                        pid_t pid;

                        next = strchr(line, '\n');
                        if (next)
                                *next++ = 0;
                        if (parse_pid(line, &pid) < 0)
                                return -EBADMSG;
                        if (pid == 0 || process_is_runner(pid))
                                continue;
                        (void) snprintf(number, sizeof(number), "%i", (int) pid);
                        if (write(procs_fd, number, strlen(number)) < 0) {
                                if (errno == ESRCH)
                                        continue; /* it ended */
                                return -errno;
                        }
                        in_pass++;
                }
                if (in_pass == 0)
                        return moved;
                moved += in_pass;
        }
        return -EBUSY;
}

static int on_pause_sweep(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;
        int r;

        if (!s->pause.paused || session_state_is_ending(s->state))
                return 0;
        r = session_open_payload_cgroup(s, false);
        if (r >= 0)
                r = session_pause_sweep(s);
        if (r > 0)
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-pause-swept"),
                           "Froze %i process(es) that joined paused session %s.", r, s->id);
        else if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to look for processes that joined paused session %s: %m", s->id);
        (void) sd_event_source_set_time_relative(source, PAUSE_SWEEP_INTERVAL_USEC);
        (void) sd_event_source_set_enabled(source, SD_EVENT_ON);
        return 0;
}

static void session_pause_arm_sweep(Session *s) {
        int r;

        if (s->pause.sweep_timer) {
                (void) sd_event_source_set_time_relative(s->pause.sweep_timer, PAUSE_SWEEP_INTERVAL_USEC);
                (void) sd_event_source_set_enabled(s->pause.sweep_timer, SD_EVENT_ON);
                return;
        }
        r = sd_event_add_time_relative(s->manager->event, &s->pause.sweep_timer, CLOCK_MONOTONIC,
                                       PAUSE_SWEEP_INTERVAL_USEC, 10 * USEC_PER_MSEC, on_pause_sweep, s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to arm the sweep of paused session %s: %m", s->id);
}

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

/* Whether the scope holds its runner as we recognise it: otherwise a sweep would freeze it too,
 * and nothing could answer for the session any more. */
static int session_scope_has_runner(Session *s) {
        _cleanup_free_ char *text = NULL;
        int r;

        r = cgroup_read(s->pause.scope_fd, "cgroup.procs", &text);
        if (r < 0)
                return r;
        for (char *line = text, *next; line && *line; line = next) {
                pid_t pid;

                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                if (parse_pid(line, &pid) >= 0 && pid > 0 && process_is_runner(pid))
                        return 0;
        }
        return -ESRCH;
}

int session_pause(Session *s) {
        int r;

        if (s->pause.paused)
                return -EALREADY;
        r = session_open_payload_cgroup(s, true);
        if (r >= 0)
                r = session_scope_has_runner(s);
        if (r < 0)
                return r;
        /* Frozen first: whatever is moved in stops on arrival, and forks no more. */
        r = cgroup_write(s->pause.payload_fd, "cgroup.freeze", "1");
        if (r >= 0)
                r = session_pause_sweep(s);
        if (r < 0) {
                (void) cgroup_write(s->pause.payload_fd, "cgroup.freeze", "0");
                return r;
        }
        s->pause.paused = true;
        session_pause_fail_queued(s);
        session_pause_arm_sweep(s);
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
        r = session_open_payload_cgroup(s, false);
        if (r >= 0)
                r = cgroup_write(s->pause.payload_fd, "cgroup.freeze", "0");
        if (r < 0)
                return r;
        s->pause.paused = false;
        s->pause.sweep_timer = sd_event_source_disable_unref(s->pause.sweep_timer);
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
        s->pause.sweep_timer = sd_event_source_disable_unref(s->pause.sweep_timer);
        r = session_open_payload_cgroup(s, false);
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
        p->sweep_timer = sd_event_source_disable_unref(p->sweep_timer);
        p->scope_fd = safe_close(p->scope_fd);
        p->payload_fd = safe_close(p->payload_fd);
}

void session_pause_load(Session *s, json_object *o) {
        json_object *v;

        if (!json_object_object_get_ex(o, "paused", &v) || !json_object_is_type(v, json_type_boolean) ||
            !json_object_get_boolean(v))
                return;
        s->pause.paused = true;
        session_pause_arm_sweep(s);
}
