/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* E2B's filesystem calls, queued on the session's runner connection (session-fs.h). */
#include <errno.h>
#include <stdlib.h>

#include "session-fs.h"
#include "session-private.h"

typedef struct FsCall {
        FileCallback callback;
        void *userdata;
} FsCall;

static void on_fs_reply(Session *s, int error, const char *message, json_object *reply, int fd,
                        void *userdata) {
        FsCall *c = userdata;

        if (error >= 0)
                session_touch(s);
        c->callback(s, error, message, error >= 0 ? fd : -EBADF, c->userdata);
        free(c);
}

int session_fs_call(Session *s, const SchemaMessage *op, const RunnerFsRequest *p, FileCallback cb,
                    void *userdata) {
        json_object *msg = NULL;
        FsCall *c;
        int r;

        if (s->state != SESSION_RUNNING)
                return -ENXIO;
        r = runner_request_fs(op, p, &msg);
        if (r < 0)
                return r;
        c = malloc(sizeof(FsCall));
        if (!c) {
                json_object_put(msg);
                return -ENOMEM;
        }
        *c = (FsCall) { .callback = cb, .userdata = userdata };
        r = session_enqueue(s, msg, -EBADF, SESSION_CONTROL_TIMEOUT_USEC, false, false, on_fs_reply, c);
        if (r < 0)
                free(c);
        return r;
}
