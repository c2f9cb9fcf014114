/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The seccomp filter loaded as the last step before the sandboxed interpreter is executed.
 *
 * Layout follows ../shared/SECURITY.md §1.3: an allow-list; clone() may not create namespaces,
 * socket() only makes local (or, with networking, inet) sockets, a few calls are allowed only
 * with harmless arguments. clone3(), io_uring, AIO and openat2() answer ENOSYS straight from the
 * kernel (glibc and libuv fall back; nobody needs to hear about it), and calls with no legitimate
 * use kill the process. Everything else goes to the supervisor (PID 1 of the sandbox) through a
 * user-notification listener, which answers EPERM for what libraries may probe and ENOSYS for what
 * it does not know, and remembers what it refused, so that the exec's result can say which call
 * was blocked. Foreign architectures are killed by the kernel.
 *
 * The kill list stays a kernel kill: filters inherited from the session manager's unit answer some
 * of those calls with EPERM (ProtectClock=, ProtectKernelModules=, ...), and an errno outranks a
 * user notification, but not a kill. */
#include <errno.h>
#include <assert.h>
#include <linux/filter.h>
#include <linux/mempolicy.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io-util.h"
#include "json-util.h"
#include "seccomp-policy.h"

static const char *const allow[] = {
        /* file descriptors and I/O */
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
        "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "flock", "fsync",
        "fdatasync", "ftruncate", "truncate", "fallocate", "fadvise64", "readahead", "sendfile",
        "copy_file_range", "splice", "tee",
        /* paths */
        "open", "openat", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
        "access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd",
        "chdir", "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
        "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2",
        "chown", "fchown", "fchownat", "lchown", "utime", "utimes", "utimensat", "futimesat", "umask",
        "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
        /* memory */
        "mmap", "munmap", "mprotect", "mremap", "madvise", "msync", "mincore", "brk", "membarrier",
        "pkey_alloc", "pkey_free", "pkey_mprotect", "memfd_create",
        /* signals */
        "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
        "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
        "signalfd4", "pause", "kill", "tgkill", "tkill", "pidfd_open", "pidfd_send_signal",
        /* threads and scheduling */
        "futex", "futex_waitv", "set_robust_list", "get_robust_list", "set_tid_address", "rseq",
        "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
        "sched_getattr", "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
        "getpriority", "setpriority",
        /* time */
        "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time", "times",
        "getrusage", "getitimer", "setitimer", "alarm", "timer_create", "timer_settime", "timer_gettime",
        "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
        /* waiting */
        "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll",
        "ppoll", "select", "pselect6", "eventfd", "eventfd2", "pipe", "pipe2",
        /* identity (read-only) and process groups */
        "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid",
        "getgroups", "getpgid", "getpgrp", "getsid", "setsid", "setpgid",
        "uname", "sysinfo", "getrandom", "getcpu", "prlimit64", "getrlimit", "setrlimit", "capget",
        /* processes */
        "execve", "execveat", "wait4", "waitid", "fork", "vfork", "exit", "exit_group", "restart_syscall",
        /* sockets (creation is filtered by family below) */
        "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom", "sendmsg", "recvmsg",
        "sendmmsg", "recvmmsg", "shutdown", "getsockname", "getpeername", "setsockopt", "getsockopt",
        /* IPC, bounded by the private IPC namespace */
        "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
        "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
        "msgget", "msgsnd", "msgrcv", "msgctl",
        "arch_prctl",
};

/* Left out of the allow-list in the no_processes profile. */
static const char *const process_calls[] = { "fork", "vfork", "execve", "execveat" };

/* Expected probes: plain ENOSYS from the kernel, not reported. */
static const char *const silent_enosys[] = {
        "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "openat2",
};

/* Refused softly: libraries probe these. */
static const char *const deny_eperm[] = {
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
        "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
        "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
        "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
        "setfsuid", "setfsgid", "capset",
        "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
        "sync", "syncfs", "sync_file_range", "name_to_handle_at", "open_by_handle_at",
        /* /usr, /etc and the fonts are the host's inodes: a watch on them would show, live, what
         * the host and the other sessions open and run. */
        "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init",
        "fanotify_mark",
        "mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages",
        "sched_setattr", "sched_setscheduler", "sched_setparam", "ioprio_set",
        "seccomp", "memfd_secret", "process_madvise", "mlock", "mlock2", "mlockall", "munlock", "munlockall",
        "vmsplice", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        /* allowed only with harmless arguments (see the conditional rules) */
        "clone", "ioctl", "prctl", "personality", "mknod", "mknodat",
        /* refused in the no_processes profile */
        "fork", "vfork", "execve", "execveat",
};

