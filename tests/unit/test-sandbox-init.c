/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* PID 1 of a sandbox, its supervision (sandbox.c: sandbox_supervise_payload(); sandbox-kernel.c:
 * sandbox_kernel_run() with the real kernel.py), run for real as PID 1 of a user and PID namespace
 * the test makes (no privilege needed): a payload that exits, one killed by a signal, one that
 * leaves children and a double-forked daemon (all killed, and counted in the report), the
 * runner's SIGTERM (the timeout), a child of the template; a stateful session's kernel between
 * cells: stopped after its cell's other processes are dead (a leftover that keeps sending it
 * SIGCONT changes nothing), ended when it ran between cells anyway (the cell is answered "lost",
 * SANDBOX_KERNEL_LOSS_RAN, which the runner logs as kernel-woken), or when it died while stopped.
 * Argument: the source root (for kernel.py). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>

#include "fs-util.h"
#include "io-util.h"
#include "pidref.h"
#include "sandbox.h"
#include "string-util.h"
#include "template-protocol.h"
#include "tests.h"

static const char *source_root;

/* ---- Namespaces ---- */

/* PID 1 ignores a signal it sends itself without a handler: ASSERT_*'s abort() gets one. */
static void pid1_abort(int sig) {
        (void) sig;
        _exit(134);
}

static void assert_exited(int wait_status, int code) {
        ASSERT_TRUE(WIFEXITED(wait_status));
        ASSERT_EQ(WEXITSTATUS(wait_status), code);
}

static void assert_killed(int wait_status, int sig) {
        ASSERT_TRUE(WIFSIGNALED(wait_status));
        ASSERT_EQ(WTERMSIG(wait_status), sig);
}

/* Forks PID 1 of the PID namespace made for our children: in a mount namespace of its own with the
 * namespace's /proc, it runs fn(arg) and exits with what it returns. */
static pid_t start_pid1(int (*fn)(void *), void *arg) {
        pid_t pid = fork();

        ASSERT_TRUE(pid >= 0);
        if (pid > 0)
                return pid;
        /* Never kill(-1) outside a namespace of our own. */
        if (getpid() != 1)
                _exit(99);
        (void) signal(SIGABRT, pid1_abort);
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        ASSERT_EQ(unshare(CLONE_NEWNS), 0);
        ASSERT_EQ(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ASSERT_EQ(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), 0);
        _exit(fn(arg));
}

/* Runs 'driver' (the runner's part: it starts PID 1 and talks to it) in a process with a user
 * namespace (our uid and gid are its root) and a PID namespace for its children: one PID 1 each,
 * the namespace ends with it. */
static void in_namespaces(void (*driver)(void *), void *arg) {
        uid_t uid = getuid();
        gid_t gid = getgid();
        int status;
        pid_t pid;

        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                if (unshare(CLONE_NEWUSER | CLONE_NEWPID) < 0) {
                        fprintf(stderr, "No user and PID namespace of our own: %s\n", strerror(errno));
                        _exit(1);
                }
                ASSERT_EQ(sandbox_map_ids_as(getpid(), 0, 0, uid, gid), 0);
                driver(arg);
                _exit(0);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        assert_exited(status, 0);
}

static void wait_pid1(pid_t pid1) {
        int status;

        ASSERT_EQ(waitpid(pid1, &status, 0), pid1);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fprintf(stderr, "PID 1 ended with wait status %#x\n", status);
        assert_exited(status, 0);
}

