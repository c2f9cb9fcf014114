/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
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

int sigprocmask_many(int how, sigset_t *ret_old, ...) {
        sigset_t ss;
        va_list ap;
        int r = 0;

        (void) sigemptyset(&ss);
        va_start(ap, ret_old);
        for (int sig; r == 0 && (sig = va_arg(ap, int)) >= 0;)
                if (sigaddset(&ss, sig) < 0)
                        r = -errno;
        va_end(ap);
        if (r < 0)
                return r;
        if (sigprocmask(how, &ss, ret_old) < 0)
                return -errno;
        return 0;
}
