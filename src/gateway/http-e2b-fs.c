/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's filesystem RPCs on an E2B sandbox (docs/e2b.md "Files"): the Connect protocol's unary
 * calls in JSON — POST /filesystem.Filesystem/Stat, ListDir, MakeDir, Move, Remove — on the files
 * of the session's workspace, which the sandbox sees as /home/user and /workspace. The session
 * manager does the work (StatPath, ListDirectory, MakeDirectory, MovePath, RemovePath) with the
 * sidecar file API's path rules; here the request is read, the E2B spelling of its paths turned
 * into the workspace's, and the answer written as envd writes it. Errors are Connect's
 * {"code":"not_found","message":...} with the status of the code. WatchDir and the watcher calls
 * are answered "unimplemented". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus-client.h"
#include "bus-util.h"
#include "connect-rpc.h"
#include "e2b-fs.h"
#include "http-e2b-fs.h"
#include "http-e2b.h"
#include "http-request.h"
#include "http-util.h"
#include "id.h"
#include "json-util.h"
#include "path-util.h"
#include "string-util.h"

#define E2B_FS_ENTRY "(sstussxs)"
#define E2B_FS_WATCH_UNSUPPORTED                                                                            \
        "watching directories is not supported by this scopebox version (docs/e2b.md \"Files\")"

typedef enum E2bFsOp {
        E2B_FS_STAT,
        E2B_FS_LIST,
        E2B_FS_MKDIR,
        E2B_FS_MOVE,
        E2B_FS_REMOVE,
} E2bFsOp;

static const char *const e2b_fs_methods[] = {
        [E2B_FS_STAT] = "StatPath", [E2B_FS_LIST] = "ListDirectory", [E2B_FS_MKDIR] = "MakeDirectory",
        [E2B_FS_MOVE] = "MovePath", [E2B_FS_REMOVE] = "RemovePath",
};

/* A call between its request and its answer. */
typedef struct E2bFsCall {
        E2bFsOp op;
        char *shown; /* the path as the client sees it, for messages; a move's source */
        char *shown_to; /* a move's destination */
        const char *root; /* where the answer's entries are shown: E2B_HOME or /workspace */
} E2bFsCall;

static void e2b_fs_call_free(void *p) {
        E2bFsCall *c = p;

        if (c) {
                free(c->shown);
                free(c->shown_to);
        }
        free(c);
}

/* Whether the request is WatchDir's, a server stream: its errors are a stream's end. */
static bool e2b_fs_streaming(const HttpRequest *req) {
        return req->route && req->route->handler == http_e2b_fs_watch_dir;
}

/* A Connect error: {"code":code,"message":before path after}, with the code's status (or 'status'
 * if not 0) for a unary call; for a stream, a 200 answer whose only message is its end with the
 * error, as Connect ends a failed stream (a status would lose the code). A path is shown back
 * only while short. */
int e2b_fs_reply_error(HttpRequest *req, unsigned status, const char *code, const char *before,
                       const char *path, const char *after) {
        char message[512];

        (void) snprintf(message, sizeof(message), "%s%s%s", before,
                        !path                                                        ? ""
                        : strlen(path) <= 256 && utf8_is_valid_n(path, strlen(path)) ? path
                                                                                     : "…",
                        strempty(after));
        return connect_reply_error(req, e2b_fs_streaming(req), status, code, message);
}

static int e2b_fs_reply_body(HttpRequest *req, JsonWriter *w) {
        HttpResponse *resp = NULL;
        int r = http_response_new_writer(HTTP_OK, w, &resp);

        return http_request_reply_made(req, r, resp);
}

/* The failures of the manager that no name below maps, in Connect's codes by their status. */
static int e2b_fs_response_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        const char *message, *code;
        unsigned status;
        int r;

        http_bus_error_describe(e, false, &status, &message, ret_internal);
        code = status == HTTP_SERVICE_UNAVAILABLE ? "unavailable"
               : status == HTTP_TOO_MANY_REQUESTS ? "resource_exhausted"
               : status == HTTP_NOT_FOUND         ? "not_found"
               : status == HTTP_BAD_REQUEST       ? "invalid_argument"
               : status == HTTP_PAYLOAD_TOO_LARGE ? "resource_exhausted"
                                                  : "internal";
        r = connect_error_json(&w, code, message);
        if (r < 0)
                return r;
        r = http_response_new_writer(connect_code_http_status(code), &w, ret);
        if (r >= 0 && (status == HTTP_SERVICE_UNAVAILABLE || status == HTTP_TOO_MANY_REQUESTS))
                (*ret)->retry_after = "1";
        return r;
}

