/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The network of an exec that may have one (dify runs with enable_network): slirp4netns, the
 * user-mode TCP/IP stack that parses every packet the sandbox sends, runs unprivileged.
 *
 * The runner makes a network namespace inside a user namespace of its own that maps uid and gid 0
 * to the session's uid and gid and nothing else; PID 1 of the sandbox joins that network namespace
 * (sandbox_run_init()). slirp4netns joins the user namespace and becomes its uid 0 — the session's
 * uid on the host, with capabilities only in that namespace, over the network namespace it serves —
 * in a mount namespace of its own where /etc/scopebox, /etc/credstore and /run are empty (the
 * resolver's directory excepted); it then sandboxes itself (--enable-sandbox: only /etc and /run
 * in view, every capability but CAP_NET_BIND_SERVICE dropped) and loads its seccomp filter
 * (--enable-seccomp) before it reads a packet. The user namespace is made by root, as every one of
 * ours is, so unprivileged user namespaces need not be allowed; and its owner is root, so nothing
 * running as the session's uid may ptrace slirp4netns.
 *
 * What slirp4netns may reach is judged in its own cgroup: "net" below the session's scope in the
 * unified hierarchy, to which the runner attaches the manager's network filter (net-filter-bpf.h)
 * and which slirp4netns's child joins before anything else. The payload stays in the scope, with no
 * filter: its own loopback is its own. No controller is enabled below the scope, so the scope may
 * keep its processes; memory and tasks of "net" still count to the scope. No filter, no network. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>

#include "fs-util.h"
#include "net-filter-bpf.h"
#include "runner.h"
#include "sandbox.h"
#include "string-util.h"

/* What slirp4netns must not see: the service's configuration and keys, systemd's credentials, and
 * everything below /run (the manager's runtime directory, the session's own mounts, sockets). */
static const char *const slirp_masked_dirs[] = {
        "/etc/scopebox",
        "/etc/credstore",
        "/etc/credstore.encrypted",
};
#define SLIRP_MASK_TMPFS_OPTIONS "mode=0555,size=4k,nr_inodes=16"
#define SLIRP_RUN_TMPFS_OPTIONS "mode=0755,size=64k,nr_inodes=64"

int runner_network_new(const Runner *r, int *ret_userns_fd, int *ret_netns_fd) {
        _cleanup_close_pair_ int hold[2] = { -EBADF, -EBADF };
        _cleanup_close_ int userns_fd = -EBADF, netns_fd = -EBADF;
        PidRef helper = PIDREF_NULL;
        char path[64];
        int q;

        if (pipe2(hold, O_CLOEXEC) < 0)
                return -errno;
        /* A process in both new namespaces, which keeps them until we hold them by fds. */
        q = pidref_clone(CLONE_NEWUSER | CLONE_NEWNET, &helper);
        if (q < 0)
                return q;
        if (q == 0) {
                char c;

                safe_close(hold[1]);
                (void) read(hold[0], &c, 1);
                _exit(0);
        }
        hold[0] = safe_close(hold[0]);

        /* Our unreaped child: its number is still its own. */
        snprintf(path, sizeof(path), "/proc/%i/ns/user", (int) helper.pid);
        userns_fd = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/%i/ns/net", (int) helper.pid);
        netns_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (userns_fd < 0 || netns_fd < 0)
                q = -errno;
        else
                /* uid and gid 0 there are the session's, nothing else is mapped; no setgroups(). */
                q = sandbox_map_ids_as(helper.pid, 0, 0, r->uid, r->gid);

        /* The helper sees EOF and exits at once: the wait is short. */
        hold[1] = safe_close(hold[1]);
        (void) pidref_wait(&helper, WEXITED | __WALL, NULL, NULL);
        pidref_done(&helper);
        if (q < 0)
                return q;
        *ret_userns_fd = TAKE_FD(userns_fd);
        *ret_netns_fd = TAKE_FD(netns_fd);
        return 0;
}

/* The scope's directory in the unified hierarchy, among those the runner opened at init (on a v2
 * host the only one, on a hybrid one at /sys/fs/cgroup/unified). Borrowed. */
