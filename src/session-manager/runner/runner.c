/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-runner: the per-session supervisor that lives in the session's transient scope.
 *
 * Started by the session manager with its control socket (already bound and listening) on fd 3.
 * It keeps the session's private filesystems in a mount namespace of its own and runs each exec
 * in fresh PID/mount/network/IPC/UTS namespaces (sandbox.c). It survives restarts of the
 * manager, which reconnects through the socket's path. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "archive-sandbox.h"
#include "cgroup-events.h"
#include "fs-util.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "message-ids.h"
#include "outputs.h"
#include "runner-protocol.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "workspace-archive.h"
#include "workspace.h"
#include "string-util.h"

#define RUNNER_LISTEN_FD 3
#define MATPLOTLIB_CACHE_DIR SCOPEBOX_CACHE_DIR "/matplotlib"
#define SESSION_ROOT_TMPFS_OPTIONS "mode=0700,size=1m,nr_inodes=64"
#define OUTPUT_PIPE_CHUNK (64U * 1024U)
/* After PID 1 of an exec is gone, every writer of the pipes is gone too; this is a safety net. */
#define DRAIN_GRACE_USEC (2 * USEC_PER_SEC)

typedef struct Runner Runner;

typedef struct OutputBuffer {
        char *data;
        size_t size;      /* bytes kept (≤ limit) */
        uint64_t total;   /* bytes seen */
        size_t limit;
        int fd;
        sd_event_source *source;
} OutputBuffer;

typedef struct RunnerExec {
        Runner *runner;
        uint64_t connection_generation;
        char exec_id[64];

        pid_t pid;
        sd_event_source *child_source;
        sd_event_source *timer_source;
        int status_fd;
        OutputBuffer out, err;

        uint64_t timeout_ms;
        ArtifactLimits limits;
        OutputSet before;
        uint64_t started_usec;

        bool exited;
        bool timed_out;
        bool cancelled;           /* the manager's caller hung up: killed as at a timeout */
        bool orphaned;            /* the manager that asked went away: killed the same way */
        siginfo_t init_info;
        /* The scope's limit event counters when the exec started. */
        uint64_t oom_kills_before;
        uint64_t pids_max_before;

        pid_t slirp_pid;          /* the network of this exec, if it has one */
        bool warm;                /* runs in the warm interpreter */
} RunnerExec;

struct Runner {
        sd_event *event;
        char session_id[SESSION_ID_LEN + 1];
        char *session_root;

        int listen_fd;
        sd_event_source *listen_source;
        int conn_fd;
        sd_event_source *conn_source;
        uint64_t connection_generation;

        bool initialized;
        Workspace workspace;
        sd_event_source *backstop_source;
        uint64_t backstop_usec;
        uid_t uid;
        gid_t gid;
        uint64_t workspace_size;
        uint64_t tmp_size;
        uint64_t cpus_percent;
        scmp_filter_ctx seccomp;
        CgroupEvents cgroup_events;   /* of the session's scope, opened at init */

        RunnerExec *exec;
        struct ArchiveJob *archive_job;
        /* outputs/ as the last exec left it: the next exec's "before". Nothing of the session
         * runs between execs, so only our own file operations can change it. */
        OutputSet outputs_snapshot;
        bool outputs_snapshot_valid;

        char *preload_modules;    /* NULL: no warm interpreters */
        struct Warm *warm;
        sd_event_source *warm_timer;
};

/* A sandbox made in advance for the session's next python exec: complete (namespaces, uid,
 * filter) and running preload.py, which has imported the preload modules and waits on ctl_fd for
 * the code. Nothing of the session's code has run in it. */
typedef struct Warm {
        pid_t pid;                /* PID 1 of the sandbox */
        int out_fd, err_fd, status_fd, ctl_fd;
        sd_event_source *child_source;
        sd_event_source *expire_source;  /* its wall-clock bound */
        bool ready;               /* its imports are done */
        struct stat site;         /* the operator's site directory before it was built (zeros: none) */
} Warm;

/* What a sandbox would bind as the operator's site directory: scopeboxctl packages install
 * swaps in a new directory (a new inode); mode and owner decide whether it is used at all. */
static void site_packages_identity(struct stat *ret) {
        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, ret) < 0)
                *ret = (struct stat) {};
}

static bool site_packages_changed(const struct stat *before) {
        struct stat now;

        site_packages_identity(&now);
        return now.st_dev != before->st_dev || now.st_ino != before->st_ino ||
               now.st_mode != before->st_mode || now.st_uid != before->st_uid;
}

