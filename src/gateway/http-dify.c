/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The dify-sandbox API: GET /health, POST /v1/sandbox/run (a stateless run in a fresh sandbox through the
 * manager's Run()), and the read-only dependency resources. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bus-client.h"
#include "http-apis.h"
#include "http-dify.h"
#include "http-router.h"
#include "http-stream.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "string-util.h"

/* Room for what the reply's data memfd may hold beyond the two configured stream limits. */
#define DIFY_DATA_SLACK (1ULL << 20)

uint64_t dify_run_body_max(const Config *config) {
        assert(config);
        return config->dify_max_code_bytes * DIFY_BODY_EXPANSION + DIFY_BODY_SLACK;
}

int dify_response_new_error(unsigned status, int code, const char *message, HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        assert(message);
        assert(ret);

        (void) json_writer_appendf(&w, "{\"code\":%d,\"message\":", code);
        (void) json_writer_append_string_lossy(&w, message, strlen(message));
        r = json_writer_append_str(&w, ",\"data\":null}");
        if (r < 0)
                return r;
        return http_response_new_writer(status, &w, ret);
}

static void dify_string_done(DifyString *s) {
        s->data = mfree(s->data);
        s->size = 0;
}

static int dify_string_set(DifyString *s, const char *data, size_t size) {
        char *copy;

        copy = malloc(size + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, data, size);
        copy[size] = 0;
        free(s->data);
        *s = (DifyString) { .data = copy, .size = size };
        return 0;
}

void dify_run_request_done(DifyRunRequest *r) {
        dify_string_done(&r->language);
        dify_string_done(&r->code);
        dify_string_done(&r->preload);
}

void dify_language_request_done(DifyLanguageRequest *r) {
        dify_string_done(&r->language);
}

typedef enum DifyFieldKind {
        DIFY_FIELD_STRING,      /* DifyString */
        DIFY_FIELD_BOOL,        /* bool */
} DifyFieldKind;

typedef struct DifyField {
        const char *name;
        DifyFieldKind kind;
        bool required;          /* present and not empty (gin's binding:"required") */
        size_t offset;
} DifyField;

#define DIFY_FIELDS_MAX 5U

static const DifyField dify_run_fields[] = {
        { "language",       DIFY_FIELD_STRING, true,  offsetof(DifyRunRequest, language)       },
        { "code",           DIFY_FIELD_STRING, true,  offsetof(DifyRunRequest, code)           },
        { "preload",        DIFY_FIELD_STRING, false, offsetof(DifyRunRequest, preload)        },
        { "enable_network", DIFY_FIELD_BOOL,   false, offsetof(DifyRunRequest, enable_network) },
        { "report",         DIFY_FIELD_BOOL,   false, offsetof(DifyRunRequest, report)         },
        {}
};

static const DifyField dify_language_fields[] = {
        { "language", DIFY_FIELD_STRING, true, offsetof(DifyLanguageRequest, language) },
        {}
};

_printf_(2, 3)
static int bind_fail(char **ret_message, const char *format, ...) {
        va_list ap;
        int n;

        va_start(ap, format);
        n = vasprintf(ret_message, format, ap);
        va_end(ap);
        if (n < 0) {
                *ret_message = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

/* A string field that no C string can carry, or that is no text: -EBADMSG, answered 400 whatever the
 * media type, so that it is never taken as the shorter value before a NUL. */
static int bind_refuse_text(char **ret_message, const char *name, const char *value, size_t size) {
        int r;

        if (memchr(value, 0, size))
                r = bind_fail(ret_message, "%s contains a NUL byte", name);
        else if (!utf8_is_valid_n(value, size))
                r = bind_fail(ret_message, "%s is not valid UTF-8", name);
        else
                return 0;
        return r == -EINVAL ? -EBADMSG : r;
}

static bool media_type_is(const char *content_type, const char *type) {
        size_t n;

        if (!content_type)
                return false;
        n = strcspn(content_type, "; \t");
        return n == strlen(type) && strncasecmp(content_type, type, n) == 0;
}

/* Go's strconv.ParseBool, with gin's empty value meaning false. */
static int parse_bool_go(const char *s, bool *ret) {
        static const char *const yes[] = { "1", "t", "T", "TRUE", "true", "True" };
        static const char *const no[] = { "", "0", "f", "F", "FALSE", "false", "False" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (streq(s, yes[i])) {
                        *ret = true;
                        return 0;
                }
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (streq(s, no[i])) {
                        *ret = false;
                        return 0;
                }
        return -EINVAL;
}

static int bind_json(const char *body, size_t size, const DifyField fields[], void *base,
                     char **ret_message) {
        _cleanup_json_ json_object *o = NULL;
        int r;

        if (size == 0)
                return bind_fail(ret_message, "request body is empty");
        r = json_parse(body, size, JSON_DEPTH_MAX, &o);
        if (r == -ENOMEM)
                return r;
        if (r == -ENOTUNIQ)
                return bind_fail(ret_message, "duplicate member in the JSON body");
        if (r == -EILSEQ)
                return bind_fail(ret_message, "the JSON body contains a NUL (\\u0000) in a member name");
        if (r < 0)
                return bind_fail(ret_message, "invalid JSON body");
        if (!o)
                return 0; /* null binds nothing */
        if (!json_object_is_type(o, json_type_object))
                return bind_fail(ret_message, "the JSON body must be an object");

        json_object_object_foreach(o, key, v) {
                for (const DifyField *f = fields; f->name; f++) {
                        void *p = (uint8_t *) base + f->offset;

                        /* encoding/json matches member names case-insensitively. */
                        if (strcasecmp(key, f->name) != 0)
                                continue;
                        if (!v)
                                break; /* null leaves the field as it is */

                        if (f->kind == DIFY_FIELD_STRING) {
                                const char *value;
                                size_t value_size;

                                if (!json_object_is_type(v, json_type_string))
                                        return bind_fail(ret_message, "%s must be a string", f->name);
                                value = json_object_get_string(v);
                                value_size = (size_t) json_object_get_string_len(v);
                                r = bind_refuse_text(ret_message, f->name, value, value_size);
                                if (r >= 0)
                                        r = dify_string_set(p, value, value_size);
                                if (r < 0)
                                        return r;
                        } else {
                                if (!json_object_is_type(v, json_type_boolean))
                                        return bind_fail(ret_message, "%s must be a boolean", f->name);
                                *(bool *) p = json_object_get_boolean(v);
                        }
                        break;
                }
        }
        return 0;
}

/* application/x-www-form-urlencoded: '+' is a space, %XX a byte. */
static int form_decode(const char *s, size_t n, char **ret, size_t *ret_size) {
        _cleanup_free_ char *out = NULL;
        size_t o = 0;

        out = malloc(n + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '+')
                        out[o++] = ' ';
                else if (s[i] == '%') {
                        int hi, lo;

                        if (i + 2 >= n)
                                return -EINVAL;
                        hi = unhexchar(s[i + 1]);
                        lo = unhexchar(s[i + 2]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        out[o++] = (char) (hi << 4 | lo);
                        i += 2;
                } else
                        out[o++] = s[i];
        }
        out[o] = 0;
        *ret = TAKE_PTR(out);
        *ret_size = o;
        return 0;
}

/* Sets field 'f' from a form value (or the query), once: gin takes the first value. */
static int bind_value(const DifyField *f, void *base, bool *bound, const char *value, size_t size,
                      char **ret_message) {
        void *p = (uint8_t *) base + f->offset;
        int r;

        if (*bound)
                return 0;
        *bound = true;

        if (f->kind == DIFY_FIELD_BOOL) {
                if (strlen(value) != size || parse_bool_go(value, p) < 0)
                        return bind_fail(ret_message, "%s must be a boolean", f->name);
                return 0;
        }
        r = bind_refuse_text(ret_message, f->name, value, size);
        if (r < 0)
                return r;
        r = dify_string_set(p, value, size);
        return r < 0 ? r : 0;
}

static int bind_form(const char *body, size_t size, const DifyField fields[], void *base,
                     bool bound[static DIFY_FIELDS_MAX], char **ret_message) {
        const char *end = body + size;

        for (const char *pair = body; pair && pair < end;) {
                const char *amp = memchr(pair, '&', end - pair), *stop = amp ?: end, *eq;
                _cleanup_free_ char *key = NULL, *value = NULL;
                size_t key_size, value_size;
                int r;

                if (memchr(pair, ';', stop - pair))
                        return bind_fail(ret_message, "invalid semicolon separator in the form body");
                eq = memchr(pair, '=', stop - pair);
                if (stop > pair) {
                        r = form_decode(pair, (eq ?: stop) - pair, &key, &key_size);
                        if (r >= 0 && eq)
                                r = form_decode(eq + 1, stop - eq - 1, &value, &value_size);
                        else if (r >= 0)
                                r = form_decode("", 0, &value, &value_size);
                        if (r == -EINVAL)
                                return bind_fail(ret_message, "invalid escape in the form body");
                        if (r < 0)
                                return r;
                        r = bind_refuse_text(ret_message, "form field name", key, key_size);
                        if (r < 0)
                                return r;

                        for (size_t i = 0; fields[i].name; i++)
                                if (streq(key, fields[i].name)) {
                                        r = bind_value(&fields[i], base, &bound[i], value, value_size,
                                                       ret_message);
                                        if (r < 0)
                                                return r;
                                }
                }
                pair = amp ? amp + 1 : NULL;
        }
        return 0;
}

static int dify_bind(const char *body, size_t size, const char *content_type, const char *query,
                     size_t query_size, const DifyField fields[], void *base, char **ret_message) {
        bool bound[DIFY_FIELDS_MAX] = {};
        int r = 0;

        assert(body || size == 0);
        assert(ret_message);

        *ret_message = NULL;
        body = body ?: "";

        if (media_type_is(content_type, "application/json"))
                r = bind_json(body, size, fields, base, ret_message);
        else {
                /* Form binding: the body if it is a form, then the query. Other bodies bind nothing. */
                if (media_type_is(content_type, "application/x-www-form-urlencoded"))
                        r = bind_form(body, size, fields, base, bound, ret_message);
                for (size_t i = 0; r >= 0 && query && fields[i].name; i++)
                        if (streq(fields[i].name, "language"))
                                r = bind_value(&fields[i], base, &bound[i], query, query_size,
                                               ret_message);
        }
        if (r < 0)
                return r;

        for (const DifyField *f = fields; f->name; f++)
                if (f->required && ((DifyString *) ((uint8_t *) base + f->offset))->size == 0)
                        return bind_fail(ret_message, "%s is required", f->name);
        return 0;
}

int dify_run_request_bind(const char *body, size_t size, const char *content_type, DifyRunRequest *ret,
                          char **ret_message) {
        assert(ret);
        return dify_bind(body, size, content_type, NULL, 0, dify_run_fields, ret, ret_message);
}

int dify_language_request_bind(const char *body, size_t size, const char *content_type, const char *query,
                               size_t query_size, DifyLanguageRequest *ret, char **ret_message) {
        assert(ret);
        return dify_bind(body, size, content_type, query, query_size, dify_language_fields, ret,
                         ret_message);
}

unsigned dify_bind_failure_status(const char *content_type, int error) {
        if (error == -EBADMSG)
                return HTTP_BAD_REQUEST;
        return content_type && streq(content_type, "application/json") ? HTTP_BAD_REQUEST : HTTP_OK;
}

bool dify_language_is_supported(const char *language) {
        return language && (streq(language, DIFY_LANGUAGE_PYTHON3) || streq(language, DIFY_LANGUAGE_NODEJS));
}

int dify_run_code(const DifyRunRequest *r, bool preload_enabled, uint64_t max, char **ret,
                  size_t *ret_size) {
        bool preload;
        size_t n;
        char *s;

        assert(r);
        assert(ret);
        assert(ret_size);

        /* Upstream ran the preload as root before its filter; here it is untrusted code like the
         * rest, in the same sandbox, or it is dropped. */
        preload = preload_enabled && r->preload.size > 0;
        if (r->code.size > max || (preload && r->preload.size + 1 > max - r->code.size))
                return -EFBIG;

        n = (preload ? r->preload.size + 1 : 0) + r->code.size;
        s = malloc(n + 1);
        if (!s)
                return -ENOMEM;
        if (preload) {
                memcpy(s, r->preload.data, r->preload.size);
                s[r->preload.size] = '\n';
        }
        memcpy(s + n - r->code.size, r->code.data, r->code.size);
        s[n] = 0;

        *ret = s;
        *ret_size = n;
        return 0;
}

static bool lower_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

static bool all_zero(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] != '0')
                        return false;
        return true;
}

int trace_context_parse(const char *s, TraceContext *ret) {
        size_t n;

        assert(ret);

        if (!s)
                return -EINVAL;
        n = strlen(s);
        /* version "-" trace-id "-" parent-id "-" flags */
        if (n < TRACEPARENT_LEN || s[2] != '-' || s[35] != '-' || s[52] != '-')
                return -EINVAL;
        if (!lower_hex(s, 2) || (s[0] == 'f' && s[1] == 'f'))
                return -EINVAL;
        /* Version 00 has exactly these fields; later versions may append "-..." and stay readable. */
        if (s[0] == '0' && s[1] == '0' ? n != TRACEPARENT_LEN
                                       : n > TRACEPARENT_LEN && s[TRACEPARENT_LEN] != '-')
                return -EINVAL;
        if (!lower_hex(s + 3, 32) || all_zero(s + 3, 32) ||
            !lower_hex(s + 36, 16) || all_zero(s + 36, 16) ||
            !lower_hex(s + 53, 2))
                return -EINVAL;

        memcpy(ret->trace_id, s + 3, 32);
        ret->trace_id[32] = 0;
        memcpy(ret->span_id, s + 36, 16);
        ret->span_id[16] = 0;
        memcpy(ret->flags, s + 53, 2);
        ret->flags[2] = 0;
        return 0;
}

int trace_context_generate(TraceContext *ret) {
        char a[SESSION_ID_LEN + 1], b[SESSION_ID_LEN + 1];
        int r;

        assert(ret);

        /* Random UUIDs as hex: never all zero (the version digit is 4). */
        r = session_id_generate(a);
        if (r >= 0)
                r = session_id_generate(b);
        if (r < 0)
                return r;
        memcpy(ret->trace_id, a, 33);
        memcpy(ret->span_id, b + 8, 16); /* includes the version digit */
        ret->span_id[16] = 0;
        strcpy(ret->flags, "00");
        return 0;
}

void trace_context_format(const TraceContext *t, char buf[static TRACEPARENT_LEN + 1]) {
        assert(t);
        (void) snprintf(buf, TRACEPARENT_LEN + 1, "00-%s-%s-%s", t->trace_id, t->span_id, t->flags);
}

int32_t dify_result_exit_code(const DifyResult *r) {
        assert(r);
        return r->timed_out || r->signal != 0 ? -1 : r->exit_code;
}

static bool text_contains(const char *text, size_t n, const char *needle) {
        return memmem(text, n, needle, strlen(needle));
}

bool dify_result_refused(const DifyResult *r, const char *stderr_text, size_t stderr_size) {
        bool eperm = false;

        assert(r);
        assert(stderr_text || stderr_size == 0);

        if (r->signal == SIGSYS)
                return true;
        for (size_t i = 0; i < r->n_blocked && !eperm; i++)
                eperm = streq_ptr(r->blocked[i].verdict, "EPERM");
        /* Libraries try things and cope: Debian's pandas asks "uname -p" at import, and the refused
         * fork leaves no trace but in the report. Only a failure that shows the refusal counts. */
        return eperm && stderr_text &&
                (text_contains(stderr_text, stderr_size, "Operation not permitted") ||
                 text_contains(stderr_text, stderr_size, "operation not permitted") ||
                 text_contains(stderr_text, stderr_size, "EPERM"));
}

const char *dify_result_sandbox_message(const DifyResult *r, const char *stderr_text, size_t stderr_size,
                                        char buf[static 64]) {
        assert(r);

        /* Upstream's timer wrote its line before the process was reaped and its exit status read. */
        (void) snprintf(buf, 64, "%s%s", r->timed_out ? DIFY_ERROR_TIMEOUT : "",
                        dify_result_refused(r, stderr_text, stderr_size) ? DIFY_ERROR_NOT_PERMITTED : "");
        return buf;
}

/* A detail goes on a line of its own. */
static int error_append_detail(JsonWriter *out, size_t start, const char *detail, size_t n) {
        int r;

        if (n == 0)
                return 0;
        if (out->buf.len > start && out->buf.s[out->buf.len - 1] != '\n') {
                r = json_writer_append(out, "\n", 1);
                if (r < 0)
                        return r;
        }
        return json_writer_append(out, detail, n);
}

int dify_error_compose(int32_t exit_code, const char *sandbox_message, const char *stderr_text,
                       size_t stderr_size, JsonWriter *out) {
        size_t start;
        int r;

        assert(out);
        assert(stderr_text || stderr_size == 0);

        /* A successful run leaves "error" empty, whatever it logged on stderr. */
        if (exit_code == 0)
                return 0;

        sandbox_message = strempty(sandbox_message);
        start = out->buf.len;
        r = json_writer_appendf(out, "process exited with code %" PRIi32, exit_code);
        if (r >= 0)
                r = error_append_detail(out, start, sandbox_message, strlen(sandbox_message));
        if (r >= 0)
                r = error_append_detail(out, start, stderr_text, stderr_size);
        return r;
}

int dify_error_append_cuts(const DifyResult *r, JsonWriter *out) {
        const char *const streams[] = { r->stdout_truncated ? "stdout" : NULL,
                                        r->stderr_truncated ? "stderr" : NULL };
        int k;

        assert(r);
        assert(out);

        for (size_t i = 0; i < ELEMENTSOF(streams); i++) {
                if (!streams[i])
                        continue;
                if (out->buf.len > 0 && out->buf.s[out->buf.len - 1] != '\n') {
                        k = json_writer_append(out, "\n", 1);
                        if (k < 0)
                                return k;
                }
                k = json_writer_appendf(out, DIFY_ERROR_CUT_FORMAT, streams[i], r->output_limit);
                if (k < 0)
                        return k;
        }
        return 0;
}

int dify_result_compose(const DifyResult *r, const void *data, size_t data_size, HttpResponse **ret) {
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        _cleanup_(json_writer_done) JsonWriter error = {};
        const char *d = data ?: "", *stderr_raw;
        char message[64];
        int32_t exit_code;
        int k;

        assert(r);
        assert(data || data_size == 0);
        assert(ret);

        if (r->stdout_size > data_size || r->stderr_size > data_size - r->stdout_size)
                return -EBADMSG;
        stderr_raw = d + r->stdout_size;

        /* "error" repeats stderr as clients see it: the head is composed here, the streams are
         * made valid UTF-8 and escaped as they are sent, from the reply's memfd. Searching the
         * raw bytes finds what the repaired text holds: the repair leaves ASCII alone. */
        exit_code = dify_result_exit_code(r);
        (void) dify_result_sandbox_message(r, stderr_raw, r->stderr_size, message);
        k = dify_error_compose(exit_code, message, NULL, 0, &error);
        if (k >= 0)
                k = dify_error_append_cuts(r, &error);
        if (k < 0)
                return k;
        if (exit_code != 0 && r->stderr_size > 0 && error.buf.len > 0 &&
            error.buf.s[error.buf.len - 1] != '\n') {
                k = json_writer_append(&error, "\n", 1);
                if (k < 0)
                        return k;
        }

        k = http_stream_new(&s);
        if (k < 0)
                return k;
        /* Appends stop at the first failure; checked once. */
        (void) http_stream_append_str(s, "{\"code\":0,\"message\":\"" DIFY_MESSAGE_SUCCESS "\","
                                         "\"data\":{\"stdout\":\"");
        (void) http_stream_append_text_lossy(s, d, r->stdout_size);
        (void) http_stream_append_str(s, "\",\"stderr\":\"");
        (void) http_stream_append_text_lossy(s, stderr_raw, r->stderr_size);
        (void) http_stream_append_str(s, "\",\"error\":\"");
        (void) http_stream_append_text_lossy(s, error.buf.s ?: "", error.buf.len);
        if (exit_code != 0)
                (void) http_stream_append_text_lossy(s, stderr_raw, r->stderr_size);
        (void) http_stream_appendf(s, "\",\"exit_code\":%" PRIi32, exit_code);
        (void) exec_report_append(s, &r->report);
        k = http_stream_append_str(s, "}}");
        if (k < 0)
                return k;
        return http_response_new_stream(HTTP_OK, TAKE_PTR(s), ret);
}

int dify_dependencies_compose(const char *text, size_t size, HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter out = {};
        _cleanup_json_ json_object *list = NULL;
        size_t n, written = 0;
        int r;

        assert(ret);

        if (text) {
                r = json_parse(text, size, JSON_DEPTH_MAX, &list);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 || !json_object_is_type(list, json_type_array))
                        return -EBADMSG;
        }

        (void) json_writer_append_str(&out, "{\"code\":0,\"message\":\"" DIFY_MESSAGE_SUCCESS "\","
                                      "\"data\":{\"dependencies\":[");
        n = list ? json_object_array_length(list) : 0;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(list, i), *name, *version;
                const char *v = "";

                if (!json_object_object_get_ex(e, "name", &name) ||
                    !json_object_is_type(name, json_type_string) || json_object_get_string_len(name) == 0)
                        continue;
                if (json_object_object_get_ex(e, "version", &version) &&
                    json_object_is_type(version, json_type_string))
                        v = json_object_get_string(version);

                (void) json_writer_append_str(&out, written++ > 0 ? ",{\"name\":" : "{\"name\":");
                (void) json_writer_append_string(&out, json_object_get_string(name),
                                                 (size_t) json_object_get_string_len(name));
                (void) json_writer_append_str(&out, ",\"version\":");
                (void) json_writer_append_string(&out, v, strlen(v));
                (void) json_writer_append_str(&out, "}");
        }
        /* Appends stop at the first failure; checked once. */
        r = json_writer_append_str(&out, "]}}");
        if (r < 0)
                return r;
        return http_response_new_writer(HTTP_OK, &out, ret);
}

