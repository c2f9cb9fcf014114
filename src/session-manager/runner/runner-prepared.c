/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The next exec's sandbox, made before the exec exists (sandbox-prepared.c, docs/security.md
 * "Prepared sandboxes"): at init and whenever an exec took the last one, the runner makes one in
 * the session's python profile (no network, no filter or environment of its own). An exec of that
 * profile hands it its code and runs at once; any other starts as before, and leaves it for the
 * next. It is thrown away when what it captured changed (the operator's packages), when it died
 * waiting, and with the runner. PID 1 of every sandbox is reaped behind the answer of its exec. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io-util.h"
#include "log.h"
#include "runner.h"

struct RunnerPrepared {
        SandboxProcess sp;         /* PID 1 and the read ends of its pipes */
        int ctl_fd;                /* ours of PID 1's socket: the exec's SandboxGo and code */
        struct stat site;          /* the operator's site directory it was made with */
        int template_pidfd;        /* the template its payload is a child of */
        PidRef slirp;              /* its network's slirp4netns (a dify run's), ended through */
        int slirp_exit_fd;         /* its --exit-fd */
        sd_event_source *child_source;
};

typedef struct RunnerZombie {
        PidRef init;
        sd_event_source *source;
} RunnerZombie;

static int on_zombie(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerZombie *z = userdata;

        if (pidref_wait(&z->init, WEXITED | WNOHANG | __WALL, NULL, NULL) == 0)
                return 0;
        z->source = sd_event_source_disable_unref(z->source);
        pidref_done(&z->init);
        free(z);
        return 0;
}

void runner_reap_later(Runner *r, PidRef *init) {
        RunnerZombie *z;

        if (!pidref_is_set(init))
                return;
        z = calloc(1, sizeof(*z));
        if (!z || sd_event_add_io(r->event, &z->source, init->fd, EPOLLIN, on_zombie, z) < 0) {
                free(z);
                pidref_done_kill(init); /* waits, then */
                return;
        }
        /* It frees itself once PID 1 is reaped (a runner that exits leaves the rest to the
         * scope's end). */
        z->init = *init;
        *init = PIDREF_NULL;
}

static RunnerPrepared *prepared_free(Runner *r, RunnerPrepared *p) {
        if (!p)
                return NULL;
        p->child_source = sd_event_source_disable_unref(p->child_source);
        /* PID 1 sees its socket close and ends the sandbox. */
        safe_close(p->ctl_fd);
        safe_close(p->template_pidfd);
        safe_close(p->slirp_exit_fd);
        pidref_done_kill(&p->slirp);
        safe_close(p->sp.out_fd);
        safe_close(p->sp.err_fd);
        safe_close(p->sp.status_fd);
        (void) pidref_kill(&p->sp.init, SIGKILL);
        runner_reap_later(r, &p->sp.init);
        free(p);
        return NULL;
}

void runner_prepared_drop(Runner *r) {
        r->prepared = prepared_free(r, r->prepared);
        r->prepare_source = sd_event_source_disable_unref(r->prepare_source);
}

/* PID 1 ended before an exec came (its payload died, say): the next one is made after the next
 * exec. */
static int on_prepared_exit(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Runner *r = userdata;

        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "The prepared sandbox of session %s ended before it was used.", r->session_id);
        r->prepared = prepared_free(r, r->prepared);
        return 0;
}

/* The network of a prepared dify sandbox, as an exec with one gets it (runner-exec.c): the
 * filtered cgroup and namespaces before PID 1, slirp4netns once PID 1 exists. */
typedef struct PreparedNetwork {
        int procs_fd;                   /* borrowed */
        int ready[2], userns_fd, netns_fd;
        ProxyEnv proxy;
} PreparedNetwork;

static void prepared_network_done(PreparedNetwork *n) {
        close_pairp(&n->ready);
        safe_close(n->userns_fd);
        safe_close(n->netns_fd);
}

static int prepared_network_setup(Runner *r, PreparedNetwork *n, SandboxExec *se) {
        int q;

        q = runner_network_cgroup(r);
        if (q < 0)
                return q;
        n->procs_fd = q;
        if (pipe2(n->ready, O_CLOEXEC) < 0)
                return -errno;
        q = runner_network_new(r, &n->userns_fd, &n->netns_fd);
        if (q < 0)
                return q;
        /* As an exec with a network gets them (exec_setup_profile()). */
        proxy_env_build(&n->proxy, r->prepare_http_proxy, r->prepare_https_proxy);
        se->extra_env = n->proxy.env;
        se->network_ready_fd = n->ready[0];
        se->netns_fd = n->netns_fd;
        return 0;
}