/* The manager's errors, decided on their names. */
static int e2b_fs_call_error(HttpRequest *req, const sd_bus_error *e) {
        E2bFsCall *c = req->userdata;

        if (sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED))
                return e2b_reply_not_running(req);
        if (sd_bus_error_has_name(e, BUS_ERROR_NOT_FOUND))
                return e2b_fs_reply_error(req, 0, "not_found", "path '", c->shown, "' does not exist");
        if (sd_bus_error_has_name(e, BUS_ERROR_INVALID_PATH) && c->shown_to)
                return e2b_fs_reply_error(req, 0, "permission_denied", "moving to '", c->shown_to,
                                          "' (or from its source) leads outside the workspace (scopebox "
                                          "serves its files only)");
        if (sd_bus_error_has_name(e, BUS_ERROR_INVALID_PATH))
                return e2b_fs_reply_error(req, 0, "permission_denied", "path '", c->shown,
                                          "' leads outside the workspace (scopebox serves its files only)");
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_INVALID_ARGS))
                return e2b_fs_reply_error(req, 0, "invalid_argument", strempty(e->message), ": ", c->shown);
        if (sd_bus_error_has_name(e, BUS_ERROR_TOO_LARGE))
                return e2b_fs_reply_error(req, 0, "resource_exhausted", "the workspace is full", NULL, NULL);
        if (sd_bus_error_has_name(e, BUS_ERROR_BUSY) || sd_bus_error_has_name(e, BUS_ERROR_LIMIT_EXCEEDED))
                return e2b_fs_reply_error(req, 0, "resource_exhausted", "the sandbox is busy, retry", NULL,
                                          NULL);
        return http_request_reply_call_error(req, e, bus_timeout_files_usec(&req->server->config),
                                             e2b_fs_response_bus_error);
}

/* ---- the request ---- */

/* The sandbox user of a call: none named (Authorization: Basic base64("user:") names one), or
 * "user", the one user of a sandbox. 1 if fine, 0 when a 401 was prepared. */
static int e2b_fs_check_user(HttpRequest *req) {
        const HttpRequestHeaders *h = &req->headers;
        char user[64];

        if (h->n_authorization == 0)
                return 1;
        if (h->n_authorization > 1 ||
            connect_basic_user(h->authorization, h->authorization_size, user, sizeof(user)) < 0)
                return e2b_fs_reply_error(req, 0, "unauthenticated", "invalid Authorization header", NULL,
                                          NULL);
        if (streq(user, E2B_USER))
                return 1;
        return e2b_fs_reply_error(req, 0, "unauthenticated", "invalid username: '", user,
                                  "' (a scopebox sandbox has one user, 'user')");
}

/* The sandbox, the user and the body of a call (WatchDir: one envelope): 1 with the body's object
 * (owned), 0 when an answer was prepared. */
int e2b_fs_begin(HttpRequest *req, char id[static SESSION_ID_LEN + 1], json_object **ret) {
        const char *type = req->headers.content_type, *want = "application/json", *body = req->body;
        size_t size = req->body_size;
        int r;

        r = e2b_sandbox_of(req, E2B_PORT_ENVD, id);
        if (r > 0)
                r = e2b_fs_check_user(req);
        if (r <= 0)
                return r;
        /* Calls in JSON only: a client that asks for protobuf learns it at once. */
        if (e2b_fs_streaming(req))
                want = CONNECT_STREAM_CONTENT_TYPE;
        if (!type || !(streq(type, want) || (startswith(type, want) && type[strlen(want)] == ';')))
                return e2b_fs_reply_error(req, 415, "invalid_argument",
                                          "unsupported content type (scopebox serves Connect calls in JSON)",
                                          NULL, NULL);
        /* A stream's request is one envelope: flags 0 (no compression), its length, the message. */
        if (e2b_fs_streaming(req) && connect_envelope_unwrap(req->body, req->body_size, &body, &size) < 0)
                return e2b_fs_reply_error(req, 0, "invalid_argument",
                                          "the request must be one uncompressed envelope", NULL, NULL);
        if (size == 0) {
                *ret = json_object_new_object();
                return *ret ? 1 : -ENOMEM;
        }
        r = json_parse(body, size, JSON_DEPTH_MAX, ret);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return e2b_fs_reply_error(req, 0, "invalid_argument", "malformed JSON body: ",
                                          json_strict_error_to_string(r) ?: "not JSON", NULL);
        if (!json_object_is_type(*ret, json_type_object)) {
                json_object_put(*ret);
                *ret = NULL;
                return e2b_fs_reply_error(req, 0, "invalid_argument", "the body must be a JSON object", NULL,
                                          NULL);
        }
        return 1;
}