/* Field 3 (the state) and 4 (the parent) of /proc/<pid>/stat; 0 when it is gone. */
static char proc_state(pid_t pid, pid_t *ret_ppid) {
        char path[64], buf[512], state = 0, *c;
        int ppid = 0;
        ssize_t k;
        int fd;

        snprintf(path, sizeof(path), "/proc/%i/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
                return 0;
        buf[k] = 0;
        c = strrchr(buf, ')');
        if (!c || sscanf(c + 1, " %c %i", &state, &ppid) != 2)
                return 0;
        if (ret_ppid)
                *ret_ppid = ppid;
        return state;
}

/* The live (not zombie) processes of the PID namespace whose PID 1 is 'pid1' (seen from outside):
 * their number, and the first one whose parent is PID 1 in *ret_child. */
static unsigned live_in_namespace(pid_t pid1, pid_t *ret_child) {
        char path[64], ns[64], other[64];
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        unsigned n = 0;
        ssize_t k;

        snprintf(path, sizeof(path), "/proc/%i/ns/pid", (int) pid1);
        k = readlink(path, ns, sizeof(ns) - 1);
        ASSERT_TRUE(k > 0);
        ns[k] = 0;
        d = opendir("/proc");
        ASSERT_TRUE(d);
        while ((de = readdir(d))) {
                pid_t pid = atoi(de->d_name), ppid = 0;
                char state;

                if (pid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%i/ns/pid", (int) pid);
                k = readlink(path, other, sizeof(other) - 1);
                if (k <= 0)
                        continue;
                other[k] = 0;
                state = proc_state(pid, &ppid);
                if (!streq(ns, other) || state == 0 || state == 'Z')
                        continue;
                n++;
                if (ret_child && ppid == pid1 && pid != pid1)
                        *ret_child = pid;
        }
        return n;
}

/* Inside: how many processes our namespace's /proc lists. */
static unsigned processes_here(void) {
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        unsigned n = 0;

        ASSERT_TRUE(d);
        while ((de = readdir(d)))
                if (atoi(de->d_name) > 0)
                        n++;
        return n;
}

static void read_exact(int fd, void *buf, size_t size) {
        size_t done = 0;

        while (done < size) {
                ssize_t k = read(fd, (char *) buf + done, size - done);
                if (k < 0 && errno == EINTR)
                        continue;
                ASSERT_TRUE(k > 0);
                done += (size_t) k;
        }
}

static void unblock_signals(void) {
        sigset_t none;

        sigemptyset(&none);
        ASSERT_EQ(sigprocmask(SIG_SETMASK, &none, NULL), 0);
}

/* ---- A payload (sandbox_supervise_payload()) ---- */

typedef enum PayloadKind {
        PAYLOAD_EXIT,           /* a refused call, then exit 3 */
        PAYLOAD_SIGNAL,         /* killed by SIGUSR1 */
        PAYLOAD_LEFTOVERS,      /* a child and a double-forked daemon stay; it exits 0 */
        PAYLOAD_HANG,           /* runs (with a child) until the runner's SIGTERM */
        PAYLOAD_TEMPLATE,       /* a child of the template (not PID 1's), exit 7, its parent reports */
        PAYLOAD_TEMPLATE_MUTE,  /* the same, and its parent dies without telling */
} PayloadKind;

typedef struct PayloadCase {
        PayloadKind kind;
        int status[2];          /* PID 1's report */
        int ready[2];           /* the payload says it runs (PAYLOAD_HANG) */
} PayloadCase;

#define TEMPLATE_CPU_USEC (5 * 1000 * 1000ULL)
#define TEMPLATE_RSS (1ULL << 30)
#define TEMPLATE_WRITTEN 12345ULL
#define DAEMON_WRITTEN 4096

/* The payload's half of PID 1's attach, as sandbox_payload_specialize() does it: a user namespace
 * that PID 1 maps, the sandbox user, and a filter whose listener goes to PID 1 (mount(2) is
 * refused through it). */
static void payload_attach_side(int sync_fd) {
        scmp_filter_ctx ctx;
        const char *step;
        int ack = -1, listener;
        int32_t self;

        unblock_signals();
        ASSERT_EQ(unshare(CLONE_NEWUSER), 0);
        self = (int32_t) getpid();
        ASSERT_EQ(write(sync_fd, &self, sizeof(self)), (ssize_t) sizeof(self));
        read_exact(sync_fd, &ack, sizeof(ack));
        ASSERT_EQ(ack, 0);
        ASSERT_EQ(sandbox_become_user(&step), 0);
        ASSERT_EQ(getuid(), SANDBOX_UID);
        ctx = seccomp_init(SCMP_ACT_ALLOW);
        ASSERT_TRUE(ctx);
        ASSERT_EQ(seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(mount), 0), 0);
        ASSERT_EQ(seccomp_load(ctx), 0);
        listener = seccomp_notify_fd(ctx);
        ASSERT_TRUE(listener >= 0);
        ASSERT_EQ(fd_send_one(sync_fd, listener), 0);
        close(listener);
        close(sync_fd);
        seccomp_release(ctx);
}

/* A child that stays, and a daemon (double-forked, its own session) that wrote DAEMON_WRITTEN
 * bytes: both run on when the payload exits. */
static void leave_children(void) {
        int p[2];
        char c;

        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        if (fork() == 0) {
                (void) signal(SIGTERM, SIG_IGN);
                if (fork() == 0) {
                        ASSERT_TRUE(setsid() > 0);
                        if (fork() == 0) {
                                static char block[DAEMON_WRITTEN];
                                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

                                ASSERT_EQ(write(null, block, sizeof(block)), (ssize_t) sizeof(block));
                                ASSERT_EQ(write(p[1], "r", 1), 1);
                                for (;;)
                                        pause();
                        }
                        _exit(0);
                }
                for (;;)
                        pause();
        }
        close(p[1]);
        read_exact(p[0], &c, 1);
}

_noreturn_ static void payload_run(PayloadCase *c, int sync_fd) {
        payload_attach_side(sync_fd);
        switch (c->kind) {
        case PAYLOAD_EXIT:
                /* Refused by PID 1's answer, not run. */
                _exit(mount("none", "/tmp", "tmpfs", 0, NULL) < 0 && errno != 0 ? 3 : 4);
        case PAYLOAD_SIGNAL:
                (void) raise(SIGUSR1);
                _exit(4);
        case PAYLOAD_LEFTOVERS:
                leave_children();
                _exit(0);
        case PAYLOAD_HANG:
                if (fork() == 0)
                        for (;;)
                                pause();
                ASSERT_EQ(write(c->ready[1], "r", 1), 1);
                for (;;)
                        pause();
        default:
                _exit(7);
        }
}

/* Stands in for the template's child (outside the namespaces in production): it forks the
 * payload, reaps it, and reports its wait status and usage on 'status_fd', unless 'mute'. */
_noreturn_ static void template_child(PayloadCase *c, int sync[2], int status_fd, bool mute) {
        TemplateStatus ts = { .flags = TEMPLATE_STATUS_USAGE | TEMPLATE_STATUS_WRITTEN,
                              .cpu_usec = TEMPLATE_CPU_USEC,
                              .max_rss_bytes = TEMPLATE_RSS,
                              .written_bytes = TEMPLATE_WRITTEN };
        pid_t payload = fork();

        ASSERT_TRUE(payload >= 0);
        if (payload == 0) {
                close(sync[0]);
                payload_run(c, sync[1]);
        }
        close(sync[0]);
        close(sync[1]);
        ASSERT_EQ(waitpid(payload, &ts.wait_status, 0), payload);
        if (!mute)
                ASSERT_EQ(write(status_fd, &ts, sizeof(ts)), (ssize_t) sizeof(ts));
        _exit(0);
}

static int pid1_payload(void *userdata) {
        PayloadCase *c = userdata;
        bool from_template = c->kind == PAYLOAD_TEMPLATE || c->kind == PAYLOAD_TEMPLATE_MUTE;
        SandboxExec e = { .code_fd = -EBADF, .stdout_fd = -EBADF, .stderr_fd = -EBADF,
                          .status_fd = c->status[1], .uid = 0, .gid = 0, .network_ready_fd = -EBADF,
                          .netns_fd = -EBADF, .template_fd = -EBADF, .filter_fd = -EBADF,
                          .kernel_fd = -EBADF, .kernel_payload_fd = -EBADF, .prepared_fd = -EBADF };
        SandboxStatus st = { .kind = SANDBOX_STATUS_EXITED,
                             .start = from_template ? SANDBOX_START_TEMPLATE : SANDBOX_START_COLD };
        SandboxInit init = {
                .io_fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC),
                .last_pid_fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC),
        };
        int template_status[2] = { -EBADF, -EBADF };
        pid_t payload;

        close(c->status[0]);
        close(c->ready[0]);
        seccomp_report_init(&st.seccomp);
        init.signal_fd = sandbox_init_signals();
        ASSERT_TRUE(init.signal_fd >= 0);
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, init.sync), 0);
        if (from_template)
                ASSERT_EQ(pipe2(template_status, O_CLOEXEC), 0);

        payload = fork();
        ASSERT_TRUE(payload >= 0);
        if (payload == 0) {
                close(template_status[0]);
                if (from_template)
                        template_child(c, init.sync, template_status[1], c->kind == PAYLOAD_TEMPLATE_MUTE);
                close(init.sync[0]);
                payload_run(c, init.sync[1]);
        }
        close(c->ready[1]);
        close(template_status[1]);

        ASSERT_EQ(sandbox_supervise_payload(&e, &init, from_template ? 0 : payload, template_status[0], &st),
                  0);
        /* Whatever the payload left is gone: nobody but us. */
        ASSERT_EQ(processes_here(), 1);
        return 0;
}