int dify_dependencies_load(const char *path, HttpResponse **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r;

        assert(path);
        assert(ret);

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                if (errno != ENOENT)
                        return -errno;
                log_debug("No dependency list at %s, listing none.", path);
                return dify_dependencies_compose(NULL, 0, ret);
        }
        r = read_full_fd(fd, DIFY_DEPENDENCIES_SIZE_MAX, &text, &size);
        if (r < 0)
                return r;
        return dify_dependencies_compose(text, size, ret);
}

/* The request's trace context and who it is for, as recorded and handed on. */
typedef struct DifyTrace {
        char traceparent[TRACEPARENT_LEN + 1];
        char user_id[DIFY_USER_FIELD_BUF];
        char user_type[DIFY_USER_FIELD_BUF];
        bool has_user_id;
        bool has_user_type;
} DifyTrace;

/* Like upstream's trace middleware: the client's traceparent or a new one, and X-User-ID/-Type; all
 * of it on the request's access-log entry. */
static int dify_request_trace(HttpRequest *req, DifyTrace *ret) {
        const HttpRequestHeaders *h = &req->headers;
        TraceContext t;
        int r;

        *ret = (DifyTrace) {};

        /* A repeated traceparent is invalid (W3C): start a new trace. */
        if (h->n_traceparent != 1 || trace_context_parse(h->traceparent, &t) < 0) {
                r = trace_context_generate(&t);
                if (r < 0)
                        return r;
        }
        trace_context_format(&t, ret->traceparent);

        ret->has_user_id = !!h->user_id;
        ret->has_user_type = !!h->user_type;
        http_sanitize_for_log(h->user_id, DIFY_USER_FIELD_MAX, ret->user_id, sizeof(ret->user_id));
        http_sanitize_for_log(h->user_type, DIFY_USER_FIELD_MAX, ret->user_type, sizeof(ret->user_type));

        r = http_request_add_log_field(req, "SCOPEBOX_TRACE_ID", t.trace_id);
        if (r >= 0)
                r = http_request_add_log_field(req, "SCOPEBOX_SPAN_ID", t.span_id);
        if (r >= 0 && ret->has_user_id)
                r = http_request_add_log_field(req, "SCOPEBOX_USER_ID", ret->user_id);
        if (r >= 0 && ret->has_user_type)
                r = http_request_add_log_field(req, "SCOPEBOX_USER_TYPE", ret->user_type);
        return r < 0 ? r : 0;
}