/* The path in member 'name' (absent or null: "", the home) as the workspace's: 1 with it relative
 * to the workspace and the root the client named it under, 0 when a client error was prepared. */
int e2b_fs_member_path(HttpRequest *req, json_object *o, const char *name, char **ret_relative,
                       const char **ret_root) {
        json_object *v = NULL;
        const char *s = "";
        size_t n = 0;
        int r;

        if (json_object_object_get_ex(o, name, &v) && v) {
                if (!json_object_is_type(v, json_type_string))
                        return e2b_fs_reply_error(req, 0, "invalid_argument", "'", name,
                                                  "' must be a string");
                s = json_object_get_string(v);
                n = (size_t) json_object_get_string_len(v);
        }
        r = e2b_fs_path(s, n, ret_relative, ret_root);
        if (r == -ENOMEM)
                return r;
        if (r == -EINVAL)
                return e2b_fs_reply_error(req, 0, "invalid_argument", "'", name, "' contains a NUL byte");
        if (r == -EILSEQ)
                return e2b_fs_reply_error(req, 0, "invalid_argument", "'", name, "' is not valid UTF-8");
        if (r == -ENAMETOOLONG)
                return e2b_fs_reply_error(req, 0, "invalid_argument", "'", name, "' is too long");
        if (r < 0)
                return e2b_fs_reply_error(req, 0, "permission_denied", "path '", s,
                                          "' is outside /home/user (scopebox serves the workspace's files)");
        return 1;
}

/* ListDir's depth: absent, null or 0 is 1 (as envd); a uint32 as a number or a string. 1 with it,
 * 0 when a client error was prepared. */
static int e2b_fs_member_depth(HttpRequest *req, json_object *o, uint32_t *ret) {
        json_object *v = NULL;
        int64_t d = 1;

        if (json_object_object_get_ex(o, "depth", &v) && v) {
                const char *s = json_object_get_string(v);
                char *end = NULL;

                errno = 0;
                if (json_object_is_type(v, json_type_int))
                        d = json_object_get_int64(v);
                else if (json_object_is_type(v, json_type_string) && *s >= '0' && *s <= '9')
                        d = strtoll(s, &end, 10);
                if ((!json_object_is_type(v, json_type_int) && (!end || *end || errno)) || d < 0 ||
                    d > UINT32_MAX)
                        return e2b_fs_reply_error(req, 0, "invalid_argument",
                                                  "'depth' must be a number from 0 to 4294967295", NULL,
                                                  NULL);
        }
        *ret = d == 0 ? 1 : (uint32_t) d;
        return 1;
}

/* ---- the answers ---- */

static int e2b_fs_read_entry(sd_bus_message *m, E2bFsEntry *e) {
        return sd_bus_message_read(m, E2B_FS_ENTRY, &e->path, &e->type, &e->size, &e->mode, &e->owner,
                                   &e->group, &e->mtime_nsec, &e->target);
}

/* {"entry": ...} of StatPath, MakeDirectory and MovePath. */
static int e2b_fs_reply_entry(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        E2bFsCall *c = req->userdata;
        E2bFsEntry e;
        int created = 1, r;

        if (c->op == E2B_FS_MKDIR) {
                r = sd_bus_message_read(reply, "b", &created);
                if (r < 0)
                        return r;
        }
        r = e2b_fs_read_entry(reply, &e);
        if (r < 0)
                return r;
        /* The SDK's makeDir() answers false for this code. */
        if (!created)
                return e2b_fs_reply_error(req, 0, "already_exists", "directory already exists: ", c->shown,
                                          NULL);
        (void) json_writer_append_str(&w, "{\"entry\":");
        r = e2b_fs_entry_append(&w, &e, c->root);
        if (r >= 0)
                r = json_writer_append_str(&w, "}");
        if (r < 0)
                return r;
        return e2b_fs_reply_body(req, &w);
}