static Warm *warm_free(Warm *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(Warm *, warm_free);

/* preload.py says "R" once its imports are done. */
static bool warm_is_ready(Warm *w) {
        char c;

        if (!w->ready && recv(w->ctl_fd, &c, 1, MSG_DONTWAIT) == 1 && c == 'R')
                w->ready = true;
        return w->ready;
}

static Warm *warm_free(Warm *w) {
        if (!w)
                return NULL;
        w->child_source = sd_event_source_disable_unref(w->child_source);
        w->expire_source = sd_event_source_disable_unref(w->expire_source);
        if (w->pid > 0) {
                /* PID 1 takes its namespace with it; SIGKILL makes the wait short. */
                (void) kill(w->pid, SIGKILL);
                (void) waitpid(w->pid, NULL, 0);
        }
        safe_close(w->out_fd);
        safe_close(w->err_fd);
        safe_close(w->status_fd);
        safe_close(w->ctl_fd);
        return mfree(w);
}

static void output_buffer_done(OutputBuffer *b) {
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
        free(b->data);
        *b = (OutputBuffer) { .fd = -EBADF };
}

static RunnerExec *runner_exec_free(RunnerExec *e) {
        if (!e)
                return NULL;
        if (e->pid > 0 && !e->exited) {
                /* PID 1 takes its namespace with it; after SIGKILL the wait is short. */
                (void) kill(e->pid, SIGKILL);
                (void) waitpid(e->pid, NULL, 0);
        }
        if (e->slirp_pid > 0) {
                /* Its namespace is gone with the sandbox; SIGKILL is immediate, so the wait is. */
                (void) kill(e->slirp_pid, SIGKILL);
                (void) waitpid(e->slirp_pid, NULL, 0);
        }
        e->child_source = sd_event_source_disable_unref(e->child_source);
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        output_buffer_done(&e->out);
        output_buffer_done(&e->err);
        safe_close(e->status_fd);
        output_set_done(&e->before);
        free(e);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(RunnerExec *, runner_exec_free);

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

static int runner_send(Runner *r, uint64_t generation, json_object *msg, const int *fds, size_t n_fds) {
        if (r->conn_fd < 0 || generation != r->connection_generation)
                return -ENOTCONN; /* The manager that asked is gone; a new one will ask again. */
        return runner_message_send(r->conn_fd, msg, fds, n_fds);
}

static int runner_send_error(Runner *r, uint64_t generation, int error, const char *fmt, ...) _printf_(4, 5);
static int runner_send_error(Runner *r, uint64_t generation, int error, const char *fmt, ...) {
        _cleanup_json_ json_object *m = NULL;
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        m = json_object_new_object();
        if (!m)
                return -ENOMEM;
        json_object_object_add(m, "ok", json_object_new_boolean(false));
        json_object_object_add(m, "errno", json_object_new_int(abs(error)));
        json_object_object_add(m, "error", json_object_new_string(msg));
        return runner_send(r, generation, m, NULL, 0);
}

static void runner_touch(Runner *r);
static void runner_resume_connection(Runner *r);

/* ---- session setup ---- */

/* matplotlib's font list, built once at install (tools/build-font-cache), copied into the
 * session's writable MPLCONFIGDIR so that the first chart needs no scan of all fonts. It must be
 * the sandbox user's own file: matplotlib rewrites it when fonts change. Missing cache: skip,
 * matplotlib builds its own. */
static void runner_seed_font_cache(Runner *r, int scratch_fd) {
        _cleanup_closedir_ DIR *d = NULL;
        _cleanup_close_ int dst_dir = -EBADF;
        struct dirent *de;

        /* Before the session's first exec: nothing of it exists yet to race us. */
        if (mkdirat(scratch_fd, "tmp/matplotlib", 0700) < 0 ||
            (dst_dir = openat(scratch_fd, "tmp/matplotlib", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
            fchown(dst_dir, r->uid, r->gid) < 0) {
                log_warning_errno(errno, "Failed to create the matplotlib directory, ignoring: %m");
                return;
        }
        d = opendir(MATPLOTLIB_CACHE_DIR);
        if (!d)
                return;
        while ((de = readdir(d))) {
                _cleanup_close_ int in = -EBADF, out = -EBADF;
                struct stat st;
                off_t off = 0;

                if (!startswith(de->d_name, "fontlist-") || !endswith(de->d_name, ".json"))
                        continue;
                in = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20))
                        continue;
                out = openat(dst_dir, de->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (out < 0)
                        continue;
                while (off < st.st_size && sendfile(out, in, &off, (size_t) (st.st_size - off)) > 0)
                        ;
                /* A cut or foreign-owned copy is worse than none: matplotlib would rebuild anyway. */
                if (off != st.st_size || fchown(out, r->uid, r->gid) < 0) {
                        log_debug_errno(errno, "Failed to seed %s, leaving it out: %m", de->d_name);
                        (void) unlinkat(dst_dir, de->d_name, 0);
                }
        }
}

static int runner_setup_session(Runner *r) {
        _cleanup_close_ int ws_fd = -EBADF, scratch_fd = -EBADF;
        const char *ws = strjoina(r->session_root, "/" SESSION_WORKSPACE_DIR);
        const char *scratch = strjoina(r->session_root, "/" SESSION_SCRATCH_DIR);
        const char *view = strjoina(r->session_root, "/view");
        char opts[256];

        /* A mount namespace of our own: the session's filesystems are invisible to everyone else,
         * and vanish with the last process of the session. */
        if (unshare(CLONE_NEWNS) < 0)
                return log_error_errno(errno, "Failed to create the session's mount namespace: %m");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return log_error_errno(errno, "Failed to make mounts private: %m");
        if (mount("tmpfs", r->session_root, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  SESSION_ROOT_TMPFS_OPTIONS) < 0)
                return log_error_errno(errno, "Failed to mount the session root '%s': %m", r->session_root);

        if (mkdir(ws, 0755) < 0 || mkdir(scratch, 0755) < 0 ||
            mkdir(strjoina(r->session_root, "/" SESSION_NEWROOT_DIR), 0755) < 0)
                return log_error_errno(errno, "Failed to create the session's directories: %m");

        /* /workspace: a size-bounded tmpfs owned by the sandbox user; code gets ENOSPC at the quota. */
        snprintf(opts, sizeof(opts), "mode=0755,uid=%u,gid=%u,size=%llu,nr_inodes=%llu", r->uid, r->gid,
                 (unsigned long long) r->workspace_size,
                 (unsigned long long) MAX(r->workspace_size / 4096, 1024ULL));
        if (mount("tmpfs", ws, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
                return log_error_errno(errno, "Failed to mount the workspace: %m");
        ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (ws_fd < 0)
                return log_error_errno(errno, "Failed to open the workspace: %m");
        static const char *const ws_dirs[] = { "uploads", "outputs", "skills" };
        for (size_t i = 0; i < ELEMENTSOF(ws_dirs); i++) {
                _cleanup_close_ int fd = -EBADF;

                if (mkdirat(ws_fd, ws_dirs[i], 0755) < 0 ||
                    (fd = openat(ws_fd, ws_dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
                    fchown(fd, r->uid, r->gid) < 0)
                        return log_error_errno(errno, "Failed to create /workspace/%s: %m", ws_dirs[i]);
        }

        /* /tmp and /home/sandbox share one bounded tmpfs that survives across execs. */
        snprintf(opts, sizeof(opts), "mode=0755,size=%llu,nr_inodes=%llu", (unsigned long long) r->tmp_size,
                 (unsigned long long) MAX(r->tmp_size / 4096, 1024ULL));
        if (mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
                return log_error_errno(errno, "Failed to mount the scratch filesystem: %m");
        scratch_fd = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (scratch_fd < 0)
                return log_error_errno(errno, "Failed to open the scratch filesystem: %m");
        /* A fresh filesystem no process of the session has seen yet; still, ownership and modes
         * are set through fds opened without following links, as everywhere else. */
        {
                _cleanup_close_ int tmp_fd = -EBADF, home_fd = -EBADF;

                if (mkdirat(scratch_fd, "tmp", 01777) < 0 || mkdirat(scratch_fd, "home", 0700) < 0 ||
                    (tmp_fd = openat(scratch_fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
                    (home_fd = openat(scratch_fd, "home", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
                    fchmod(tmp_fd, 01777) < 0 || fchown(home_fd, r->uid, r->gid) < 0)
                        return log_error_errno(errno, "Failed to create /tmp and /home/sandbox: %m");
        }

        runner_seed_font_cache(r, scratch_fd);

        /* The workspace once more, at "workspace" in an otherwise empty directory: the root
         * against which absolute links to /workspace/... are resolved for the file API. */
        if (mkdir(view, 0755) < 0 || mkdir(strjoina(view, "/workspace"), 0755) < 0 ||
            mount(ws, strjoina(view, "/workspace"), NULL, MS_BIND, NULL) < 0)
                return log_error_errno(errno, "Failed to set up the workspace view: %m");
        r->workspace.view_fd = open(view, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (r->workspace.view_fd < 0)
                return log_error_errno(errno, "Failed to open the workspace view: %m");
        r->workspace.fd = TAKE_FD(ws_fd);
        r->workspace.uid = r->uid;
        r->workspace.gid = r->gid;
        return 0;
}

/* Values handed into the sandbox's environment (proxies): one printable line, bounded. */
#define EXEC_ENV_VALUE_MAX 1024

/* How long a session must be quiet before its next warm interpreter is prepared. */
#define WARM_PREPARE_DELAY_USEC (250 * USEC_PER_MSEC)

/* RLIMIT_CPU of a warm interpreter, which starts before its exec's timeout is known. */
#define WARM_CPU_BACKSTOP_MS (24ULL * 3600 * 1000)

/* How long a prepared sandbox may wait for its exec: then it is ended, and the next exec starts
 * cold (and prepares the one after it). No process of a session lives unbounded. */
#define WARM_MAX_AGE_USEC (10 * 60 * USEC_PER_SEC)

/* Module names for the warm interpreter: dotted identifiers separated by spaces. */
static bool module_list_is_valid(const char *s) {
        if (strlen(s) > 4096)
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '_' || *c == '.' || *c == ' '))
                        return false;
        return true;
}

static void runner_warm_schedule(Runner *r);

/* No preparing until runner_warm_schedule() is called again (an exec or a file operation runs). */
static void runner_warm_hold(Runner *r) {
        if (r->warm_timer)
                (void) sd_event_source_set_enabled(r->warm_timer, SD_EVENT_OFF);
}

static int runner_handle_init(Runner *r, json_object *req) {
        struct {
                int64_t uid, gid, workspace_size, tmp_size, cpus_percent, backstop_sec;
                const char *preload_modules;
        } p = {};
        static const JsonField fields[] = {
                { "preload_modules", JSON_FIELD_STRING, offsetof(typeof(p), preload_modules), 0 },
                { "uid", JSON_FIELD_INT64, offsetof(typeof(p), uid), JSON_MANDATORY },
                { "gid", JSON_FIELD_INT64, offsetof(typeof(p), gid), JSON_MANDATORY },
                { "workspace_size", JSON_FIELD_INT64, offsetof(typeof(p), workspace_size), JSON_MANDATORY },
                { "tmp_size", JSON_FIELD_INT64, offsetof(typeof(p), tmp_size), JSON_MANDATORY },
                { "cpus_percent", JSON_FIELD_INT64, offsetof(typeof(p), cpus_percent), JSON_MANDATORY },
                { "idle_backstop_sec", JSON_FIELD_INT64, offsetof(typeof(p), backstop_sec), 0 },
                {},
        };
        _cleanup_json_ json_object *reply = NULL;
        JsonDispatchError jerr;
        SeccompOptions so = {};
        int q;

        if (r->initialized)
                return runner_send_error(r, r->connection_generation, EALREADY, "session already initialized");
        q = json_dispatch(req, fields, &p, &jerr);
        if (q < 0 || p.uid <= 0 || p.gid <= 0 || p.uid > 0xfffffffe || p.gid > 0xfffffffe || p.workspace_size <= 0 ||
            p.tmp_size <= 0 || p.cpus_percent <= 0 || (p.preload_modules && !module_list_is_valid(p.preload_modules)))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid init request");
        if (p.preload_modules && !(r->preload_modules = strdup(p.preload_modules)))
                return log_oom();

        r->uid = (uid_t) p.uid;
        r->gid = (gid_t) p.gid;
        r->workspace_size = (uint64_t) p.workspace_size;
        r->tmp_size = (uint64_t) p.tmp_size;
        r->cpus_percent = (uint64_t) p.cpus_percent;
        r->backstop_usec = p.backstop_sec > 0 ? (uint64_t) p.backstop_sec * USEC_PER_SEC : 0;
        /* We are in the session's scope by now (the manager sends init once systemd started it). */
        cgroup_events_close(&r->cgroup_events);
        cgroup_events_open("/sys/fs/cgroup", &r->cgroup_events);

        q = runner_setup_session(r);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "failed to set up the session: %s", strerror(-q));
        q = seccomp_policy_build(&so, &r->seccomp);
        if (q < 0) {
                log_error_errno(q, "Failed to build the seccomp filter: %m");
                return runner_send_error(r, r->connection_generation, q, "failed to build the seccomp filter");
        }
        r->initialized = true;
        runner_touch(r);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Session %s is ready.", r->session_id);

        reply = json_object_new_object();
        if (!reply)
                return -ENOMEM;
        json_object_object_add(reply, "ok", json_object_new_boolean(true));
        json_object_object_add(reply, "pid", json_object_new_int(getpid()));
        /* What this runner can do that earlier ones could not: cancel an exec. */
        json_object_object_add(reply, "cancel", json_object_new_boolean(true));
        q = runner_send(r, r->connection_generation, reply, NULL, 0);
        runner_warm_schedule(r);
        return q;
}

/* ---- exec ---- */

static int copy_into(int dst_fd, uint64_t dst_off, int src_fd, uint64_t size) {
        loff_t out = (loff_t) dst_off;
        while (size > 0) {
                ssize_t k = copy_file_range(src_fd, NULL, dst_fd, &out, size, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP) {
                                /* Fall back to a plain copy through a buffer. */
                                char buf[64 * 1024];
                                ssize_t n = read(src_fd, buf, MIN(sizeof(buf), size));
                                if (n <= 0)
                                        return n < 0 ? -errno : -EIO;
                                if (pwrite(dst_fd, buf, (size_t) n, out) != n)
                                        return -EIO;
                                out += n;
                                size -= (uint64_t) n;
                                continue;
                        }
                        return -errno;
                }
                if (k == 0)
                        return -EIO; /* shrank under us */
                size -= (uint64_t) k;
        }
        return 0;
}

static int runner_exec_finish(RunnerExec *e) {
        Runner *r = e->runner;
        _cleanup_json_ json_object *reply = NULL, *files = NULL;
        _cleanup_free_ OutputEntry **changed = NULL;
        _cleanup_free_ bool *chosen = NULL;
        _cleanup_close_ int data_fd = -EBADF, outputs_fd = -EBADF;
        OutputSet after = {};
        bool scanned = false;
        SandboxStatus st = {};
        size_t n_changed = 0, skipped = 0;
        uint64_t offset;
        int exit_code = 0, sig = 0, q;
        ssize_t k;

        /* What did PID 1 of the sandbox tell us? */
        k = read(e->status_fd, &st, sizeof(st));
        if (k == (ssize_t) sizeof(st) && st.kind == SANDBOX_STATUS_SETUP_FAILED) {
                st.step[sizeof(st.step) - 1] = 0;
                log_struct(LOG_ERR, st.value, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Sandbox setup failed at '%s': %m", st.step);
                q = runner_send_error(r, e->connection_generation, st.value, "sandbox setup failed at %s: %s",
                                      st.step, strerror(st.value));
                goto done;
        }

        if (e->timed_out)
                exit_code = 124;
        else if (k == (ssize_t) sizeof(st) && st.kind == SANDBOX_STATUS_EXITED) {
                if (WIFEXITED(st.value))
                        exit_code = WEXITSTATUS(st.value);
                else if (WIFSIGNALED(st.value)) {
                        sig = WTERMSIG(st.value);
                        exit_code = 128 + sig;
                }
        } else {
                /* PID 1 itself died without reporting (killed from outside the sandbox). */
                sig = e->init_info.si_code == CLD_KILLED || e->init_info.si_code == CLD_DUMPED ? e->init_info.si_status : SIGKILL;
                exit_code = 128 + sig;
        }

        /* Artifacts: files under outputs/ created or changed by this exec. Nothing of the sandbox
         * runs any more, so the tree cannot change while we look at it. */
        outputs_fd = openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (outputs_fd >= 0) {
                q = output_set_scan(outputs_fd, &after);
                if (q < 0)
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Failed to scan outputs, ignoring: %m");
                scanned = q >= 0;
        }
        q = output_set_diff(&e->before, &after, &changed, &n_changed);
        if (q < 0)
                goto fail;
        chosen = calloc(n_changed + 1, sizeof(bool));
        if (!chosen) {
                q = -ENOMEM;
                goto fail;
        }
        skipped = artifacts_select(changed, n_changed, &e->limits, chosen);

        data_fd = memfd_new_empty("exec-result");
        if (data_fd < 0) {
                q = data_fd;
                goto fail;
        }
        q = write_all(data_fd, e->out.data ?: "", e->out.size);
        if (q >= 0)
                q = write_all(data_fd, e->err.data ?: "", e->err.size);
        if (q < 0)
                goto fail;
        offset = e->out.size + e->err.size;

        files = json_object_new_array();
        if (!files) {
                q = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < n_changed; i++) {
                _cleanup_close_ int fd = -EBADF;
                json_object *f;
                struct stat sst;

                if (!chosen[i])
                        continue;
                if (!utf8_is_valid_n(changed[i]->path, strlen(changed[i]->path))) {
                        skipped++; /* a name that can't be a JSON string */
                        continue;
                }
                fd = openat_beneath(outputs_fd, changed[i]->path, O_RDONLY | O_NONBLOCK, 0);
                if (fd < 0 || fstat(fd, &sst) < 0 || !S_ISREG(sst.st_mode) || (uint64_t) sst.st_size != changed[i]->size) {
                        log_struct(LOG_DEBUG, fd < 0 ? fd : 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Artifact '%s' vanished or changed, skipping: %m", changed[i]->path);
                        skipped++;
                        continue;
                }
                q = copy_into(data_fd, offset, fd, changed[i]->size);
                if (q < 0) {
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to read artifact '%s', skipping: %m", changed[i]->path);
                        skipped++;
                        continue;
                }
                f = json_object_new_object();
                if (!f) {
                        q = -ENOMEM;
                        goto fail;
                }
                json_object_object_add(f, "path", json_object_new_string(changed[i]->path));
                json_object_object_add(f, "offset", json_object_new_int64((int64_t) offset));
                json_object_object_add(f, "size", json_object_new_int64((int64_t) changed[i]->size));
                json_object_array_add(files, f);
                offset += changed[i]->size;
        }
        q = memfd_seal(data_fd);
        if (q < 0)
                goto fail;

        reply = json_object_new_object();
        if (!reply) {
                q = -ENOMEM;
                goto fail;
        }
        json_object_object_add(reply, "ok", json_object_new_boolean(true));
        json_object_object_add(reply, "exit_code", json_object_new_int(exit_code));
        json_object_object_add(reply, "signal", json_object_new_int(sig));
        json_object_object_add(reply, "timed_out", json_object_new_boolean(e->timed_out));
        if (e->cancelled)
                json_object_object_add(reply, "cancelled", json_object_new_boolean(true));
        json_object_object_add(reply, "duration_usec", json_object_new_int64((int64_t) (now_usec() - e->started_usec)));
        json_object_object_add(reply, "stdout_size", json_object_new_int64((int64_t) e->out.size));
        json_object_object_add(reply, "stderr_size", json_object_new_int64((int64_t) e->err.size));
        json_object_object_add(reply, "stdout_truncated", json_object_new_boolean(e->out.total > e->out.size));
        json_object_object_add(reply, "stderr_truncated", json_object_new_boolean(e->err.total > e->err.size));
        json_object_object_add(reply, "files", TAKE_PTR(files));
        json_object_object_add(reply, "files_skipped", json_object_new_int64((int64_t) skipped));
        /* Whether the scope's limits struck during the exec: the OOM killer (which spares the
         * runner), or a fork or thread refused at TasksMax. */
        json_object_object_add(reply, "oom_killed", json_object_new_boolean(
                        cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL) > e->oom_kills_before));
        json_object_object_add(reply, "pids_limited", json_object_new_boolean(
                        cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX) > e->pids_max_before));
        if (k == (ssize_t) sizeof(st)) {
                q = seccomp_report_to_json(&st.seccomp, reply);
                if (q < 0)
                        goto fail;
                if (st.seccomp.n_calls > 0) {
                        _cleanup_free_ char *calls = seccomp_report_format(&st.seccomp);
                        log_struct(LOG_INFO, 0,
                                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                                   "Exec %s: the sandbox refused %s.", e->exec_id, calls ?: "some system calls");
                }
        }

        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                              e->timed_out ? "SCOPEBOX_EXIT_REASON=timeout" :
                              e->cancelled ? "SCOPEBOX_EXIT_REASON=cancelled" :
                              e->orphaned ? "SCOPEBOX_EXIT_REASON=orphaned" :
                              sig ? "SCOPEBOX_EXIT_REASON=signal" : "SCOPEBOX_EXIT_REASON=exited"),
                   "Exec %s finished with exit code %i%s after %llu ms.", e->exec_id, exit_code,
                   e->timed_out ? " (timed out)" : e->cancelled ? " (cancelled)" :
                   e->orphaned ? " (orphaned)" : "",
                   (unsigned long long) ((now_usec() - e->started_usec) / 1000));
        if (e->timed_out || sig) {
                const char *reason = e->timed_out ? "timeout" : e->cancelled ? "cancelled" :
                                     e->orphaned ? "orphaned" : sig == SIGSYS ? "sigsys" : "signal";
                char signal_field[32];

                snprintf(signal_field, sizeof(signal_field), "SCOPEBOX_SIGNAL=%i", sig);
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id),
                                      strjoina("SCOPEBOX_EXIT_REASON=", reason), signal_field,
                                      SCOPEBOX_MESSAGE_EXEC_KILLED),
                           "Exec %s of session %s was killed (%s).", e->exec_id, r->session_id, reason);
        }

        q = runner_send(r, e->connection_generation, reply, &data_fd, 1);
        goto done;

fail:
        log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Failed to collect the exec's results: %m");
        q = runner_send_error(r, e->connection_generation, q, "failed to collect results: %s", strerror(-q));
done:
        /* What the next exec compares with. */
        output_set_done(&r->outputs_snapshot);
        r->outputs_snapshot = after;
        r->outputs_snapshot_valid = scanned;
        r->exec = runner_exec_free(r->exec);
        runner_warm_schedule(r);
        runner_resume_connection(r);
        return q;
}

static void runner_exec_maybe_finish(RunnerExec *e) {
        if (e->exited && !e->out.source && !e->err.source)
                (void) runner_exec_finish(e);
}

static int on_output(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerExec *e = userdata;
        OutputBuffer *b = fd == e->out.fd ? &e->out : &e->err;
        char buf[OUTPUT_PIPE_CHUNK];

        for (unsigned i = 0; i < 16; i++) {
                ssize_t k = read(fd, buf, sizeof(buf));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        break;
                }
                if (k == 0)
                        break;
                /* Keep the first 'limit' bytes, count and discard the rest but keep draining so
                 * the writer never blocks on a full pipe. */
                if (b->size < b->limit) {
                        size_t take = MIN((size_t) k, b->limit - b->size);
                        if (!b->data) {
                                b->data = malloc(b->limit);
                                if (!b->data)
                                        return log_oom();
                        }
                        memcpy(b->data + b->size, buf, take);
                        b->size += take;
                }
                b->total += (uint64_t) k;
                if (i == 15)
                        return 0; /* let others run; we'll be called again */
        }
        /* EOF or error: this stream is done. */
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
        runner_exec_maybe_finish(e);
        return 0;
}

static int on_drain_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;
        /* Writers can't outlive PID 1, but never let a stuck pipe hold the session forever. */
        e->out.source = sd_event_source_disable_unref(e->out.source);
        e->err.source = sd_event_source_disable_unref(e->err.source);
        runner_exec_maybe_finish(e);
        return 0;
}

static int on_init_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        RunnerExec *e = userdata;
        int q;

        e->exited = true;
        e->init_info = *si;
        e->child_source = sd_event_source_disable_unref(e->child_source);
        e->timer_source = sd_event_source_disable_unref(e->timer_source);

        if (e->out.source || e->err.source) {
                q = sd_event_add_time_relative(e->runner->event, &e->timer_source, CLOCK_MONOTONIC, DRAIN_GRACE_USEC, 0,
                                               on_drain_timeout, e);
                if (q < 0)
                        return on_drain_timeout(NULL, 0, e);
                return 0;
        }
        runner_exec_maybe_finish(e);
        return 0;
}

static int on_exec_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RunnerExec *e = userdata;

        e->timed_out = true;
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        /* Killing PID 1 of the sandbox makes the kernel kill every process in its namespace. */
        (void) kill(e->pid, SIGKILL);
        return 0;
}