static int dify_reply_error(HttpRequest *req, unsigned status, int code, const char *message) {
        HttpResponse *resp = NULL;
        int r = dify_response_new_error(status, code, message, &resp);

        /* MAX_REQUESTS reached: runs end within WORKER_TIMEOUT, a retry soon may find room. */
        if (r >= 0 && status == HTTP_SERVICE_UNAVAILABLE)
                resp->retry_after = HTTP_BUSY_RETRY_AFTER;
        return http_request_reply_made(req, r, resp);
}

int http_dify_health(HttpRequest *req) {
        return http_request_reply_literal(req, HTTP_OK, "\"ok\"");
}

/* A run counts against MAX_REQUESTS from its acceptance to its result, also when its client went
 * away meanwhile (the request waits for the result as an orphan). */
typedef struct DifyRun {
        Server *server;
        bool counted;
        bool report;
        char language[16];
} DifyRun;

/* Runs between acceptance and their result, queued in the manager or running (the server counts
 * them for the API, and shows them in its STATUS= line). */
unsigned *dify_runs(Server *s) {
        unsigned *n = server_api_count(s, &http_dify_api);

        assert(n); /* a run comes through one of the API's routes */
        return n;
}

static void dify_run_uncount(DifyRun *run) {
        unsigned *n;

        if (!run->counted)
                return;
        run->counted = false;
        n = dify_runs(run->server);
        assert(*n > 0);
        (*n)--;
        server_status_changed(run->server);
}

