/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A sandbox's PID 1, cloned into new namespaces with the pipes it reports through: for an exec
 * (runner-exec.c) and for a stateful session's kernel (runner-kernel.c) alike. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "runner.h"

int sandbox_pipes_open(SandboxPipes *p) {
        _cleanup_(sandbox_pipes_close) SandboxPipes n = SANDBOX_PIPES_NULL;

        if (pipe2(n.out, O_CLOEXEC) < 0 || pipe2(n.err, O_CLOEXEC) < 0 || pipe2(n.status, O_CLOEXEC) < 0)
                return -errno;
        *p = n;
        n = SANDBOX_PIPES_NULL;
        return 0;
}

void sandbox_pipes_close(SandboxPipes *p) {
        close_pairp(&p->out);
        close_pairp(&p->err);
        close_pairp(&p->status);
}

SandboxProcess sandbox_pipes_take(SandboxPipes *p, PidRef *init) {
        SandboxProcess sp = {
                .init = *init,
                .out_fd = TAKE_FD(p->out[0]),
                .err_fd = TAKE_FD(p->err[0]),
                .status_fd = TAKE_FD(p->status[0]),
        };

        *init = PIDREF_NULL;
        return sp;
}

/* Creates the pipes of a sandbox, fills in what every sandbox of the session shares and clones
 * PID 1 of a new one, which runs 'se'. 'parent_only_fd' (or -EBADF) is closed in the child. */
int runner_spawn_sandbox(Runner *r, SandboxExec *se, int parent_only_fd, SandboxProcess *ret) {
        _cleanup_(sandbox_pipes_close) SandboxPipes pipes = SANDBOX_PIPES_NULL;
        PidRef init = PIDREF_NULL;
        int q;

        q = sandbox_pipes_open(&pipes);
        if (q < 0)
                return q;

        se->session_root = r->session_root;
        se->stdout_fd = pipes.out[1];
        se->stderr_fd = pipes.err[1];
        se->status_fd = pipes.status[1];
        se->uid = r->uid;
        se->gid = r->gid;
        /* No file can be larger than both filesystems together: a backstop only, so that hitting
         * a quota gives ENOSPC from the filesystem, not EFBIG. */
        se->fsize_limit = r->workspace_size + r->tmp_size;
        se->cpus_percent = r->cpus_percent;
        se->payload_procs_fd = r->payload_procs_fd;
        se->in_payload = r->payload_procs_fd >= 0;

        /* fork()-like clone into new namespaces: the child starts as PID 1 of its namespace. With a
         * network, in the network namespace made for it (sandbox_run_init() joins it). */
        q = pidref_clone(SANDBOX_CLONE_FLAGS & ~(se->netns_fd >= 0 ? CLONE_NEWNET : 0UL), &init);
        if (q < 0)
                return q;
        if (q == 0) {
                safe_close(pipes.out[0]);
                safe_close(pipes.err[0]);
                safe_close(pipes.status[0]);
                safe_close(parent_only_fd);
                sandbox_run_init(se);
        }
        *ret = sandbox_pipes_take(&pipes, &init);
        return 0;
}
