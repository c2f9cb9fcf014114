/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fsync() in a forked child watched by sd-event: durable writes without blocking the agent's loop. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "macro.h"
#include "sync-child.h"

struct SyncChild {
        sd_event_source *source;
        SyncChildCallback callback;
        void *userdata;
};

static int on_child_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        SyncChild *c = userdata;
        int error;

        /* The exit status is fsync()'s errno (every errno fits in 8 bits). */
        if (si->si_code == CLD_EXITED)
                error = -si->si_status;
        else
                error = -EIO;
        c->source = sd_event_source_disable_unref(c->source);
        c->callback(c, error, c->userdata);
        return 0;
}

int sync_child_start(sd_event *e, int fd, SyncChildCallback cb, void *userdata, SyncChild **ret) {
        _cleanup_free_ SyncChild *c = NULL;
        pid_t pid;
        int r;

        if (!e || fd < 0 || !cb || !ret)
                return -EINVAL;
        c = calloc(1, sizeof(SyncChild));
        if (!c)
                return -ENOMEM;
        *c = (SyncChild) { .callback = cb, .userdata = userdata };

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Nothing but async-signal-safe calls in here: the parent's state is not ours. */
                if (fsync(fd) < 0)
                        _exit(errno > 0 && errno < 256 ? errno : EIO);
                _exit(0);
        }
        r = sd_event_add_child(e, &c->source, pid, WEXITED, on_child_exit, c);
        if (r < 0) {
                /* Unwatched, it stays a zombie until the agent exits (when idle): better than waiting
                 * here for the disk, which is what the child is for. */
                (void) kill(pid, SIGKILL);
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

SyncChild *sync_child_free(SyncChild *c) {
        if (!c)
                return NULL;
        c->source = sd_event_source_disable_unref(c->source);
        free(c);
        return NULL;
}