static void run_payload_case(PayloadCase *c, SandboxStatus *ret) {
        pid_t pid1;
        char r;

        ASSERT_EQ(pipe2(c->status, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(c->ready, O_CLOEXEC), 0);
        pid1 = start_pid1(pid1_payload, c);
        close(c->status[1]);
        close(c->ready[1]);
        if (c->kind == PAYLOAD_HANG) {
                /* The runner's timeout: SIGTERM from outside the namespace. */
                read_exact(c->ready[0], &r, 1);
                ASSERT_EQ(kill(pid1, SIGTERM), 0);
        }
        read_exact(c->status[0], ret, sizeof(*ret));
        wait_pid1(pid1);
        ASSERT_EQ(read(c->status[0], &r, 1), 0); /* one report, nothing after it */
        close(c->status[0]);
        close(c->ready[0]);
        ASSERT_EQ(ret->kind, SANDBOX_STATUS_EXITED);
        ASSERT_EQ(ret->kernel, SANDBOX_KERNEL_NONE);
        ASSERT_TRUE(ret->usage.valid);
        ASSERT_TRUE(ret->usage.tasks_valid);
}

/* Runs a payload of 'kind' under PID 1 in namespaces of its own; returns PID 1's report. */
static void drive_payload(void *arg) {
        const int *args = arg;
        PayloadCase c = { .kind = (PayloadKind) args[0] };
        SandboxStatus st;

        run_payload_case(&c, &st);
        ASSERT_EQ(write(args[1], &st, sizeof(st)), (ssize_t) sizeof(st));
}

static SandboxStatus run_payload(PayloadKind kind) {
        SandboxStatus st;
        int p[2];

        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        in_namespaces(drive_payload, (int[]) { kind, p[1] });
        read_exact(p[0], &st, sizeof(st));
        close(p[0]);
        close(p[1]);
        return st;
}

static void test_payload_exits(void) {
        SandboxStatus st = run_payload(PAYLOAD_EXIT);

        assert_exited(st.value, 3);
        /* PID 1 answered the refused call through the payload's listener, and reports it. */
        ASSERT_EQ(st.seccomp.n_calls, 1);
        ASSERT_EQ(st.seccomp.calls[0].nr, SCMP_SYS(mount));
        ASSERT_EQ(st.seccomp.calls[0].count, 1);
        ASSERT_TRUE(st.seccomp.calls[0].verdict > 0);
        ASSERT_EQ(st.usage.tasks, 1); /* PIDs are given from 2: the payload alone */
}

static void test_payload_killed_by_signal(void) {
        SandboxStatus st = run_payload(PAYLOAD_SIGNAL);

        assert_killed(st.value, SIGUSR1);
        ASSERT_EQ(st.seccomp.n_calls, 0);
}

static void test_payload_leftovers_killed_and_counted(void) {
        SandboxStatus st = run_payload(PAYLOAD_LEFTOVERS);

        ASSERT_EQ(st.value, 0);
        /* The payload, its child, the daemon's parent and the daemon: killed (PID 1 saw its
         * namespace empty), and reaped by PID 1, so that what they did counts. */
        ASSERT_EQ(st.usage.tasks, 4);
        ASSERT_TRUE(st.usage.written_valid);
        ASSERT_TRUE(st.usage.written_bytes >= DAEMON_WRITTEN);
}

static void test_payload_timeout(void) {
        SandboxStatus st = run_payload(PAYLOAD_HANG);

        assert_killed(st.value, SIGKILL);
        ASSERT_EQ(st.usage.tasks, 2);
}

static void test_payload_from_template(void) {
        SandboxStatus st = run_payload(PAYLOAD_TEMPLATE);

        assert_exited(st.value, 7);
        /* The template's child's figures are added to ours. */
        ASSERT_TRUE(st.usage.cpu_usec >= TEMPLATE_CPU_USEC);
        ASSERT_TRUE(st.usage.max_rss_bytes >= TEMPLATE_RSS);
        ASSERT_TRUE(st.usage.written_valid);
        ASSERT_TRUE(st.usage.written_bytes >= TEMPLATE_WRITTEN);
}

static void test_payload_from_template_unreported(void) {
        /* Its parent died without a report: as if killed. */
        ASSERT_EQ(run_payload(PAYLOAD_TEMPLATE_MUTE).value, SIGKILL);
}

/* ---- A stateful session's kernel (sandbox_kernel_run()) ---- */

typedef struct Cell {
        int code;
        int out[2], err[2], status[2];
} Cell;

typedef struct KernelCase {
        Cell first;
        int ctl[2];             /* the runner's [0] and PID 1's [1] */
} KernelCase;

static void cell_new(Cell *c, const char *code) {
        c->code = memfd_new_data("cell", code, strlen(code));
        ASSERT_TRUE(c->code >= 0);
        ASSERT_EQ(pipe2(c->out, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(c->err, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(c->status, O_CLOEXEC), 0);
}

/* The runner's copies of what the cell's processes write to are closed once handed over. */
static void cell_handed(Cell *c) {
        c->code = safe_close(c->code);
        c->out[1] = safe_close(c->out[1]);
        c->err[1] = safe_close(c->err[1]);
        c->status[1] = safe_close(c->status[1]);
}

/* The next cell, as the runner sends it: 0, or -EPIPE when PID 1 takes no more. */
static int cell_send(KernelCase *k, Cell *c, const char *code) {
        int r;

        cell_new(c, code);
        r = fds_send(k->ctl[0], "c", 1, (const int[]) { c->code, c->out[1], c->err[1], c->status[1] }, 4);
        cell_handed(c);
        return r;
}

/* What PID 1 reported for the cell, and its stdout (up to 'size' - 1 bytes). */
static void cell_result(Cell *c, SandboxStatus *st, char *out, size_t size) {
        int32_t start = -1;
        size_t n = 0;
        ssize_t k;

        read_exact(c->status[0], &start, sizeof(start));
        ASSERT_EQ(start, SANDBOX_START_COLD);
        read_exact(c->status[0], st, sizeof(*st));
        while (n < size - 1 && (k = read(c->out[0], out + n, size - 1 - n)) > 0)
                n += (size_t) k;
        out[n] = 0;
        c->out[0] = safe_close(c->out[0]);
        c->err[0] = safe_close(c->err[0]);
        c->status[0] = safe_close(c->status[0]);
}

static void assert_cell_kept(Cell *c, int exit_code, const char *out) {
        SandboxStatus st;
        char buf[256];

        cell_result(c, &st, buf, sizeof(buf));
        ASSERT_EQ(st.kind, SANDBOX_STATUS_EXITED);
        assert_exited(st.value, exit_code);
        ASSERT_EQ(st.kernel, SANDBOX_KERNEL_KEPT);
        ASSERT_TRUE(st.usage.valid);
        ASSERT_STREQ(buf, out);
}

static void assert_cell_lost(Cell *c, SandboxKernelLoss loss) {
        SandboxStatus st;
        char buf[64];

        cell_result(c, &st, buf, sizeof(buf));
        ASSERT_EQ(st.kind, SANDBOX_STATUS_KERNEL_LOST);
        ASSERT_EQ(st.value, loss);
        ASSERT_EQ(st.kernel, SANDBOX_KERNEL_ENDED);
        ASSERT_STREQ(buf, ""); /* it never ran */
}

/* Between cells: the kernel is PID 1's only process, and stopped. Returns its PID (ours). */
static pid_t assert_kernel_stopped_alone(pid_t pid1) {
        pid_t kernel = 0;

        ASSERT_EQ(live_in_namespace(pid1, &kernel), 2);
        ASSERT_TRUE(kernel > 0);
        ASSERT_EQ(proc_state(kernel, NULL), 'T');
        return kernel;
}

static int pid1_kernel(void *userdata) {
        KernelCase *k = userdata;
        SandboxExec e = { .code_fd = k->first.code, .stdout_fd = k->first.out[1],
                          .stderr_fd = k->first.err[1], .status_fd = k->first.status[1],
                          .network_ready_fd = -EBADF, .netns_fd = -EBADF, .template_fd = -EBADF,
                          .filter_fd = -EBADF, .kernel = true, .kernel_fd = k->ctl[1],
                          .kernel_payload_fd = -EBADF, .prepared_fd = -EBADF };
        const char *script = strjoina(source_root, "/src/session-manager/runner/kernel.py");
        char *const argv[] = { (char *) "python3", (char *) script, NULL };
        char *const envp[] = { (char *) "PATH=/usr/bin:/bin", (char *) "LANG=C.UTF-8",
                               (char *) "PYTHONDONTWRITEBYTECODE=1", NULL };
        PidRef kernel = PIDREF_NULL;
        int ksock[2], signal_fd;
        pid_t pid;

        close(k->ctl[0]);
        close(k->first.out[0]);
        close(k->first.err[0]);
        close(k->first.status[0]);
        signal_fd = sandbox_init_signals();
        ASSERT_TRUE(signal_fd >= 0);
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ksock), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                /* As run_kernel() starts it, without the payload's specialization. */
                unblock_signals();
                ASSERT_TRUE(ksock[1] != SANDBOX_KERNEL_FD);
                ASSERT_EQ(dup2(ksock[1], SANDBOX_KERNEL_FD), SANDBOX_KERNEL_FD);
                execve("/usr/bin/python3", argv, envp);
                _exit(127);
        }
        close(ksock[1]);
        ASSERT_EQ(pidref_set_child(&kernel, pid), 0);
        sandbox_kernel_run(&e, &kernel, ksock[0], -EBADF, signal_fd,
                           open("/proc/self/io", O_RDONLY | O_CLOEXEC),
                           open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC));
}