/* Killed by the kernel: no legitimate use in a runner, and dying loudly aids detection. */
static const char *const deny_kill[] = {
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
        "swapon", "swapoff", "acct", "iopl", "ioperm", "modify_ldt", "settimeofday",
        "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
        "quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs",
        "_sysctl", "vhangup", "syslog",
};

/* ioctl() requests allowed (compared on the low 32 bits only: CVE-2019-10063). */
static const uint64_t ioctl_allowed[] = {
        TCGETS, TCSETS, TCSETSW, TCSETSF, TIOCGPGRP, TIOCSPGRP, TIOCGWINSZ, TIOCSWINSZ,
        FIONREAD, FIONBIO, FIONCLEX, FIOCLEX, FIOASYNC, 0x80086601 /* FS_IOC_GETFLAGS */,
};

static const uint64_t prctl_allowed[] = {
        PR_SET_NAME, PR_GET_NAME, PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_GET_DUMPABLE,
        PR_CAPBSET_READ, PR_GET_NO_NEW_PRIVS, PR_SET_NO_NEW_PRIVS, 0x53564d41 /* PR_SET_VMA */,
        PR_GET_SECCOMP,
};

/* File types mknod() may create without privileges; devices never. */
static const uint64_t mknod_types_allowed[] = { 0, S_IFREG, S_IFIFO, S_IFSOCK };

static bool name_in(const char *const *list, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (streq(list[i], name))
                        return true;
        return false;
}

int seccomp_policy_verdict(const struct seccomp_data *call) {
        _cleanup_free_ char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, call->nr);
        uint64_t request;

        if (!name)
                return ENOSYS;
        if (streq(name, "socket") || streq(name, "socketpair"))
                return EAFNOSUPPORT;
        /* Terminal injection is refused outright; other requests look unsupported by the device. */
        if (streq(name, "ioctl")) {
                request = call->args[1] & 0xffffffffULL;
                return request == TIOCSTI || request == TIOCLINUX ? EPERM : ENOTTY;
        }
        if (name_in(deny_eperm, ELEMENTSOF(deny_eperm), name))
                return EPERM;
        return ENOSYS;
}

const char *seccomp_verdict_to_string(int verdict) {
        switch (verdict) {
        case EPERM:
                return "EPERM";
        case EAFNOSUPPORT:
                return "EAFNOSUPPORT";
        case ENOSYS:
                return "ENOSYS";
        case ENOTTY:
                return "ENOTTY";
        default:
                return "refused";
        }
}

/* Add a rule by name; names unknown to this architecture or libseccomp are skipped. */
static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n_args,
                    const struct scmp_arg_cmp *args) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR)
                return 0;
        return seccomp_rule_add_array(ctx, action, nr, n_args, args);
}