/* The manager's caller hung up: the exec named goes the way a timed-out one does. No answer of its
 * own; the exec's answer follows once it is over. One that is over already (its answer crossed
 * this request) or another exec is left alone. */
static void runner_handle_cancel(Runner *r, json_object *req) {
        RunnerExec *e = r->exec;
        json_object *v;

        if (!e || e->exited || e->cancelled || !json_object_object_get_ex(req, "exec_id", &v) ||
            !json_object_is_type(v, json_type_string) || !streq(json_object_get_string(v), e->exec_id))
                return;
        e->cancelled = true;
        e->timer_source = sd_event_source_disable_unref(e->timer_source);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Cancelling exec %s of session %s.", e->exec_id, r->session_id);
        /* As at the timeout: PID 1 takes every process of its namespace along. */
        (void) kill(e->pid, SIGKILL);
}

static int spawn_slirp4netns(pid_t target, int ready_fd, pid_t *ret) {
        char target_s[16];
        pid_t pid;

        snprintf(target_s, sizeof(target_s), "%i", (int) target);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                char *const argv[] = {
                        (char *) "slirp4netns", (char *) "--configure", (char *) "--mtu=65520",
                        (char *) "--disable-host-loopback", (char *) "--ready-fd=3", target_s, (char *) "tap0", NULL,
                };
                char *const envp[] = { (char *) "PATH=/usr/bin:/bin", NULL };
                int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);

                (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0)
                        _exit(127);
                /* dup2() onto itself keeps O_CLOEXEC: clear it then. */
                if (ready_fd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(ready_fd, 3) < 0)
                        _exit(127);
                if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
                        _exit(127);
                execve(SANDBOX_SLIRP4NETNS, argv, envp);
                _exit(127);
        }
        *ret = pid;
        return 0;
}