/* Starts PID 1 with the kernel and 'code' as the first cell. */
static pid_t start_kernel(KernelCase *k, const char *code) {
        pid_t pid1;

        cell_new(&k->first, code);
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, k->ctl), 0);
        pid1 = start_pid1(pid1_kernel, k);
        k->ctl[1] = safe_close(k->ctl[1]);
        cell_handed(&k->first);
        return pid1;
}

/* A child that keeps sending the kernel SIGCONT, and a double-forked daemon: both are dead before
 * the kernel stops. */
static const char cell_wakers[] =
        "import os, signal, time\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.write(w, b'1')\n"
        "    while True:\n"
        "        os.kill(os.getppid(), signal.SIGCONT)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.write(w, b'2')\n"
        "        while True:\n"
        "            time.sleep(1)\n"
        "    os._exit(0)\n"
        "os.read(r, 1), os.read(r, 1)\n"
        "raise SystemExit(x + 1)\n";

/* A leftover that keeps replacing itself (it forks, its parent exits: a new PID each time) and
 * keeps sending the kernel SIGCONT: one listing of the namespace can miss it, PID 1 looks again. */
static const char cell_fork_chain[] =
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None)\n"
        "kernel = os.getpid()\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.write(w, b'1')\n"
        "    while True:\n"
        "        libc.kill(kernel, signal.SIGCONT)\n"
        "        if libc.fork() != 0:\n"
        "            libc._exit(0)\n"
        "os.read(r, 1)\n"
        "x += 1\n";

