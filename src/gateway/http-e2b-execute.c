/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The code interpreter's POST /execute (docs/e2b.md, port 49999 of a sandbox): a cell of the
 * sandbox's stateful kernel, run with the Exec option "display", answered as E2B's newline-delimited
 * JSON while it runs: stdout and stderr as they come, the kernel's result records (checked here:
 * they come from the sandbox), then the end. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "exec-command.h"
#include "exec-reply.h"
#include "http-e2b.h"
#include "http-exec-stream.h"
#include "http-request.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "stream-frame.h"
#include "string-util.h"
#include "time-util.h"

/* The record types the kernel may send: anything else from the sandbox is dropped. */
static const char *const e2b_record_types[] = { "result", "error", "number_of_executions" };
/* How deep a record's JSON may nest (a result's "json" is the cell's value). */
#define E2B_RECORD_DEPTH_MAX 64

static int e2b_append_timestamp(JsonWriter *w) {
        struct timespec ts;
        struct tm tm;
        time_t t;

        (void) clock_gettime(CLOCK_REALTIME, &ts);
        t = ts.tv_sec;
        if (!gmtime_r(&t, &tm))
                return -EINVAL;
        return json_writer_appendf(w, "\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\"", tm.tm_year + 1900,
                                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                                   ts.tv_nsec / 1000000);
}

static int e2b_execute_output(JsonWriter *w, unsigned which, const uint8_t *text, size_t n) {
        int r;

        r = json_writer_append_str(w, which == STREAM_FRAME_STDOUT ? "{\"type\":\"stdout\",\"text\":"
                                                                   : "{\"type\":\"stderr\",\"text\":");
        if (r >= 0)
                r = json_writer_append_string_lossy(w, (const char *) text, n);
        if (r >= 0)
                r = json_writer_append_str(w, ",\"timestamp\":");
        if (r >= 0)
                r = e2b_append_timestamp(w);
        if (r >= 0)
                r = json_writer_append_str(w, "}\n");
        return r;
}

/* A record is at most this long here (the runner lets through 16 MiB): checking a line costs the
 * event loop about 2 ms per MiB. Longer ones are skipped unread and the cell's stderr says so. */
#define E2B_RECORD_MAX (4U * 1024U * 1024U)
/* Up to this size a record is parsed and written out anew; a longer one (a picture) is checked
 * strictly and passed on as it came. */
#define E2B_RECORD_REWRITE_MAX (64U * 1024U)
/* How the kernel begins a picture's record (json.dumps of {"type": "result", ...}). */
#define E2B_RESULT_PREFIX "{\"type\": \"result\", "

/* One line of the kernel's records: passed on only as one JSON object of a known type, so that
 * nothing but one line of JSON reaches the client whatever the sandbox sent. */
static int e2b_execute_record(JsonWriter *w, const uint8_t *line, size_t n) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        const char *text, *type;
        json_object *t;
        bool known = false;

        if (n == 0 || line[n - 1] != '\n')
                return 0;
        n--;
        /* Large: strictly valid (no raw newline, no NUL, no duplicate key, so no second "type"),
         * and a result by its first member. */
        if (n > E2B_RECORD_REWRITE_MAX) {
                if (n < strlen(E2B_RESULT_PREFIX) ||
                    memcmp(line, E2B_RESULT_PREFIX, strlen(E2B_RESULT_PREFIX)) != 0 ||
                    json_validate_strict_limits((const char *) line, n,
                                                &(JsonLimits) { .depth_max = E2B_RECORD_DEPTH_MAX,
                                                                .members_max = E2B_RECORD_MAX,
                                                                .tokens_max = E2B_RECORD_MAX }) < 0)
                        return 0;
                return json_writer_append(w, (const char *) line, n + 1);
        }
        /* Small: one strict JSON object (json-strict.c) of a known type, written anew. */
        if (json_parse((const char *) line, n, E2B_RECORD_DEPTH_MAX, &o) < 0 ||
            !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "type", &t) ||
            !json_object_is_type(t, json_type_string))
                return 0;
        type = json_object_get_string(t);
        for (size_t i = 0; i < ELEMENTSOF(e2b_record_types); i++)
                known = known || streq(type, e2b_record_types[i]);
        if (!known)
                return 0;
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (!text)
                return -ENOMEM;
        return json_writer_append(w, text, strlen(text)) < 0 ? -ENOMEM : json_writer_append(w, "\n", 1);
}

static const ExecStreamFormat e2b_execute_format = {
        .content_type = "application/x-ndjson",
        .output = e2b_execute_output,
        .record = e2b_execute_record,
        .record_max = E2B_RECORD_MAX + 1,
        .keepalive_sec = 5,
        .keepalive = "{\"type\":\"keepalive\"}\n",
};

typedef struct E2bExecute {
        ExecSse *stream;
        uint64_t timeout_ms;
} E2bExecute;

static void e2b_execute_free(void *p) {
        E2bExecute *x = p;

        if (!x)
                return;
        exec_sse_detach(x->stream);
        exec_sse_unref(x->stream);
        free(x);
}

