/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-template: starts the template (template.py), the interpreter from which python execs
 * and dify runs are forked (docs/security.md "The template", scopebox-template(8)).
 *
 * It binds the socket sandboxes' PID 1 reach it on (root's alone), then enters new mount, UTS,
 * IPC and network namespaces, builds there a root the way a sandbox's is built (the same /usr,
 * /etc, site directory, /dev and /proc; an empty /workspace, /tmp and /home/sandbox of its own),
 * pivots into it and executes the interpreter with the sandbox's environment. The interpreter
 * stays root: its children need that to join a session. It never runs code it is sent. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "config.h"
#include "daemon-util.h"
#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "sandbox.h"
#include "signal-util.h"
#include "string-util.h"
#include "template-protocol.h"

#define TEMPLATE_TREE TEMPLATE_SOCKET_DIR "/tree"
#define TEMPLATE_SCRIPT SCOPEBOX_DATA_DIR "/template.py"
#define TEMPLATE_MODULE LIBEXECDIR "/_scopebox_template.so"
static int bind_socket(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = TEMPLATE_SOCKET_PATH };
        int fd;

        if (mkdir(TEMPLATE_SOCKET_DIR, 0700) < 0 && errno != EEXIST)
                return -errno;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* A killed template's socket is still there: replaced, never shared. Not listening
         * yet: until its imports are done, connections are refused and execs start cold. */
        (void) unlink(TEMPLATE_SOCKET_PATH);
        mode_t old = umask(0177);
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int e = -errno;
                umask(old);
                close(fd);
                return e;
        }
        umask(old);
        return fd;
}

/* The service manager's notification socket, connected now: the interpreter sends READY=1 on it
 * from a root where $NOTIFY_SOCKET's path does not exist. -ENOENT without one. */
static int connect_notify_socket(void) {
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t l;
        int fd;

        if (!path || (path[0] != '/' && path[0] != '@'))
                return -ENOENT;
        l = strlen(path);
        if (l >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, l);
        if (path[0] == '@')
                sa.sun_path[0] = 0;
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        /* Out of the way of fds 3 and 4, where the interpreter gets the two sockets. */
        int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
        int e = high < 0 ? -errno : 0;
        close(fd);
        return high < 0 ? e : high;
}