/* The read ends of a sandbox's pipes, and its PID 1. */
typedef struct SandboxProcess {
        pid_t pid;
        int out_fd, err_fd, status_fd;
} SandboxProcess;

/* Creates the pipes of a sandbox, fills in what every sandbox of the session shares and clones
 * PID 1 of a new one, which runs 'se'. 'parent_only_fd' (or -EBADF) is closed in the child. */
static int runner_spawn_sandbox(Runner *r, SandboxExec *se, int parent_only_fd, SandboxProcess *ret) {
        _cleanup_close_pair_ int out_pipe[2] = { -EBADF, -EBADF }, err_pipe[2] = { -EBADF, -EBADF },
                                  status_pipe[2] = { -EBADF, -EBADF };
        pid_t pid;

        if (pipe2(out_pipe, O_CLOEXEC) < 0 || pipe2(err_pipe, O_CLOEXEC) < 0 || pipe2(status_pipe, O_CLOEXEC) < 0)
                return -errno;

        se->session_root = r->session_root;
        se->stdout_fd = out_pipe[1];
        se->stderr_fd = err_pipe[1];
        se->status_fd = status_pipe[1];
        se->uid = r->uid;
        se->gid = r->gid;
        /* No file can be larger than both filesystems together: a backstop only, so that hitting
         * a quota gives ENOSPC from the filesystem, not EFBIG. */
        se->fsize_limit = r->workspace_size + r->tmp_size;
        se->cpus_percent = r->cpus_percent;

        /* fork()-like clone into new namespaces: the child starts as PID 1 of its namespace. */
        pid = (pid_t) syscall(SYS_clone, SANDBOX_CLONE_FLAGS | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                safe_close(out_pipe[0]);
                safe_close(err_pipe[0]);
                safe_close(status_pipe[0]);
                safe_close(parent_only_fd);
                sandbox_run_init(se);
        }
        *ret = (SandboxProcess) {
                .pid = pid,
                .out_fd = TAKE_FD(out_pipe[0]),
                .err_fd = TAKE_FD(err_pipe[0]),
                .status_fd = TAKE_FD(status_pipe[0]),
        };
        return 0;
}