static int e2b_reply_text(HttpRequest *req, unsigned status, const char *text) {
        HttpResponse *r = NULL;
        char *copy = strdup(text);
        int k = copy ? http_response_new_take(status, copy, strlen(text), &r) : -ENOMEM;

        if (k >= 0)
                r->content_type = "text/plain; charset=utf-8";
        return http_request_reply_made(req, k, r);
}

static int e2b_execute_on_reply(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(exec_info_done) ExecInfo info = {};
        _cleanup_(json_writer_done) JsonWriter w = {};
        E2bExecute *x = req->userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        int r, fd;

        if (e) {
                /* No sandbox, or one without a kernel (template "base"): nothing listens on the port. */
                if (sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED,
                                           SD_BUS_ERROR_INVALID_ARGS) &&
                    !exec_sse_started(x->stream))
                        return e2b_reply_text(req, HTTP_BAD_GATEWAY, "sandbox not running");
                if (!exec_sse_started(x->stream))
                        return http_request_reply_call_error(
                                req, e, bus_timeout_exec_usec(&req->server->config, x->timeout_ms),
                                http_response_new_bus_error);
                r = json_writer_append_str(&w, "{\"type\":\"error\",\"name\":\"SandboxError\",\"value\":");
                if (r >= 0)
                        r = json_writer_append_string_lossy(&w, e->name, strlen(e->name));
                if (r >= 0)
                        r = json_writer_append_str(
                                &w, ",\"traceback\":\"\"}\n{\"type\":\"end_of_execution\"}\n");
        } else {
                /* The exec's info, as /exec reads it (the output came on the stream). */
                r = sd_bus_message_skip(reply, "itta(stt)");
                if (r >= 0)
                        r = exec_reply_read_info(reply, &info, &fd);
                if (r < 0)
                        return r;
                /* The cell ended the interpreter (a timeout, a signal, the memory limit): as the
                 * notebook shows a dead kernel. */
                if (info.kernel && streq(info.kernel, "ended")) {
                        char value[256];

                        (void) snprintf(value, sizeof(value),
                                        "the interpreter ended (%s); the next cell starts a fresh one",
                                        info.exit_reason ?: "killed");
                        r = json_writer_appendf(&w, "{\"type\":\"error\",\"name\":\"%s\",\"value\":",
                                                info.timed_out ? "TimeoutError" : "KernelDied");
                        if (r >= 0)
                                r = json_writer_append_string_lossy(&w, value, strlen(value));
                        if (r >= 0)
                                r = json_writer_append_str(&w, ",\"traceback\":\"\"}\n");
                }
                /* Results the cell made that did not reach the client, as a line of its stderr. */
                if (r >= 0 && exec_stream_records_left_out(x->stream) > 0) {
                        r = json_writer_appendf(
                                &w,
                                "{\"type\":\"stderr\",\"text\":\"[sandbox] %u result(s) "
                                "over %u MiB or past the cell's bound were left out\\n\",\"timestamp\":",
                                exec_stream_records_left_out(x->stream), E2B_RECORD_MAX >> 20);
                        if (r >= 0)
                                r = e2b_append_timestamp(&w);
                        if (r >= 0)
                                r = json_writer_append_str(&w, "}\n");
                }
                if (r >= 0)
                        r = json_writer_append_str(&w, "{\"type\":\"end_of_execution\"}\n");
        }
        if (r < 0)
                return r;
        return exec_stream_finish_text(x->stream, w.buf.s, w.buf.len);
}

/* The cell as the kernel takes it: with the variables of the sandbox (its create's envVars), then
 * the cell's own (env_vars), as an environment block before the code (docs/dbus-api.md "Exec":
 * the kernel sets them for the cell and puts the environment back after it). */
static int e2b_cell_code(json_object *code, json_object *sandbox_envs, json_object *cell_envs) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r = 0;

        if (sandbox_envs || cell_envs) {
                r = json_writer_append(&w, KERNEL_ENV_MAGIC, sizeof(KERNEL_ENV_MAGIC));
                if (r >= 0)
                        r = e2b_envs_pack(&w, sandbox_envs);
                if (r >= 0)
                        r = e2b_envs_pack(&w, cell_envs);
                if (r >= 0)
                        r = json_writer_append(&w, "", 1);
        }
        if (r >= 0)
                r = json_writer_append(&w, json_object_get_string(code),
                                       (size_t) json_object_get_string_len(code));
        if (r < 0)
                return r;
        return memfd_new_data("scopebox-exec-code", w.buf.s, w.buf.len);
}

