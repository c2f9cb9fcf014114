/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* _scopebox_template: the fork server inside the template's Python (template.py). serve() waits
 * for requests of sandboxes' PID 1 (template-protocol.h) and forks for each a child that turns
 * into that sandbox's payload, in this order (docs/security.md "The template"):
 *
 *   the template's child:  closes every fd but the request's, joins the session's cgroup, enters
 *                          PID 1's cgroup, IPC, UTS, network, PID and mount namespaces, forks
 *                          the payload and stays outside as its parent, reporting its status;
 *   the payload:           sandbox_payload_specialize(): new session, stdio, rlimits, its own
 *                          user namespace mapped by PID 1, the sandbox user, no capabilities,
 *                          no_new_privs, fds 0-2 only, the seccomp filter last;
 *
 * and only then returns to Python, in the payload alone, which runs the cell. The template
 * itself never runs anything it receives. No threads: one poll loop.
 *
 * Both hold their children by pidfd (pidref.h) and wait for them through it only, never by number:
 * the template its children (from clone(CLONE_PIDFD): none exists without its fd), each child its
 * payload (from fork(), see become_child()). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include "io-util.h"
#include "macro.h"
#include "parse-util.h"
#include "pidref.h"
#include "sandbox.h"
#include "template-protocol.h"
#include "time-util.h"

/* Connections whose request has not come yet (a PID 1 still building its root, or waiting for
 * its network), and how long one may wait. */
#define PENDING_MAX 128
#define CHILD_STACK_SIZE (256U * 1024U)
#define PENDING_MAX_AGE_SEC 120

typedef struct Pending {
        int fd;
        time_t since;
} Pending;

/* The template's children that have not exited yet, each held by its pidfd. */
static PidRef *children;
static size_t n_children_held, n_children_allocated;

static int children_hold(PidRef ref) {
        if (n_children_held == n_children_allocated) {
                size_t n = MAX(n_children_allocated * 2, (size_t) 16);
                PidRef *c = reallocarray(children, n, sizeof(PidRef));
                if (!c)
                        return -ENOMEM;
                children = c;
                n_children_allocated = n;
        }
        children[n_children_held++] = ref;
        return 0;
}

/* Reaps the children that have exited (through their pidfds). */
static void children_reap(void) {
        for (size_t i = 0; i < n_children_held;) {
                siginfo_t si;

                if (pidref_wait(&children[i], WEXITED | WNOHANG, &si, NULL) == 0) {
                        i++;
                        continue;
                }
                /* Collected (or not ours to wait for, which can't be: dropped either way). */
                pidref_done(&children[i]);
                children[i] = children[--n_children_held];
        }
}

/* In a child: nothing of its siblings (their numbers, their fds' numbers) stays in its memory,
 * which the payload inherits. The fds themselves are closed by close_all_but(). */
static void children_forget(void) {
        if (children)
                explicit_bzero(children, n_children_allocated * sizeof(PidRef));
        children = mfree(children);
        n_children_held = n_children_allocated = 0;
}

typedef struct Served {
        int profile;
        bool prepared;
        char *env[40];
        char env_buf[192];
        char extra[TEMPLATE_ENV_MAX];
        char *extra_env[TEMPLATE_ENV_MAX / 2 + 1];
} Served;

static time_t now_sec(void) {
        return (time_t) (now_usec(CLOCK_MONOTONIC) / USEC_PER_SEC);
}