static int build_tree(void) {
        static const char *const dirs[] = { SESSION_WORKSPACE_DIR, SESSION_SCRATCH_DIR,
                                            SESSION_SCRATCH_DIR "/tmp", SESSION_SCRATCH_DIR "/home",
                                            SESSION_NEWROOT_DIR };

        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return -errno;
        if (mkdir(TEMPLATE_TREE, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (mount("tmpfs", TEMPLATE_TREE, "tmpfs", MS_NOSUID | MS_NODEV,
                  "mode=0700,size=16m,nr_inodes=1024") < 0)
                return -errno;
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if (mkdir(strjoina(TEMPLATE_TREE "/", dirs[i]),
                          streq(dirs[i], SESSION_SCRATCH_DIR "/tmp") ? 01777 : 0755) < 0)
                        return -errno;
        return 0;
}

/* Builds the template's tree and root, and becomes its interpreter: returns only on failure. */
static int template_run(const Config *config) {
        _cleanup_free_ char *modules = NULL;
        struct stat site = {};
        char site_arg[96], age_arg[32], children_arg[32], buf[192];
        char *envp[32], *args[512];
        const char *step = NULL;
        size_t n = 0;
        int fd, notify, r;

        /* What runners compare with before they use us (as they lstat it). */
        if (lstat(SCOPEBOX_SITE_PACKAGES_DIR, &site) < 0)
                site = (struct stat) {};
        snprintf(site_arg, sizeof(site_arg), "%llu:%llu:%u:%u", (unsigned long long) site.st_dev,
                 (unsigned long long) site.st_ino, (unsigned) site.st_mode, (unsigned) site.st_uid);
        snprintf(age_arg, sizeof(age_arg), "%llu", (unsigned long long) config->template_max_age);
        snprintf(children_arg, sizeof(children_arg), "%llu",
                 (unsigned long long) config->template_max_children);

        notify = connect_notify_socket();
        if (notify < 0 && notify != -ENOENT)
                log_warning_errno(notify, "Failed to connect to $NOTIFY_SOCKET, ignoring: %m");
        (void) unsetenv("NOTIFY_SOCKET");
        fd = bind_socket();
        if (fd < 0)
                return log_error_errno(fd, "Failed to bind " TEMPLATE_SOCKET_PATH ": %m");
        if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET) < 0)
                return log_error_errno(errno, "Failed to create the template's namespaces: %m");
        r = build_tree();
        if (r < 0)
                return log_error_errno(r, "Failed to create the template's tree: %m");
        {
                /* The font list where the template's matplotlib looks for it, as in a session. */
                _cleanup_close_ int scratch = open(TEMPLATE_TREE "/" SESSION_SCRATCH_DIR,
                                                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                int q = scratch < 0 ? -errno : sandbox_seed_font_cache(scratch, 0, 0);
                if (q < 0)
                        log_warning_errno(q, "Failed to seed the matplotlib font list, ignoring: %m");
        }

        SandboxExec e = {
                .session_root = TEMPLATE_TREE,
                .code_fd = -EBADF,
                .stdout_fd = -EBADF,
                .stderr_fd = -EBADF,
                .status_fd = -EBADF,
                .language = SANDBOX_PYTHON3,
                .network_ready_fd = -EBADF,
                .template_fd = -EBADF,
                .filter_fd = -EBADF,
                .prepared_fd = -EBADF,
                .cpus_percent = 100,   /* OPENBLAS_NUM_THREADS=1: no threads in the template */
        };
        r = sandbox_build_root(&e, &step);
        if (r < 0)
                return log_error_errno(r, "Failed to build the template's root at '%s': %m", strna(step));
        if (chdir("/workspace") < 0)
                return log_error_errno(errno, "Failed to enter /workspace: %m");
        if (fd == 3 ? fcntl(fd, F_SETFD, 0) < 0 : dup2(fd, 3) < 0)
                return log_error_errno(errno, "Failed to pass the socket: %m");
        /* Readiness (Type=notify): fd 4, "-1" without a service manager. */
        if (notify >= 0 && (notify == 4 ? fcntl(notify, F_SETFD, 0) < 0 : dup2(notify, 4) < 0))
                return log_error_errno(errno, "Failed to pass the notification socket: %m");

        /* Defaults for every signal, also the two glibc keeps (systemd cannot reset those, and
         * an ignored one would reach every exec forked from us). */
        r = reset_all_signal_dispositions();
        if (r < 0)
                return log_error_errno(r, "Failed to reset the signal dispositions: %m");
        sandbox_build_env(&e, true, buf, sizeof(buf), envp, ELEMENTSOF(envp));
        args[n++] = (char *) "python3";
        args[n++] = (char *) TEMPLATE_SCRIPT;
        args[n++] = (char *) TEMPLATE_MODULE;
        args[n++] = site_arg;
        args[n++] = age_arg;
        args[n++] = children_arg;
        args[n++] = (char *) (notify >= 0 ? "4" : "-1");
        modules = strdup(config->preload_modules ?: "");
        if (!modules)
                return log_oom();
        for (char *save = NULL, *m = strtok_r(modules, " ", &save); m && n < ELEMENTSOF(args) - 1;
             m = strtok_r(NULL, " ", &save))
                args[n++] = m;
        args[n] = NULL;
        execve(SANDBOX_PYTHON, args, envp);
        return log_error_errno(errno, "Failed to execute " SANDBOX_PYTHON ": %m");
}

int main(int argc, char *argv[]) {
        Config config = {};
        int r;

        r = daemon_parse_argv(argc, argv, "scopebox-template",
                              "The template interpreter of scopebox, from which python execs are forked.",
                              "by scopebox-template.service");
        if (r != 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        log_setup("scopebox-template");

        if (daemon_load_config(&config) < 0)
                return EXIT_FAILURE;
        if (!config.preload) {
                log_info("SANDBOX_PRELOAD=0: no template, every exec starts a new interpreter.");
                /* Started as asked (Type=notify), with nothing to serve: exit 0 keeps it down. */
                (void) sd_notify(false, "READY=1\nSTATUS=SANDBOX_PRELOAD=0: no template.");
                return EXIT_SUCCESS;
        }
        if (!module_list_is_valid(config.preload_modules ?: "")) {
                log_error(
                        "Invalid configuration: SANDBOX_PRELOAD_MODULES must be module names separated by "
                        "spaces.");
                return EXIT_FAILURE;
        }

        (void) template_run(&config); /* it returns only if it failed, and said why */
        return EXIT_FAILURE;
}
