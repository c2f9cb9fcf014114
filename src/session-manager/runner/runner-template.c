/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a python exec needs to start from the template (template-protocol.h): the session's
 * cgroup directories and its filter as BPF, prepared once per session, and a connection per exec.
 * Without any of them the exec starts cold, which always works. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/magic.h>

#include "io-util.h"
#include "log.h"
#include "string-util.h"
#include "runner.h"
#include "template-protocol.h"

/* The directory of the runner's cgroup in one hierarchy of /proc/self/cgroup: "0::/path" is the
 * unified one (at /sys/fs/cgroup itself, or at its "unified" on a hybrid host), "N:ctrl,...:/path"
 * a v1 one (at /sys/fs/cgroup/<ctrl,...>, "name=X" at /sys/fs/cgroup/X). */
static int open_hierarchy(const char *controllers, const char *path) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        struct statfs sfs;

        if (path[0] != '/' || strstr(path, "/..") || strchr(controllers, '/'))
                return -EBADMSG;
        if (isempty(controllers)) {
                if (asprintf(&dir, "/sys/fs/cgroup%s", path) < 0)
                        return -ENOMEM;
                fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || fstatfs(fd, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
                        fd = safe_close(fd);
                        free(dir);
                        if (asprintf(&dir, "/sys/fs/cgroup/unified%s", path) < 0)
                                return -ENOMEM;
                        fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                }
        } else {
                if (asprintf(&dir, "/sys/fs/cgroup/%s%s",
                             startswith(controllers, "name=") ? controllers + 5 : controllers, path) < 0)
                        return -ENOMEM;
                fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0)
                return -errno;
        if (fstatfs(fd, &sfs) < 0)
                return -errno;
        if (sfs.f_type != CGROUP2_SUPER_MAGIC && sfs.f_type != CGROUP_SUPER_MAGIC)
                return -ENOTDIR;
        return TAKE_FD(fd);
}

/* The runner's cgroup in every hierarchy it is in: the template's child joins each, so that the
 * payload is bound and charged exactly as a cold one, which the runner forks in here. */
static int open_own_cgroups(Runner *r) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        int q;

        fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        q = read_full_fd(fd, 64 * 1024, &text, NULL);
        if (q < 0)
                return q;
        for (char *line = text, *next; line && *line; line = next) {
                char *c1, *c2, *end = strchrnul(line, '\n');

                next = *end ? end + 1 : NULL;
                *end = 0;
                c1 = strchr(line, ':');
                c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        return -EBADMSG;
                *c2 = 0;
                if (r->n_scope_cgroup_fds >= ELEMENTSOF(r->scope_cgroup_fds))
                        return -E2BIG;
                q = open_hierarchy(c1 + 1, c2 + 1);
                if (q < 0)
                        return q;
                r->scope_cgroup_fds[r->n_scope_cgroup_fds++] = q;
        }
        return r->n_scope_cgroup_fds > 0 ? 0 : -ENOENT;
}

/* The payload cgroup (runner.h): made below the scope's directory of the unified hierarchy (ours:
 * the scope is delegated to us), its cgroup.procs kept open for each PID 1 to move itself in. */
static int open_payload_cgroup(Runner *r) {
        _cleanup_close_ int dir_fd = -EBADF, procs_fd = -EBADF;
        struct statfs sfs;

        for (size_t i = 0; i < r->n_scope_cgroup_fds; i++) {
                r->template_cgroup_fds[i] = r->scope_cgroup_fds[i];
                if (dir_fd >= 0 || fstatfs(r->scope_cgroup_fds[i], &sfs) < 0 ||
                    sfs.f_type != CGROUP2_SUPER_MAGIC)
                        continue;
                if (mkdirat(r->scope_cgroup_fds[i], RUNNER_PAYLOAD_CGROUP, 0755) < 0 && errno != EEXIST)
                        return -errno;
                dir_fd = openat(r->scope_cgroup_fds[i], RUNNER_PAYLOAD_CGROUP,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dir_fd < 0)
                        return -errno;
                if (fstatfs(dir_fd, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC)
                        return -ENOTDIR;
                r->template_cgroup_fds[i] = dir_fd;
        }
        if (dir_fd < 0)
                return -ENOMEDIUM;
        procs_fd = openat(dir_fd, "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
        if (procs_fd < 0)
                return -errno;
        r->payload_cgroup_fd = TAKE_FD(dir_fd);
        r->payload_procs_fd = TAKE_FD(procs_fd);
        return 0;
}

void runner_template_setup(Runner *r) {
        int q;

        q = open_own_cgroups(r);
        if (q < 0) {
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to open the scope's cgroups, execs start cold: %m");
                for (size_t i = 0; i < r->n_scope_cgroup_fds; i++)
                        safe_close(r->scope_cgroup_fds[i]);
                r->n_scope_cgroup_fds = 0;
                return;
        }
        if (r->payload_cgroup_fd >= 0)
                return;
        q = open_payload_cgroup(r);
        if (q < 0) {
                log_struct(LOG_WARNING, q, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)),
                           "Failed to make the sandboxes' cgroup, the session can't be paused: %m");
                for (size_t i = 0; i < r->n_scope_cgroup_fds; i++) {
                        if (r->template_cgroup_fds[i] != r->scope_cgroup_fds[i])
                                safe_close(r->template_cgroup_fds[i]);
                        r->template_cgroup_fds[i] = r->scope_cgroup_fds[i];
                }
        }
}

int runner_template_connect(Runner *r) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = TEMPLATE_SOCKET_PATH };
        _cleanup_close_ int fd = -EBADF;

        if (r->n_scope_cgroup_fds == 0 || r->filter_fds[SECCOMP_PROFILE_SIDECAR] < 0)
                return -EOPNOTSUPP;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* Never waits: a template that is not there, not ready or whose backlog is full makes
         * this exec start cold. */
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        (void) fd_nonblock(fd, false);
        return TAKE_FD(fd);
}
