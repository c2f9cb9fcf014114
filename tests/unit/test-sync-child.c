/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fsync() in a child: the result comes back through the event loop, which keeps running meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "macro.h"
#include "sync-child.h"
#include "tests.h"

typedef struct Result {
        bool done;
        int error;
        unsigned ticks;                /* loop iterations seen before the result */
} Result;

static void on_synced(SyncChild *c, int error, void *userdata) {
        Result *res = userdata;

        res->done = true;
        res->error = error;
        sync_child_free(c);
}

static int on_tick(sd_event_source *s, void *userdata) {
        Result *res = userdata;

        res->ticks++;
        return 0;
}

static int sync_fd(int fd, Result *res) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        sd_event_source *tick = NULL;
        SyncChild *c = NULL;
        int r;

        ASSERT_EQ(sd_event_new(&e), 0);
        r = sync_child_start(e, fd, on_synced, res, &c);
        if (r < 0)
                return r;
        ASSERT_TRUE(!res->done); /* never answered before the loop runs */
        ASSERT_EQ(sd_event_add_post(e, &tick, on_tick, res), 0);
        while (!res->done) {
                ASSERT_TRUE(sd_event_run(e, 10 * 1000 * 1000) >= 0);
                ASSERT_EQ(sd_event_source_set_enabled(tick, SD_EVENT_ON), 0);
        }
        sd_event_source_disable_unref(tick);
        /* The child is reaped (held by a pidfd the source owned, which was closed only after the
         * reap): no zombie, no other child left. */
        siginfo_t si = {};
        ASSERT_TRUE(waitid(P_ALL, 0, &si, WEXITED | WNOHANG) < 0 && errno == ECHILD);
        return 0;
}

static void test_fsync_ok(void) {
        char path[] = "/var/tmp/test-sync-child-XXXXXX";
        _cleanup_close_ int fd = mkostemp(path, O_CLOEXEC);
        static char data[1 << 20];
        Result res = {};

        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(unlink(path), 0);
        ASSERT_EQ(write(fd, data, sizeof(data)), (ssize_t) sizeof(data));
        ASSERT_EQ(sync_fd(fd, &res), 0);
        ASSERT_TRUE(res.done);
        ASSERT_EQ(res.error, 0);
}

static void test_fsync_error_reported(void) {
        int fds[2];
        Result res = {};

        /* fsync() of a pipe fails with EINVAL: in the child, reported through its exit status. */
        ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
        ASSERT_EQ(sync_fd(fds[0], &res), 0);
        ASSERT_EQ(res.error, -EINVAL);
        close(fds[0]);
        close(fds[1]);
}

static void test_bad_arguments(void) {
        Result res = {};

        ASSERT_EQ(sync_fd(-1, &res), -EINVAL);
}

int main(void) {
        sigset_t ss;

        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ASSERT_EQ(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        RUN(test_fsync_ok);
        RUN(test_fsync_error_reported);
        RUN(test_bad_arguments);
        return 0;
}
