/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The warm interpreter: the sandbox the runner prepares in advance for a session's next python
 * exec (preload.py importing SANDBOX_PRELOAD_MODULES), when it is prepared, held off and ended,
 * and how an exec takes it over. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "io-util.h"
#include "log.h"
#include "runner.h"
#include "sandbox.h"

/* How long a session must be quiet before its next warm interpreter is prepared. */
#define WARM_PREPARE_DELAY_USEC (250 * USEC_PER_MSEC)

/* RLIMIT_CPU of a warm interpreter, which starts before its exec's timeout is known. */
#define WARM_CPU_BACKSTOP_MS (24ULL * 3600 * 1000)

/* How long a prepared sandbox may wait for its exec: then it is ended, and the next exec starts
 * cold (and prepares the one after it). No process of a session lives unbounded. */
#define WARM_MAX_AGE_USEC (10 * 60 * USEC_PER_SEC)

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

DEFINE_TRIVIAL_CLEANUP_FUNC(Warm *, warm_free);

/* preload.py says "R" once its imports are done. */
static bool warm_is_ready(Warm *w) {
        char c;

        if (!w->ready && recv(w->ctl_fd, &c, 1, MSG_DONTWAIT) == 1 && c == 'R')
                w->ready = true;
        return w->ready;
}

Warm *warm_free(Warm *w) {
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

/* Module names for the warm interpreter: dotted identifiers separated by spaces. */
bool module_list_is_valid(const char *s) {
        if (strlen(s) > 4096)
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '_' || *c == '.' || *c == ' '))
                        return false;
        return true;
}

/* No preparing until runner_warm_schedule() is called again (an exec or a file operation runs). */
void runner_warm_hold(Runner *r) {
        if (r->warm_timer)
                (void) sd_event_source_set_enabled(r->warm_timer, SD_EVENT_OFF);
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
void runner_warm_schedule(Runner *r) {
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
void runner_end_prepared(Runner *r) {
        runner_warm_hold(r);
        r->warm = warm_free(r->warm);
}

/* Hands the warm sandbox to an exec that can use it ('usable': a plain python exec), if it has
 * finished its imports: the code goes to preload.py over ctl_fd, and 'ret' gets its PID 1 and the
 * read ends of its pipes. Returns 1 when the exec got it, 0 when the exec is to start cold. */
int runner_warm_take(Runner *r, bool usable, int code_fd, SandboxProcess *ret) {
        /* One built before the operator's packages changed would run the code without them. */
        if (r->warm && site_packages_changed(&r->warm->site))
                r->warm = warm_free(r->warm);
        if (r->warm && usable && warm_is_ready(r->warm)) {
                _cleanup_(warm_freep) Warm *w = TAKE_PTR(r->warm);

                w->child_source = sd_event_source_disable_unref(w->child_source);
                if (fd_send_one(w->ctl_fd, code_fd) >= 0) {
                        ret->pid = w->pid;
                        w->pid = 0;
                        ret->out_fd = TAKE_FD(w->out_fd);
                        ret->err_fd = TAKE_FD(w->err_fd);
                        ret->status_fd = TAKE_FD(w->status_fd);
                        return 1;
                }
                /* It died before we got to it: warm_free() reaps it, the exec starts cold. */
        }
        return 0;
}