static int runner_handle_exec(Runner *r, json_object *req, int code_fd) {
        struct {
                const char *exec_id, *language, *http_proxy, *https_proxy;
                int64_t timeout_ms, output_limit, max_file, max_files, max_total, memory_limit;
                bool no_processes, network;
        } p = {};
        static const JsonField fields[] = {
                { "exec_id", JSON_FIELD_STRING, offsetof(typeof(p), exec_id), JSON_MANDATORY },
                { "language", JSON_FIELD_STRING, offsetof(typeof(p), language), 0 },
                { "no_processes", JSON_FIELD_BOOL, offsetof(typeof(p), no_processes), 0 },
                { "network", JSON_FIELD_BOOL, offsetof(typeof(p), network), 0 },
                { "http_proxy", JSON_FIELD_STRING, offsetof(typeof(p), http_proxy), 0 },
                { "https_proxy", JSON_FIELD_STRING, offsetof(typeof(p), https_proxy), 0 },
                { "memory_limit", JSON_FIELD_INT64, offsetof(typeof(p), memory_limit), 0 },
                { "timeout_ms", JSON_FIELD_INT64, offsetof(typeof(p), timeout_ms), JSON_MANDATORY },
                { "output_limit", JSON_FIELD_INT64, offsetof(typeof(p), output_limit), JSON_MANDATORY },
                { "max_artifact_bytes", JSON_FIELD_INT64, offsetof(typeof(p), max_file), JSON_MANDATORY },
                { "max_files", JSON_FIELD_INT64, offsetof(typeof(p), max_files), JSON_MANDATORY },
                { "max_total_artifact_bytes", JSON_FIELD_INT64, offsetof(typeof(p), max_total), JSON_MANDATORY },
                {},
        };
        _cleanup_(runner_exec_freep) RunnerExec *e = NULL;
        _cleanup_close_pair_ int ready_pipe[2] = { -EBADF, -EBADF };
        _cleanup_close_ int outputs_fd = -EBADF;
        SandboxProcess sp;
        _cleanup_(seccomp_releasep) scmp_filter_ctx filter = NULL;
        _cleanup_free_ char *http_proxy = NULL, *https_proxy = NULL;
        char *extra_env[3] = {};
        size_t n_env = 0;
        SandboxLanguage language = SANDBOX_PYTHON3;
        JsonDispatchError jerr;
        struct stat st;
        pid_t pid;
        int q;

        if (!r->initialized)
                return runner_send_error(r, r->connection_generation, ENOTCONN, "session not initialized");
        if (r->exec)
                return runner_send_error(r, r->connection_generation, EBUSY, "an exec is already running");
        /* Busy again: no preparing while this one runs (it is scheduled anew when it ends). */
        runner_warm_hold(r);
        if (code_fd < 0 || fstat(code_fd, &st) < 0 || !S_ISREG(st.st_mode))
                return runner_send_error(r, r->connection_generation, EINVAL, "exec request without code");
        q = json_dispatch(req, fields, &p, &jerr);
        if (q < 0 || p.timeout_ms <= 0 || p.output_limit <= 0 || p.output_limit > (64 << 20) || p.max_file < 0 ||
            p.max_files < 0 || p.max_total < 0 || strlen(p.exec_id) >= sizeof(e->exec_id) || p.memory_limit < 0 ||
            !string_is_printable_line(p.http_proxy, EXEC_ENV_VALUE_MAX) ||
            !string_is_printable_line(p.https_proxy, EXEC_ENV_VALUE_MAX))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid exec request");
        if (p.language && streq(p.language, "nodejs"))
                language = SANDBOX_NODEJS;
        else if (p.language && !streq(p.language, "python3"))
                return runner_send_error(r, r->connection_generation, EINVAL, "unsupported language");

        /* The session's filter, or one for this exec's profile. */
        if (p.no_processes || p.network) {
                q = seccomp_policy_build(&(SeccompOptions) { .allow_inet = p.network, .no_processes = p.no_processes },
                                         &filter);
                if (q < 0)
                        return runner_send_error(r, r->connection_generation, q, "failed to build the seccomp filter");
        }
        if (p.network && !isempty(p.http_proxy)) {
                if (asprintf(&http_proxy, "HTTP_PROXY=%s", p.http_proxy) < 0)
                        return log_oom();
                extra_env[n_env++] = http_proxy;
        }
        if (p.network && !isempty(p.https_proxy)) {
                if (asprintf(&https_proxy, "HTTPS_PROXY=%s", p.https_proxy) < 0)
                        return log_oom();
                extra_env[n_env++] = https_proxy;
        }

        e = calloc(1, sizeof(RunnerExec));
        if (!e)
                return log_oom();
        *e = (RunnerExec) {
                .runner = r,
                .connection_generation = r->connection_generation,
                .status_fd = -EBADF,
                .out = { .fd = -EBADF, .limit = (size_t) p.output_limit },
                .err = { .fd = -EBADF, .limit = (size_t) p.output_limit },
                .timeout_ms = (uint64_t) p.timeout_ms,
                .limits = { (uint64_t) p.max_file, (uint64_t) p.max_files, (uint64_t) p.max_total },
                .started_usec = now_usec(),
                .oom_kills_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_OOM_KILL),
                .pids_max_before = cgroup_events_get(&r->cgroup_events, CGROUP_EVENT_PIDS_MAX),
        };
        snprintf(e->exec_id, sizeof(e->exec_id), "%s", p.exec_id);

        /* outputs/ before the exec: as the last exec left it, unless a file operation changed
         * it since (then walk it again). */
        if (r->outputs_snapshot_valid) {
                e->before = r->outputs_snapshot;
                r->outputs_snapshot = (OutputSet) {};
                r->outputs_snapshot_valid = false;
        } else {
                outputs_fd = openat(r->workspace.fd, "outputs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (outputs_fd >= 0) {
                        q = output_set_scan(outputs_fd, &e->before);
                        if (q < 0)
                                return runner_send_error(r, r->connection_generation, q, "failed to scan outputs");
                }
        }

        /* A plain python exec takes the warm interpreter, if it has finished its imports: it gets
         * the code and runs it as the cold path would. One still importing is left to a later
         * exec; this one starts cold, which is quicker than waiting. */
        /* One built before the operator's packages changed would run the code without them. */
        if (r->warm && site_packages_changed(&r->warm->site))
                r->warm = warm_free(r->warm);
        if (r->warm && language == SANDBOX_PYTHON3 && !p.no_processes && !p.network && warm_is_ready(r->warm)) {
                _cleanup_(warm_freep) Warm *w = TAKE_PTR(r->warm);

                w->child_source = sd_event_source_disable_unref(w->child_source);
                if (fd_send_one(w->ctl_fd, code_fd) >= 0) {
                        e->pid = w->pid;
                        w->pid = 0;
                        e->out.fd = TAKE_FD(w->out_fd);
                        e->err.fd = TAKE_FD(w->err_fd);
                        e->status_fd = TAKE_FD(w->status_fd);
                        e->warm = true;
                        goto watch;
                }
                /* It died before we got to it: warm_free() reaps it, the exec starts cold. */
        }

        if (p.network && pipe2(ready_pipe, O_CLOEXEC) < 0)
                return runner_send_error(r, r->connection_generation, errno, "failed to create pipes");

        SandboxExec se = {
                .code_fd = code_fd,
                .timeout_ms = e->timeout_ms,
                .memory_limit = (uint64_t) p.memory_limit,
                .language = language,
                .no_processes = p.no_processes,
                .extra_env = extra_env,
                .network_ready_fd = p.network ? ready_pipe[0] : -EBADF,
                .warm_ctl_fd = -EBADF,
                .seccomp = filter ?: r->seccomp,
        };
        q = runner_spawn_sandbox(r, &se, ready_pipe[1], &sp);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, -q, "failed to create the sandbox: %s",
                                         strerror(-q));
        e->pid = pid = sp.pid;
        e->out.fd = sp.out_fd;
        e->err.fd = sp.err_fd;
        e->status_fd = sp.status_fd;

        /* The network, for an exec that may have one: slirp4netns plugs a user-mode stack into
         * the sandbox's namespace (no route to the host's loopback) and tells PID 1 when it is
         * up; PID 1 starts the payload only then. */
        if (p.network) {
                ready_pipe[0] = safe_close(ready_pipe[0]);
                q = spawn_slirp4netns(pid, ready_pipe[1], &e->slirp_pid);
                ready_pipe[1] = safe_close(ready_pipe[1]);
                if (q < 0)
                        log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Failed to start slirp4netns, the exec fails: %m");
        }

watch:
        pid = e->pid;
        (void) fd_nonblock(e->out.fd, true);
        (void) fd_nonblock(e->err.fd, true);
        (void) fd_nonblock(e->status_fd, true);

        q = sd_event_add_child(r->event, &e->child_source, pid, WEXITED, on_init_exit, e);
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->out.source, e->out.fd, EPOLLIN, on_output, e);
        if (q >= 0)
                q = sd_event_add_io(r->event, &e->err.source, e->err.fd, EPOLLIN, on_output, e);
        if (q >= 0)
                q = sd_event_add_time_relative(r->event, &e->timer_source, CLOCK_MONOTONIC,
                                               e->timeout_ms * USEC_PER_MSEC, USEC_PER_MSEC, on_exec_timeout, e);
        if (q < 0) {
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Failed to watch the sandbox: %m");
                return runner_send_error(r, r->connection_generation, q, "failed to watch the sandbox");
        }

        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                   "Exec %s started as PID %i (%s).", e->exec_id, (int) pid, e->warm ? "warm" : "cold");
        r->exec = TAKE_PTR(e);
        return 0;
}

/* The warm sandbox died while it waited (out of memory, a broken preload module, ...): the next
 * exec starts cold, and the one after it gets a new warm sandbox. */
