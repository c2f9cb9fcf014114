/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's process RPCs (docs/e2b.md "Commands"), in Connect's JSON codec: Start and Connect stream a
 * process's events, List, SendSignal, SendInput, CloseStdin answer at once. The processes
 * themselves are e2b-process.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base64.h"
#include "connect-rpc.h"
#include "e2b-fs.h"
#include "e2b-process.h"
#include "exec-command.h"
#include "http-e2b.h"
#include "http-request.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "parse-util.h"
#include "string-util.h"

/* How deep a request's JSON may nest: {"process":{"envs":{...}}}. */
#define E2B_RPC_DEPTH_MAX 8
#define E2B_TAG_MAX 256U
/* What the SDKs ask for (Keepalive-Ping-Interval), and the bound of what a client may ask. */
#define E2B_KEEPALIVE_DEFAULT_SEC 50U

uint64_t e2b_command_body_max(const Config *config) {
        return 2 * config->max_code_bytes + 64U * 1024U;
}

uint64_t e2b_rpc_body_max(const Config *config) {
        return 2U << 20;
}

/* A streaming call's failure; a unary call's (connect_reply_error()). */
static int connect_stream_fail(HttpRequest *req, const char *code, const char *message) {
        return connect_reply_error(req, true, 0, code, message);
}

static int connect_unary_fail(HttpRequest *req, const char *code, const char *message) {
        return connect_reply_error(req, false, 0, code, message);
}

static int connect_unary_reply(HttpRequest *req, JsonWriter *w) {
        HttpResponse *resp = NULL;
        size_t n = w->buf.len;
        int r;

        if (json_writer_error(w) < 0)
                return json_writer_error(w);
        r = http_response_new_take(HTTP_OK, TAKE_PTR(w->buf.s), n, &resp);
        return http_request_reply_made(req, r, resp);
}

/* A string member, NULL if absent; -EINVAL if it is there as anything else or holds a NUL. */
static int member_string(json_object *o, const char *key, const char **ret, size_t *ret_len) {
        json_object *v;

        *ret = NULL;
        *ret_len = 0;
        if (!o || !json_object_object_get_ex(o, key, &v) || !v)
                return 0;
        if (!json_object_is_type(v, json_type_string))
                return -EINVAL;
        *ret = json_object_get_string(v);
        *ret_len = (size_t) json_object_get_string_len(v);
        return memchr(*ret, 0, *ret_len) ? -EINVAL : 1;
}

/* The process a request names: {"process":{"pid":N}} or {"process":{"tag":"..."}}. */
static int request_selector(json_object *o, uint32_t *ret_pid, const char **ret_tag) {
        json_object *sel, *v;
        size_t n;
        int r;

        *ret_pid = 0;
        *ret_tag = NULL;
        if (!o || !json_object_object_get_ex(o, "process", &sel) ||
            !json_object_is_type(sel, json_type_object))
                return -EINVAL;
        r = member_string(sel, "tag", ret_tag, &n);
        if (r != 0)
                return r < 0 ? r : 0;
        if (!json_object_object_get_ex(sel, "pid", &v) || !json_object_is_type(v, json_type_int) ||
            json_object_get_int64(v) <= 0 || json_object_get_int64(v) > UINT32_MAX)
                return -EINVAL;
        *ret_pid = (uint32_t) json_object_get_int64(v);
        return 0;
}

/* The user a request runs as: the SDK names it in "Authorization: Basic" (only when asked). */
static int request_user_check(HttpRequest *req, bool stream) {
        const HttpRequestHeaders *h = &req->headers;
        char user[64], message[128];

        if (h->n_authorization == 0)
                return 1;
        if (h->n_authorization > 1 ||
            connect_basic_user(h->authorization, h->authorization_size, user, sizeof(user)) < 0)
                return (stream ? connect_stream_fail : connect_unary_fail)(req, "unauthenticated",
                                                                           "invalid Authorization header");
        if (streq(user, E2B_USER))
                return 1;
        if (streq(user, "root"))
                return (stream ? connect_stream_fail : connect_unary_fail)(
                        req, "permission_denied",
                        "user root is not served: commands run as the sandbox's user (docs/e2b.md)");
        (void) snprintf(message, sizeof(message), "invalid username: '%s'", user);
        return (stream ? connect_stream_fail : connect_unary_fail)(req, "unauthenticated", message);
}