static void dify_run_free(void *p) {
        DifyRun *run = p;

        if (!run)
                return;
        dify_run_uncount(run);
        free(run);
}

/* Failed Run() calls in the envelope: the manager's queue bound is MAX_REQUESTS' 503, a refused
 * argument -400, everything else -500 (upstream's runner start errors), all but the 503 with HTTP 200. */
static int dify_reply_bus_error(HttpRequest *req, const sd_bus_error *e) {
        const char *message;
        bool gone, internal = false;
        unsigned status;

        gone = http_request_call_recipient_gone(req, e, bus_timeout_run_usec(&req->server->config));
        http_bus_error_describe(e, gone, &status, &message, &internal);
        http_request_log_bus_error(req, e, internal);

        /* The manager's queue, or the bus's bound of calls waiting for replies: nothing ran. */
        if (status == HTTP_TOO_MANY_REQUESTS || sd_bus_error_has_name(e, SD_BUS_ERROR_LIMITS_EXCEEDED))
                return dify_reply_error(req, HTTP_SERVICE_UNAVAILABLE, DIFY_CODE_UNAVAILABLE,
                                        DIFY_MESSAGE_TOO_MANY_REQUESTS);
        if (status == HTTP_BAD_REQUEST || status == HTTP_PAYLOAD_TOO_LARGE)
                return dify_reply_error(req, HTTP_OK, DIFY_CODE_BAD_REQUEST, message);
        return dify_reply_error(req, HTTP_OK, DIFY_CODE_INTERNAL, message);
}

