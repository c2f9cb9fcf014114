/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /exec: run code in a session and return its output and artifacts. */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "bus-client.h"
#include "http-apis.h"
#include "http-body.h"
#include "http-exec.h"
#include "http-exec-stream.h"
#include "http-router.h"
#include "http-stream.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "mime.h"
#include "string-util.h"

static const JsonField exec_body_fields[] = {
        BODY_SESSION_ID, BODY_CODE, BODY_TIMEOUT_MS, BODY_REPORT, BODY_STREAM, {}
};

uint64_t exec_timeout_effective(bool given, int64_t timeout_ms, uint64_t cap_ms) {
        uint64_t t;

        if (!given || timeout_ms == 0)
                t = BUS_EXEC_TIMEOUT_DEFAULT_MS;
        else if (timeout_ms < 0)
                t = BUS_EXEC_TIMEOUT_MIN_MS;
        else
                t = (uint64_t) timeout_ms;

        /* The cap wins over the minimum if an operator configured it lower. */
        return MIN(MAX(t, (uint64_t) BUS_EXEC_TIMEOUT_MIN_MS),
                   MAX(cap_ms, (uint64_t) BUS_EXEC_TIMEOUT_MIN_MS));
}

int exec_request_parse(json_object *body, const Config *config, ExecRequest *ret, HttpResponse **ret_error) {
        json_object *stream_member = NULL;
        SidecarBody b = {};
        size_t code_size;
        int r;

        assert(config);
        assert(ret);
        assert(ret_error);

        r = sidecar_body_read(body, exec_body_fields, &b, ret_error);
        if (r > 0)
                r = sidecar_body_check_session_id(body, &b, ret_error);
        if (r <= 0)
                return r < 0 ? r : -EINVAL;

        /* Counted in UTF-8 bytes, as received (json_parse() accepted only valid UTF-8). */
        code_size = json_member_string_length(body, "code");
        if (code_size > config->max_code_bytes) {
                r = http_response_new_detail(HTTP_PAYLOAD_TOO_LARGE, "code too large", ret_error);
                return r < 0 ? r : -EFBIG;
        }

        /* C strings downstream would run only what comes before it. */
        if (memchr(b.code, 0, code_size)) {
                r = http_response_new_detail(HTTP_BAD_REQUEST, "code contains a NUL byte", ret_error);
                return r < 0 ? r : -EINVAL;
        }

        /* A JSON null counts as absent. */
        (void) json_object_object_get_ex(body, "stream", &stream_member);
        *ret = (ExecRequest) {
                .session_id = b.session_id,
                .code = b.code,
                .code_size = code_size,
                .timeout_ms = exec_timeout_effective(json_object_object_get_ex(body, "timeout_ms", NULL),
                                                     b.timeout_ms, config->exec_timeout_cap_ms),
                .report = b.report,
                .stream = b.stream,
                .stream_given = stream_member != NULL,
        };
        return 0;
}