/* 'action' for each of the calls named, whatever their arguments. */
static int add_rules(scmp_filter_ctx ctx, uint32_t action, const char *const names[], size_t n) {
        for (size_t i = 0; i < n; i++) {
                int r = add_rule(ctx, action, names[i], 0, NULL);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int allow_if_eq(scmp_filter_ctx ctx, const char *name, unsigned arg, uint64_t mask,
                       const uint64_t *values, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct scmp_arg_cmp cmp = SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, mask, values[i]);
                int r = add_rule(ctx, SCMP_ACT_ALLOW, name, 1, &cmp);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* OpenBLAS (Debian's BLAS of choice for the data stack) asks for each buffer it maps to be placed
 * on the local node: mbind(addr, len, MPOL_PREFERRED, NULL, 0, 0), which with no nodes is the
 * kernel's own default (MPOL_LOCAL). Exactly that is allowed; every other memory policy (a node
 * set, mode flags, page moves) stays refused and reported. */
static int allow_mbind_local(scmp_filter_ctx ctx) {
        const struct scmp_arg_cmp local[] = {
                SCMP_CMP(2, SCMP_CMP_MASKED_EQ, 0xffffffffULL, MPOL_PREFERRED), /* mode, no flags */
                SCMP_CMP(3, SCMP_CMP_EQ, 0),                                    /* no nodes */
                SCMP_CMP(5, SCMP_CMP_MASKED_EQ, 0xffffffffULL, 0),              /* no MPOL_MF_* */
        };
        return add_rule(ctx, SCMP_ACT_ALLOW, "mbind", ELEMENTSOF(local), local);
}

/* A filter with 'default_action': foreign architectures and the kill list killed by the kernel. */
static int filter_new(uint32_t default_action, scmp_filter_ctx *ret) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = seccomp_init(default_action);
        int r;

        if (!ctx)
                return -ENOMEM;
        if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0 ||
            (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1)) < 0 ||
            (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
                return r;
        r = add_rules(ctx, SCMP_ACT_KILL_PROCESS, deny_kill, ELEMENTSOF(deny_kill));
        if (r < 0)
                return r;
        *ret = TAKE_PTR(ctx);
        return 0;
}

int seccomp_policy_build(const SeccompOptions *options, scmp_filter_ctx *ret) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
        const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                  CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
        const uint64_t personality_allowed[] = { 0, 0xffffffffULL };
        uint64_t families[3] = { AF_UNIX, AF_INET, AF_INET6 };
        int r;

        r = filter_new(SCMP_ACT_NOTIFY, &ctx);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(allow); i++) {
                if (options->no_processes && name_in(process_calls, ELEMENTSOF(process_calls), allow[i]))
                        continue;
                r = add_rule(ctx, SCMP_ACT_ALLOW, allow[i], 0, NULL);
                if (r < 0)
                        return r;
        }
        r = add_rules(ctx, SCMP_ACT_ERRNO(ENOSYS), silent_enosys, ELEMENTSOF(silent_enosys));
        if (r < 0)
                return r;

        /* clone(): threads and fork are fine, new namespaces are not; without processes only
         * threads. */
        if (options->no_processes)
                r = allow_if_eq(ctx, "clone", 0, ns_flags | CLONE_THREAD,
                                (const uint64_t[]) { CLONE_THREAD }, 1);
        else
                r = allow_if_eq(ctx, "clone", 0, ns_flags, (const uint64_t[]) { 0 }, 1);
        if (r < 0)
                return r;
        /* Local sockets always; inet only with networking (the namespace has no route anyway). */
        r = allow_if_eq(ctx, "socket", 0, 0xffffffffULL, families, options->allow_inet ? 3 : 1);
        if (r >= 0)
                r = allow_if_eq(ctx, "socketpair", 0, 0xffffffffULL, families, 1);
        if (r < 0)
                return r;
        /* Terminal requests compare only the low 32 bits: TIOCSTI with high bits set stays out. */
        r = allow_if_eq(ctx, "ioctl", 1, 0xffffffffULL, ioctl_allowed, ELEMENTSOF(ioctl_allowed));
        if (r >= 0)
                r = allow_if_eq(ctx, "prctl", 0, 0xffffffffULL, prctl_allowed, ELEMENTSOF(prctl_allowed));
        if (r >= 0)
                r = allow_if_eq(ctx, "personality", 0, 0xffffffffULL, personality_allowed,
                                ELEMENTSOF(personality_allowed));
        if (r >= 0)
                r = allow_if_eq(ctx, "mknod", 1, S_IFMT, mknod_types_allowed,
                                ELEMENTSOF(mknod_types_allowed));
        if (r >= 0)
                r = allow_if_eq(ctx, "mknodat", 2, S_IFMT, mknod_types_allowed,
                                ELEMENTSOF(mknod_types_allowed));
        if (r >= 0)
                r = allow_mbind_local(ctx);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(ctx);
        return 0;
}

/* What the archive helper may call: files below its root (the workspace), memory, and leaving.
 * No sockets, no processes, no new programs, no mounts, no ids. */
