/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Signal dispositions a new program starts with. */
#pragma once

/* Sets every signal but SIGKILL and SIGSTOP to SIG_DFL and empties the signal mask. It uses the
 * system call, not sigaction(3): glibc refuses to touch the two real-time signals it keeps for
 * itself (32 and 33), yet an ignored disposition of them is inherited across fork and execve
 * from whatever started the service, and a sandbox must not start with a signal ignored that a
 * fresh interpreter would not ignore. Async-signal-safe. Returns 0 or -errno (the first error;
 * every signal is still tried). */
int reset_all_signal_dispositions(void);