static void send_reply(int conn, int error) {
        TemplateReply reply = { .error = error };
        (void) send(conn, &reply, sizeof(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Closes every fd from 3 up except those in keep[]. */
static int close_all_but(const int *keep, size_t n) {
        int max = 0;

        for (size_t i = 0; i < n; i++)
                max = MAX(max, keep[i]);
        for (int fd = 3; fd <= max; fd++) {
                bool kept = false;
                for (size_t i = 0; i < n && !kept; i++)
                        kept = keep[i] == fd;
                if (!kept)
                        (void) close(fd);
        }
        return syscall(SYS_close_range, (unsigned) max + 1, ~0U, 0U) < 0 ? -errno : 0;
}

static bool request_is_valid(const TemplateRequest *req, ssize_t size) {
        size_t used = 0;

        if (size < (ssize_t) offsetof(TemplateRequest, env) || req->magic != TEMPLATE_MAGIC ||
            req->version != TEMPLATE_PROTOCOL_VERSION || req->profile >= _TEMPLATE_PROFILE_MAX ||
            req->env_size > TEMPLATE_ENV_MAX || (req->flags & ~TEMPLATE_REQUEST_PREPARED) != 0 ||
            (size_t) size != offsetof(TemplateRequest, env) + req->env_size || req->timeout_ms == 0 ||
            req->cpus_percent == 0 || req->n_cgroups == 0 || req->n_cgroups > TEMPLATE_CGROUPS_MAX)
                return false;
        /* "NAME=value" strings, each NUL-terminated, printable. */
        while (used < req->env_size) {
                const char *s = req->env + used;
                size_t l = strnlen(s, req->env_size - used);
                if (l == req->env_size - used || !memchr(s, '=', l) || s[0] == '=')
                        return false;
                for (size_t i = 0; i < l; i++)
                        if ((unsigned char) s[i] < 0x20 || s[i] == 0x7f)
                                return false;
                used += l + 1;
        }
        return true;
}

/* In the payload (the template's grandchild), inside the sandbox's namespaces, still root:
 * specializes, then leaves the rest to Python. Never returns on failure. */
static void become_payload(const TemplateRequest *req, const int *fds, Served *out) {
        size_t n = 0, used = 0;
        const char *step = "";
        int r;

        memcpy(out->extra, req->env, req->env_size);
        while (used < req->env_size && n < ELEMENTSOF(out->extra_env) - 1) {
                out->extra_env[n++] = out->extra + used;
                used += strlen(out->extra + used) + 1;
        }
        out->extra_env[n] = NULL;

        SandboxExec e = {
                .code_fd = -EBADF,
                .stdout_fd = fds[TEMPLATE_FD_STDOUT],
                .stderr_fd = fds[TEMPLATE_FD_STDERR],
                .status_fd = -EBADF,
                .timeout_ms = req->timeout_ms,
                .fsize_limit = req->fsize_limit,
                .cpus_percent = req->cpus_percent,
                .language = SANDBOX_PYTHON3,
                .no_processes = req->profile == TEMPLATE_PROFILE_DIFY,
                .extra_env = out->extra_env,
                .network_ready_fd = -EBADF,
                .template_fd = -EBADF,
                .filter_fd = fds[TEMPLATE_FD_FILTER],
                .prepared_fd = -EBADF,
                .prepared = req->flags & TEMPLATE_REQUEST_PREPARED,
        };
        out->profile = (int) req->profile;
        out->prepared = e.prepared;
        r = sandbox_payload_specialize(&e, fds[TEMPLATE_FD_SYNC], true, out->env, ELEMENTSOF(out->env),
                                       out->env_buf, sizeof(out->env_buf), &step);
        if (r < 0) {
                dprintf(STDERR_FILENO, "[sandbox] failed to start the interpreter (%s): %s\n", step,
                        strerror(-r));
                _exit(127);
        }
}

/* The template's child: into the session, then the payload's parent. Returns only in the
 * payload. */
/* What the template's child is given: it runs on a stack of its own in the template's memory
 * (CLONE_VM | CLONE_VFORK), the template waiting, until it executes the waiter. */
typedef struct ChildArgs {
        int conn;
        const TemplateRequest *req;
        int *fds;
        size_t n_fds;
        Served *out;
} ChildArgs;

/* Where a payload goes on from: handle_request(), in the template's own frames, which the payload
 * has a copy of (sigsetjmp() there, siglongjmp() from the child's stack). */
static sigjmp_buf payload_return;
/* scopebox-template-waiter, opened once (O_PATH) in the template's own mount namespace: executed
 * through the fd, never looked up in the session's. */
static int waiter_fd = -EBADF;

/* The template's child (template-child): CLONE_VM | CLONE_VFORK, so no copy of the template's
 * page tables is made for it, and the template waits until it executes the waiter. It joins the
 * session's cgroups and namespaces, forks the payload (the one copy of the template's memory per
 * exec), and becomes scopebox-template-waiter, which reaps the payload and reports. Its fd table,
 * signal handlers and filesystem context are its own (no CLONE_FILES, CLONE_SIGHAND, CLONE_FS);
 * it writes nothing of the template's memory but its own stack, and calls nothing that would
 * (no malloc, no stdio, no raise()). */
static int become_child(void *userdata) {
        static const int ns_types[] = { CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWUTS,
                                        CLONE_NEWNET,    CLONE_NEWPID, CLONE_NEWNS };
        static const int ns_fds[] = { TEMPLATE_FD_CGROUPNS, TEMPLATE_FD_IPC, TEMPLATE_FD_UTS,
                                      TEMPLATE_FD_NET,      TEMPLATE_FD_PID, TEMPLATE_FD_MNT };
        const ChildArgs *a = userdata;
        int keep[_TEMPLATE_FD_MAX + TEMPLATE_CGROUPS_MAX + 3], io_fd, payload_fd = -EBADF, r;
        int *fds = a->fds;
        size_t n_fds = a->n_fds;
        pid_t pid;

        (void) prctl(PR_SET_NAME, (unsigned long) "template-child", 0, 0, 0);
        /* Our own /proc entry, while /proc is still the template's: what we write ourselves
         * after this is a few bytes of status, what we reap is the payload's. */
        io_fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
        /* Nothing of the template (its socket, the other connections) goes along. */
        memcpy(keep, fds, sizeof(int) * n_fds);
        keep[n_fds] = a->conn;
        keep[n_fds + 1] = waiter_fd;
        keep[n_fds + 2] = io_fd;
        r = close_all_but(keep, io_fd >= 0 ? n_fds + 3 : n_fds + 2);
        if (r < 0)
                goto fail;

        /* The session's cgroups first (its scope in each hierarchy): everything from here on is
         * charged to the session and bound by its limits. */
        for (size_t i = _TEMPLATE_FD_MAX; i < n_fds; i++) {
                int procs = openat(fds[i], "cgroup.procs", O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
                if (procs < 0) {
                        r = -errno;
                        goto fail;
                }
                r = write(procs, "0", 1) == 1 ? 0 : -errno;
                (void) close(procs);
                if (r < 0)
                        goto fail;
                (void) close(fds[i]);
        }

        for (size_t i = 0; i < ELEMENTSOF(ns_types); i++)
                if (setns(fds[ns_fds[i]], ns_types[i]) < 0) {
                        r = -errno;
                        goto fail;
                }

        /* fork(), not a raw clone(): the payload runs Python, which needs all of glibc's fork
         * (the new thread id in its thread control block, the at-fork handlers). It is held by its
         * pidfd right after: we (and the waiter we become) are its only reaper, so until it is
         * reaped its number is still its own. */
        pid = fork();
        if (pid < 0) {
                r = -errno;
                goto fail;
        }
        if (pid == 0) {
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                (void) close(a->conn);
                (void) close(fds[TEMPLATE_FD_STATUS]);
                (void) close(waiter_fd);
                if (io_fd >= 0)
                        (void) close(io_fd);
                become_payload(a->req, fds, a->out);
                siglongjmp(payload_return, 1);
        }
        /* Failing (out of memory: every fd but a few is closed), the payload dies with us
         * (PR_SET_PDEATHSIG), and PID 1 ends its namespace on our answer. */
        payload_fd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (payload_fd < 0) {
                r = -errno;
                goto fail;
        }
        send_reply(a->conn, 0);
        (void) close(a->conn);

        /* The waiter's fds, in its order, and nothing else: each moved out of the way first, as
         * any of them may have one of those numbers now. */
        {
                int from[] = { payload_fd, fds[TEMPLATE_FD_STATUS], io_fd, waiter_fd };
                int exe = TEMPLATE_WAITER_FD_IO + 1;

                for (size_t i = 0; i < ELEMENTSOF(from); i++)
                        if (from[i] >= 0 && (from[i] = fcntl(from[i], F_DUPFD_CLOEXEC, exe + 1)) < 0)
                                _exit(1);
                if (from[2] < 0)
                        (void) close(TEMPLATE_WAITER_FD_IO);
                if (dup2(from[0], TEMPLATE_WAITER_FD_PAYLOAD) < 0 ||
                    dup2(from[1], TEMPLATE_WAITER_FD_STATUS) < 0 ||
                    (from[2] >= 0 && dup2(from[2], TEMPLATE_WAITER_FD_IO) < 0) || dup2(from[3], exe) < 0 ||
                    syscall(SYS_close_range, (unsigned) exe + 1, ~0U, 0U) < 0)
                        _exit(1);
                (void) syscall(SYS_execveat, exe, "", (char *const[]) { (char *) "template-child", NULL },
                               (char *const[]) { NULL }, AT_EMPTY_PATH);
        }
        /* The payload dies with us. */
        _exit(1);

fail:
        send_reply(a->conn, -r);
        _exit(1);
}

/* One request on 'conn': 1 when its request has not come yet, 0 when the connection is done
 * (*ret_forked if a child was forked for it; in the payload, *ret_in_payload and 1), -ESTALE
 * when the template must be rebuilt. */
/* Starts become_child() on its stack; returns once it executed the waiter (or died): 0 with the
 * child held in *ret, or -errno. */
static int child_clone(ChildArgs *args, PidRef *ret) {
        static void *stack;
        int pidfd = -EBADF;
        pid_t pid;

        if (!stack) {
                /* With a guard page below it: the child's stack lies among the template's own
                 * mappings, which an overflow must fault on, never write into. */
                stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
                if (stack == MAP_FAILED) {
                        stack = NULL;
                        return -errno;
                }
                if (mprotect(stack, (size_t) sysconf(_SC_PAGESIZE), PROT_NONE) < 0) {
                        int r = -errno;
                        (void) munmap(stack, CHILD_STACK_SIZE);
                        stack = NULL;
                        return r;
                }
        }
        pid = clone(become_child, (char *) stack + CHILD_STACK_SIZE,
                    CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, args, &pidfd);
        if (pid < 0)
                return -errno;
        *ret = (PidRef) { .pid = pid, .fd = pidfd };
        return 0;
}

/* Python's fork bookkeeping around child_clone(): 1 in the payload (forked by our child from our
 * memory as it was in here; Python's own after-fork work, its locks, `random`'s reseed, the
 * os.register_at_fork() hooks, runs under the sandbox's rules), 0 in the template once the child
 * executed the waiter, or -errno. */
static int fork_payload(ChildArgs *args, PidRef *ret) {
        int r;

        PyOS_BeforeFork();
        if (sigsetjmp(payload_return, 0) != 0) {
                children_forget();
                PyOS_AfterFork_Child();
                return 1;
        }
        r = child_clone(args, ret);
        PyOS_AfterFork_Parent();
        return r;
}

static int handle_request(int conn, const struct stat *site, bool expired, Served *out,
                          bool *ret_in_payload, bool *ret_forked) {
        static TemplateRequest req;
        static ChildArgs child_args;
        int fds[_TEMPLATE_FD_MAX + TEMPLATE_CGROUPS_MAX];
        struct statfs sfs;
        PidRef child = PIDREF_NULL;
        size_t n_fds = 0;
        ssize_t k;
        int r = 0, forked;

        k = fds_receive(conn, &req, sizeof(req), fds, ELEMENTSOF(fds), &n_fds);
        if (k == -EAGAIN)
                return 1; /* not yet: keep waiting */
        if (k <= 0) {
                r = 0;
                goto done;
        }
        if (!request_is_valid(&req, k) || n_fds != _TEMPLATE_FD_MAX + req.n_cgroups) {
                send_reply(conn, EBADMSG);
                goto done;
        }
        for (size_t i = _TEMPLATE_FD_MAX; i < n_fds; i++)
                if (fstatfs(fds[i], &sfs) < 0 ||
                    (sfs.f_type != CGROUP2_SUPER_MAGIC && sfs.f_type != CGROUP_SUPER_MAGIC)) {
                        send_reply(conn, EBADMSG);
                        goto done;
                }
        /* Built before the operator's packages changed (scopeboxctl packages install): the cell
         * would not see them. */
        if (req.site_dev != (uint64_t) site->st_dev || req.site_ino != (uint64_t) site->st_ino ||
            req.site_mode != (uint32_t) site->st_mode || req.site_uid != (uint32_t) site->st_uid) {
                send_reply(conn, ESTALE);
                r = -ESTALE;
                goto done;
        }
        if (expired) {
                send_reply(conn, ESTALE);
                r = -ESTALE;
                goto done;
        }

        /* Nothing is buffered in the interpreter's streams: they become the exec's. The child comes
         * with its pidfd (no moment without it); it shares our memory (the template has no
         * threads, and waits), calls nothing of glibc's that needs fork()'s bookkeeping, and
         * fork()s the payload, which gets all of it. */
        child_args = (ChildArgs) { .conn = conn, .req = &req, .fds = fds, .n_fds = n_fds, .out = out };
        forked = fork_payload(&child_args, &child);
        if (forked > 0) {
                *ret_in_payload = true;
                return 1;
        }
        if (forked < 0)
                send_reply(conn, -forked);
        else {
                *ret_forked = true;
                if (children_hold(child) < 0)
                        /* Not held, not to be signalled or waited for by its number: it goes to its
                         * session as asked, and is reaped with the template. */
                        pidref_done(&child);
        }
done:
        /* Every later child is a copy of this memory: nothing of one session's request (its
         * proxies, say) may stay in it for the next session's payload to find. */
        explicit_bzero(&req, sizeof(req));
        for (size_t i = 0; i < n_fds; i++)
                (void) close(fds[i]);
        (void) close(conn);
        return r < 0 ? r : 0;
}

static PyObject *payload_result(const Served *s) {
        PyObject *env = PyList_New(0), *t;

        if (!env)
                return NULL;
        for (size_t i = 0; s->env[i]; i++) {
                PyObject *b = PyBytes_FromString(s->env[i]);
                if (!b || PyList_Append(env, b) < 0) {
                        Py_XDECREF(b);
                        Py_DECREF(env);
                        return NULL;
                }
                Py_DECREF(b);
        }
        t = Py_BuildValue("(iNO)", s->profile, env, s->prepared ? Py_True : Py_False);
        return t;
}

/* Tells the service manager (Type=notify) that requests are served from now on. */
static void notify_ready(int notify_fd, const char *status) {
        char msg[256];
        int l;

        if (notify_fd < 0)
                return;
        l = snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
        if (l > 0)
                (void) send(notify_fd, msg, MIN((size_t) l, sizeof(msg) - 1), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void) close(notify_fd);
}

/* Whether our child is still in the template's cgroups: it leaves them for the session's before
 * it enters the session's mount namespace, the last of its setns() calls. Not reaped yet (only
 * children_reap() reaps), its number is still its own. */
static bool child_in_flight(const PidRef *ref, const struct stat *own_mnt) {
        char path[64];
        struct stat st;

        snprintf(path, sizeof(path), "/proc/%i/ns/mnt", (int) ref->pid);
        if (stat(path, &st) < 0)
                return false; /* gone (or not ours to look at) */
        return st.st_dev == own_mnt->st_dev && st.st_ino == own_mnt->st_ino;
}

/* Before the template exits (and systemd ends what is left in its cgroup), each child forked
 * for a request is let finish its way into its session: the fork in flight completes. Bounded
 * by the time a runner waits for its answer; children that end meanwhile are reaped. */
static void wait_for_children_in_flight(void) {
        struct stat own_mnt;

        if (stat("/proc/self/ns/mnt", &own_mnt) < 0)
                return;
        for (unsigned tries = 0; tries < TEMPLATE_REPLY_TIMEOUT_MS / 10; tries++) {
                bool waiting = false;

                children_reap();
                for (size_t i = 0; i < n_children_held && !waiting; i++)
                        waiting = child_in_flight(&children[i], &own_mnt);
                if (!waiting)
                        return;
                (void) usleep(10 * 1000);
        }
}

/* serve() returns in the template: no more connections (those queued or waiting for their
 * request see the socket closed and start cold at once, as do later ones until the next template
 * listens), the forks in flight complete, the journal says why (template.py exits 75 then). */
static PyObject *retire(const char *why, unsigned long long n_children, int listen_fd, Pending *pending,
                        size_t n_pending) {
        (void) close(listen_fd);
        for (size_t i = 0; i < n_pending; i++)
                safe_close(pending[i].fd);
        fprintf(stderr, "scopebox-template: %s after %llu children, to be replaced by a new one\n", why,
                n_children);
        fflush(stderr);
        wait_for_children_in_flight();
        Py_RETURN_NONE;
}

/* The template's anonymous memory (the interpreter's heap and arenas, the modules' buffers) in
 * transparent huge pages where it spans whole 2 MiB blocks: each fork then copies one entry per
 * 2 MiB instead of 512, and each payload's exit has as few to tear down; a page a payload writes
 * is still copied alone (the kernel splits the huge page's entry first). MADV_COLLAPSE (Linux
 * 6.1) makes them now, in the template, once. Returns the bytes collapsed; nothing where THP is
 * off ("never") or the kernel older. */
static uint64_t collapse_anonymous_memory(void) {
        const uint64_t huge = UINT64_C(2) << 20;
        FILE *f = fopen("/proc/self/maps", "re");
        char line[512];
        uint64_t done = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long a, b;
                char perms[8] = "", path[256] = "";
                uint64_t start, end;

                if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %255s", &a, &b, perms, path) < 3)
                        continue;
                /* Private writable memory that is no file's: [heap] or nameless. */
                if (!streq(perms, "rw-p") || (path[0] && !streq(path, "[heap]")))
                        continue;
                start = ((uint64_t) a + huge - 1) & ~(huge - 1);
                end = (uint64_t) b & ~(huge - 1);
                if (end <= start)
                        continue;
                if (madvise((void *) (uintptr_t) start, end - start, MADV_HUGEPAGE) < 0)
                        continue;
                if (madvise((void *) (uintptr_t) start, end - start, 25 /* MADV_COLLAPSE */) >= 0)
                        done += end - start;
        }
        fclose(f);
        return done;
}

/* serve(listen_fd, notify_fd, site_dev, site_ino, site_mode, site_uid, max_age_seconds,
 * max_children, status): the fork server. Returns (profile, environment) in each payload, None in
 * the template when it must be restarted: the operator's packages changed, or it is older than
 * max_age_seconds or has forked max_children children (0: no bound). Its children share its
 * stack canary, pointer guard, addresses and hash secret; a new one has new ones
 * (docs/security.md). notify_fd (-1: none) gets READY=1 once it listens. */
static PyObject *serve(PyObject *self, PyObject *args) {
        static Served served;
        static Pending pending[PENDING_MAX];
        static size_t n_pending;
        unsigned long long dev, ino, max_age, max_children, n_children = 0;
        unsigned int mode, uid;
        struct stat site = {};
        const char *status;
        int listen_fd, notify_fd, sfd;
        sigset_t mask;
        time_t started = now_sec();

        if (!PyArg_ParseTuple(args, "iiKKIIKKs", &listen_fd, &notify_fd, &dev, &ino, &mode, &uid, &max_age,
                              &max_children, &status))
                return NULL;
        site.st_dev = (dev_t) dev;
        site.st_ino = (ino_t) ino;
        site.st_mode = (mode_t) mode;
        site.st_uid = (uid_t) uid;

        fprintf(stderr, "scopebox-template: %" PRIu64 " MiB of its memory in huge pages\n",
                collapse_anonymous_memory() >> 20);
        fflush(stderr);
        if (waiter_fd < 0) {
                waiter_fd = open(LIBEXECDIR "/" TEMPLATE_WAITER_NAME, O_PATH | O_CLOEXEC);
                if (waiter_fd < 0)
                        return PyErr_SetFromErrnoWithFilename(PyExc_OSError,
                                                              LIBEXECDIR "/" TEMPLATE_WAITER_NAME);
        }
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
            (sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0 || listen(listen_fd, 64) < 0)
                return PyErr_SetFromErrno(PyExc_OSError);
        notify_ready(notify_fd, status);

        for (;;) {
                struct pollfd p[PENDING_MAX + 2];
                bool aged = max_age > 0 && (unsigned long long) (now_sec() - started) >= max_age;
                bool expired = aged || (max_children > 0 && n_children >= max_children);
                size_t n = 0;
                int q;

                p[n++] = (struct pollfd) { .fd = sfd, .events = POLLIN };
                p[n++] =
                        (struct pollfd) { .fd = n_pending < PENDING_MAX ? listen_fd : -1, .events = POLLIN };
                for (size_t i = 0; i < n_pending; i++)
                        p[n++] = (struct pollfd) { .fd = pending[i].fd, .events = POLLIN };
                q = poll(p, n, 1000);
                if (q < 0 && errno != EINTR)
                        return PyErr_SetFromErrno(PyExc_OSError);

                /* Our children leave for a session's cgroup; reap each as soon as it is done. */
                if (p[0].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) > 0)
                                ;
                }
                children_reap();

                for (size_t i = 0; q > 0 && i < n_pending; i++) {
                        bool in_payload = false, forked = false;
                        int r;

                        if (!p[2 + i].revents)
                                continue;
                        r = handle_request(pending[i].fd, &site, expired, &served, &in_payload, &forked);
                        if (in_payload)
                                return payload_result(&served);
                        if (r == 1)
                                continue;
                        pending[i].fd = -EBADF; /* handle_request() closed it */
                        n_children += forked;
                        /* The last child of this generation is forked: the connections still
                         * waiting get ESTALE below and start cold, as later ones until the next
                         * template listens. */
                        expired = expired || (max_children > 0 && n_children >= max_children);
                        if (r == -ESTALE)
                                return retire(aged      ? "max age reached"
                                              : expired ? "max children reached"
                                                        : "site directory changed",
                                              n_children, listen_fd, pending, n_pending);
                }
                /* Drop the done ones, and those that waited too long. */
                for (size_t i = 0; i < n_pending;) {
                        if (pending[i].fd >= 0 && now_sec() - pending[i].since > PENDING_MAX_AGE_SEC)
                                pending[i].fd = safe_close(pending[i].fd);
                        if (pending[i].fd < 0)
                                pending[i] = pending[--n_pending];
                        else
                                i++;
                }

                if (p[1].revents & POLLIN) {
                        int conn = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                        struct ucred cred;
                        socklen_t l = sizeof(cred);

                        if (conn >= 0 &&
                            (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &l) < 0 || cred.uid != 0))
                                conn = safe_close(conn); /* only root (runners) may ask */
                        if (conn >= 0)
                                pending[n_pending++] = (Pending) { conn, now_sec() };
                }
                if (expired && n_pending == 0)
                        return retire(aged ? "max age reached" : "max children reached", n_children,
                                      listen_fd, pending, n_pending);
        }
}

