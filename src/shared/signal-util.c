/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "signal-util.h"

/* The kernel's struct sigaction on the architectures where the handler comes first (x86-64,
 * arm64, ppc64el, s390x, riscv64); the rest is zero for SIG_DFL. */
struct kernel_sigaction {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
};

int reset_all_signal_dispositions(void) {
        struct kernel_sigaction ksa = { .handler = SIG_DFL };
        uint64_t empty = 0;
        int r = 0;

        for (int sig = 1; sig < _NSIG; sig++) {
                if (sig == SIGKILL || sig == SIGSTOP)
                        continue;
                if (syscall(SYS_rt_sigaction, sig, &ksa, NULL, sizeof(uint64_t)) < 0 && r == 0)
                        r = -errno;
        }
        if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, sizeof(uint64_t)) < 0 && r == 0)
                r = -errno;
        return r;
}