static int dify_run_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const Config *config = &req->server->config;
        _cleanup_(exec_info_done) ExecInfo info = {};
        _cleanup_(bus_data_done) BusData data = {};
        DifyRun *run = req->userdata;
        const sd_bus_error *e;
        DifyResult result = {};
        HttpResponse *resp;
        int fd, r;

        dify_run_uncount(run);

        e = sd_bus_message_get_error(reply);
        if (e)
                return dify_reply_bus_error(req, e);

        r = sd_bus_message_read(reply, "itt", &result.exit_code, &result.stdout_size, &result.stderr_size);
        if (r < 0)
                return r;
        r = exec_reply_read_info(reply, &info, &fd);
        if (r < 0)
                return r;

        result.timed_out = info.timed_out;
        result.signal = info.signal;
        result.blocked = info.blocked.items;
        result.n_blocked = info.blocked.n;
        result.stdout_truncated = info.stdout_truncated;
        result.stderr_truncated = info.stderr_truncated;
        result.output_limit = config->dify_max_output_bytes;
        exec_report_from_info(&result.report, &info, run->report);

        r = bus_data_load(fd, 2 * config->dify_max_output_bytes + DIFY_DATA_SLACK, &data);
        if (r < 0)
                return r;

        log_debug("Run (%s) finished: exit code %" PRIi32 "%s%s, %" PRIu64 " ms%s%s.", run->language,
                  result.exit_code, result.timed_out ? ", timed out" : "",
                  result.n_blocked > 0 ? ", calls refused" : "", info.duration_usec / USEC_PER_MSEC,
                  info.stdout_truncated ? ", stdout cut" : "", info.stderr_truncated ? ", stderr cut" : "");

        r = dify_result_compose(&result, data.data, data.size, &resp);
        if (r < 0)
                return r;
        http_stream_hold(resp->stream, &data);
        return http_request_reply(req, resp);
}

