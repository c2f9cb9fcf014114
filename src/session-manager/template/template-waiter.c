/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-template-waiter: what the template's child becomes once it has forked the payload
 * (template-module.c). The child shares the template's memory until it executes this, so that no
 * copy of the template's page tables is made for it; from here it is a small static program in
 * the session's cgroups and namespaces, the payload's parent. It reaps the payload (through its
 * pidfd) and writes its wait status, rusage and write counter to PID 1's status pipe, then exits.
 * It is started by the template only (root, its fds given as template-protocol.h says), reads
 * nothing but its own /proc io counter and the payload's end, and links nothing but libc,
 * statically: nothing to load, nothing found on a path of the session's. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "parse-util.h"
#include "pidref.h"
#include "template-protocol.h"
#include "time-util.h"

int main(void) {
        PidRef payload = { .pid = 1, .fd = TEMPLATE_WAITER_FD_PAYLOAD };
        TemplateStatus status = { .wait_status = SIGKILL };
        struct rusage ru = {};
        siginfo_t si = {};
        uint64_t wchar;

        /* Still the template's child, as ps and the session's tasks show it. */
        (void) prctl(PR_SET_NAME, (unsigned long) "template-child", 0, 0, 0);
        if (pidref_wait(&payload, WEXITED | __WALL, &si, &ru) > 0) {
                status.wait_status = pidref_wait_status(&si);
                status.flags |= TEMPLATE_STATUS_USAGE;
                status.cpu_usec = timeval_load(&ru.ru_utime) + timeval_load(&ru.ru_stime);
                status.max_rss_bytes = (uint64_t) ru.ru_maxrss * 1024U;
        }
        /* Reaping the payload added its writes (and those it reaped) to ours. */
        if (proc_io_read_wchar(TEMPLATE_WAITER_FD_IO, &wchar) >= 0) {
                status.flags |= TEMPLATE_STATUS_WRITTEN;
                status.written_bytes = wchar;
        }
        (void) !write(TEMPLATE_WAITER_FD_STATUS, &status, sizeof(status));
        return 0;
}
