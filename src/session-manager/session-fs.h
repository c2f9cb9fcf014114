/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* E2B's filesystem calls on a session's workspace (runner-fs.c does them), queued behind the
 * session's other calls like its file operations. */
#pragma once

#include "runner-protocol.h"
#include "session.h"

/* Queues the fs-* request 'op' (runner_fs_*_request) with 'p'. The callback gets the runner's
 * RunnerFsListing as a memfd (borrowed; -EBADF for fs-remove), or the runner's -errno: -ENOENT,
 * -EXDEV (leaves the workspace), -ENOTDIR, -EEXIST, -EISDIR, -ENOTEMPTY, -EINVAL, -EPERM (the
 * workspace itself), -ENOSPC, -EAGAIN, or the queue's -EBUSY/-EUSERS. Synchronous failures: -ENXIO
 * (the session does not run), -EBUSY (its queue is full), -ENOMEM. */
int session_fs_call(Session *s, const SchemaMessage *op, const RunnerFsRequest *p, FileCallback cb,
                    void *userdata);
