/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* E2B's filesystem calls, as the runner takes them (runner-protocol.h RunnerFsRequest): the paths
 * checked, the work done by workspace-fs.c, its listing answered in a memfd. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "io-util.h"
#include "json-util.h"
#include "path-util.h"
#include "runner.h"
#include "string-util.h"
#include "workspace-fs.h"

/* A path as the manager sends it: "" or normalised (relative, no "." or "..", no empty names). */
static bool fs_path_is_valid(const char *p) {
        _cleanup_free_ char *n = NULL;

        if (*p == 0)
                return true;
        return workspace_path_normalize(p, &n) >= 0 && streq(n, p);
}

static int fs_reply(Runner *r, int q, WorkspaceFsList *l, bool with_listing) {
        _cleanup_json_ json_object *o = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *text;

        if (q >= 0 && with_listing) {
                q = schema_build(&runner_fs_listing, &l->listing, &o);
                text = q >= 0 ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
                if (q >= 0 && !text)
                        q = -ENOMEM;
                if (q >= 0)
                        fd = memfd_new_data("workspace-fs", text, strlen(text));
                if (q >= 0 && fd < 0)
                        q = fd;
        }
        workspace_fs_list_done(l);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, r->connection_generation, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
}

/* The request's paths, checked; 0 or an error answered. */
static int fs_check(Runner *r, const RunnerFsRequest *p) {
        if (fs_path_is_valid(p->path) && (!p->destination || fs_path_is_valid(p->destination)))
                return 0;
        (void) runner_send_error(r, r->connection_generation, EINVAL, "invalid path");
        return -EINVAL;
}

int runner_handle_fs_stat(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFsRequest *p = params;
        WorkspaceFsList l = {};

        if (fs_check(r, p) < 0)
                return 0;
        return fs_reply(r, workspace_fs_stat(&r->workspace, p->path, &l), &l, true);
}

int runner_handle_fs_list(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFsRequest *p = params;
        WorkspaceFsList l = {};

        if (fs_check(r, p) < 0)
                return 0;
        return fs_reply(r, workspace_fs_list(&r->workspace, p->path, (unsigned) p->depth, &l), &l, true);
}

int runner_handle_fs_mkdir(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFsRequest *p = params;
        WorkspaceFsList l = {};

        if (fs_check(r, p) < 0)
                return 0;
        return fs_reply(r, workspace_fs_mkdir(&r->workspace, p->path, &l), &l, true);
}

int runner_handle_fs_move(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFsRequest *p = params;
        WorkspaceFsList l = {};

        if (fs_check(r, p) < 0)
                return 0;
        return fs_reply(r, workspace_fs_move(&r->workspace, p->path, p->destination, &l), &l, true);
}

int runner_handle_fs_remove(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFsRequest *p = params;
        WorkspaceFsList l = {};

        if (fs_check(r, p) < 0)
                return 0;
        return fs_reply(r, workspace_fs_remove(&r->workspace, p->path), &l, false);
}
