/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fsync() in a forked child watched by sd-event: durable writes without blocking the agent's loop. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "macro.h"
#include "pidref.h"
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
        PidRef child = PIDREF_NULL;
        int r;

        if (!e || fd < 0 || !cb || !ret)
                return -EINVAL;
        c = calloc(1, sizeof(SyncChild));
        if (!c)
                return -ENOMEM;
        *c = (SyncChild) { .callback = cb, .userdata = userdata };

        /* With its pidfd (CLONE_PIDFD): watched, and killed if need be, through that fd only. */
        r = pidref_clone(0, &child);
        if (r < 0)
                return r;
        if (r == 0) {
                /* Nothing but async-signal-safe calls in here: the parent's state is not ours. */
                if (fsync(fd) < 0)
                        _exit(errno > 0 && errno < 256 ? errno : EIO);
                _exit(0);
        }
        /* The source owns the pidfd once it is made: it closes it when it is freed, after sd-event
         * has reaped the child, also when the callback is what frees it. */
        r = sd_event_add_child_pidfd(e, &c->source, child.fd, WEXITED, on_child_exit, c);
        if (r >= 0)
                r = sd_event_source_set_child_pidfd_own(c->source, true);
        if (r < 0) {
                /* Unwatched, it stays a zombie until the agent exits (when idle): better than waiting
                 * here for the disk, which is what the child is for. The fd is still ours. */
                c->source = sd_event_source_disable_unref(c->source);
                (void) pidref_kill(&child, SIGKILL);
                pidref_done(&child);
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