static int e2b_execute_running(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_json_ json_object *sandbox_envs = NULL;
        _cleanup_close_ int fd = -EBADF, stream_fd = -EBADF;
        _cleanup_(exec_sse_unrefp) ExecSse *stream = NULL;
        const Config *c = &req->server->config;
        json_object *code, *envs = NULL;
        E2bExecute *x;
        int r;

        (void) e2b_if_running_take(req, &sandbox_envs);
        (void) json_object_object_get_ex(req->json, "code", &code);
        if (!json_object_object_get_ex(req->json, "env_vars", &envs) || json_object_object_length(envs) == 0)
                envs = NULL;
        fd = e2b_cell_code(code, sandbox_envs, envs);
        if (fd < 0)
                return fd;
        r = exec_stream_new(req, &e2b_execute_format, &stream, &stream_fd);
        if (r < 0)
                return r;

        /* A cell runs until it is done, as long as the longest exec may: E2B has no server-side
         * limit, its clients give up on their own. */
        r = session_manager_new_call(req->server->bus, "Exec", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sh", req->session_id, fd);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}", "timeout_ms", "t",
                                          c->exec_timeout_cap_ms, "language", "s", "python3", "stream", "h",
                                          stream_fd, "display", "b", 1, "interrupt", "b", 1);
        if (r < 0)
                return r;

        x = http_request_new_userdata(req, sizeof(E2bExecute), e2b_execute_free);
        if (!x)
                return -ENOMEM;
        *x = (E2bExecute) { .stream = TAKE_PTR(stream), .timeout_ms = c->exec_timeout_cap_ms };
        http_request_drop_json(req);

        /* A client that hangs up ends the cell (docs/e2b.md). */
        return http_request_call_until_hangup(req, m, bus_timeout_exec_usec(c, x->timeout_ms),
                                              e2b_execute_on_reply);
}

/* POST /execute {"code", "context_id"?, "language"?, "env_vars"?}: checked now, run once the
 * sandbox is known to run (its record has its environment). */
int http_e2b_execute(HttpRequest *req) {
        const Config *c = &req->server->config;
        json_object *code, *v;

        if (!req->json || !json_object_is_type(req->json, json_type_object) ||
            !json_object_object_get_ex(req->json, "code", &code) ||
            !json_object_is_type(code, json_type_string))
                return e2b_reply_text(req, HTTP_BAD_REQUEST, "code must be a string");
        if (json_object_object_get_ex(req->json, "language", &v) && v &&
            !(json_object_is_type(v, json_type_string) &&
              (streq(json_object_get_string(v), "python") || streq(json_object_get_string(v), ""))))
                return e2b_reply_text(req, HTTP_BAD_REQUEST,
                                      "only python is served (docs/e2b.md): no other language context");
        if (json_object_object_get_ex(req->json, "context_id", &v) && v &&
            !(json_object_is_type(v, json_type_string) &&
              streq(json_object_get_string(v), E2B_CONTEXT_DEFAULT)))
                return e2b_reply_text(req, HTTP_NOT_FOUND, "context not found");
        if (json_object_object_get_ex(req->json, "env_vars", &v) && v &&
            !e2b_envs_valid(v, KERNEL_ENV_MAX - E2B_MAP_ENTRIES_MAX))
                return e2b_reply_text(
                        req, HTTP_BAD_REQUEST,
                        "env_vars must be an object of strings without NUL, names without '='");
        if ((uint64_t) json_object_get_string_len(code) > c->max_code_bytes)
                return e2b_reply_text(req, HTTP_PAYLOAD_TOO_LARGE, "code too large");
        return e2b_if_running(req, E2B_PORT_JUPYTER, e2b_execute_running);
}

/* ---- contexts: one per sandbox, its kernel ---- */

static int e2b_context_json(HttpRequest *req, bool array) {
        const char *one =
                "{\"id\":\"" E2B_CONTEXT_DEFAULT "\",\"language\":\"python\",\"cwd\":\"/workspace\"}";
        char body[128];

        (void) snprintf(body, sizeof(body), array ? "[%s]" : "%s", one);
        return http_request_reply_literal(req, HTTP_OK, body);
}

static int e2b_contexts_list_running(HttpRequest *req) {
        return e2b_context_json(req, true);
}

/* GET /contexts: the sandbox's one context. */
int http_e2b_contexts_list(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_JUPYTER, e2b_contexts_list_running);
}

static int e2b_contexts_refuse_running(HttpRequest *req) {
        return e2b_reply_text(req, HTTP_BAD_REQUEST,
                              "scopebox serves one python context per sandbox, \"" E2B_CONTEXT_DEFAULT
                              "\" (docs/e2b.md)");
}

/* POST /contexts, DELETE /contexts/{id}: a sandbox has its one interpreter. */
int http_e2b_contexts_refuse(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_JUPYTER, e2b_contexts_refuse_running);
}

static int e2b_context_restart_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e && sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED))
                return e2b_reply_not_running(req);
        if (e)
                return http_request_reply_ok_or_call_error(req, reply,
                                                           bus_timeout_session_usec(&req->server->config));
        return e2b_context_json(req, false);
}

/* POST /contexts/{id}/restart: the kernel ends; the next cell starts a fresh one. */
int http_e2b_context_restart(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        char id[SESSION_ID_LEN + 1];
        int r;

        r = e2b_sandbox_of(req, E2B_PORT_JUPYTER, id);
        if (r <= 0)
                return r;
        if (!startswith(req->path_arg, E2B_CONTEXT_DEFAULT "/"))
                return e2b_reply_text(req, HTTP_NOT_FOUND, "context not found");
        r = session_manager_new_call(req->server->bus, "ResetKernel", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", id);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config),
                                 e2b_context_restart_on_reply);
}