static void drive_kernel_cells(_unused_ void *arg) {
        KernelCase k = {};
        pid_t pid1, kernel;
        Cell c;

        pid1 = start_kernel(&k, "x = 41\nprint('one')\n");
        assert_cell_kept(&k.first, 0, "one\n");
        kernel = assert_kernel_stopped_alone(pid1);

        ASSERT_EQ(cell_send(&k, &c, cell_wakers), 0);
        assert_cell_kept(&c, 42, "");
        /* The leftovers are gone, and the kernel stays stopped: the same one. */
        ASSERT_EQ(assert_kernel_stopped_alone(pid1), kernel);

        ASSERT_EQ(cell_send(&k, &c, cell_fork_chain), 0);
        assert_cell_kept(&c, 0, "");
        ASSERT_EQ(assert_kernel_stopped_alone(pid1), kernel);

        /* Not judged woken: the next cell runs in the same interpreter. */
        ASSERT_EQ(cell_send(&k, &c, "print(x)\n"), 0);
        assert_cell_kept(&c, 0, "42\n");
        ASSERT_EQ(assert_kernel_stopped_alone(pid1), kernel);

        /* The runner hangs up: everything ends with PID 1. */
        k.ctl[0] = safe_close(k.ctl[0]);
        wait_pid1(pid1);
        ASSERT_EQ(kill(kernel, 0), -1);
}

