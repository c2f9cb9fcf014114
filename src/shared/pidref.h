/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A child process held by a pidfd, the way systemd's PidRef holds one: it is signalled and waited
 * for through the fd only, never by its number, which names another process once it is reaped. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "macro.h"

typedef struct PidRef {
        pid_t pid;      /* for messages and for matching what waitpid(-1) reaped; never signalled */
        int fd;         /* the pidfd, or -EBADF */
} PidRef;

#define PIDREF_NULL (PidRef) { .pid = 0, .fd = -EBADF }

static inline bool pidref_is_set(const PidRef *ref) {
        return ref && ref->fd >= 0;
}

/* fork()-like: a new child (in the namespaces of 'flags', CLONE_NEW*) whose pidfd comes with it
 * (CLONE_PIDFD): there is no moment in which the child exists without it. Returns 0 in the
 * child, 1 in the parent (*ret set), or -errno. */
int pidref_clone(unsigned long flags, PidRef *ret);

/* posix_spawn() for a child held by its pidfd: stdio[i] >= 0 (an fd above 2) becomes the child's
 * fd i, the others are inherited; argv[0] (an absolute path) is executed with envp, and exit
 * status 127 says that failed. Returns 0 with *ret set, or -errno. */
int pidref_spawn(char *const argv[], char *const envp[], const int stdio[3], PidRef *ret);

/* Holds 'pid', which must be the caller's own child, not yet reaped (so that its number is still
 * its own). */
int pidref_set_child(PidRef *ref, pid_t pid);

int pidref_dup(const PidRef *ref, PidRef *ret);

/* pidfd_send_signal(): -ESRCH for a process that is gone (or reaped, or never held). */
int pidref_kill(const PidRef *ref, int sig);

/* waitid(P_PIDFD): 'options' as waitid's (WEXITED, WNOHANG, ...). Returns 1 with *ret_si (and
 * *ret_ru, if not NULL) filled when there was something to collect, 0 with WNOHANG when not
 * yet, or -errno. */
int pidref_wait(const PidRef *ref, int options, siginfo_t *ret_si, struct rusage *ret_ru);

/* The wait status (as waitpid() reports it: WIFEXITED() and the others apply) of what a wait
 * collected, for those who pass one on. */
int pidref_wait_status(const siginfo_t *si);

/* Closes the fd; the process (if any) is not touched. */
void pidref_done(PidRef *ref);

/* SIGKILL, reaped (a killed process goes at once, so the wait is short), and done. */
void pidref_done_kill(PidRef *ref);
