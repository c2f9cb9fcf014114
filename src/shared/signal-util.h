/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Signal dispositions a new program starts with, and the mask a daemon runs with. */
#pragma once

#include <signal.h>

/* Sets every signal but SIGKILL and SIGSTOP to SIG_DFL and empties the signal mask. It uses the
 * system call, not sigaction(3): glibc refuses to touch the two real-time signals it keeps for
 * itself (32 and 33), yet an ignored disposition of them is inherited across fork and execve
 * from whatever started the service, and a sandbox must not start with a signal ignored that a
 * fresh interpreter would not ignore. Async-signal-safe. Returns 0 or -errno (the first error;
 * every signal is still tried). */
int reset_all_signal_dispositions(void);

/* Adds the signals listed, ended by -1, to the mask (how = SIG_BLOCK), takes them out of it
 * (SIG_UNBLOCK) or makes them the mask (SIG_SETMASK); the mask before goes to *ret_old, if given.
 * Returns 0 or -errno (-EINVAL for a number that is no signal, before the mask is touched). */
int sigprocmask_many(int how, sigset_t *ret_old, ...);