static void drive_kernel_woken(_unused_ void *arg) {
        KernelCase k = {};
        pid_t pid1, kernel;
        Cell c;

        pid1 = start_kernel(&k, "x = 1\n");
        assert_cell_kept(&k.first, 0, "");
        kernel = assert_kernel_stopped_alone(pid1);
        /* Something continues it between cells: it runs (waits for the next cell). */
        ASSERT_EQ(kill(kernel, SIGCONT), 0);
        ASSERT_EQ(cell_send(&k, &c, "print(x)\n"), 0);
        assert_cell_lost(&c, SANDBOX_KERNEL_LOSS_RAN);
        wait_pid1(pid1);
        ASSERT_EQ(kill(kernel, 0), -1);
        k.ctl[0] = safe_close(k.ctl[0]);
}

static void drive_kernel_died_stopped(_unused_ void *arg) {
        KernelCase k = {};
        pid_t pid1, kernel;
        Cell c;
        int r;

        pid1 = start_kernel(&k, "x = 1\n");
        assert_cell_kept(&k.first, 0, "");
        kernel = assert_kernel_stopped_alone(pid1);
        /* The OOM killer, say; PID 1 reaps it. */
        ASSERT_EQ(kill(kernel, SIGKILL), 0);
        while (kill(kernel, 0) == 0)
                usleep(1000);
        /* PID 1 takes no more cells, or answers one that came "lost": it never runs. */
        r = cell_send(&k, &c, "print(x)\n");
        if (r >= 0)
                assert_cell_lost(&c, SANDBOX_KERNEL_LOSS_DIED);
        else
                ASSERT_EQ(r, -EPIPE);
        wait_pid1(pid1);
        k.ctl[0] = safe_close(k.ctl[0]);
}