/* The one message of a streaming call, parsed; 0 when a failure was prepared. */
static int stream_request_parse(HttpRequest *req, json_object **ret) {
        const char *type = req->headers.content_type, *msg;
        size_t n;
        int r;

        if (!type || !startswith(type, CONNECT_STREAM_CONTENT_TYPE))
                return http_request_reply_failure(req, 415, "expected " CONNECT_STREAM_CONTENT_TYPE);
        r = connect_envelope_unwrap(req->body, req->body_size, &msg, &n);
        if (r == -EPROTONOSUPPORT)
                return connect_stream_fail(req, "unimplemented", "compressed messages are not served");
        if (r < 0)
                return connect_stream_fail(req, "invalid_argument", "the body is not one Connect envelope");
        r = json_parse(msg, n, E2B_RPC_DEPTH_MAX, ret);
        if (r < 0 || !json_object_is_type(*ret, json_type_object))
                return connect_stream_fail(req, "invalid_argument", "the message is not a JSON object");
        return 1;
}

/* A streaming call: its message parsed now (the body goes when the handler returns), 'then' once
 * its sandbox is known to run (e2b_if_running_take() gives the message back). */
static int stream_request_begin(HttpRequest *req, HttpHandler then) {
        _cleanup_json_ json_object *msg = NULL;
        char id[SESSION_ID_LEN + 1];
        int r;

        r = e2b_sandbox_of(req, E2B_PORT_ENVD, id);
        if (r <= 0)
                return r;
        r = stream_request_parse(req, &msg);
        if (r <= 0)
                return r;
        return e2b_if_running_keep(req, E2B_PORT_ENVD, then, TAKE_PTR(msg));
}

/* Where a command runs: envd resolves an empty cwd to the home, "~" and relative paths there. */
static int command_cwd(const char *cwd, size_t n, char **ret) {
        if (!cwd || n == 0 || (n == 1 && cwd[0] == '~'))
                return (*ret = strdup(E2B_HOME)) ? 0 : -ENOMEM;
        if (cwd[0] == '~' && cwd[1] == '/')
                return asprintf(ret, E2B_HOME "%.*s", (int) (n - 1), cwd + 1) < 0 ? -ENOMEM : 0;
        if (cwd[0] != '/')
                return asprintf(ret, E2B_HOME "/%.*s", (int) n, cwd) < 0 ? -ENOMEM : 0;
        return (*ret = strndup(cwd, n)) ? 0 : -ENOMEM;
}

static int pack_string(JsonWriter *w, const char *s, size_t n) {
        int r = json_writer_append(w, s, n);

        return r < 0 ? r : json_writer_append(w, "", 1);
}

/* StartRequest.process as exec-command.h packs it, and the config List shows; a message for the
 * client when it is not one. */