static int on_warm_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        Runner *r = userdata;
        char why[512] = "";
        ssize_t k;

        /* What it said on stderr (nothing, normally) says why. */
        (void) fd_nonblock(r->warm->err_fd, true);
        k = read(r->warm->err_fd, why, sizeof(why) - 1);
        why[MAX(k, (ssize_t) 0)] = 0;
        for (char *c = why; *c; c++)
                if (*c == '\n')
                        *c = ' ';
        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "The warm interpreter of session %s exited before use (code=%i status=%i): %s", r->session_id,
                   si->si_code, si->si_status, why[0] ? why : "no message");
        r->warm->pid = 0; /* reaped */
        r->warm = warm_free(r->warm);
        return 0;
}

static int on_warm_timer(sd_event_source *s, uint64_t usec, void *userdata);

static int on_warm_expire(sd_event_source *s, uint64_t usec, void *userdata) {
        Runner *r = userdata;

        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "The prepared sandbox of session %s waited %llus for an exec; ending it.", r->session_id,
                   (unsigned long long) (WARM_MAX_AGE_USEC / USEC_PER_SEC));
        r->warm = warm_free(r->warm);
        return 0;
}

/* The next warm interpreter is prepared once the session has been quiet for a moment: its imports
 * take the scope's CPU for half a second, which execs coming back to back shouldn't compete with
 * (they start cold, as fast as ever); between the cells of a conversation there is time. */
static void runner_warm_schedule(Runner *r) {
        int q;

        if (!r->preload_modules || r->warm)
                return;
        if (r->warm_timer)
                q = sd_event_source_set_time_relative(r->warm_timer, WARM_PREPARE_DELAY_USEC) < 0 ? -EIO :
                    sd_event_source_set_enabled(r->warm_timer, SD_EVENT_ONESHOT);
        else
                q = sd_event_add_time_relative(r->event, &r->warm_timer, CLOCK_MONOTONIC, WARM_PREPARE_DELAY_USEC,
                                               10 * USEC_PER_MSEC, on_warm_timer, r);
        if (q < 0)
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to schedule a warm interpreter, ignoring: %m");
}

static void runner_warm_prepare(Runner *r) {
        _cleanup_close_pair_ int ctl[2] = { -EBADF, -EBADF };
        _cleanup_(warm_freep) Warm *w = NULL;
        SandboxProcess sp;
        int q;

        if (!r->preload_modules || r->warm || r->exec || r->archive_job || !r->initialized)
                return;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) {
                log_struct(LOG_WARNING, errno, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to prepare a warm interpreter, ignoring: %m");
                return;
        }

        SandboxExec se = {
                .code_fd = -EBADF,
                /* The exec's own timeout is enforced by its timer; RLIMIT_CPU is a backstop. */
                .timeout_ms = WARM_CPU_BACKSTOP_MS,
                .language = SANDBOX_PYTHON3,
                .network_ready_fd = -EBADF,
                .warm_ctl_fd = ctl[1],
                .seccomp = r->seccomp,
        };
        w = calloc(1, sizeof(Warm));
        if (!w) {
                log_oom();
                return;
        }
        *w = (Warm) { .out_fd = -EBADF, .err_fd = -EBADF, .status_fd = -EBADF, .ctl_fd = -EBADF };
        /* Before the sandbox looks: a change in between then only costs a cold start. */
        site_packages_identity(&w->site);
        q = runner_spawn_sandbox(r, &se, ctl[0], &sp);
        if (q < 0) {
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to create a warm sandbox, ignoring: %m");
                return;
        }
        *w = (Warm) { .pid = sp.pid, .out_fd = sp.out_fd, .err_fd = sp.err_fd, .status_fd = sp.status_fd,
                      .ctl_fd = TAKE_FD(ctl[0]), .site = w->site };

        /* The modules to import; the code follows when an exec takes this sandbox. */
        if (send(w->ctl_fd, r->preload_modules, strlen(r->preload_modules), MSG_NOSIGNAL) < 0) {
                log_struct(LOG_WARNING, errno, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to start the warm interpreter, ignoring: %m");
                return;
        }
        q = sd_event_add_child(r->event, &w->child_source, w->pid, WEXITED, on_warm_exit, r);
        if (q >= 0)
                q = sd_event_add_time_relative(r->event, &w->expire_source, CLOCK_MONOTONIC, WARM_MAX_AGE_USEC,
                                               USEC_PER_SEC, on_warm_expire, r);
        if (q < 0) {
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to watch the warm sandbox, ignoring: %m");
                return;
        }
        r->warm = TAKE_PTR(w);
}

static int on_warm_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        runner_warm_prepare(userdata);
        return 0;
}

/* Ends the prepared sandbox, if there is one, and holds off preparing the next: a file, archive
 * or restore operation is about to work on the session's files, and no process of the session
 * may exist meanwhile. runner_warm_schedule() prepares one again afterwards. */
static void runner_end_prepared(Runner *r) {
        runner_warm_hold(r);
        r->warm = warm_free(r->warm);
}

/* ---- workspace file operations ---- */

static int runner_send_ok(Runner *r, json_object *extra, const int *fds, size_t n_fds) {
        _cleanup_json_ json_object *reply = extra ?: json_object_new_object();
        if (!reply)
                return -ENOMEM;
        json_object_object_add(reply, "ok", json_object_new_boolean(true));
        return runner_send(r, r->connection_generation, reply, fds, n_fds);
}

static bool path_has_dotdot_component(const char *p) {
        for (const char *c = p; *c;) {
                size_t l = strcspn(c, "/");
                if (l == 2 && c[0] == '.' && c[1] == '.')
                        return true;
                c += l;
                if (*c == '/')
                        c++;
        }
        return false;
}

static const char *request_path(json_object *req) {
        json_object *v;
        const char *p;

        if (!json_object_object_get_ex(req, "path", &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        p = json_object_get_string(v);
        /* Already normalised by the manager: relative, no "..", no empty components. */
        if (p[0] == '/' || path_has_dotdot_component(p) || strstr(p, "//") || strlen(p) > 4096)
                return NULL;
        return p;
}

static int runner_handle_write(Runner *r, json_object *req, int data_fd) {
        const char *path = request_path(req);
        struct stat st;
        int q;

        if (!path || data_fd < 0 || fstat(data_fd, &st) < 0 || !S_ISREG(st.st_mode))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid write request");
        q = workspace_write(&r->workspace, path, data_fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, NULL, NULL, 0);
}

static int runner_handle_read(Runner *r, json_object *req) {
        const char *path = request_path(req);
        _cleanup_close_ int fd = -EBADF;
        json_object *v;
        int64_t max;
        int q;

        if (!path || !json_object_object_get_ex(req, "max", &v) || !json_object_is_type(v, json_type_int) ||
            (max = json_object_get_int64(v)) <= 0)
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid read request");
        q = workspace_read(&r->workspace, path, (uint64_t) max, &fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, NULL, &fd, 1);
}

static int runner_handle_list(Runner *r) {
        _cleanup_json_ json_object *list = NULL;
        _cleanup_close_ int fd = -EBADF;
        OutputSet s = {};
        const char *text;
        int q;

        q = workspace_list(&r->workspace, &s);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        list = json_object_new_array();
        for (size_t i = 0; list && i < s.n; i++) {
                json_object *e = json_object_new_object();
                if (!e)
                        break;
                json_object_object_add(e, "path", json_object_new_string(s.entries[i].path));
                json_object_object_add(e, "size", json_object_new_int64((int64_t) s.entries[i].size));
                json_object_array_add(list, e);
        }
        output_set_done(&s);
        if (!list)
                return -ENOMEM;
        /* 500 paths of up to 4 KiB don't fit a control message: the list travels in a memfd. */
        text = json_object_to_json_string_ext(list, JSON_C_TO_STRING_PLAIN);
        fd = memfd_new_data("workspace-list", text, strlen(text));
        if (fd < 0)
                return runner_send_error(r, r->connection_generation, fd, "%s", strerror(-fd));
        return runner_send_ok(r, NULL, &fd, 1);
}

static int runner_handle_reset_inputs(Runner *r) {
        int q = workspace_reset_inputs(&r->workspace);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, NULL, NULL, 0);
}

/* ---- archives ---- */

/* Archive and restore run in the archive helper (archive-sandbox.c): libarchive parses hostile
 * input there, isolated like an exec. */
typedef struct ArchiveJob {
        Runner *runner;
        uint64_t connection_generation;
        bool restore;
        pid_t pid;
        int result_fd;                 /* pipe: the helper's ArchiveResult */
        sd_event_source *child_source;
        sd_event_source *timer_source;
        bool timed_out;
        bool orphaned;                 /* the manager that asked went away: killed */
} ArchiveJob;

static ArchiveJob *archive_job_free(ArchiveJob *j) {
        if (!j)
                return NULL;
        j->child_source = sd_event_source_disable_unref(j->child_source);
        if (j->pid > 0) {
                /* One process, killed: the wait is short, and nothing is left unreaped. */
                (void) kill(j->pid, SIGKILL);
                (void) waitpid(j->pid, NULL, 0);
        }
        j->timer_source = sd_event_source_disable_unref(j->timer_source);
        safe_close(j->result_fd);
        free(j);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(ArchiveJob *, archive_job_free);

static int on_archive_child(sd_event_source *s, const siginfo_t *si, void *userdata) {
        ArchiveJob *j = userdata;
        Runner *r = j->runner;
        _cleanup_json_ json_object *reply = NULL;
        ArchiveResult res = { .error = -EIO };

        j->pid = 0;
        if (j->timed_out)
                res.error = -ETIME;
        else if (read(j->result_fd, &res, sizeof(res)) != (ssize_t) sizeof(res))
                res = (ArchiveResult) { .error = si->si_code == CLD_KILLED && si->si_status == SIGXCPU ? -ETIME : -EIO };
        res.step[sizeof(res.step) - 1] = 0;

        if (res.error < 0) {
                if (res.step[0])
                        log_struct(LOG_WARNING, res.error, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "The archive helper of session %s failed at '%s': %m", r->session_id, res.step);
                (void) runner_send_error(r, j->connection_generation, res.error, "%s failed: %s",
                                         j->restore ? "restore" : "archive", strerror(-res.error));
        } else {
                reply = json_object_new_object();
                if (reply) {
                        json_object_object_add(reply, "ok", json_object_new_boolean(true));
                        json_object_object_add(reply, "bytes", json_object_new_int64((int64_t) res.bytes));
                        json_object_object_add(reply, "refused", json_object_new_int(res.refused));
                        (void) runner_send(r, j->connection_generation, reply, NULL, 0);
                }
                if (res.refused > 0)
                        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                   "Restore of session %s refused %i hostile archive entries.", r->session_id,
                                   res.refused);
        }
        r->archive_job = archive_job_free(r->archive_job);
        runner_warm_schedule(r);
        runner_resume_connection(r);
        return 0;
}

static int on_archive_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        ArchiveJob *j = userdata;

        j->timed_out = true;
        if (j->pid > 0)
                (void) kill(j->pid, SIGKILL);
        return 0;
}