/* {"entries": [...]} of ListDirectory. */
static int e2b_fs_reply_entries(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        E2bFsCall *c = req->userdata;
        int truncated = 0, r;

        (void) json_writer_append_str(&w, "{\"entries\":[");
        r = sd_bus_message_enter_container(reply, 'a', E2B_FS_ENTRY);
        for (size_t i = 0; r >= 0; i++) {
                E2bFsEntry e;

                r = e2b_fs_read_entry(reply, &e);
                if (r <= 0)
                        break;
                if (i > 0)
                        (void) json_writer_append_str(&w, ",");
                r = e2b_fs_entry_append(&w, &e, c->root);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "b", &truncated);
        if (r >= 0)
                r = json_writer_append_str(&w, "]}");
        if (r < 0)
                return r;
        /* envd's answer has no way to say it: the access log does. */
        if (truncated)
                (void) http_request_add_log_field(req, "SCOPEBOX_E2B_LIST_TRUNCATED", "1");
        return e2b_fs_reply_body(req, &w);
}

static int e2b_fs_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bFsCall *c = req->userdata;

        if (e)
                return e2b_fs_call_error(req, e);
        switch (c->op) {
        case E2B_FS_LIST:
                return e2b_fs_reply_entries(req, reply);
        case E2B_FS_REMOVE:
                return http_request_reply_literal(req, HTTP_OK, "{}");
        default:
                return e2b_fs_reply_entry(req, reply);
        }
}

/* ---- the calls ---- */

static int e2b_fs_handle(HttpRequest *req, E2bFsOp op) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ char *rel = NULL, *to_rel = NULL, *ws = NULL, *to_ws = NULL;
        _cleanup_json_ json_object *o = NULL;
        const char *root = NULL, *to_root = NULL;
        char id[SESSION_ID_LEN + 1];
        uint32_t depth = 1;
        E2bFsCall *c;
        int r;

        r = e2b_fs_begin(req, id, &o);
        if (r > 0)
                r = e2b_fs_member_path(req, o, op == E2B_FS_MOVE ? "source" : "path", &rel, &root);
        if (r > 0 && op == E2B_FS_MOVE)
                r = e2b_fs_member_path(req, o, "destination", &to_rel, &to_root);
        if (r > 0 && op == E2B_FS_LIST)
                r = e2b_fs_member_depth(req, o, &depth);
        if (r <= 0)
                return r;

        c = http_request_new_userdata(req, sizeof(E2bFsCall), e2b_fs_call_free);
        if (!c)
                return -ENOMEM;
        /* Answers show the entry where the client looks for it: a move's where it went. */
        *c = (E2bFsCall) { .op = op, .root = to_root ?: root, .shown = e2b_fs_path_show(root, rel) };
        ws = e2b_fs_path_show(WORKSPACE_PATH, rel);
        if (to_rel) {
                to_ws = e2b_fs_path_show(WORKSPACE_PATH, to_rel);
                c->shown_to = e2b_fs_path_show(to_root, to_rel);
        }
        if (!c->shown || !ws || (to_rel && (!to_ws || !c->shown_to)))
                return -ENOMEM;

        r = session_manager_new_call(req->server->bus, e2b_fs_methods[op], &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", id, ws);
        if (r >= 0 && op == E2B_FS_MOVE)
                r = sd_bus_message_append(m, "s", to_ws);
        if (r >= 0 && op == E2B_FS_LIST)
                r = sd_bus_message_append(m, "u", depth);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_files_usec(&req->server->config), e2b_fs_on_reply);
}

uint64_t http_e2b_fs_body_max(const Config *config) {
        return E2B_FS_BODY_MAX;
}

int http_e2b_fs_stat(HttpRequest *req) {
        return e2b_fs_handle(req, E2B_FS_STAT);
}

int http_e2b_fs_list_dir(HttpRequest *req) {
        return e2b_fs_handle(req, E2B_FS_LIST);
}

int http_e2b_fs_make_dir(HttpRequest *req) {
        return e2b_fs_handle(req, E2B_FS_MKDIR);
}

int http_e2b_fs_move(HttpRequest *req) {
        return e2b_fs_handle(req, E2B_FS_MOVE);
}

int http_e2b_fs_remove(HttpRequest *req) {
        return e2b_fs_handle(req, E2B_FS_REMOVE);
}

/* ---- the Python SDK's watchers: not served ---- */

static int e2b_fs_watcher_refuse(HttpRequest *req) {
        return e2b_fs_reply_error(req, 0, "unimplemented",
                                  "polling watchers are not served by this scopebox version: use WatchDir "
                                  "(docs/e2b.md \"Files\")",
                                  NULL, NULL);
}

/* CreateWatcher, GetWatcherEvents, RemoveWatcher (Python's sync SDK). */
int http_e2b_fs_watcher(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, e2b_fs_watcher_refuse);
}