static int dify_run_call(HttpRequest *req, const DifyRunRequest *b, const DifyTrace *t, const char *code,
                         size_t code_size) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = -EBADF;
        Server *s = req->server;
        DifyRun *run;
        int r;

        /* The code crosses the bus as a sealed memfd, like an exec's. */
        fd = memfd_new_data("scopebox-run-code", code, code_size);
        if (fd < 0)
                return fd;

        r = session_manager_new_call(s->bus, "Run", &m);
        if (r < 0)
                return r;
        r = sd_bus_message_append(m, "sh", b->language.data, fd);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}", "enable_network", "b", (int) b->enable_network,
                                          "traceparent", "s", t->traceparent);
        if (r >= 0 && t->has_user_id)
                r = sd_bus_message_append(m, "{sv}", "user_id", "s", t->user_id);
        if (r >= 0 && t->has_user_type)
                r = sd_bus_message_append(m, "{sv}", "user_type", "s", t->user_type);
        if (r < 0)
                return r;

        run = http_request_new_userdata(req, sizeof(DifyRun), dify_run_free);
        if (!run)
                return -ENOMEM;
        run->server = s;
        run->report = b->report;
        (void) snprintf(run->language, sizeof(run->language), "%s", b->language.data);

        /* The run ends when its client hangs up; it counts until the manager says it has. */
        r = http_request_call_until_hangup(req, m, bus_timeout_run_usec(&s->config), dify_run_on_reply);
        if (r < 0)
                return r;

        run->counted = true;
        (*dify_runs(s))++;
        server_status_changed(s);
        return 0;
}