static void drive_kernel_timeout(_unused_ void *arg) {
        KernelCase k = {};
        SandboxStatus st;
        pid_t pid1, kernel = 0;
        char buf[64];
        ssize_t n;

        pid1 = start_kernel(&k, "import time\nprint('started', flush=True)\ntime.sleep(600)\n");
        n = read(k.first.out[0], buf, sizeof(buf) - 1);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        ASSERT_STREQ(buf, "started\n");
        ASSERT_EQ(live_in_namespace(pid1, &kernel), 2);
        /* The runner's timeout: everything is killed, the kernel ends with the cell. */
        ASSERT_EQ(kill(pid1, SIGTERM), 0);
        cell_result(&k.first, &st, buf, sizeof(buf));
        ASSERT_EQ(st.kind, SANDBOX_STATUS_EXITED);
        assert_killed(st.value, SIGKILL);
        ASSERT_EQ(st.kernel, SANDBOX_KERNEL_ENDED);
        wait_pid1(pid1);
        ASSERT_EQ(kill(kernel, 0), -1);
        k.ctl[0] = safe_close(k.ctl[0]);
}

static void drive_kernel_killed_in_cell(_unused_ void *arg) {
        KernelCase k = {};
        SandboxStatus st;
        char buf[64];
        pid_t pid1;

        /* The cell's code kills its interpreter: the cell ran, it is no loss. */
        pid1 = start_kernel(&k, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n");
        cell_result(&k.first, &st, buf, sizeof(buf));
        ASSERT_EQ(st.kind, SANDBOX_STATUS_EXITED);
        assert_killed(st.value, SIGKILL);
        ASSERT_EQ(st.kernel, SANDBOX_KERNEL_ENDED);
        wait_pid1(pid1);
        k.ctl[0] = safe_close(k.ctl[0]);
}

/* ---- Display cells: result records on a pipe of their own ---- */

/* All of what 'fd' gives until its end (at most 'size' - 1 bytes), then closes it. */
static void read_to_end(int *fd, char *buf, size_t size) {
        size_t n = 0;
        ssize_t k;

        while (n < size - 1 && (k = read(*fd, buf + n, size - 1 - n)) > 0)
                n += (size_t) k;
        buf[n] = 0;
        *fd = safe_close(*fd);
}

/* A display cell after the first: its records pipe is the fifth fd. */
static void cell_send_display(KernelCase *k, Cell *c, int results[2], const char *code) {
        cell_new(c, code);
        ASSERT_EQ(pipe2(results, O_CLOEXEC), 0);
        ASSERT_EQ(fds_send(k->ctl[0], "c", 1,
                           (const int[]) { c->code, c->out[1], c->err[1], c->status[1], results[1] }, 5),
                  0);
        cell_handed(c);
        results[1] = safe_close(results[1]);
}

#define RECORD_COUNT(n) "{\"type\": \"number_of_executions\", \"execution_count\": " #n "}\n"

static void drive_kernel_display(_unused_ void *arg) {
        KernelCase k = {};
        char records[4096], err[4096];
        int results[2];
        pid_t pid1;
        Cell c;

        /* The first cell is a display cell: its records pipe waits on PID 1's socket when it
         * starts, as the runner puts it there. */
        cell_new(&k.first, "x = 41\n");
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, k.ctl), 0);
        ASSERT_EQ(pipe2(results, O_CLOEXEC), 0);
        ASSERT_EQ(fds_send(k.ctl[0], "r", 1, &results[1], 1), 0);
        results[1] = safe_close(results[1]);
        pid1 = start_pid1(pid1_kernel, &k);
        k.ctl[1] = safe_close(k.ctl[1]);
        cell_handed(&k.first);
        /* The kernel waits for each record to be read: read while it runs. */
        read_to_end(&results[0], records, sizeof(records));
        ASSERT_STREQ(records, RECORD_COUNT(1));
        assert_cell_kept(&k.first, 0, "");

        /* The last expression's value, as its repr. */
        cell_send_display(&k, &c, results, "x + 1\n");
        read_to_end(&results[0], records, sizeof(records));
        ASSERT_STREQ(records,
                     RECORD_COUNT(2) "{\"type\": \"result\", \"is_main_result\": true, \"text\": \"42\"}\n");
        assert_cell_kept(&c, 0, "");

        /* An exception is a record, not a traceback on stderr; the exit code is as before. */
        cell_send_display(&k, &c, results, "1/0\n");
        read_to_end(&results[0], records, sizeof(records));
        read_to_end(&c.err[0], err, sizeof(err));
        ASSERT_STREQ(err, "");
        ASSERT_TRUE(startswith(records,
                               RECORD_COUNT(3) "{\"type\": \"error\", \"name\": \"ZeroDivisionError\", "
                                               "\"value\": \"division by zero\", \"traceback\": "
                                               "\"Traceback (most recent call last):\\n  "
                                               "File \\\"<cell 3>\\\""));
        ASSERT_TRUE(strstr(records, "kernel.py") == NULL);
        assert_cell_kept(&c, 1, "");

        /* A plain cell in the same kernel: as ever, no display() and the traceback on stderr. */
        ASSERT_EQ(cell_send(&k, &c, "display(x)\n"), 0);
        read_to_end(&c.err[0], err, sizeof(err));
        ASSERT_TRUE(strstr(err, "NameError: name 'display' is not defined\n") != NULL);
        assert_cell_kept(&c, 1, "");

        k.ctl[0] = safe_close(k.ctl[0]);
        wait_pid1(pid1);
}