/* Clones the helper into its namespaces, maps the sandbox user into its user namespace and lets
 * it go. */
static int archive_job_spawn(Runner *r, ArchiveJob *j, int data_fd, uint64_t max_bytes, uint64_t timeout_sec) {
        _cleanup_close_pair_ int result_pipe[2] = { -EBADF, -EBADF }, go_pipe[2] = { -EBADF, -EBADF };
        pid_t pid;
        int q;

        if (pipe2(result_pipe, O_CLOEXEC) < 0 || pipe2(go_pipe, O_CLOEXEC) < 0)
                return -errno;

        pid = (pid_t) syscall(SYS_clone, ARCHIVE_SANDBOX_CLONE_FLAGS | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                safe_close(result_pipe[0]);
                safe_close(go_pipe[1]);
                archive_sandbox_run(&(ArchiveSandbox) {
                        .workspace = strjoina(r->session_root, "/" SESSION_WORKSPACE_DIR),
                        .newroot = strjoina(r->session_root, "/" SESSION_NEWROOT_DIR),
                        .restore = j->restore,
                        .data_fd = data_fd,
                        .result_fd = result_pipe[1],
                        .go_fd = go_pipe[0],
                        .max_bytes = max_bytes,
                        .max_entries = ARCHIVE_ENTRIES_MAX,
                        .timeout_sec = timeout_sec,
                });
        }
        j->pid = pid;
        q = sandbox_map_ids(pid, r->uid, r->gid);
        if (q < 0)
                return q; /* the helper sees its go pipe close and gives up; we kill it anyway */
        if (write(go_pipe[1], "1", 1) != 1)
                return -errno;
        j->result_fd = TAKE_FD(result_pipe[0]);
        return 0;
}

static int runner_handle_archive(Runner *r, json_object *req, int data_fd, bool restore) {
        _cleanup_(archive_job_freep) ArchiveJob *j = NULL;
        json_object *v;
        int64_t max_bytes = 0, timeout_sec = 0;
        struct stat st;
        int q;

        if (json_object_object_get_ex(req, "max_bytes", &v))
                max_bytes = json_object_get_int64(v);
        if (json_object_object_get_ex(req, "timeout_sec", &v))
                timeout_sec = json_object_get_int64(v);
        if (data_fd < 0 || fstat(data_fd, &st) < 0 || max_bytes <= 0 || timeout_sec <= 0 || r->archive_job)
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid archive request");

        j = calloc(1, sizeof(ArchiveJob));
        if (!j)
                return log_oom();
        *j = (ArchiveJob) { .runner = r, .connection_generation = r->connection_generation, .restore = restore,
                            .result_fd = -EBADF };
        q = archive_job_spawn(r, j, data_fd, (uint64_t) max_bytes, (uint64_t) timeout_sec);
        if (q < 0) {
                log_struct(LOG_ERR, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Failed to start the archive helper: %m");
                return runner_send_error(r, r->connection_generation, q, "failed to start the archive helper");
        }
        q = sd_event_add_child(r->event, &j->child_source, j->pid, WEXITED, on_archive_child, j);
        if (q >= 0)
                q = sd_event_add_time_relative(r->event, &j->timer_source, CLOCK_MONOTONIC,
                                               (uint64_t) timeout_sec * USEC_PER_SEC, USEC_PER_SEC, on_archive_timeout, j);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "failed to watch the archive job");
        r->archive_job = TAKE_PTR(j);
        return 0;
}

/* ---- backstop ---- */

/* The manager releases idle sessions; should it be gone for good, the runner ends its own
 * session after the same idle time plus a margin, so no scope outlives its TTL for long. */
static int on_backstop(sd_event_source *s, uint64_t usec, void *userdata) {
        Runner *r = userdata;

        if (r->exec || r->archive_job) {
                /* Busy is not idle: look again later. */
                runner_touch(r);
                return 0;
        }
        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), "SCOPEBOX_EVENT=runner-backstop"),
                   "No request for session %s in %llus; ending the session.", r->session_id,
                   (unsigned long long) (r->backstop_usec / USEC_PER_SEC));
        return sd_event_exit(r->event, 0);
}

static void runner_touch(Runner *r) {
        if (r->backstop_usec == 0)
                return;
        if (!r->backstop_source) {
                if (sd_event_add_time_relative(r->event, &r->backstop_source, CLOCK_BOOTTIME, r->backstop_usec,
                                               USEC_PER_SEC, on_backstop, r) < 0)
                        log_warning("Failed to arm the idle backstop, ignoring.");
                return;
        }
        (void) sd_event_source_set_time_relative(r->backstop_source, r->backstop_usec);
        (void) sd_event_source_set_enabled(r->backstop_source, SD_EVENT_ONESHOT);
}

/* ---- control connection ---- */

/* The manager that asked for the exec or archive job running now is gone: its connection closed
 * (it died, or stopped), or a new instance took over. Nobody can receive the result any more, so
 * it is ended the way a cancel ends it — PID 1 of the sandbox, or the helper, killed: no process
 * of it is left — and the next manager finds the session idle, not busy until a timeout. */
static void runner_end_orphans(Runner *r) {
        RunnerExec *e = r->exec;
        ArchiveJob *j = r->archive_job;

        if (e && !e->exited && !e->orphaned && !e->cancelled) {
                e->orphaned = true;
                e->timer_source = sd_event_source_disable_unref(e->timer_source);
                log_struct(LOG_NOTICE, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(r->session_id), strjoina("SCOPEBOX_EXEC_ID=", e->exec_id)),
                           "The manager went away during exec %s of session %s; ending it, nobody can receive "
                           "its result.", e->exec_id, r->session_id);
                (void) kill(e->pid, SIGKILL);
        }
        if (j && j->pid > 0 && !j->orphaned) {
                j->orphaned = true;
                log_struct(LOG_NOTICE, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "The manager went away during the %s of session %s; ending it.",
                           j->restore ? "restore" : "archive", r->session_id);
                (void) kill(j->pid, SIGKILL);
        }
}

/* Whether an exec or archive job of an earlier connection is still being ended. */
static bool runner_orphan_running(Runner *r) {
        return (r->exec && r->exec->connection_generation != r->connection_generation) ||
               (r->archive_job && r->archive_job->connection_generation != r->connection_generation);
}

/* Requests of a new manager wait (unread) while an orphan is ended, so that they find the session
 * idle; they are read once it is over. */
