/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Children held by pidfds (pidref.h). The raw system calls, not glibc's wrappers: clone() because
 * fork() can't return a pidfd (and clone3(), which could, is refused by the unit's namespace
 * filter, which can't look into its arguments); the others for libcs without them. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pidref.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

int pidref_clone(unsigned long flags, PidRef *ret) {
        int fd = -EBADF;
        pid_t pid;

        /* The pidfd is written to the parent_tid argument, the third on every architecture whose
         * clone() takes the flags first (x86, arm64, riscv, ppc; as our other clones assume). */
        pid = (pid_t) syscall(SYS_clone, flags | CLONE_PIDFD | SIGCHLD, NULL, &fd, NULL, 0);
        if (pid < 0)
                return -errno;
        if (pid == 0)
                return 0;
        *ret = (PidRef) { .pid = pid, .fd = fd };
        return 1;
}

int pidref_spawn(char *const argv[], char *const envp[], const int stdio[3], PidRef *ret) {
        int r;

        r = pidref_clone(0, ret);
        if (r != 0)
                return MIN(r, 0);
        /* The child: system calls only, then exec (or _exit). */
        for (int i = 0; i < 3; i++)
                if (stdio[i] >= 0 && dup2(stdio[i], i) < 0)
                        _exit(127);
        execve(argv[0], argv, envp);
        _exit(127);
}

int pidref_set_child(PidRef *ref, pid_t pid) {
        int fd;

        if (pid <= 0)
                return -EINVAL;
        fd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return -errno;
        *ref = (PidRef) { .pid = pid, .fd = fd };
        return 0;
}

int pidref_dup(const PidRef *ref, PidRef *ret) {
        int fd;

        if (!pidref_is_set(ref))
                return -ESRCH;
        fd = fcntl(ref->fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        *ret = (PidRef) { .pid = ref->pid, .fd = fd };
        return 0;
}

int pidref_kill(const PidRef *ref, int sig) {
        if (!pidref_is_set(ref))
                return -ESRCH;
        if (syscall(SYS_pidfd_send_signal, ref->fd, sig, NULL, 0) < 0)
                return -errno;
        return 0;
}

int pidref_wait(const PidRef *ref, int options, siginfo_t *ret_si, struct rusage *ret_ru) {
        siginfo_t si = {};

        if (!pidref_is_set(ref))
                return -ECHILD;
        for (;;) {
                if (syscall(SYS_waitid, P_PIDFD, ref->fd, &si, options, ret_ru) >= 0)
                        break;
                if (errno != EINTR)
                        return -errno;
        }
        if (si.si_pid == 0)
                return 0; /* WNOHANG, and nothing yet */
        if (ret_si)
                *ret_si = si;
        return 1;
}

int pidref_wait_status(const siginfo_t *si) {
        switch (si->si_code) {
        case CLD_EXITED:
                return (si->si_status & 0xff) << 8;
        case CLD_KILLED:
                return si->si_status & 0x7f;
        case CLD_DUMPED:
                return (si->si_status & 0x7f) | 0x80;
        default:
                return SIGKILL; /* what a wait that collected nothing is taken for */
        }
}

void pidref_done(PidRef *ref) {
        ref->fd = safe_close(ref->fd);
        ref->pid = 0;
}

void pidref_done_kill(PidRef *ref) {
        if (pidref_kill(ref, SIGKILL) >= 0)
                (void) pidref_wait(ref, WEXITED | __WALL, NULL, NULL);
        pidref_done(ref);
}