static void test_kernel_display(void) {
        in_namespaces(drive_kernel_display, NULL);
}

static void test_kernel_cells_and_leftovers(void) {
        in_namespaces(drive_kernel_cells, NULL);
}

static void test_kernel_woken_between_cells(void) {
        in_namespaces(drive_kernel_woken, NULL);
}

static void test_kernel_died_while_stopped(void) {
        in_namespaces(drive_kernel_died_stopped, NULL);
}

static void test_kernel_timeout(void) {
        in_namespaces(drive_kernel_timeout, NULL);
}

static void test_kernel_killed_in_cell(void) {
        in_namespaces(drive_kernel_killed_in_cell, NULL);
}

int main(int argc, char *argv[]) {
        ASSERT_TRUE(argc == 2);
        source_root = argv[1];
        setvbuf(stdout, NULL, _IOLBF, 0);
        /* The report pipes of a PID 1 that failed must not kill us. */
        (void) signal(SIGPIPE, SIG_IGN);
        RUN(test_payload_exits);
        RUN(test_payload_killed_by_signal);
        RUN(test_payload_leftovers_killed_and_counted);
        RUN(test_payload_timeout);
        RUN(test_payload_from_template);
        RUN(test_payload_from_template_unreported);
        RUN(test_kernel_cells_and_leftovers);
        RUN(test_kernel_woken_between_cells);
        RUN(test_kernel_died_while_stopped);
        RUN(test_kernel_timeout);
        RUN(test_kernel_killed_in_cell);
        RUN(test_kernel_display);
        return 0;
}