static const char *exec_file_name(const char *path) {
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

int exec_result_validate(const ExecResult *result, size_t data_size) {
        uint64_t streams, artifacts = 0;

        assert(result);

        if (result->stdout_size > data_size || result->stderr_size > data_size - result->stdout_size)
                return -EBADMSG;
        streams = result->stdout_size + result->stderr_size;

        if (result->n_files > BUS_EXEC_FILES_MAX || (result->n_files > 0 && !result->files))
                return -EBADMSG;

        for (size_t i = 0; i < result->n_files; i++) {
                const ExecFile *f = &result->files[i];

                if (isempty(f->path) || !utf8_is_valid_n(f->path, strlen(f->path)) ||
                    isempty(exec_file_name(f->path)))
                        return -EBADMSG;
                /* Artifacts live after the two streams, inside the buffer... */
                if (f->offset < streams || f->offset > data_size || f->size > data_size - f->offset)
                        return -EBADMSG;
                /* ...and do not share bytes: overlapping ranges could multiply a small buffer into
                 * an enormous response. */
                artifacts += f->size;
                if (artifacts > data_size - streams)
                        return -EBADMSG;
        }

        return 0;
}

/* The notes that follow a stream's text: the raw bytes are sent as they are (made valid UTF-8),
 * the notes composed here. */
typedef struct ExecText {
        const uint8_t *raw;
        size_t raw_size;
        JsonWriter notes;
} ExecText;

static void exec_text_done(ExecText *t) {
        json_writer_done(&t->notes);
}

/* Notes go on a line of their own. The raw text ends in a newline exactly when its last byte is
 * one: the UTF-8 repair replaces only bytes of 0x80 and above. */
static const char *exec_note_separator(const ExecText *t) {
        if (t->notes.buf.len > 0)
                return t->notes.buf.s[t->notes.buf.len - 1] != '\n' ? "\n" : "";
        return t->raw_size > 0 && t->raw[t->raw_size - 1] != '\n' ? "\n" : "";
}

static int exec_compose_stdout(const ExecResult *result, const uint8_t *data, const Config *config,
                               ExecText *ret) {
        ret->raw = data;
        ret->raw_size = result->stdout_size;
        if (result->stdout_truncated)
                return json_writer_appendf(&ret->notes, "\n... [truncated, stdout exceeded %" PRIu64 "KB]",
                                           config->max_output_bytes / 1024);
        return 0;
}

static int exec_compose_stderr(const ExecResult *result, const uint8_t *data, const Config *config,
                               ExecText *ret) {
        JsonWriter *w = &ret->notes;
        int r = 0;

        ret->raw = data + result->stdout_size;
        ret->raw_size = result->stderr_size;

        if (result->stderr_truncated) {
                r = json_writer_appendf(w, "\n... [truncated, stderr exceeded %" PRIu64 "KB]",
                                        config->max_output_bytes / 1024);
                if (r < 0)
                        return r;
        }

        if (result->timed_out) {
                /* {seconds:.3f} without floating point: the timeout is whole milliseconds. */
                r = json_writer_appendf(w, "\n[sandbox] execution exceeded %" PRIu64 ".%03" PRIu64 "s "
                                        "and was killed",
                                        result->timeout_ms / 1000, result->timeout_ms % 1000);
                if (r < 0)
                        return r;
        }

        /* Say why the code failed when the sandbox refused something; a refusal the code coped
         * with stays out of its stderr (the structured fields still list it). */
        if (result->signal == SIGSYS && !result->timed_out)
                r = json_writer_appendf(w, "%s[sandbox] killed: the code made a system call that is never "
                                        "allowed in the sandbox (SIGSYS)", exec_note_separator(ret));
        else if (result->n_blocked > 0 && result->exit_code != 0 && !result->timed_out) {
                r = json_writer_appendf(w, "%s[sandbox] the sandbox refused these system calls: ",
                                        exec_note_separator(ret));
                for (size_t i = 0; r >= 0 && i < result->n_blocked; i++)
                        r = json_writer_appendf(w, "%s%s (%s)", i > 0 ? ", " : "", result->blocked[i].name,
                                                result->blocked[i].verdict);
        }
        if (r < 0)
                return r;

        if (exec_report_cancelled(&result->report)) {
                r = json_writer_appendf(w, "%s[sandbox] execution was cancelled", exec_note_separator(ret));
                if (r < 0)
                        return r;
        }

        if (result->files_skipped > 0) {
                const char *sep = exec_note_separator(ret);

                /* After a note that ended in a newline, or at the very start, no extra line. */
                r = json_writer_appendf(w, "%s[sandbox] skipped %" PRIu32 " output file(s) because "
                                        "artifact limits are %" PRIu64 " files, %" PRIu64 " bytes per file, "
                                        "%" PRIu64 " bytes total", sep,
                                        result->files_skipped, config->max_files_per_exec,
                                        config->max_artifact_bytes, config->max_total_artifact_bytes);
                if (r < 0)
                        return r;
        }

        return 0;
}

/* "<text>" as a JSON string: the raw bytes streamed, then the notes. */
static int exec_stream_text(HttpStream *s, const ExecText *t) {
        (void) http_stream_append(s, "\"", 1);
        (void) http_stream_append_text_lossy(s, t->raw, t->raw_size);
        (void) http_stream_append_text_lossy(s, t->notes.buf.s ?: "", t->notes.buf.len);
        return http_stream_append(s, "\"", 1);
}

static int exec_append_usage(HttpStream *s, const char *name, uint64_t v, uint64_t divisor, bool first) {
        if (v == EXEC_USAGE_UNKNOWN)
                return http_stream_appendf(s, "%s\"%s\":null", first ? "" : ",", name);
        return http_stream_appendf(s, "%s\"%s\":%" PRIu64, first ? "" : ",", name, v / divisor);
}

void exec_report_from_info(ExecReport *ret, const ExecInfo *info, bool wanted) {
        *ret = (ExecReport) {
                .wanted = wanted,
                .exit_reason = info->exit_reason,
                .kernel = info->kernel,
                .wall_usec = info->duration_usec,
                .cpu_usec = info->cpu_usec,
                .max_rss_bytes = info->max_rss_bytes,
                .written_bytes = info->written_bytes,
                .processes = info->processes,
        };
}

bool exec_report_cancelled(const ExecReport *r) {
        return r->exit_reason && streq(r->exit_reason, "cancelled");
}

/* Only for a client that asked (or cancelled), so that the peers' clients get their bytes.
 * Numbers are whole; what was not measured is null. */
int exec_report_append(HttpStream *s, const ExecReport *r) {
        /* Stateful sessions only: what became of the kernel. Both strings are words the reply's
         * decoder (exec-reply.c) checked against the contract. */
        if (r->kernel)
                (void) http_stream_appendf(s, ",\"kernel\":\"%s\"", r->kernel);
        if (r->exit_reason && (r->wanted || exec_report_cancelled(r)))
                (void) http_stream_appendf(s, ",\"exit_reason\":\"%s\"", r->exit_reason);
        if (r->wanted) {
                (void) http_stream_append_str(s, ",\"resources\":{");
                (void) exec_append_usage(s, "cpu_ms", r->cpu_usec, USEC_PER_MSEC, true);
                (void) exec_append_usage(s, "wall_ms", r->wall_usec, USEC_PER_MSEC, false);
                (void) exec_append_usage(s, "max_rss_bytes", r->max_rss_bytes, 1, false);
                (void) exec_append_usage(s, "written_bytes", r->written_bytes, 1, false);
                (void) exec_append_usage(s, "processes", r->processes, 1, false);
                (void) http_stream_append_str(s, "}");
        }
        return http_stream_error(s);
}

int exec_result_compose(const ExecResult *result, const void *data, size_t data_size, const Config *config,
                        const MimeTypes *mime_types, HttpResponse **ret) {
        _cleanup_(exec_text_done) ExecText out_text = {}, err_text = {};
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        const uint8_t *d = data ?: (const void *) "";
        int r;

        assert(result);
        assert(data || data_size == 0);
        assert(config);
        assert(ret);

        r = exec_result_validate(result, data_size);
        if (r < 0)
                return r;

        r = exec_compose_stdout(result, d, config, &out_text);
        if (r < 0)
                return r;
        r = exec_compose_stderr(result, d, config, &err_text);
        if (r < 0)
                return r;

        /* Artifacts are base64-encoded as they are sent, from the reply's memfd. */
        r = http_stream_new(&s);
        if (r < 0)
                return r;
        /* Appends stop at the first failure; checked once below. */
        (void) http_stream_append_str(s, "{\"stdout\":");
        (void) exec_stream_text(s, &out_text);
        (void) http_stream_append_str(s, ",\"stderr\":");
        (void) exec_stream_text(s, &err_text);
        (void) http_stream_appendf(s, ",\"exit_code\":%" PRIi32 ",\"files\":[",
                                   result->timed_out ? 124 : result->exit_code);
        for (size_t i = 0; i < result->n_files; i++) {
                const ExecFile *f = &result->files[i];
                const char *name = exec_file_name(f->path), *mime = mime_type_from_name(mime_types, name);

                (void) http_stream_append_str(s, i > 0 ? ",{\"name\":\"" : "{\"name\":\"");
                (void) http_stream_append_text_lossy(s, name, strlen(name));
                (void) http_stream_append_str(s, "\",\"mime_type\":\"");
                (void) http_stream_append_text_lossy(s, mime, strlen(mime));
                (void) http_stream_append_str(s, "\",\"data_base64\":");
                (void) http_stream_append_base64(s, d + f->offset, (size_t) f->size);
                (void) http_stream_append_str(s, "}");
        }
        (void) http_stream_append_str(s, "]");
        for (size_t i = 0; i < result->n_blocked; i++) {
                const ExecBlocked *b = &result->blocked[i];

                (void) http_stream_append_str(s, i > 0 ? ",{\"name\":\""
                                                       : ",\"blocked_syscalls\":[{\"name\":\"");
                (void) http_stream_append_text_lossy(s, b->name, strlen(b->name));
                (void) http_stream_append_str(s, "\",\"verdict\":\"");
                (void) http_stream_append_text_lossy(s, b->verdict, strlen(b->verdict));
                (void) http_stream_appendf(s, "\",\"count\":%" PRIu32 "}", b->count);
        }
        if (result->n_blocked > 0)
                (void) http_stream_append_str(s, "]");
        (void) exec_report_append(s, &result->report);
        (void) http_stream_append_str(s, "}");
        r = http_stream_error(s);
        if (r < 0)
                return r;

        return http_response_new_stream(HTTP_OK, TAKE_PTR(s), ret);
}

typedef struct ExecContext {
        uint64_t timeout_ms;
        bool report;
        ExecSse *sse;      /* a streamed exec */
} ExecContext;

static void exec_context_free(void *p) {
        ExecContext *ctx = p;

        if (!ctx)
                return;
        exec_sse_detach(ctx->sse);
        exec_sse_unref(ctx->sse);
        free(ctx);
}

/* The answer to a failed Exec(). */
static int exec_reply_bus_error(HttpRequest *req, const sd_bus_error *e) {
        const ExecContext *ctx = req->userdata;

        uint64_t timeout = bus_timeout_exec_usec(&req->server->config, ctx->timeout_ms);

        return http_request_reply_call_error(req, e, timeout, http_response_new_bus_error);
}

/* A streamed exec that failed once its events began: the error is the last event. */
static int exec_reply_sse_error(HttpRequest *req, ExecSse *sse, int error, const sd_bus_error *e) {
        HttpResponse *resp;
        int r;

        if (e)
                r = exec_reply_bus_error(req, e);
        else {
                log_warning_errno(error, "Failed to compose a streamed exec result: %m");
                r = http_request_reply_detail(req, HTTP_INTERNAL_SERVER_ERROR, "internal error");
        }
        if (r < 0 || !req->response)
                return r < 0 ? r : -ENOMEM;
        resp = TAKE_PTR(req->response);
        return exec_sse_fail(sse, resp);
}

static int exec_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const Config *config = &req->server->config;
        _cleanup_(bus_data_done) BusData data = {};
        _cleanup_free_ ExecFile *files = NULL;
        const ExecContext *ctx = req->userdata;
        const sd_bus_error *e;
        HttpResponse *resp;
        ExecResult result = {};
        _cleanup_(exec_info_done) ExecInfo info = {};
        uint64_t max;
        int fd, r;

        e = sd_bus_message_get_error(reply);
        if (e && exec_sse_started(ctx->sse))
                return exec_reply_sse_error(req, ctx->sse, 0, e);
        if (e)
                return exec_reply_bus_error(req, e);

        r = sd_bus_message_read(reply, "itt", &result.exit_code, &result.stdout_size, &result.stderr_size);
        if (r < 0)
                return r;
        r = exec_reply_read_files(reply, &files, &result.n_files);
        if (r < 0)
                return r;
        result.files = files;
        r = exec_reply_read_info(reply, &info, &fd);
        if (r < 0)
                return r;

        result.timed_out = info.timed_out;
        result.stdout_truncated = info.stdout_truncated;
        result.stderr_truncated = info.stderr_truncated;
        result.files_skipped = info.files_skipped;
        result.timeout_ms = ctx->timeout_ms;
        result.blocked = info.blocked.items;
        result.n_blocked = info.blocked.n;
        result.signal = info.signal;
        exec_report_from_info(&result.report, &info, ctx->report);

        max = exec_reply_data_max(config);
        r = bus_data_load(fd, max, &data);
        if (r < 0)
                return r;

        log_debug("Exec in session %s finished: exit code %" PRIi32 ", %" PRIu64 " ms, %zu artifacts.",
                  req->session_id, result.exit_code, info.duration_usec / USEC_PER_MSEC, result.n_files);

        r = exec_result_compose(&result, data.data, data.size, config, req->server->mime_types, &resp);
        if (r < 0)
                return r;
        /* The body points into the memfd's mapping: it lives as long as the body is sent. */
        http_stream_hold(resp->stream, &data);
        if (ctx->sse)
                return exec_sse_finish(ctx->sse, resp);
        return http_request_reply(req, resp);
}

