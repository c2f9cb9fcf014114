/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Draining (scopeboxctl drain): no new sessions while the existing ones finish. The switch is the
 * file MANAGER_DRAINING_FILE in the state directory, so it holds across restarts and reboots. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drain.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "message-ids.h"

static int open_state_dir(const char *dir) {
        int fd;

        /* The directory itself is never a link either: it is root's, mode 0700 (StateDirectory=). */
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int drain_state_load(const char *dir, bool *ret) {
        _cleanup_close_ int dfd = -EBADF;
        struct stat st;

        dfd = open_state_dir(dir);
        if (dfd == -ENOENT) {
                *ret = false;
                return 0;
        }
        if (dfd < 0)
                return dfd;
        if (fstatat(dfd, MANAGER_DRAINING_FILE, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno != ENOENT)
                        return -errno;
                *ret = false;
                return 0;
        }
        /* Only we create it, as a regular file: anything else there is not our switch. */
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        *ret = true;
        return 0;
}

/* Creates (draining) or removes the file, relative to the directory and never through a link,
 * then makes the change durable. */
int drain_state_save(const char *dir, bool draining) {
        _cleanup_close_ int dfd = -EBADF, fd = -EBADF;
        struct stat st;

        dfd = open_state_dir(dir);
        if (dfd < 0)
                return dfd;

        if (draining) {
                fd = openat(dfd, MANAGER_DRAINING_FILE,
                            O_WRONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0600);
                if (fd < 0)
                        return -errno;
                if (fstat(fd, &st) < 0)
                        return -errno;
                if (!S_ISREG(st.st_mode))
                        return -EBADFD;
                if (fsync(fd) < 0)
                        return -errno;
        } else if (unlinkat(dfd, MANAGER_DRAINING_FILE, 0) < 0 && errno != ENOENT)
                return -errno;

        return fsync(dfd) < 0 ? -errno : 0;
}

int manager_load_draining(Manager *m) {
        int r;

        r = drain_state_load(SCOPEBOX_STATE_DIR, &m->draining);
        if (r == -EBADFD) {
                /* Refusing sessions for a file we did not write would be a surprise; say so. */
                log_warning_errno(r, "%s/%s is not a regular file, ignoring it: not draining.",
                                  SCOPEBOX_STATE_DIR, MANAGER_DRAINING_FILE);
                m->draining = false;
                return 0;
        }
        if (r < 0)
                return log_error_errno(r, "Failed to read the drain state in %s: %m", SCOPEBOX_STATE_DIR);
        if (m->draining)
                log_struct(LOG_NOTICE, 0, LOG_FIELDS("SCOPEBOX_DRAINING=1", SCOPEBOX_MESSAGE_DRAIN_CHANGED),
                           "Draining (since before this start): new sessions are refused.");
        return 0;
}

int manager_set_draining(Manager *m, bool draining) {
        int r;

        if (m->draining == draining)
                return 0;
        r = drain_state_save(SCOPEBOX_STATE_DIR, draining);
        if (r < 0)
                return log_error_errno(r, "Failed to %s %s/%s: %m", draining ? "create" : "remove",
                                       SCOPEBOX_STATE_DIR, MANAGER_DRAINING_FILE);
        m->draining = draining;
        log_struct(LOG_NOTICE, 0,
                   LOG_FIELDS(draining ? "SCOPEBOX_DRAINING=1" : "SCOPEBOX_DRAINING=0",
                              SCOPEBOX_MESSAGE_DRAIN_CHANGED),
                   draining ? "Draining: new sessions are refused, existing sessions and dify runs go on."
                            : "No longer draining: new sessions are accepted again.");
        if (m->hooks.draining_changed)
                m->hooks.draining_changed(m);
        return 1;
}