int http_dify_run(HttpRequest *req) {
        const Config *config = &req->server->config;
        const char *content_type = req->headers.content_type;
        _cleanup_(dify_run_request_done) DifyRunRequest b = {};
        _cleanup_free_ char *message = NULL, *code = NULL;
        char limit[96];
        size_t code_size;
        DifyTrace t;
        int r;

        r = dify_request_trace(req, &t);
        if (r < 0)
                return r;

        /* Upstream's first gate, before the body is even bound. */
        if (*dify_runs(req->server) >= config->dify_max_requests)
                return dify_reply_error(req, HTTP_SERVICE_UNAVAILABLE, DIFY_CODE_UNAVAILABLE,
                                        DIFY_MESSAGE_TOO_MANY_REQUESTS);

        r = dify_run_request_bind(req->body, req->body_size, content_type, &b, &message);
        if (r == -EINVAL || r == -EBADMSG)
                return dify_reply_error(req, dify_bind_failure_status(content_type, r),
                                        DIFY_CODE_BAD_REQUEST, message);
        if (r < 0)
                return r;

        if (!dify_language_is_supported(b.language.data))
                return dify_reply_error(req, HTTP_BAD_REQUEST, DIFY_CODE_BAD_REQUEST,
                                        DIFY_MESSAGE_UNSUPPORTED_LANGUAGE);
        if (b.enable_network && !config->dify_enable_network)
                return dify_reply_error(req, HTTP_OK, DIFY_CODE_BAD_REQUEST, DIFY_MESSAGE_NETWORK_DISABLED);

        r = dify_run_code(&b, config->dify_enable_preload, config->dify_max_code_bytes, &code, &code_size);
        if (r == -EFBIG) {
                /* Dify reads only the status of anything but 200 ("likely a network issue"): a
                 * limit is said with 200 and a message that names it. */
                (void) snprintf(limit, sizeof(limit), "code too large: more than %" PRIu64
                                " bytes (SANDBOX_DIFY_MAX_CODE_BYTES)", config->dify_max_code_bytes);
                return dify_reply_error(req, HTTP_OK, DIFY_CODE_BAD_REQUEST, limit);
        }
        if (r < 0)
                return r;

        return dify_run_call(req, &b, &t, code, code_size);
}

