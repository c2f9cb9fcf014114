/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The archive helper: libarchive parses archives that may come from a storage endpoint the
 * client chose, so it runs isolated like an exec. The runner clones it into a user namespace of
 * its own, maps the session's sandbox user there and lets it go; it then keeps only the archive
 * and its result pipe, makes the workspace (read-only when creating) its whole filesystem, holds
 * no network, becomes the sandbox user with no capabilities and no_new_privs, sets its limits,
 * loads an allow-list seccomp filter and only then touches the archive. */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "archive-sandbox.h"
#include "io-util.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "workspace-archive.h"

/* Where the helper keeps its three fds once everything else is closed. */
enum { DATA_FD = 3, RESULT_FD = 4, GO_FD = 5 };

static int move_fds(const ArchiveSandbox *a) {
        int fds[3] = { a->data_fd, a->result_fd, a->go_fd }, high[3], null_fd;

        /* Out of the way first, so that no dup below lands on one we still need. */
        for (size_t i = 0; i < 3; i++) {
                high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
                if (high[i] < 0)
                        return -errno;
        }
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                return -errno;
        /* No journal stream, no stdin of the runner's: /dev/null on 0, 1 and 2. */
        for (int fd = 0; fd < 3; fd++)
                if (dup2(null_fd, fd) < 0)
                        return -errno;
        for (size_t i = 0; i < 3; i++)
                if (dup3(high[i], DATA_FD + (int) i, O_CLOEXEC) < 0)
                        return -errno;
        /* The control connection, the listening socket, directory fds outside: all gone. */
        if (syscall(SYS_close_range, (unsigned) GO_FD + 1, ~0U, 0U) < 0)
                return -errno;
        return 0;
}

static int set_limits(const ArchiveSandbox *a) {
        const struct {
                int resource;
                rlim_t value;
        } limits[] = {
                { RLIMIT_AS, (rlim_t) ARCHIVE_SANDBOX_MEMORY_MAX },
                { RLIMIT_NOFILE, ARCHIVE_SANDBOX_FILES_MAX },
                /* No file it writes (archive or extracted) can be larger than the bound. */
                { RLIMIT_FSIZE, (rlim_t) a->max_bytes + 1024 * 1024 },
                { RLIMIT_CPU, (rlim_t) a->timeout_sec + 1 },
                { RLIMIT_CORE, 0 },
                { RLIMIT_NPROC, 0 },
                { RLIMIT_MEMLOCK, 0 },
                { RLIMIT_MSGQUEUE, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(limits); i++) {
                struct rlimit rl = { limits[i].value, limits[i].value };
                if (setrlimit(limits[i].resource, &rl) < 0)
                        return -errno;
        }
        return 0;
}

/* The workspace becomes the root; the runner's tree is detached. */
static int enter_workspace(const ArchiveSandbox *a) {
        unsigned long flags =
                MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC | (a->restore ? 0 : MS_RDONLY);

        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        /* A bind of our own: pivot_root() won't take a mount we inherited (it is locked). */
        if (mount(a->workspace, a->newroot, NULL, MS_BIND, NULL) < 0)
                return -errno;
        if (chdir(a->newroot) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
            chdir("/") < 0)
                return -errno;
        if (mount(NULL, "/", NULL, flags, NULL) < 0)
                return -errno;
        return 0;
}

_noreturn_ void archive_sandbox_run(const ArchiveSandbox *a) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx filter = NULL;
        ArchiveLimits limits = {
                .max_bytes = a->max_bytes, .max_entries = a->max_entries, .refuse_forged = true
        };
        ArchiveResult res = {};
        const char *step;
        char go = 0;
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        (void) prctl(PR_SET_NAME, (unsigned long) "scopebox-archive", 0, 0, 0);

        step = "close fds";
        r = move_fds(a);
        if (r < 0)
                goto fail_early;
        step = "user namespace";
        if (read(GO_FD, &go, 1) != 1 || go != '1') {
                r = -EPERM;
                goto fail;
        }
        (void) close(GO_FD);
        /* File names are bytes, their pax records UTF-8: in a UTF-8 locale libarchive passes
         * them through (in the C locale a name in a UTF-8 pax record can't be converted). Loaded
         * while /usr is still there; without it, names still round-trip as raw bytes. */
        (void) setlocale(LC_CTYPE, "C.UTF-8");
        step = "enter the workspace";
        r = enter_workspace(a);
        if (r < 0)
                goto fail;
        r = sandbox_become_user(&step);
        if (r < 0)
                goto fail;
        step = "rlimits";
        r = set_limits(a);
        if (r < 0)
                goto fail;
        step = "seccomp";
        r = seccomp_policy_build_archive(&filter);
        if (r >= 0)
                r = seccomp_load(filter);
        if (r < 0)
                goto fail;

        /* From here on: hostile bytes, the sandbox's rules. */
        step = a->restore ? "restore" : "archive";
        if (a->restore) {
                uint64_t total = 0;

                /* A forged entry fails the whole restore: what holds one is no workspace's archive
                 * (the runner clears what was unpacked, the manager quarantines the archive). */
                r = archive_extract(DATA_FD, &limits, &total);
                if (r < 0)
                        goto fail;
                res.refused = r;
                res.bytes = total;
        } else {
                struct stat st;
                int root = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

                r = root < 0 ? -errno : archive_create(root, DATA_FD, &limits);
                if (r < 0)
                        goto fail;
                if (fstat(DATA_FD, &st) < 0) {
                        r = -errno;
                        goto fail;
                }
                res.bytes = (uint64_t) st.st_size;
        }
        (void) write_all(RESULT_FD, &res, sizeof(res));
        _exit(0);

fail:
        res.error = r < 0 ? r : -EIO;
        snprintf(res.step, sizeof(res.step), "%s", step);
        (void) write_all(RESULT_FD, &res, sizeof(res));
        _exit(1);

fail_early:
        /* The fds may be anywhere: report on the pipe we were given. */
        res.error = r;
        snprintf(res.step, sizeof(res.step), "%s", step);
        (void) write_all(a->result_fd, &res, sizeof(res));
        _exit(1);
}
