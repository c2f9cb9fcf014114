/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* PID 1 of a prepared sandbox: everything of an exec's sandbox made before the exec exists.
 *
 * The runner makes the next exec's sandbox while the session waits (docs/security.md "Prepared
 * sandboxes"): namespaces, root, and the payload forked from the template and specialized (user
 * namespace, uid, no capabilities, no_new_privs, the filter, the exec's environment, its random
 * state reseeded) up to the point where it reads its code. Nothing of the session has run in it
 * and nothing the session wrote was read: /workspace is mounted but not looked at, the user site
 * and the cell come after the release. Here PID 1 waits for the exec (a SandboxGo and the code's
 * fd on e->prepared_fd), writes the code into /exec (a tmpfs of its own, writable by no one but
 * us), and releases the payload (TemplateGo over its socket, which lowers its RLIMIT_CPU to the
 * exec's); from there the exec runs as any other. A sandbox the runner gives up (it closes the
 * socket, or signals) ends here with all it holds; one whose payload died while it waited reports
 * SANDBOX_STATUS_PREPARED_LOST, and the runner starts the exec anew. Each serves one exec. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "sandbox.h"
#include "template-protocol.h"

_noreturn_ static void prepared_lost(const SandboxExec *e, int payload_status_fd) {
        TemplateStatus ts = {};
        ssize_t k;

        k = payload_status_fd >= 0 ? read(payload_status_fd, &ts, sizeof(ts)) : -1;
        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_PREPARED_LOST,
                                k == (ssize_t) sizeof(ts) ? ts.wait_status : SIGKILL, "prepared payload", 0);
}

/* Ends a sandbox the runner gave up: our exit takes every process of the namespace along. */
_noreturn_ static void prepared_dropped(void) {
        sandbox_end_all_processes();
        _exit(0);
}

/* The runner's SandboxGo and the code's fd; returns the fd. */
static int receive_go(const SandboxExec *e, SandboxGo *ret) {
        SandboxGo go = {};
        size_t n_fds = 0;
        ssize_t k;
        int fd = -EBADF;

        k = fds_receive(e->prepared_fd, &go, sizeof(go), &fd, 1, &n_fds);
        if (k == -EAGAIN)
                return -EAGAIN;
        if (k <= 0)
                prepared_dropped(); /* EOF, or nothing we can use: the runner let go */
        if (k != (ssize_t) sizeof(go) || go.magic != SANDBOX_GO_MAGIC || go.timeout_ms == 0 || n_fds != 1) {
                safe_close(fd);
                prepared_dropped();
        }
        *ret = go;
        return fd;
}

void sandbox_prepared_wait(SandboxExec *e, SandboxInit *init, int payload_status_fd, SandboxStatus *st) {
        bool from_template = st->start == SANDBOX_START_TEMPLATE;
        SeccompSupervisor sup = {};
        SandboxGo go = {};
        int code_fd = -EBADF, r;

        (void) fd_nonblock(e->prepared_fd, true);
        if (from_template) {
                /* Mapped and filtered now; -EBADF: it failed before its filter (and said why on
                 * its stderr), its end follows on payload_status_fd. */
                r = sandbox_payload_attach(e, 0, init->sync[0]);
                if (r < 0 && r != -EBADF)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -r,
                                                "user namespace", 125);
                init->listener = r;
                init->attached = true;
        }

        while (code_fd < 0) {
                struct pollfd p[4] = {
                        { .fd = e->prepared_fd, .events = POLLIN },
                        { .fd = init->signal_fd, .events = POLLIN },
                        { .fd = payload_status_fd, .events = POLLIN },
                        { .fd = init->listener, .events = POLLIN },
                };

                if (poll(p, ELEMENTSOF(p), -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        prepared_dropped();
                }
                sandbox_listener_event(&init->listener, p[3].revents, &sup, &st->seccomp);
                if (p[2].revents)
                        prepared_lost(e, payload_status_fd);
                /* No child of ours exists yet: only the runner's SIGTERM matters. */
                if ((p[1].revents & POLLIN) && sandbox_sigterm_from_outside(init->signal_fd))
                        prepared_dropped();
                if (p[0].revents) {
                        r = receive_go(e, &go);
                        if (r >= 0)
                                code_fd = r;
                }
        }
        e->prepared_fd = safe_close(e->prepared_fd);

        r = sandbox_write_cell(e, init->exec_dir_fd, code_fd);
        if (r < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -r, "copy cell", 125);
        init->exec_dir_fd = safe_close(init->exec_dir_fd);
        /* Read-only from here on, as a sandbox's /exec made with its code is (our root's, which
         * nothing of the sandbox can change). */
        if (mount(NULL, "/exec", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  NULL) < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno, "remount /exec",
                                        125);
        e->code_fd = code_fd;
        e->timeout_ms = go.timeout_ms;
        if (!from_template)
                return; /* the cold payload starts now, with the exec's timeout */

        TemplateGo tg = {
                .magic = TEMPLATE_MAGIC,
                .cpu_limit_sec = sandbox_cpu_limit_sec(go.timeout_ms, e->cpus_percent),
        };
        if (send(init->sync[0], &tg, sizeof(tg), MSG_NOSIGNAL) != (ssize_t) sizeof(tg))
                /* It died waiting: nothing of the exec ran. */
                prepared_lost(e, payload_status_fd);
        /* It says it took the code before it reads it: a payload killed a moment before (the
         * OOM killer, say) never does, and the exec starts anew instead of ending with a death
         * that was not its own. */
        for (;;) {
                struct pollfd p[3] = {
                        { .fd = init->sync[0], .events = POLLIN },
                        { .fd = init->signal_fd, .events = POLLIN },
                        { .fd = payload_status_fd, .events = POLLIN },
                };
                char ack;

                if (poll(p, ELEMENTSOF(p), -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        prepared_lost(e, payload_status_fd);
                }
                if (p[0].revents & POLLIN && recv(init->sync[0], &ack, 1, MSG_DONTWAIT) == 1 && ack == 'G')
                        return;
                /* Gone, or the exec ended (its timeout, a cancel) before the code was taken. */
                if (p[0].revents || p[2].revents ||
                    ((p[1].revents & POLLIN) && sandbox_sigterm_from_outside(init->signal_fd))) {
                        sandbox_end_all_processes();
                        prepared_lost(e, payload_status_fd);
                }
        }
}