static int exec_on_reply_maybe_streamed(HttpRequest *req, sd_bus_message *reply) {
        const ExecContext *ctx = req->userdata;
        int r;

        r = exec_on_reply(req, reply);
        if (r < 0 && exec_sse_started(ctx->sse) && !req->response)
                return exec_reply_sse_error(req, ctx->sse, r, NULL);
        return r;
}

/* The client asked for events: "stream": true, or no "stream" member and text/event-stream in Accept. */
static bool exec_wants_stream(HttpRequest *req, const ExecRequest *x) {
        const char *accept;

        if (x->stream_given)
                return x->stream;
        if (!req->connection)
                return false;
        accept = MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
        return accept && http_accept_event_stream(accept, strlen(accept));
}

int http_exec_post(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = -EBADF, stream = -EBADF;
        _cleanup_(exec_sse_unrefp) ExecSse *sse = NULL;
        ExecContext *ctx;
        HttpResponse *error;
        ExecRequest x = {};
        int r;

        r = exec_request_parse(req->json, &req->server->config, &x, &error);
        if (r < 0)
                return error ? http_request_reply(req, error) : r;
        http_request_set_session_id(req, x.session_id);

        /* The code crosses the bus as a sealed memfd, not as a megabyte string. */
        fd = memfd_new_data("scopebox-exec-code", x.code, x.code_size);
        if (fd < 0)
                return fd;

        r = session_manager_new_call(req->server->bus, "Exec", &m);
        if (r < 0)
                return r;
        r = sd_bus_message_append(m, "sh", x.session_id, fd);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}", "timeout_ms", "t", x.timeout_ms,
                                          "language", "s", "python3");
        if (r < 0)
                return r;
        if (exec_wants_stream(req, &x)) {
                r = exec_sse_new(req, &sse, &stream);
                if (r < 0)
                        return r;
                r = sd_bus_message_append(m, "{sv}", "stream", "h", stream);
                if (r < 0)
                        return r;
        }

        ctx = http_request_new_userdata(req, sizeof(ExecContext), exec_context_free);
        if (!ctx)
                return -ENOMEM;
        *ctx = (ExecContext) { .timeout_ms = x.timeout_ms, .report = x.report, .sse = TAKE_PTR(sse) };

        /* The code is in its memory file now: while the exec waits for its session or a slot, the
         * request holds no second copy of it. */
        x.session_id = x.code = NULL;
        http_request_drop_json(req);

        /* The exec ends when its client hangs up. */
        return http_request_call_until_hangup(req, m, bus_timeout_exec_usec(&req->server->config,
                                                                            ctx->timeout_ms),
                                              exec_on_reply_maybe_streamed);
}

static const JsonField cancel_body_fields[] = { BODY_SESSION_ID, {} };

static int exec_cancel_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return http_request_reply_ok_or_call_error(req, reply, BUS_TIMEOUT_SHORT_USEC);
}

int http_exec_cancel(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        HttpResponse *error;
        SidecarBody b = {};
        int r;

        r = sidecar_body_read(req->json, cancel_body_fields, &b, &error);
        if (r > 0)
                r = sidecar_body_check_session_id(req->json, &b, &error);
        if (r <= 0)
                return r < 0 ? r : http_request_reply(req, error);
        http_request_set_session_id(req, b.session_id);

        r = session_manager_new_call(req->server->bus, "CancelExec", &m);
        if (r < 0)
                return r;
        r = sd_bus_message_append(m, "s", b.session_id);
        if (r < 0)
                return r;
        return http_request_call(req, m, BUS_TIMEOUT_SHORT_USEC, exec_cancel_on_reply);
}
