/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Requests on the workspace's files: write, read, list and reset-inputs (workspace.c does the
 * work). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io-util.h"
#include "json-util.h"
#include "outputs.h"
#include "runner.h"
#include "workspace.h"

static bool path_has_dotdot_component(const char *p) {
        for (const char *c = p; *c;) {
                size_t l = strcspn(c, "/");
                if (l == 2 && c[0] == '.' && c[1] == '.')
                        return true;
                c += l;
                if (*c == '/')
                        c++;
        }
        return false;
}

/* Already normalised by the manager: relative, no "..", no empty components. */
static bool request_path_is_valid(const char *p) {
        return p[0] != '/' && !path_has_dotdot_component(p) && !strstr(p, "//");
}

int runner_handle_write(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFileRequest *p = params;
        int data_fd = n_fds > 0 ? fds[0] : -EBADF;
        struct stat st;
        int q;

        if (!request_path_is_valid(p->path) || data_fd < 0 || fstat(data_fd, &st) < 0 ||
            !S_ISREG(st.st_mode))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid write request");
        q = workspace_write(&r->workspace, p->path, data_fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, r->connection_generation, NULL, 0);
}

int runner_handle_read(Runner *r, const void *params, const int *fds, size_t n_fds) {
        const RunnerFileRequest *p = params;
        _cleanup_close_ int fd = -EBADF;
        int q;

        if (!request_path_is_valid(p->path))
                return runner_send_error(r, r->connection_generation, EINVAL, "invalid read request");
        q = workspace_read(&r->workspace, p->path, p->max, &fd);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, r->connection_generation, &fd, 1);
}

int runner_handle_list(Runner *r, const void *params, const int *fds, size_t n_fds) {
        _cleanup_json_ json_object *list = NULL;
        _cleanup_close_ int fd = -EBADF;
        OutputSet s = {};
        const char *text;
        int q, jr = 0;

        q = workspace_list(&r->workspace, &s);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        /* Every entry or an error: never a list with one missing. */
        list = json_object_new_array();
        if (!list)
                jr = -ENOMEM;
        for (size_t i = 0; jr >= 0 && i < s.n; i++) {
                json_object *e = json_object_new_object();

                if (!e) {
                        jr = -ENOMEM;
                        break;
                }
                json_add_checked(e, "path", json_object_new_string(s.entries[i].path), &jr);
                json_add_checked(e, "size", json_object_new_int64((int64_t) s.entries[i].size), &jr);
                if (jr < 0 || json_object_array_add(list, e) < 0) {
                        json_object_put(e);
                        jr = -ENOMEM;
                }
        }
        output_set_done(&s);
        if (jr < 0)
                return jr;
        /* 500 paths of up to 4 KiB don't fit a control message: the list travels in a memfd. */
        text = json_object_to_json_string_ext(list, JSON_C_TO_STRING_PLAIN);
        if (!text)
                return -ENOMEM;
        fd = memfd_new_data("workspace-list", text, strlen(text));
        if (fd < 0)
                return runner_send_error(r, r->connection_generation, fd, "%s", strerror(-fd));
        return runner_send_ok(r, r->connection_generation, &fd, 1);
}

int runner_handle_reset_inputs(Runner *r, const void *params, const int *fds, size_t n_fds) {
        int q = workspace_reset_inputs(&r->workspace);
        if (q < 0)
                return runner_send_error(r, r->connection_generation, q, "%s", strerror(-q));
        return runner_send_ok(r, r->connection_generation, NULL, 0);
}
