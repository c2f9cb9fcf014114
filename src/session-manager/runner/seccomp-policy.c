/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The seccomp filter loaded as the last step before the sandboxed interpreter is executed.
 *
 * Layout follows ../shared/SECURITY.md §1.3: calls that libraries may probe fail softly with
 * EPERM, calls that have no legitimate use in a runner kill the process, clone() may not create
 * namespaces, clone3() and io_uring answer ENOSYS (glibc and libuv fall back), and foreign
 * architectures are killed. The namespaces bound what remains (no route, private IPC). */
#include <errno.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "seccomp-policy.h"

static const char *const deny_eperm[] = {
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
        "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
        "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
        "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
        "setfsuid", "setfsgid", "capset",
        "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
        "sync", "syncfs", "name_to_handle_at", "open_by_handle_at", "fanotify_init",
        "mbind", "set_mempolicy", "migrate_pages", "move_pages",
        "sched_setattr", "sched_setscheduler", "sched_setparam", "ioprio_set",
        "seccomp", "memfd_secret", "process_madvise", "mlock", "mlock2", "mlockall",
        "vmsplice", "landlock_create_ruleset",
};

static const char *const deny_kill[] = {
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
        "swapon", "swapoff", "acct", "iopl", "ioperm", "modify_ldt", "settimeofday",
        "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
        "quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs",
        "_sysctl", "vhangup", "syslog",
};

static const char *const deny_enosys[] = {
        "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
};

/* Add a rule by name; names unknown to this architecture or libseccomp are skipped. */
static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n_args,
                    const struct scmp_arg_cmp *args) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR)
                return 0;
        return seccomp_rule_add_array(ctx, action, nr, n_args, args);
}

int seccomp_policy_build(const SeccompOptions *options, scmp_filter_ctx *ret) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
        const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                  CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
        int r;

        ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return -ENOMEM;
        r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r < 0)
                return r;
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(deny_eperm); i++) {
                r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), deny_eperm[i], 0, NULL);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(deny_kill); i++) {
                r = add_rule(ctx, SCMP_ACT_KILL_PROCESS, deny_kill[i], 0, NULL);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(deny_enosys); i++) {
                r = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), deny_enosys[i], 0, NULL);
                if (r < 0)
                        return r;
        }

        /* clone(): threads and fork are fine, new namespaces are not. */
        for (uint64_t bit = 1; bit; bit <<= 1) {
                if (!(ns_flags & bit))
                        continue;
                r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1,
                             (struct scmp_arg_cmp[]) { SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit) });
                if (r < 0)
                        return r;
        }

        /* Socket families: unix always, inet only with networking, never netlink/packet/alg/vsock. */
        static const int families_denied[] = { AF_NETLINK, AF_PACKET, AF_ALG, AF_VSOCK, AF_KEY,
                                               AF_BLUETOOTH, AF_TIPC, AF_XDP, AF_RDS, AF_CAN };
        for (size_t i = 0; i < ELEMENTSOF(families_denied); i++) {
                r = add_rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1,
                             (struct scmp_arg_cmp[]) { SCMP_A0(SCMP_CMP_EQ, (uint64_t) families_denied[i]) });
                if (r < 0)
                        return r;
        }
        if (!options->allow_inet)
                for (int f = AF_INET; f != -1; f = f == AF_INET ? AF_INET6 : -1) {
                        r = add_rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1,
                                     (struct scmp_arg_cmp[]) { SCMP_A0(SCMP_CMP_EQ, (uint64_t) f) });
                        if (r < 0)
                                return r;
                }

        /* Terminal injection: compare only the low 32 bits (CVE-2019-10063). */
        static const uint64_t tty_denied[] = { TIOCSTI, TIOCLINUX };
        for (size_t i = 0; i < ELEMENTSOF(tty_denied); i++) {
                r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1,
                             (struct scmp_arg_cmp[]) { SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, tty_denied[i]) });
                if (r < 0)
                        return r;
        }

        /* personality() is locked by LockPersonality= of the session manager's unit, which every
         * runner inherits. */

        *ret = TAKE_PTR(ctx);
        return 0;
}