static int command_pack(json_object *process, json_object *sandbox_envs, JsonWriter *w,
                        json_object **ret_config, const char **ret_error) {
        _cleanup_json_ json_object *config = NULL;
        _cleanup_free_ char *cwd = NULL;
        const char *cmd, *dir;
        json_object *args = NULL, *envs = NULL;
        size_t n_cmd, n_dir, n_args = 0;
        char count[16];
        int r;

        *ret_error = "process.cmd must be a non-empty string without NUL";
        if (!process || !json_object_is_type(process, json_type_object) ||
            member_string(process, "cmd", &cmd, &n_cmd) <= 0 || n_cmd == 0)
                return -EINVAL;
        *ret_error = "process.cwd must be a string without NUL";
        if (member_string(process, "cwd", &dir, &n_dir) < 0 ||
            n_dir > EXEC_COMMAND_CWD_MAX - strlen(E2B_HOME) - 1)
                return -EINVAL;
        *ret_error = "process.args must be an array of strings without NUL";
        if (json_object_object_get_ex(process, "args", &args) && args) {
                if (!json_object_is_type(args, json_type_array))
                        return -EINVAL;
                n_args = json_object_array_length(args);
                if (n_args >= EXEC_COMMAND_ARGS_MAX)
                        return -EINVAL;
                for (size_t i = 0; i < n_args; i++) {
                        json_object *a = json_object_array_get_idx(args, i);

                        if (!json_object_is_type(a, json_type_string) ||
                            memchr(json_object_get_string(a), 0, (size_t) json_object_get_string_len(a)))
                                return -EINVAL;
                }
        }
        *ret_error = "process.envs must be an object of strings without NUL, names without '='";
        if (json_object_object_get_ex(process, "envs", &envs) && envs &&
            !e2b_envs_valid(envs, EXEC_COMMAND_ENV_MAX - E2B_MAP_ENTRIES_MAX))
                return -EINVAL;
        r = command_cwd(dir, n_dir, &cwd);
        if (r < 0)
                return r;

        (void) snprintf(count, sizeof(count), "%zu", n_args + 1);
        r = pack_string(w, EXEC_COMMAND_MAGIC, strlen(EXEC_COMMAND_MAGIC));
        if (r >= 0)
                r = pack_string(w, cwd, strlen(cwd));
        if (r >= 0)
                r = pack_string(w, count, strlen(count));
        if (r >= 0)
                r = pack_string(w, cmd, n_cmd);
        for (size_t i = 0; r >= 0 && i < n_args; i++) {
                json_object *a = json_object_array_get_idx(args, i);

                r = pack_string(w, json_object_get_string(a), (size_t) json_object_get_string_len(a));
        }
        /* The sandbox's variables, then the command's: a later one replaces an earlier one. */
        if (r >= 0)
                r = e2b_envs_pack(w, sandbox_envs);
        if (r >= 0)
                r = e2b_envs_pack(w, envs);
        if (r < 0)
                return r;

        /* What List shows: the process as asked for, its cwd resolved. */
        config = json_object_new_object();
        if (!config ||
            json_object_object_add(config, "cmd", json_object_new_string_len(cmd, (int) n_cmd)) < 0 ||
            json_object_object_add(config, "args", args ? json_object_get(args) : json_object_new_array()) <
                    0 ||
            json_object_object_add(config, "envs", envs ? json_object_get(envs) : json_object_new_object()) <
                    0 ||
            json_object_object_add(config, "cwd", json_object_new_string(cwd)) < 0)
                return -ENOMEM;
        *ret_config = TAKE_PTR(config);
        return 0;
}

/* Connect-Timeout-Ms (the SDK's timeoutMs; absent or 0: none): at most the longest exec. */
static uint64_t request_timeout_ms(HttpRequest *req) {
        const Config *c = &req->server->config;
        const char *v = req->connection ? MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND,
                                                                      "Connect-Timeout-Ms")
                                        : NULL;
        uint64_t ms = 0;

        if (!v || safe_atou64(v, &ms) < 0 || ms == 0)
                return c->exec_timeout_cap_ms;
        return MIN(ms, c->exec_timeout_cap_ms);
}

static unsigned request_keepalive_sec(HttpRequest *req) {
        const char *v = req->connection ? MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND,
                                                                      "Keepalive-Ping-Interval")
                                        : NULL;
        uint64_t sec = 0;

        if (!v || safe_atou64(v, &sec) < 0 || sec == 0)
                return E2B_KEEPALIVE_DEFAULT_SEC;
        return (unsigned) MIN(sec, (uint64_t) E2B_KEEPALIVE_DEFAULT_SEC);
}