/* wait_for_code(): in a prepared payload (TEMPLATE_REQUEST_PREPARED), pristine, until PID 1 has put
 * the exec's code in /exec and releases it (a TemplateGo on SANDBOX_SYNC_FD): the exec's
 * RLIMIT_CPU is set (a lowering, which needs no privilege) and the socket closed. When PID 1 gives
 * the sandbox up instead, it ends here, having run nothing. */
static PyObject *wait_for_code(PyObject *self, PyObject *args) {
        TemplateGo go = {};
        struct rlimit rl;
        ssize_t k;

        Py_BEGIN_ALLOW_THREADS
        do
                k = recv(SANDBOX_SYNC_FD, &go, sizeof(go), 0);
        while (k < 0 && errno == EINTR);
        Py_END_ALLOW_THREADS
        if (k != (ssize_t) sizeof(go) || go.magic != TEMPLATE_MAGIC || go.cpu_limit_sec == 0 ||
            send(SANDBOX_SYNC_FD, "G", 1, MSG_NOSIGNAL) != 1)
                _exit(0);
        (void) close(SANDBOX_SYNC_FD);
        if (getrlimit(RLIMIT_CPU, &rl) >= 0 &&
            (rl.rlim_max == RLIM_INFINITY || go.cpu_limit_sec < rl.rlim_max)) {
                rl.rlim_cur = rl.rlim_max = (rlim_t) go.cpu_limit_sec;
                if (setrlimit(RLIMIT_CPU, &rl) < 0)
                        _exit(127);
        }
        Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
        { "serve", serve, METH_VARARGS, "Run the fork server; returns in each payload." },
        { "wait_for_code", wait_for_code, METH_NOARGS, "In a prepared payload: wait for the exec's code." },
        {},
};

static struct PyModuleDef module = {
        PyModuleDef_HEAD_INIT, "_scopebox_template", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__scopebox_template(void);
PyMODINIT_FUNC PyInit__scopebox_template(void) {
        return PyModule_Create(&module);
}
