/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session setup: the init request, which mounts the session's filesystems in the runner's own
 * mount namespace and builds the session's seccomp filter. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup-events.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "runner.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "string-util.h"

#define SESSION_ROOT_TMPFS_OPTIONS "mode=0700,size=1m,nr_inodes=64"

/* A tmpfs of 'size' bytes at 'where' ('what', for messages), whose options start with 'owner', and
 * an inode per 4 KiB of it (1024 at least): many small files meet the same quota as a few large
 * ones. Opened into *ret_fd. */
static int mount_session_tmpfs(const char *where, const char *what, const char *owner, uint64_t size,
                               int *ret_fd) {
        char opts[256];
        int fd;

        snprintf(opts, sizeof(opts), "%s,size=%llu,nr_inodes=%llu", owner, (unsigned long long) size,
                 (unsigned long long) MAX(size / 4096, 1024ULL));
        if (mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
                return log_error_errno(errno, "Failed to mount %s: %m", what);
        fd = open(where, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "Failed to open %s: %m", what);
        *ret_fd = fd;
        return 0;
}

static int runner_setup_session(Runner *r) {
        _cleanup_close_ int ws_fd = -EBADF, scratch_fd = -EBADF;
        const char *ws = strjoina(r->session_root, "/" SESSION_WORKSPACE_DIR);
        const char *scratch = strjoina(r->session_root, "/" SESSION_SCRATCH_DIR);
        const char *view = strjoina(r->session_root, "/view");
        char owner[64];
        int q;

        /* A mount namespace of our own: the session's filesystems are invisible to everyone else,
         * and vanish with the last process of the session. */
        if (unshare(CLONE_NEWNS) < 0)
                return log_error_errno(errno, "Failed to create the session's mount namespace: %m");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return log_error_errno(errno, "Failed to make mounts private: %m");
        if (mount("tmpfs", r->session_root, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  SESSION_ROOT_TMPFS_OPTIONS) < 0)
                return log_error_errno(errno, "Failed to mount the session root '%s': %m", r->session_root);

        if (mkdir(ws, 0755) < 0 || mkdir(scratch, 0755) < 0 ||
            mkdir(strjoina(r->session_root, "/" SESSION_NEWROOT_DIR), 0755) < 0)
                return log_error_errno(errno, "Failed to create the session's directories: %m");

        /* /workspace: a size-bounded tmpfs owned by the sandbox user; code gets ENOSPC at the quota. */
        snprintf(owner, sizeof(owner), "mode=0755,uid=%u,gid=%u", r->uid, r->gid);
        q = mount_session_tmpfs(ws, "the workspace", owner, r->workspace_size, &ws_fd);
        if (q < 0)
                return q;
        static const char *const ws_dirs[] = { "uploads", "outputs", "skills" };
        for (size_t i = 0; i < ELEMENTSOF(ws_dirs); i++) {
                _cleanup_close_ int fd = -EBADF;

                if (mkdirat(ws_fd, ws_dirs[i], 0755) < 0 ||
                    (fd = openat(ws_fd, ws_dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
                    fchown(fd, r->uid, r->gid) < 0)
                        return log_error_errno(errno, "Failed to create /workspace/%s: %m", ws_dirs[i]);
        }

        /* /tmp and /home/sandbox share one bounded tmpfs that survives across execs. */
        q = mount_session_tmpfs(scratch, "the scratch filesystem", "mode=0755", r->tmp_size, &scratch_fd);
        if (q < 0)
                return q;
        /* A fresh filesystem no process of the session has seen yet; still, ownership and modes
         * are set through fds opened without following links, as everywhere else. */
        {
                _cleanup_close_ int tmp_fd = -EBADF, home_fd = -EBADF;

                if (mkdirat(scratch_fd, "tmp", 01777) < 0 || mkdirat(scratch_fd, "home", 0700) < 0 ||
                    (tmp_fd = openat(scratch_fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                            0 ||
                    (home_fd = openat(scratch_fd, "home", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                            0 ||
                    fchmod(tmp_fd, 01777) < 0 || fchown(home_fd, r->uid, r->gid) < 0)
                        return log_error_errno(errno, "Failed to create /tmp and /home/sandbox: %m");
        }

        /* Before the session's first exec: nothing of it exists yet to race us. */
        q = sandbox_seed_font_cache(scratch_fd, r->uid, r->gid);
        if (q < 0)
                log_warning_errno(q, "Failed to create the matplotlib directory, ignoring: %m");

        /* The workspace once more, at "workspace" in an otherwise empty directory: the root
         * against which absolute links to /workspace/... are resolved for the file API. */
        if (mkdir(view, 0755) < 0 || mkdir(strjoina(view, "/workspace"), 0755) < 0 ||
            mount(ws, strjoina(view, "/workspace"), NULL, MS_BIND, NULL) < 0)
                return log_error_errno(errno, "Failed to set up the workspace view: %m");
        r->workspace.view_fd = open(view, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (r->workspace.view_fd < 0)
                return log_error_errno(errno, "Failed to open the workspace view: %m");
        r->workspace.fd = TAKE_FD(ws_fd);
        r->workspace.uid = r->uid;
        r->workspace.gid = r->gid;
        return 0;
}

int runner_handle_init(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerInitRequest *p = params;
        _cleanup_json_ json_object *reply = NULL;
        int q;

        if (r->initialized)
                return runner_send_error(r, r->connection_generation, EALREADY,
                                         "session already initialized");
        if ((p->preload_modules && !module_list_is_valid(p->preload_modules)) || n_fds != 1)
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid init request");
        /* The answer first, before anything is kept or set up: a session is initialized only once it
         * can be told so, and an answer that can't be made leaves nothing behind. What this runner
         * can do that earlier ones could not: cancel an exec. */
        q = schema_build(&runner_init_reply, &(RunnerInitReply) { .pid = getpid(), .cancel = true }, &reply);
        if (q < 0)
                return q;
        /* An init that failed further on may be sent again: what the first one kept goes. */
        r->preload_modules = mfree(r->preload_modules);
        if (p->preload_modules && !(r->preload_modules = strdup(p->preload_modules)))
                return log_oom();

        r->uid = (uid_t) p->uid;
        r->gid = (gid_t) p->gid;
        r->workspace_size = p->workspace_size;
        r->tmp_size = p->tmp_size;
        r->cpus_percent = p->cpus_percent;
        r->backstop_usec = p->idle_backstop_sec > 0 && p->idle_backstop_sec < UINT64_MAX / USEC_PER_SEC
                                   ? p->idle_backstop_sec * USEC_PER_SEC
                                   : 0;
        /* We are in the session's scope by now (the manager sends init once systemd started it). */
        cgroup_events_close(&r->cgroup_events);
        cgroup_events_open("/sys/fs/cgroup", &r->cgroup_events);

        q = runner_setup_session(r);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "failed to set up the session: %s",
                                         strerror(-q));
        /* The manager's filters, one memfd per profile. */
        for (size_t i = 0; i < ELEMENTSOF(r->filter_fds); i++)
                r->filter_fds[i] = safe_close(r->filter_fds[i]);
        q = seccomp_filter_set_split(fds[0], r->filter_fds);
        if (q < 0) {
                log_error_errno(q, "Invalid seccomp filters in the init request: %m");
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid init request");
        }
        runner_template_setup(r);
        r->initialized = true;
        r->prepare = p->prepare && r->preload_modules;
        r->prepare_no_processes = p->prepare_no_processes;
        r->prepare_network = p->prepare_network;
        free(r->prepare_http_proxy);
        free(r->prepare_https_proxy);
        r->prepare_http_proxy = r->prepare_https_proxy = NULL;
        if ((p->http_proxy && !(r->prepare_http_proxy = strdup(p->http_proxy))) ||
            (p->https_proxy && !(r->prepare_https_proxy = strdup(p->https_proxy))))
                r->prepare = false; /* out of memory: each exec makes its own */
        runner_touch(r);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(r->session_id)), "Session %s is ready.",
                   r->session_id);
        q = runner_send(r, r->connection_generation, reply, NULL, 0);
        /* The first exec's sandbox, once the answer is out. */
        runner_prepare_soon(r);
        return q;
}