static int process_start_running(HttpRequest *req) {
        _cleanup_json_ json_object *sandbox_envs = NULL, *o = e2b_if_running_take(req, &sandbox_envs),
                                   *config = NULL;
        _cleanup_(json_writer_done) JsonWriter packed = {};
        _cleanup_close_ int fd = -EBADF;
        const char *error = NULL, *tag = NULL;
        json_object *process, *v;
        E2bProcess *p;
        bool with_stdin = true;
        size_t n_tag;
        int r;

        r = request_user_check(req, true);
        if (r <= 0)
                return r;
        if (json_object_object_get_ex(o, "pty", &v) && v)
                return connect_stream_fail(
                        req, "unimplemented",
                        "a PTY is not served by scopebox: commands have pipes (docs/e2b.md)");
        /* As envd: a pipe unless the client says stdin: false (older SDKs send nothing). */
        if (json_object_object_get_ex(o, "stdin", &v) && v) {
                if (!json_object_is_type(v, json_type_boolean))
                        return connect_stream_fail(req, "invalid_argument", "stdin must be a boolean");
                with_stdin = json_object_get_boolean(v);
        }
        if (member_string(o, "tag", &tag, &n_tag) < 0 || n_tag > E2B_TAG_MAX)
                return connect_stream_fail(req, "invalid_argument",
                                           "tag must be a short string without NUL");
        if (!json_object_object_get_ex(o, "process", &process))
                process = NULL;
        r = command_pack(process, sandbox_envs, &packed, &config, &error);
        if (r == -EINVAL)
                return connect_stream_fail(req, "invalid_argument", error);
        if (r < 0)
                return r;
        if (packed.buf.len > req->server->config.max_code_bytes)
                return connect_stream_fail(req, "invalid_argument", "the command is too large");

        fd = memfd_new_data("scopebox-e2b-command", packed.buf.s, packed.buf.len);
        if (fd < 0)
                return fd;
        r = e2b_process_start(req->server, req->session_id, fd, config, tag, request_timeout_ms(req),
                              with_stdin, &p);
        if (r == -EMFILE)
                return connect_stream_fail(req, "resource_exhausted",
                                           "too many processes in this sandbox or this gateway");
        if (r < 0)
                return r;
        http_request_drop_json(req);
        r = e2b_process_subscribe(p, req, request_keepalive_sec(req));
        if (r < 0)
                /* Nobody would see it: it does not run. */
                e2b_process_kill(p);
        return r;
}

/* POST /process.Process/Start: a command, streamed. */
int http_e2b_process_start(HttpRequest *req) {
        return stream_request_begin(req, process_start_running);
}

static int process_connect_running(HttpRequest *req) {
        _cleanup_json_ json_object *o = e2b_if_running_take(req, NULL);
        const char *tag;
        E2bProcess *p;
        uint32_t pid;
        int r;

        if (request_selector(o, &pid, &tag) < 0)
                return connect_stream_fail(req, "invalid_argument",
                                           "process.pid or process.tag is required");
        p = e2b_process_find(req->server, req->session_id, pid, tag);
        if (!p)
                return connect_stream_fail(req, "not_found", "no such process");
        r = e2b_process_subscribe(p, req, request_keepalive_sec(req));
        return r == -EMFILE
                       ? connect_stream_fail(req, "resource_exhausted", "too many clients of this process")
                       : r;
}

/* POST /process.Process/Connect: a running process's events from now on. */
int http_e2b_process_connect(HttpRequest *req) {
        return stream_request_begin(req, process_connect_running);
}

static int process_list_running(HttpRequest *req) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        r = json_writer_append_str(&w, "{\"processes\":[");
        if (r >= 0)
                r = e2b_process_list_append(req->server, req->session_id, &w);
        if (r >= 0)
                r = json_writer_append_str(&w, "]}");
        if (r < 0)
                return r;
        return connect_unary_reply(req, &w);
}

/* POST /process.Process/List. */
int http_e2b_process_list(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, process_list_running);
}