static int runner_prepare(Runner *r) {
        _cleanup_close_pair_ int ctl[2] = { -EBADF, -EBADF };
        _cleanup_close_ int template_fd = -EBADF;
        _cleanup_(prepared_network_done) PreparedNetwork net = {
                .ready = { -EBADF, -EBADF }, .userns_fd = -EBADF, .netns_fd = -EBADF };
        struct ucred cred = {};
        RunnerPrepared *p;
        SandboxExec se;
        int q;

        if (!r->prepare || r->prepared || !r->initialized)
                return 0;
        template_fd = runner_template_connect(r);
        if (template_fd < 0)
                return template_fd; /* no template: execs start as before */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
                return -errno;
        se = (SandboxExec) {
                .code_fd = -EBADF,
                /* Lowered to the exec's own when it comes. */
                .timeout_ms = (uint64_t) RUNNER_TIMEOUT_SEC_MAX * 1000U,
                .language = SANDBOX_PYTHON3,
                .no_processes = r->prepare_no_processes,
                .network_ready_fd = -EBADF,
                .netns_fd = -EBADF,
                .template_fd = template_fd,
                .cgroup_fds = r->template_cgroup_fds,
                .n_cgroup_fds = r->n_scope_cgroup_fds,
                .filter_fd = r->filter_fds[seccomp_profile_of(r->prepare_network, r->prepare_no_processes)],
                .prepared_fd = ctl[1],
        };
        if (r->prepare_network) {
                q = prepared_network_setup(r, &net, &se);
                if (q < 0)
                        return q;
        }
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (RunnerPrepared) { .ctl_fd = -EBADF, .template_pidfd = -EBADF, .slirp = PIDREF_NULL,
                                .slirp_exit_fd = -EBADF,
                                .sp = { .init = PIDREF_NULL, -EBADF, -EBADF, -EBADF } };
        /* The template that will fork its payload (it listens, so the peer is its process): a
         * template that ended since (restarted for new packages, stopped, renewed) takes the
         * sandbox along. */
        if (getsockopt(template_fd, SOL_SOCKET, SO_PEERCRED, &cred, &(socklen_t) { sizeof(cred) }) < 0 ||
            cred.pid <= 0 || (p->template_pidfd = (int) syscall(SYS_pidfd_open, cred.pid, 0)) < 0) {
                free(p);
                return -errno;
        }
        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, &se.site) < 0)
                se.site = (struct stat) {};
        p->site = se.site;
        q = runner_spawn_sandbox(r, &se, ctl[0], &p->sp);
        if (q < 0) {
                safe_close(p->template_pidfd);
                free(p);
                return q;
        }
        p->ctl_fd = TAKE_FD(ctl[0]);
        r->prepared = p;
        if (r->prepare_network) {
                /* PID 1 waits for it before it asks the template; a failure shows as its loss. */
                net.ready[0] = safe_close(net.ready[0]);
                q = runner_network_start(net.procs_fd, net.userns_fd, net.netns_fd, net.ready[1], &p->slirp,
                                         &p->slirp_exit_fd);
                if (q < 0) {
                        r->prepared = prepared_free(r, p);
                        return q;
                }
        }
        q = sd_event_add_io(r->event, &p->child_source, p->sp.init.fd, EPOLLIN, on_prepared_exit, r);
        if (q < 0) {
                r->prepared = prepared_free(r, p);
                return q;
        }
        return 1;
}

static int on_prepare(sd_event_source *s, void *userdata) {
        Runner *r = userdata;
        int q;

        r->prepare_source = sd_event_source_disable_unref(r->prepare_source);
        q = runner_prepare(r);
        if (q < 0)
                log_struct(LOG_DEBUG, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "No prepared sandbox for session %s: %m", r->session_id);
        return 0;
}

void runner_prepare_soon(Runner *r) {
        if (!r->prepare || r->prepared || r->prepare_source)
                return;
        /* After whatever is due now: the exec that just started goes first. */
        if (sd_event_add_defer(r->event, &r->prepare_source, on_prepare, r) < 0)
                return;
        (void) sd_event_source_set_priority(r->prepare_source, SD_EVENT_PRIORITY_IDLE);
}

static bool proxy_eq(const char *a, const char *b) {
        return streq(strempty(a), strempty(b));
}

int runner_prepared_take(Runner *r, const RunnerExecRequest *req, SandboxLanguage language, int code_fd,
                         SandboxProcess *ret, PidRef *ret_slirp, int *ret_slirp_exit_fd) {
        RunnerPrepared *p = r->prepared;
        SandboxGo go = { .magic = SANDBOX_GO_MAGIC, .timeout_ms = req->timeout_ms };
        struct stat site;

        /* Only the profile it was made for: its filter, its network (or none), its proxies. */
        if (!p || language != SANDBOX_PYTHON3 || req->cold || req->stateful ||
            req->no_processes != r->prepare_no_processes || req->network != r->prepare_network ||
            (req->network && (!proxy_eq(req->http_proxy, r->prepare_http_proxy) ||
                              !proxy_eq(req->https_proxy, r->prepare_https_proxy))))
                return 0;
        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, &site) < 0)
                site = (struct stat) {};
        if (site.st_dev != p->site.st_dev || site.st_ino != p->site.st_ino ||
            site.st_mode != p->site.st_mode || site.st_uid != p->site.st_uid ||
            poll(&(struct pollfd) { .fd = p->template_pidfd, .events = POLLIN }, 1, 0) != 0) {
                /* The operator's packages changed since, or its template ended (new packages in
                 * /usr, say): it would not see what a sandbox made now sees. */
                runner_prepared_drop(r);
                return 0;
        }
        r->prepared = NULL;
        if (fds_send(p->ctl_fd, &go, sizeof(go), &code_fd, 1) < 0) {
                prepared_free(r, p);
                return 0;
        }
        /* A dify run's session serves one run: no other sandbox is made for it. */
        if (r->prepare_no_processes)
                r->prepare = false;
        p->child_source = sd_event_source_disable_unref(p->child_source);
        p->ctl_fd = safe_close(p->ctl_fd);
        *ret = p->sp;
        *ret_slirp = p->slirp;
        *ret_slirp_exit_fd = p->slirp_exit_fd;
        p->template_pidfd = safe_close(p->template_pidfd);
        free(p);
        return 1;
}
