/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The D-Bus methods of E2B's filesystem calls (docs/dbus-api.md: StatPath, ListDirectory,
 * MakeDirectory, MovePath, RemovePath): the client's paths normalised as WriteFile's, the work
 * queued to the session's runner (runner-fs.c), its answer turned into entries
 * "(sstussxs)": path relative to /workspace, type, size, st_mode, owner, group, mtime in ns, target. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bus-contract.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "manager-fs.h"
#include "session-fs.h"
#include "string-util.h"

#define FS_ENTRY_SIGNATURE "(sstussxs)"
/* The largest listing the runner sends: RUNNER_FS_ENTRIES_MAX entries of two paths each. */
#define FS_LISTING_BYTES_MAX (RUNNER_FS_ENTRIES_MAX * (2U * RUNNER_PATH_MAX + 512U))

/* The runner's errnos in the contract's names (never its texts). */
static const struct {
        int error;
        const char *name;
        const char *message;
} fs_errors[] = {
        { ENOENT, BUS_ERROR_NOT_FOUND, "no such file or directory" },
        { EXDEV, BUS_ERROR_INVALID_PATH, "path resolves outside /workspace" },
        { ELOOP, BUS_ERROR_INVALID_PATH, "path resolves outside /workspace" },
        { ENAMETOOLONG, BUS_ERROR_INVALID_PATH, "path too long" },
        { ENOTDIR, SD_BUS_ERROR_INVALID_ARGS, "not a directory" },
        { EEXIST, SD_BUS_ERROR_INVALID_ARGS, "path exists and is not a directory" },
        { EISDIR, SD_BUS_ERROR_INVALID_ARGS, "a file cannot replace a directory" },
        { ENOTEMPTY, SD_BUS_ERROR_INVALID_ARGS, "the destination is a directory that is not empty" },
        { EINVAL, SD_BUS_ERROR_INVALID_ARGS, "a directory cannot move into itself" },
        { EPERM, SD_BUS_ERROR_INVALID_ARGS, "the workspace itself cannot be moved or removed" },
        { ENOSPC, BUS_ERROR_TOO_LARGE, BUS_MESSAGE_WORKSPACE_FULL },
        { EDQUOT, BUS_ERROR_TOO_LARGE, BUS_MESSAGE_WORKSPACE_FULL },
        { EMLINK, BUS_ERROR_TOO_LARGE, BUS_MESSAGE_WORKSPACE_FULL },
        { EAGAIN, BUS_ERROR_BUSY, "the directory kept changing while it was removed" },
        { EBUSY, BUS_ERROR_BUSY, NULL },
        { EUSERS, BUS_ERROR_LIMIT_EXCEEDED, NULL },
        { ENXIO, BUS_ERROR_NO_SUCH_SESSION, BUS_MESSAGE_NO_SUCH_SESSION },
};

static void fs_reply_error(sd_bus_message *m, int error, const char *message) {
        const char *name = BUS_ERROR_BACKEND_FAILED, *text = "workspace operation failed";
        int r;

        for (size_t i = 0; i < ELEMENTSOF(fs_errors); i++)
                if (abs(error) == fs_errors[i].error) {
                        name = fs_errors[i].name;
                        text = fs_errors[i].message ?: message ?: strerror(abs(error));
                        break;
                }
        if (streq(name, BUS_ERROR_BACKEND_FAILED))
                log_warning_errno(error, "Workspace filesystem call failed: %s", strempty(message));
        r = sd_bus_reply_method_errorf(m, name, "%s", text);
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
}

static int fs_append_entry(sd_bus_message *reply, const RunnerFsEntry *e) {
        return sd_bus_message_append(reply, FS_ENTRY_SIGNATURE, e->path, e->type, e->size, e->mode, e->owner,
                                     e->group, e->mtime_nsec, strempty(e->target));
}