/* The process a unary call names; 0 when a failure was prepared. */
static int unary_process(HttpRequest *req, E2bProcess **ret) {
        const char *tag;
        uint32_t pid;
        int r;

        http_request_free_userdata(req);
        r = request_user_check(req, false);
        if (r <= 0)
                return r;
        if (request_selector(req->json, &pid, &tag) < 0)
                return connect_unary_fail(req, "invalid_argument", "process.pid or process.tag is required");
        *ret = e2b_process_find(req->server, req->session_id, pid, tag);
        if (!*ret)
                return connect_unary_fail(req, "not_found", "no such process");
        return 1;
}

static int process_signal_running(HttpRequest *req) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        const char *signal;
        E2bProcess *p;
        size_t n;
        int r;

        r = unary_process(req, &p);
        if (r <= 0)
                return r;
        if (member_string(req->json, "signal", &signal, &n) <= 0 ||
            !(streq(signal, "SIGNAL_SIGKILL") || streq(signal, "SIGNAL_SIGTERM")))
                return connect_unary_fail(req, "invalid_argument",
                                          "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        /* Either ends every process of the command's sandbox (docs/e2b.md). */
        e2b_process_kill(p);
        r = json_writer_append_str(&w, "{}");
        return r < 0 ? r : connect_unary_reply(req, &w);
}

/* POST /process.Process/SendSignal. */
int http_e2b_process_signal(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, process_signal_running);
}

static int process_input_running(HttpRequest *req) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        _cleanup_free_ void *data = NULL;
        json_object *input = NULL;
        const char *text;
        E2bProcess *p;
        size_t n, size;
        int r;

        r = unary_process(req, &p);
        if (r <= 0)
                return r;
        if (!json_object_object_get_ex(req->json, "input", &input) ||
            !json_object_is_type(input, json_type_object))
                return connect_unary_fail(req, "invalid_argument", "input is required");
        if (json_object_object_get_ex(input, "pty", NULL))
                return connect_unary_fail(req, "unimplemented",
                                          "a PTY is not served by scopebox (docs/e2b.md)");
        if (member_string(input, "stdin", &text, &n) < 0 || base64_decode(text ?: "", n, &data, &size) < 0)
                return connect_unary_fail(req, "invalid_argument", "input.stdin must be base64");
        r = e2b_process_write_stdin(p, data, size);
        if (r == -ENOTCONN)
                return connect_unary_fail(req, "failed_precondition", "stdin not enabled or closed");
        if (r == -ENOBUFS)
                return connect_unary_fail(req, "resource_exhausted",
                                          "the command has not read 1 MiB of earlier input yet");
        if (r < 0)
                return r;
        r = json_writer_append_str(&w, "{}");
        return r < 0 ? r : connect_unary_reply(req, &w);
}

/* POST /process.Process/SendInput: bytes for a command's stdin. */
int http_e2b_process_input(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, process_input_running);
}

static int process_close_stdin_running(HttpRequest *req) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        E2bProcess *p;
        int r;

        r = unary_process(req, &p);
        if (r <= 0)
                return r;
        r = e2b_process_close_stdin(p);
        if (r == -ENOTCONN)
                return connect_unary_fail(req, "failed_precondition", "stdin not enabled or closed");
        if (r < 0)
                return r;
        r = json_writer_append_str(&w, "{}");
        return r < 0 ? r : connect_unary_reply(req, &w);
}

/* POST /process.Process/CloseStdin: the command reads the end of its input once it read the rest. */
int http_e2b_process_close_stdin(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, process_close_stdin_running);
}

static int process_unimplemented_running(HttpRequest *req) {
        http_request_free_userdata(req);
        return connect_unary_fail(
                req, "unimplemented",
                "not served by scopebox: commands have no PTY, and stdin comes by SendInput (docs/e2b.md)");
}

/* POST /process.Process/Update, /StreamInput: a PTY's and a client stream's. */
int http_e2b_process_unimplemented(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, process_unimplemented_running);
}