static void runner_resume_connection(Runner *r) {
        if (r->conn_source && !runner_orphan_running(r))
                (void) sd_event_source_set_enabled(r->conn_source, SD_EVENT_ON);
}

static void runner_close_connection(Runner *r) {
        if (r->conn_fd >= 0)
                runner_end_orphans(r);
        r->conn_source = sd_event_source_disable_unref(r->conn_source);
        r->conn_fd = safe_close(r->conn_fd);
}

static bool op_works_on_files(const char *op) {
        static const char *const ops[] = { "write", "read", "list", "reset-inputs", "archive", "restore" };

        for (size_t i = 0; i < ELEMENTSOF(ops); i++)
                if (streq(op, ops[i]))
                        return true;
        return false;
}

static int on_connection(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Runner *r = userdata;

        if (runner_orphan_running(r)) {
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                return 0;
        }

        for (;;) {
                _cleanup_json_ json_object *req = NULL;
                int fds[RUNNER_MESSAGE_FDS_MAX];
                size_t n_fds = 0;
                json_object *op_obj;
                const char *op;
                bool files_op;
                int q;

                q = runner_message_recv(fd, &req, fds, &n_fds);
                if (q == -EAGAIN)
                        return 0;
                if (q < 0) {
                        if (q != -ECONNRESET)
                                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                                           "Dropping the control connection: %m");
                        runner_close_connection(r);
                        return 0;
                }

                op = json_object_object_get_ex(req, "op", &op_obj) ? json_object_get_string(op_obj) : NULL;
                if (op && streq(op, "cancel")) {
                        /* The one request without an answer of its own, taken while an exec runs. */
                        for (size_t i = 0; i < n_fds; i++)
                                safe_close(fds[i]);
                        runner_handle_cancel(r, req);
                        continue;
                }
                if ((r->exec || r->archive_job) && op && !streq(op, "ping")) {
                        /* One request at a time; the manager queues. */
                        for (size_t i = 0; i < n_fds; i++)
                                safe_close(fds[i]);
                        (void) runner_send_error(r, r->connection_generation, EBUSY, "an exec is running");
                        continue;
                }
                /* No process of the session while we work on its files. */
                files_op = op && r->initialized && op_works_on_files(op);
                if (files_op) {
                        runner_end_prepared(r);
                        if (streq(op, "write") || streq(op, "restore")) {
                                output_set_done(&r->outputs_snapshot);
                                r->outputs_snapshot_valid = false;
                        }
                }

                if (op && streq(op, "init"))
                        q = runner_handle_init(r, req);
                else if (op && streq(op, "exec"))
                        q = runner_handle_exec(r, req, n_fds > 0 ? fds[0] : -EBADF);
                else if (op && r->initialized && streq(op, "write"))
                        q = runner_handle_write(r, req, n_fds > 0 ? fds[0] : -EBADF);
                else if (op && r->initialized && streq(op, "read"))
                        q = runner_handle_read(r, req);
                else if (op && r->initialized && streq(op, "list"))
                        q = runner_handle_list(r);
                else if (op && r->initialized && streq(op, "reset-inputs"))
                        q = runner_handle_reset_inputs(r);
                else if (op && r->initialized && (streq(op, "archive") || streq(op, "restore")))
                        q = runner_handle_archive(r, req, n_fds > 0 ? fds[0] : -EBADF, streq(op, "restore"));
                else if (op && streq(op, "ping")) {
                        _cleanup_json_ json_object *reply = json_object_new_object();
                        if (reply) {
                                json_object_object_add(reply, "ok", json_object_new_boolean(true));
                                json_object_object_add(reply, "initialized", json_object_new_boolean(r->initialized));
                                json_object_object_add(reply, "busy", json_object_new_boolean(r->exec != NULL));
                                json_object_object_add(reply, "cancel", json_object_new_boolean(true));
                                q = runner_send(r, r->connection_generation, reply, NULL, 0);
                        } else
                                q = -ENOMEM;
                } else
                        q = runner_send_error(r, r->connection_generation, EOPNOTSUPP, "unknown operation");

                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                /* Done with the files (an archive job prepares one when it ends). */
                if (files_op && !r->archive_job)
                        runner_warm_schedule(r);
                runner_touch(r);
                if (q < 0 && r->conn_fd >= 0 && q != -ENOTCONN)
                        log_struct(LOG_DEBUG, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Request failed: %m");
                if (r->conn_fd < 0)
                        return 0;
        }
}

static int on_listen(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Runner *r = userdata;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int cfd, q;

        cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0)
                return 0;
        /* Only the session manager (root) may drive us. */
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != 0) {
                safe_close(cfd);
                return 0;
        }
        /* A new manager instance replaces the old connection. */
        runner_close_connection(r);
        r->conn_fd = cfd;
        r->connection_generation++;
        q = sd_event_add_io(r->event, &r->conn_source, cfd, EPOLLIN, on_connection, r);
        if (q < 0) {
                log_error_errno(q, "Failed to watch the control connection: %m");
                runner_close_connection(r);
        }
        return 0;
}

static int parse_argv(int argc, char *argv[], Runner *r) {
        static const struct option options[] = {
                { "session-id", required_argument, NULL, 's' },
                { "session-root", required_argument, NULL, 'r' },
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (!session_id_is_valid(optarg))
                                return log_error_errno(EINVAL, "Invalid session id '%s'.", optarg);
                        strcpy(r->session_id, optarg);
                        break;
                case 'r':
                        free(r->session_root);
                        r->session_root = strdup(optarg);
                        if (!r->session_root)
                                return log_oom();
                        break;
                default:
                        return -EINVAL;
                }
        if (!r->session_id[0] || !r->session_root)
                return log_error_errno(EINVAL, "--session-id= and --session-root= are required.");
        return 0;
}

int main(int argc, char *argv[]) {
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        Runner runner = { .listen_fd = RUNNER_LISTEN_FD, .conn_fd = -EBADF,
                           .workspace = { .fd = -EBADF, .view_fd = -EBADF },
                           .cgroup_events = CGROUP_EVENTS_NULL };
        Runner *r = &runner;
        sigset_t ss;
        int q, fd;

        log_setup("scopebox-runner");
        q = parse_argv(argc, argv, r);
        if (q < 0)
                return EXIT_FAILURE;

        /* Directories we create for the sandbox must be traversable by its user. */
        umask(0022);
        /* No supplementary groups: the archive helper inherits ours into its user namespace. */
        if (setgroups(0, NULL) < 0) {
                log_error_errno(errno, "Failed to drop supplementary groups: %m");
                return EXIT_FAILURE;
        }

        /* Survive the manager: own session, never the manager's death signal. */
        (void) setsid();
        (void) prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
        /* When the scope runs out of memory, the sandbox goes first, never its supervisor. */
        fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void) write_all(fd, "-1000", 5);
                safe_close(fd);
        }

        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigaddset(&ss, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0) {
                log_error_errno(errno, "Failed to block signals: %m");
                return EXIT_FAILURE;
        }
        (void) signal(SIGPIPE, SIG_IGN);

        q = sd_event_default(&event);
        if (q < 0) {
                log_error_errno(q, "Failed to allocate the event loop: %m");
                return EXIT_FAILURE;
        }
        r->event = event;
        (void) sd_event_add_signal(event, NULL, SIGTERM, NULL, NULL);
        (void) sd_event_add_signal(event, NULL, SIGINT, NULL, NULL);
        (void) sd_event_add_signal(event, NULL, SIGHUP, NULL, NULL);

        if (fcntl(r->listen_fd, F_SETFD, FD_CLOEXEC) < 0) {
                log_error_errno(errno, "No control socket on fd %i: %m", r->listen_fd);
                return EXIT_FAILURE;
        }
        (void) fd_nonblock(r->listen_fd, true);
        q = sd_event_add_io(event, &r->listen_source, r->listen_fd, EPOLLIN, on_listen, r);
        if (q < 0) {
                log_error_errno(q, "Failed to watch the control socket: %m");
                return EXIT_FAILURE;
        }

        q = sd_event_loop(event);

        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Runner of session %s exiting.", r->session_id);
        r->exec = runner_exec_free(r->exec);
        r->warm = warm_free(r->warm);
        r->warm_timer = sd_event_source_disable_unref(r->warm_timer);
        free(r->preload_modules);
        r->archive_job = archive_job_free(r->archive_job);
        output_set_done(&r->outputs_snapshot);
        runner_close_connection(r);
        r->listen_source = sd_event_source_disable_unref(r->listen_source);
        r->backstop_source = sd_event_source_disable_unref(r->backstop_source);
        safe_close(r->listen_fd);
        safe_close(r->workspace.fd);
        safe_close(r->workspace.view_fd);
        cgroup_events_close(&r->cgroup_events);
        if (r->seccomp)
                seccomp_release(r->seccomp);
        free(r->session_root);
        return q < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