/* The runner's listing as the method's answer. */
static int fs_reply_listing(sd_bus_message *m, int fd) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(runner_fs_listing_done) RunnerFsListing l = {};
        _cleanup_json_ json_object *o = NULL;
        _cleanup_free_ char *text = NULL;
        size_t size;
        int r;

        r = read_full_memfd(fd, FS_LISTING_BYTES_MAX, &text, &size);
        if (r >= 0)
                r = json_parse(text, size, JSON_DEPTH_MAX, &o);
        if (r >= 0)
                r = schema_parse(&runner_fs_listing, o, &l, NULL);
        if (r >= 0 && !sd_bus_message_is_method_call(m, NULL, "ListDirectory") && l.n_entries != 1)
                r = -EBADMSG;
        if (r < 0)
                return r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r < 0)
                return r;
        if (sd_bus_message_is_method_call(m, NULL, "ListDirectory")) {
                r = sd_bus_message_open_container(reply, 'a', FS_ENTRY_SIGNATURE);
                for (size_t i = 0; r >= 0 && i < l.n_entries; i++)
                        r = fs_append_entry(reply, &l.entries[i]);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                if (r >= 0)
                        r = sd_bus_message_append(reply, "b", l.truncated);
        } else {
                if (sd_bus_message_is_method_call(m, NULL, "MakeDirectory"))
                        r = sd_bus_message_append(reply, "b", !l.existed);
                if (r >= 0)
                        r = fs_append_entry(reply, &l.entries[0]);
        }
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static void on_fs_done(Session *s, int error, const char *message, int fd, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = userdata;
        int r;

        if (error < 0) {
                fs_reply_error(m, error, message);
                return;
        }
        if (sd_bus_message_is_method_call(m, NULL, "RemovePath"))
                r = sd_bus_reply_method_return(m, NULL);
        else {
                r = fs_reply_listing(m, fd);
                if (r < 0 && r != -ENOMEM) {
                        log_warning_errno(r, "Malformed filesystem answer from the runner of %s: %m", s->id);
                        fs_reply_error(m, -EHOSTDOWN, "malformed answer from the runner");
                        return;
                }
        }
        if (r < 0) {
                log_debug_errno(r, "Failed to reply: %m");
                fs_reply_error(m, -EHOSTDOWN, NULL);
        }
}

/* Reads "s session_id, s path" and, with 'destination', a second path; queues 'op'. */
static int fs_method(sd_bus_message *m, Manager *mgr, const SchemaMessage *op, bool destination,
                     uint64_t depth, sd_bus_error *error) {
        _cleanup_free_ char *path = NULL, *to = NULL;
        const char *id, *p, *d = NULL;
        Session *s;
        int r;

        r = sd_bus_message_read(m, "ss", &id, &p);
        if (r >= 0 && destination)
                r = sd_bus_message_read(m, "s", &d);
        if (r < 0)
                return r;
        s = manager_bus_find_running_session(mgr, id, error);
        if (!s)
                return -EINVAL;
        r = manager_bus_normalize_path(p, &path, error);
        if (r >= 0 && d)
                r = manager_bus_normalize_path(d, &to, error);
        if (r < 0)
                return r;

        r = session_fs_call(s, op, &(RunnerFsRequest) { .path = path, .destination = to, .depth = depth },
                            on_fs_done, sd_bus_message_ref(m));
        if (r >= 0)
                return 1;
        sd_bus_message_unref(m);
        if (r == -EBUSY)
                return sd_bus_error_set(error, BUS_ERROR_BUSY, BUS_MESSAGE_SESSION_BUSY);
        if (r == -ENXIO)
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION, BUS_MESSAGE_NO_SUCH_SESSION);
        return r;
}

int method_stat_path(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return fs_method(m, userdata, &runner_fs_stat_request, false, 0, error);
}

int method_list_directory(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *id, *p;
        uint32_t depth;
        int r;

        /* The depth comes last: read the call whole, then again from its start. */
        r = sd_bus_message_read(m, "ssu", &id, &p, &depth);
        if (r < 0)
                return r;
        if (depth == 0)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "depth must be at least 1");
        r = sd_bus_message_rewind(m, true);
        if (r < 0)
                return r;
        return fs_method(m, userdata, &runner_fs_list_request, false, MIN(depth, RUNNER_FS_DEPTH_MAX),
                         error);
}

int method_make_directory(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return fs_method(m, userdata, &runner_fs_mkdir_request, false, 0, error);
}

int method_move_path(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return fs_method(m, userdata, &runner_fs_move_request, true, 0, error);
}

int method_remove_path(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return fs_method(m, userdata, &runner_fs_remove_request, false, 0, error);
}