static const char *const archive_allow[] = {
        "read",         "write",          "readv",        "writev",       "pread64",
        "pwrite64",     "lseek",          "close",        "dup",          "dup2",
        "dup3",         "fcntl",          "ftruncate",    "fallocate",    "fsync",
        "fdatasync",    "open",           "openat",       "stat",         "fstat",
        "lstat",        "newfstatat",     "statx",        "access",       "faccessat",
        "faccessat2",   "readlink",       "readlinkat",   "getdents64",   "getcwd",
        "chdir",        "fchdir",         "mkdir",        "mkdirat",      "rmdir",
        "unlink",       "unlinkat",       "rename",       "renameat",     "renameat2",
        "symlink",      "symlinkat",      "chmod",        "fchmod",       "fchmodat",
        "utimes",       "utimensat",      "futimesat",    "umask",        "mmap",
        "munmap",       "mremap",         "mprotect",     "madvise",      "brk",
        "futex",        "rt_sigprocmask", "rt_sigaction", "rt_sigreturn", "clock_gettime",
        "gettimeofday", "time",           "getrandom",    "getpid",       "gettid",
        "getuid",       "geteuid",        "getgid",       "getegid",      "exit",
        "exit_group",
};

int seccomp_policy_build_archive(scmp_filter_ctx *ret) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
        int r;

        r = filter_new(SCMP_ACT_ERRNO(EPERM), &ctx);
        if (r < 0)
                return r;
        r = add_rules(ctx, SCMP_ACT_ALLOW, archive_allow, ELEMENTSOF(archive_allow));
        if (r < 0)
                return r;
        *ret = TAKE_PTR(ctx);
        return 0;
}

void seccomp_report_init(SeccompReport *report) {
        *report = (SeccompReport) {};
}

void seccomp_report_add(SeccompReport *report, int nr, int verdict) {
        for (uint32_t i = 0; i < report->n_calls; i++)
                if (report->calls[i].nr == nr) {
                        if (report->calls[i].count < UINT32_MAX)
                                report->calls[i].count++;
                        return;
                }
        if (report->n_calls >= SECCOMP_REPORT_MAX) {
                if (report->overflow < UINT32_MAX)
                        report->overflow++;
                return;
        }
        report->calls[report->n_calls++] = (SeccompBlocked) { .nr = nr, .verdict = verdict, .count = 1 };
}