/* The dependency resources: there is nothing to install at run time (the sandbox's Python is the
 * system's, listed by tools/install), so listing, updating and refreshing all answer the list. */
static int dify_dependencies(HttpRequest *req) {
        const char *content_type = req->headers.content_type;
        _cleanup_(dify_language_request_done) DifyLanguageRequest b = {};
        _cleanup_free_ char *message = NULL;
        HttpResponse *resp;
        DifyTrace t;
        int r;

        r = dify_request_trace(req, &t);
        if (r < 0)
                return r;

        r = dify_language_request_bind(req->body, req->body_size, content_type, req->headers.language,
                                       req->headers.language_size, &b, &message);
        if (r == -EINVAL || r == -EBADMSG)
                return dify_reply_error(req, dify_bind_failure_status(content_type, r),
                                        DIFY_CODE_BAD_REQUEST, message);
        if (r < 0)
                return r;
        if (!streq(b.language.data, DIFY_LANGUAGE_PYTHON3))
                return dify_reply_error(req, HTTP_BAD_REQUEST, DIFY_CODE_BAD_REQUEST,
                                        DIFY_MESSAGE_UNSUPPORTED_LANGUAGE);

        r = dify_dependencies_load(DIFY_DEPENDENCIES_FILE, &resp);
        if (r < 0)
                return r;
        return http_request_reply(req, resp);
}

int http_dify_dependencies_list(HttpRequest *req) {
        return dify_dependencies(req);
}

int http_dify_dependencies_update(HttpRequest *req) {
        return dify_dependencies(req);
}

int http_dify_dependencies_refresh(HttpRequest *req) {
        return dify_dependencies(req);
}

/* The router's own answers (refused requests, internal errors) in the envelope, minus the status
 * as the body's code. */
int dify_response_new_failure(unsigned status, const char *message, HttpResponse **ret) {
        return dify_response_new_error(status, -(int) status, message, ret);
}

/* Dify shows messages, not statuses (any status but 200 and 503 is "likely a network issue" to it):
 * the limit is said with 200 and the envelope. */
int dify_response_new_too_large(const HttpRequest *req, HttpResponse **ret) {
        char msg[128];

        (void) snprintf(msg, sizeof(msg), "request body exceeds %" PRIu64 " bytes (%s)", req->body_max,
                        req->route->body_max == dify_run_body_max
                                ? "6 per byte of SANDBOX_DIFY_MAX_CODE_BYTES, plus 64 KiB"
                                : "SANDBOX_MAX_BODY_BYTES");
        return dify_response_new_error(HTTP_OK, DIFY_CODE_BAD_REQUEST, msg, ret);
}