static int scope_unified_cgroup(const Runner *r) {
        struct statfs sfs;

        for (size_t i = 0; i < r->n_scope_cgroup_fds; i++)
                if (fstatfs(r->scope_cgroup_fds[i], &sfs) >= 0 && sfs.f_type == CGROUP2_SUPER_MAGIC)
                        return r->scope_cgroup_fds[i];
        return -ENOMEDIUM;
}

int runner_network_cgroup(Runner *r) {
        _cleanup_close_ int net_fd = -EBADF, procs_fd = -EBADF;
        int scope_fd, q;

        if (r->net_cgroup_procs_fd >= 0)
                return r->net_cgroup_procs_fd;
        if (r->net_filter_fds[0] < 0)
                return -EOPNOTSUPP; /* the manager has no filter to give */
        scope_fd = scope_unified_cgroup(r);
        if (scope_fd < 0)
                return scope_fd;
        /* Ours: nothing else may create cgroups in a scope delegated to us. */
        if (mkdirat(scope_fd, "net", 0755) < 0 && errno != EEXIST)
                return -errno;
        net_fd = openat(scope_fd, "net", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (net_fd < 0)
                return -errno;
        q = net_filter_programs_attach(net_fd, r->net_filter_fds);
        if (q < 0)
                return q;
        procs_fd = openat(net_fd, "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (procs_fd < 0)
                return -errno;
        r->net_cgroup_procs_fd = TAKE_FD(procs_fd);
        return r->net_cgroup_procs_fd;
}

/* The directory holding the host's resolver configuration when /etc/resolv.conf leads below /run
 * (systemd-resolved, resolvconf): bound back into the empty /run, so that libslirp (which reads
 * /etc/resolv.conf again when it changes) still finds the upstream resolver. NULL otherwise. */
static char *resolver_dir_below_run(bool *ret_is_file) {
        _cleanup_free_ char *conf = realpath("/etc/resolv.conf", NULL), *dir = NULL;

        if (!conf || !startswith(conf, "/run/"))
                return NULL;
        dir = strdup(conf);
        if (!dir)
                return NULL;
        /* A file directly in /run is bound alone: its directory is what we hide. */
        *ret_is_file = streq(dirname(dir), "/run");
        return *ret_is_file ? TAKE_PTR(conf) : strdup(dirname(conf));
}

/* In slirp4netns's child, as uid 0 of its user namespace: a mount namespace of its own (owned by
 * that user namespace), in which the secrets' directories and /run are empty read-only tmpfs.
 * Returns the step that failed, or NULL. */
static const char *slirp_hide_secrets(void) {
        _cleanup_free_ char *resolver = NULL;
        _cleanup_close_ int resolver_fd = -EBADF;
        bool resolver_is_file = false;
        char source[64];
        struct stat st;

        if (unshare(CLONE_NEWNS) < 0)
                return "unshare mount namespace";
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return "make mounts private";
        for (size_t i = 0; i < ELEMENTSOF(slirp_masked_dirs); i++) {
                if (lstat(slirp_masked_dirs[i], &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                if (mount("tmpfs", slirp_masked_dirs[i], "tmpfs",
                          MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, SLIRP_MASK_TMPFS_OPTIONS) < 0)
                        return "mask a secrets directory";
        }

        /* Opened in this mount namespace (a bind's source must be of it), before /run is covered. */
        resolver = resolver_dir_below_run(&resolver_is_file);
        if (resolver) {
                resolver_fd = open(resolver, O_PATH | O_CLOEXEC | (resolver_is_file ? 0 : O_DIRECTORY));
                if (resolver_fd < 0)
                        resolver = mfree(resolver);
        }
        if (mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, SLIRP_RUN_TMPFS_OPTIONS) < 0)
                return "mask /run";
        if (resolver) {
                _cleanup_free_ char *parent = strdup(resolver);
                int fd;

                if (!parent || mkdir_p(resolver_is_file ? dirname(parent) : resolver, 0755) < 0)
                        return "create the resolver's directory";
                if (resolver_is_file) {
                        fd = open(resolver, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                        if (fd < 0)
                                return "create the resolver's file";
                        safe_close(fd);
                }
                snprintf(source, sizeof(source), "/proc/self/fd/%i", resolver_fd);
                if (mount(source, resolver, NULL, MS_BIND | MS_REC, NULL) < 0)
                        return "bind the resolver's directory";
        }
        if (mount(NULL, "/run", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  NULL) < 0)
                return "remount /run read-only";
        return NULL;
}

/* The child that becomes slirp4netns: the session's uid in the network's user namespace, the
 * secrets out of view, its death signal set last (a change of credentials clears it), and only
 * its fds: the ready pipe on 3, the network namespace on 4, the exit pipe on 5. It joins the
 * filtered cgroup first, while it is still the runner's root. */
_noreturn_ static void slirp_child(int cgroup_procs_fd, int userns_fd, int netns_fd, int ready_fd,
                                   int exit_fd, pid_t runner) {
        char *const argv[] = {
                (char *) "slirp4netns",        (char *) "--configure",        (char *) "--mtu=65520",
                (char *) "--disable-host-loopback", (char *) "--enable-sandbox", (char *) "--enable-seccomp",
                (char *) "--ready-fd=3",       (char *) "--exit-fd=5",        (char *) "--netns-type=path",
                (char *) "/proc/self/fd/4",    (char *) "tap0",               NULL,
        };
        char *const envp[] = { (char *) "PATH=/usr/bin:/bin", NULL };
        const int fds[3] = { ready_fd, netns_fd, exit_fd };
        int moved[3], null_fd;
        const char *step;
        sigset_t mask;

        /* First, as the runner's root: no socket of slirp4netns exists outside the filter. */
        step = "join the network filter's cgroup";
        if (write(cgroup_procs_fd, "0", 1) != 1)
                goto fail;
        step = "credentials";
        if (setgroups(0, NULL) < 0 || setns(userns_fd, CLONE_NEWUSER) < 0 || setresgid(0, 0, 0) < 0 ||
            setresuid(0, 0, 0) < 0)
                goto fail;
        step = slirp_hide_secrets();
        if (step)
                goto fail;
        step = "death signal";
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != runner)
                goto fail;
        step = "signal mask";
        if (sigemptyset(&mask) < 0 || sigprocmask(SIG_SETMASK, &mask, NULL) < 0)
                goto fail;
        step = "fds";
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0)
                goto fail;
        /* Above 5 first, so that no dup2() below overwrites one still to be moved; dup2() clears
         * O_CLOEXEC on the copies. */
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                if ((moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 6)) < 0)
                        goto fail;
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                if (dup2(moved[i], 3 + (int) i) < 0)
                        goto fail;
        if (syscall(SYS_close_range, 6U, ~0U, 0U) < 0)
                goto fail;
        step = "execve " SANDBOX_SLIRP4NETNS;
        execve(SANDBOX_SLIRP4NETNS, argv, envp);
fail:
        dprintf(STDERR_FILENO, "<3>Failed to start slirp4netns (%s): %s\n", step, strerror(errno));
        _exit(127);
}

int runner_network_start(int cgroup_procs_fd, int userns_fd, int netns_fd, int ready_fd, PidRef *ret,
                         int *ret_exit_fd) {
        _cleanup_close_pair_ int exit_pipe[2] = { -EBADF, -EBADF };
        pid_t runner = getpid();
        PidRef slirp = PIDREF_NULL;
        int q;

        /* Made only now, after PID 1: slirp4netns's end is the only reader, ours the only writer. */
        if (pipe2(exit_pipe, O_CLOEXEC) < 0)
                return -errno;
        q = pidref_clone(0, &slirp);
        if (q < 0)
                return q;
        if (q == 0)
                slirp_child(cgroup_procs_fd, userns_fd, netns_fd, ready_fd, exit_pipe[0], runner);
        *ret = slirp;
        *ret_exit_fd = TAKE_FD(exit_pipe[1]);
        return 0;
}

void proxy_env_build(ProxyEnv *pe, const char *http_proxy, const char *https_proxy) {
        size_t k = 0;

        if (!isempty(http_proxy)) {
                snprintf(pe->http, sizeof(pe->http), "HTTP_PROXY=%s", http_proxy);
                pe->env[k++] = pe->http;
        }
        if (!isempty(https_proxy)) {
                snprintf(pe->https, sizeof(pe->https), "HTTPS_PROXY=%s", https_proxy);
                pe->env[k++] = pe->https;
        }
        pe->env[k] = NULL;
}
