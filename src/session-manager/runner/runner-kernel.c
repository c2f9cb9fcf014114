/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel of a stateful session: PID 1 of a sandbox that stays between cells
 * (sandbox-kernel.c). Its first cell starts it; each next one is a message on its control
 * socket with the code and the cell's stdout, stderr and status pipes (and a display cell's
 * records pipe); reset, a cell that ended it and the runner's end kill it (PID 1's death takes
 * every process of its namespace). A first cell that is a display cell has its records pipe
 * waiting on the socket when PID 1 starts ('r', one fd). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "runner.h"

void runner_kernel_stop(Runner *r) {
        RunnerKernel *k = r->kernel;

        if (!k)
                return;
        r->kernel = NULL;
        k->child_source = sd_event_source_disable_unref(k->child_source);
        /* SIGKILL to PID 1 of the namespace (through its pidfd: once reaped, it is not signalled):
         * the wait is short. */
        pidref_done_kill(&k->init);
        safe_close(k->ctl_fd);
        free(k);
}

/* PID 1 of the kernel's sandbox ended (its pidfd polls readable): reaped here, through the pidfd. */
static int on_kernel_exit(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RunnerKernel *k = userdata;
        Runner *r = k->runner;
        RunnerExec *e = r->exec;

        /* A cell running now learns how PID 1 ended (its status pipe tells it that it is over). */
        if (runner_exec_reap_init(e && e->stateful && !e->exited ? e : NULL, &k->init) == 0)
                return 0;
        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                   "The kernel of session %s ended.", r->session_id);
        runner_kernel_stop(r);
        return 0;
}

int runner_kernel_cell(Runner *r, SandboxExec *se, bool display, SandboxProcess *ret, int *ret_results_fd,
                       bool *ret_new) {
        _cleanup_(sandbox_pipes_close) SandboxPipes pipes = SANDBOX_PIPES_NULL;
        _cleanup_close_pair_ int ctl[2] = { -EBADF, -EBADF }, results[2] = { -EBADF, -EBADF };
        RunnerKernel *k;
        int q;

        if (display && pipe2(results, O_CLOEXEC) < 0)
                return -errno;
        if (r->kernel) {
                q = sandbox_pipes_open(&pipes);
                if (q < 0)
                        return q;
                q = fds_send(r->kernel->ctl_fd, "c", 1,
                             (const int[]) { se->code_fd, pipes.out[1], pipes.err[1], pipes.status[1],
                                             results[1] },
                             display ? 5 : 4);
                if (q >= 0) {
                        PidRef init;

                        /* The cell's own reference to PID 1: it may outlive the kernel's. */
                        q = pidref_dup(&r->kernel->init, &init);
                        if (q < 0)
                                return q;
                        *ret = sandbox_pipes_take(&pipes, &init);
                        *ret_results_fd = TAKE_FD(results[0]);
                        *ret_new = false;
                        return 0;
                }
                /* Gone between cells (its end not seen yet): a new one. */
                runner_kernel_stop(r);
        }

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
                return -errno;
        /* Before PID 1 exists: it finds the records pipe of its first cell at once. */
        if (display) {
                q = fds_send(ctl[0], "r", 1, &results[1], 1);
                if (q < 0)
                        return q;
        }
        k = calloc(1, sizeof(RunnerKernel));
        if (!k)
                return -ENOMEM;
        se->kernel = true;
        se->kernel_fd = ctl[1];
        q = runner_spawn_sandbox(r, se, ctl[0], ret);
        if (q < 0) {
                free(k);
                return q;
        }
        *k = (RunnerKernel) { .runner = r, .init = PIDREF_NULL, .ctl_fd = TAKE_FD(ctl[0]) };
        r->kernel = k;
        q = pidref_dup(&ret->init, &k->init);
        if (q >= 0)
                q = sd_event_add_io(r->event, &k->child_source, k->init.fd, EPOLLIN, on_kernel_exit, k);
        if (q < 0) {
                pidref_done_kill(&ret->init);
                safe_close(ret->out_fd);
                safe_close(ret->err_fd);
                safe_close(ret->status_fd);
                runner_kernel_stop(r);
                return q;
        }
        *ret_results_fd = TAKE_FD(results[0]);
        *ret_new = true;
        return 0;
}

int runner_handle_reset_kernel(Runner *r, const void *params, const int *fds, size_t n_fds) {
        if (r->kernel)
                log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Resetting the kernel of session %s.", r->session_id);
        runner_kernel_stop(r);
        return runner_send_ok(r, r->connection_generation, NULL, 0);
}