int seccomp_notify_handle_one(int listener_fd, SeccompSupervisor *supervisor) {
        /* Direct ioctls: the kernel wants the request zeroed, and libseccomp 2.5 turns every
         * failure into ECANCELED, hiding the harmless ENOENT of a caller that died. */
        struct seccomp_notif req = {};
        struct seccomp_notif_resp resp = {};
        int verdict;

        if (ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
                return errno == ENOENT || errno == EINTR ? 0 : -errno;

        resp.id = req.id;
        /* The payload executing the interpreter: no user code has run yet, and the payload is
         * single-threaded, so nobody can change the arguments between our answer and the call. */
        if (supervisor->first_exec_pid > 0 && (pid_t) req.pid == supervisor->first_exec_pid &&
            req.data.nr == (int) seccomp_syscall_resolve_name("execve")) {
                supervisor->first_exec_pid = 0;
                resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        } else {
                verdict = seccomp_policy_verdict(&req.data);
                seccomp_report_add(&supervisor->report, req.data.nr, verdict);
                resp.error = -verdict;
        }
        if (ioctl(listener_fd, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

void seccomp_report_calls(const SeccompReport *report, SeccompReportCalls *ret) {
        ret->n = MIN(report->n_calls, (uint32_t) SECCOMP_REPORT_MAX);
        for (size_t i = 0; i < ret->n; i++) {
                _cleanup_free_ char *name =
                        seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, report->calls[i].nr);

                if (name)
                        snprintf(ret->names[i], sizeof(ret->names[i]), "%s", name);
                else
                        snprintf(ret->names[i], sizeof(ret->names[i]), "syscall_%i", report->calls[i].nr);
                ret->items[i] = (ExecBlocked) {
                        .name = ret->names[i],
                        .verdict = seccomp_verdict_to_string(report->calls[i].verdict),
                        .count = report->calls[i].count,
                };
        }
}

char *seccomp_report_format(const SeccompReport *report) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return NULL;
        for (uint32_t i = 0; i < MIN(report->n_calls, (uint32_t) SECCOMP_REPORT_MAX); i++) {
                _cleanup_free_ char *name =
                        seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, report->calls[i].nr);

                if (name)
                        fprintf(f, "%s%s (%s", i > 0 ? ", " : "", name,
                                seccomp_verdict_to_string(report->calls[i].verdict));
                else
                        fprintf(f, "%ssyscall_%i (%s", i > 0 ? ", " : "", report->calls[i].nr,
                                seccomp_verdict_to_string(report->calls[i].verdict));
                fprintf(f, report->calls[i].count > 1 ? ", %u times)" : ")", report->calls[i].count);
        }
        if (report->overflow > 0)
                fprintf(f, " and %u more", report->overflow);
        if (fclose(f) != 0)
                return NULL;
        return TAKE_PTR(text);
}

/* One profile's program, exported into 'set_fd' at its end; its length in instructions. */
static int filter_set_append(SeccompProfile profile, int set_fd, uint32_t *ret_n) {
        _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
        off_t before, after;
        int r;

        r = seccomp_policy_build(&(SeccompOptions) { .allow_inet = profile == SECCOMP_PROFILE_SIDECAR_INET ||
                                                                    profile == SECCOMP_PROFILE_DIFY_INET,
                                                     .no_processes = profile >= SECCOMP_PROFILE_DIFY },
                                 &ctx);
        if (r < 0)
                return r;
        before = lseek(set_fd, 0, SEEK_END);
        if (before < 0)
                return -errno;
        r = seccomp_export_bpf(ctx, set_fd);
        if (r < 0)
                return r;
        after = lseek(set_fd, 0, SEEK_END);
        if (after < 0)
                return -errno;
        if ((after - before) % (off_t) sizeof(struct sock_filter) != 0 || after == before ||
            (after - before) / (off_t) sizeof(struct sock_filter) > BPF_MAXINSNS)
                return -EBADMSG;
        *ret_n = (uint32_t) ((after - before) / (off_t) sizeof(struct sock_filter));
        return 0;
}

int seccomp_filter_set_new(int *ret_fd) {
        SeccompFilterSetHeader h = { .magic = SECCOMP_FILTER_SET_MAGIC, .n_programs = _SECCOMP_PROFILE_MAX };
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = memfd_new_empty("seccomp-filter-set");
        if (fd < 0)
                return fd;
        if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h))
                return -errno;
        for (SeccompProfile p = 0; p < _SECCOMP_PROFILE_MAX; p++) {
                r = filter_set_append(p, fd, &h.n_insns[p]);
                if (r < 0)
                        return r;
        }
        if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h))
                return -errno;
        r = memfd_seal(fd);
        if (r < 0)
                return r;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int seccomp_filter_set_split(int set_fd, int ret_fds[_SECCOMP_PROFILE_MAX]) {
        int fds[_SECCOMP_PROFILE_MAX] = { -EBADF, -EBADF, -EBADF, -EBADF };
        struct sock_filter insns[BPF_MAXINSNS];
        SeccompFilterSetHeader h;
        struct stat st;
        off_t off = sizeof(h);
        int r = 0;

        static_assert(_SECCOMP_PROFILE_MAX == 4, "one -EBADF per profile above");
        if (fstat(set_fd, &st) < 0)
                return -errno;
        if (pread(set_fd, &h, sizeof(h), 0) != (ssize_t) sizeof(h) || h.magic != SECCOMP_FILTER_SET_MAGIC ||
            h.n_programs != _SECCOMP_PROFILE_MAX)
                return -EBADMSG;
        for (size_t i = 0; i < _SECCOMP_PROFILE_MAX && r >= 0; i++) {
                size_t size = (size_t) h.n_insns[i] * sizeof(struct sock_filter);

                if (h.n_insns[i] == 0 || h.n_insns[i] > BPF_MAXINSNS || off + (off_t) size > st.st_size ||
                    pread(set_fd, insns, size, off) != (ssize_t) size) {
                        r = -EBADMSG;
                        break;
                }
                off += (off_t) size;
                fds[i] = memfd_new_data("seccomp-bpf", insns, size);
                r = MIN(fds[i], 0);
        }
        if (r >= 0 && off != st.st_size)
                r = -EBADMSG;
        if (r < 0) {
                for (size_t i = 0; i < _SECCOMP_PROFILE_MAX; i++)
                        safe_close(fds[i]);
                return r;
        }
        memcpy(ret_fds, fds, sizeof(fds));
        return 0;
}
