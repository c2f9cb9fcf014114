/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of POST /exec: request validation in FastAPI's order, response composition from a reply. */
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "http-exec.h"
#include "http-exec-stream.h"
#include "json-util.h"
#include "stream-frame.h"
#include "tests.h"

#define SID "0123456789abcdef0123456789abcdef"

static Config test_config(void) {
        return (Config) {
                .max_code_bytes = 16,
                .exec_timeout_cap_ms = 600000,
                .max_output_bytes = 32768,
                .max_artifact_bytes = 20971520,
                .max_files_per_exec = 20,
                .max_total_artifact_bytes = 52428800,
        };
}

/* The document the last parse() borrowed from: an ExecRequest points into it. */
static json_object *last_doc = NULL;

/* Parses 'text' as a /exec body; returns the HTTP status it would get (200 = valid). */
static unsigned parse(const char *text, const Config *c, ExecRequest *ret, char **ret_body) {
        HttpResponse *error = (HttpResponse *) 0x1;
        unsigned status;
        int r;

        json_object_put(last_doc);
        last_doc = NULL;
        if (text)
                ASSERT_TRUE(json_parse(text, strlen(text), JSON_DEPTH_MAX, &last_doc) == 0);
        *ret = (ExecRequest) {};
        r = exec_request_parse(last_doc, c, ret, &error);
        if (r == 0) {
                ASSERT_TRUE(error == NULL);
                if (ret_body)
                        *ret_body = NULL;
                return 200;
        }
        ASSERT_TRUE(error);
        status = error->status;
        if (ret_body)
                *ret_body = strndup(error->body, error->size);
        http_response_free(error);
        return status;
}

static void check_refused(const char *text, unsigned status, const char *body) {
        Config c = test_config();
        ExecRequest x;
        char *b = NULL;
        unsigned s = parse(text, &c, &x, &b);

        if (s != status || !streq(b, body))
                fprintf(stderr, "%s\n  got %u %s\n  expected %u %s\n", strempty(text), s, strempty(b),
                        status, body);
        ASSERT_TRUE(s == status && streq(b, body));
        free(b);
}

static uint64_t timeout_of(const char *text, uint64_t cap) {
        Config c = test_config();
        ExecRequest x;

        c.exec_timeout_cap_ms = cap;
        ASSERT_TRUE(parse(text, &c, &x, NULL) == 200);
        return x.timeout_ms;
}

/* A body with a valid session id and more members. */
#define BODY(more) "{\"session_id\":\"" SID "\"" more "}"
#define TIMEOUT(t) BODY(",\"code\":\"\",\"timeout_ms\":" t)
#define DETAIL(s) "{\"detail\":\"" s "\"}"
#define PYDANTIC(type, loc, msg) \
        "{\"detail\":[{\"type\":\"" type "\",\"loc\":[" loc "],\"msg\":\"" msg "\"}]}"

static void test_request(void) {
        Config c = test_config();
        ExecRequest x;

        /* Schema first (422), in pydantic's shape. */
        check_refused(NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_refused("{}", 422, PYDANTIC("missing", "\"body\",\"session_id\"", "Field required"));
        check_refused(BODY(""), 422, PYDANTIC("missing", "\"body\",\"code\"", "Field required"));
        check_refused(BODY(",\"code\":null"), 422,
                      PYDANTIC("string_type", "\"body\",\"code\"", "Input should be a valid string"));
        check_refused(BODY(",\"code\":1"), 422,
                      PYDANTIC("string_type", "\"body\",\"code\"", "Input should be a valid string"));
        check_refused(BODY(",\"code\":\"1\",\"timeout_ms\":\"5\""), 422,
                      PYDANTIC("int_type", "\"body\",\"timeout_ms\"", "Input should be a valid integer"));
        check_refused("[]", 422,
                      PYDANTIC("model_attributes_type", "\"body\"",
                               "Input should be a valid dictionary or object to extract fields from"));
        /* A schema error wins over a bad id. */
        check_refused("{\"session_id\":\"bad\"}", 422,
                      PYDANTIC("missing", "\"body\",\"code\"", "Field required"));

        /* Then the session id (400). */
        check_refused("{\"session_id\":\"bad\",\"code\":\"1\"}", 400, DETAIL("invalid session_id"));
        check_refused("{\"session_id\":\"0123456789ABCDEF0123456789abcdef\",\"code\":\"1\"}", 400,
                      DETAIL("invalid session_id"));
        check_refused("{\"session_id\":\"0123456789abcdef0123456789abcde\",\"code\":\"1\"}", 400,
                      DETAIL("invalid session_id"));
        check_refused("{\"session_id\":\"" SID "0\",\"code\":\"1\"}", 400, DETAIL("invalid session_id"));
        check_refused("{\"session_id\":\"" SID "\\u0000/../x\",\"code\":\"1\"}", 400,
                      DETAIL("invalid session_id"));
        check_refused("{\"session_id\":\"\",\"code\":\"1\"}", 400, DETAIL("invalid session_id"));
        /* A bad id wins over a too large code. */
        check_refused("{\"session_id\":\"bad\",\"code\":\"01234567890123456789\"}", 400,
                      DETAIL("invalid session_id"));

        /* Then the code size, in UTF-8 bytes (413). max_code_bytes is 16 here. */
        ASSERT_TRUE(parse(BODY(",\"code\":\"0123456789abcdef\""), &c, &x, NULL) == 200);
        ASSERT_TRUE(x.code_size == 16 && memcmp(x.code, "0123456789abcdef", 16) == 0);
        check_refused(BODY(",\"code\":\"0123456789abcdefg\""), 413, DETAIL("code too large"));
        /* 6 characters, 18 bytes. */
#define NIHAO "\xe4\xbd\xa0\xe5\xa5\xbd"
        check_refused(BODY(",\"code\":\"" NIHAO NIHAO NIHAO "\""), 413, DETAIL("code too large"));
#undef NIHAO
        /* A NUL is refused, never cut at. */
        check_refused(BODY(",\"code\":\"a\\u0000b\""), 400, DETAIL("code contains a NUL byte"));
        ASSERT_TRUE(parse(BODY(",\"code\":\"a\\u0001b\""), &c, &x, NULL) == 200);
        ASSERT_TRUE(x.code_size == 3 && memcmp(x.code, "a\1b", 3) == 0);
        ASSERT_STREQ(x.session_id, SID);
        ASSERT_TRUE(parse(BODY(",\"code\":\"\""), &c, &x, NULL) == 200);
        ASSERT_TRUE(x.code_size == 0);

        /* Timeouts: absent/null/0 → 120 s, then clamped to [1 s, cap]. */
        ASSERT_TRUE(timeout_of(BODY(",\"code\":\"\""), 600000) == 120000);
        ASSERT_TRUE(timeout_of(TIMEOUT("null"), 600000) == 120000);
        ASSERT_TRUE(timeout_of(TIMEOUT("0"), 600000) == 120000);
        ASSERT_TRUE(timeout_of(TIMEOUT("1"), 600000) == 1000);
        ASSERT_TRUE(timeout_of(TIMEOUT("999"), 600000) == 1000);
        ASSERT_TRUE(timeout_of(TIMEOUT("-5"), 600000) == 1000);
        ASSERT_TRUE(timeout_of(TIMEOUT("1000"), 600000) == 1000);
        ASSERT_TRUE(timeout_of(TIMEOUT("2500"), 600000) == 2500);
        ASSERT_TRUE(timeout_of(TIMEOUT("2500.0"), 600000) == 2500);
        ASSERT_TRUE(timeout_of(TIMEOUT("600000"), 600000) == 600000);
        ASSERT_TRUE(timeout_of(TIMEOUT("600001"), 600000) == 600000);
        ASSERT_TRUE(timeout_of(TIMEOUT("9223372036854775807"), 600000) == 600000);
        ASSERT_TRUE(timeout_of(BODY(",\"code\":\"\""), 30000) == 30000);
        ASSERT_TRUE(timeout_of(TIMEOUT("0"), 5000) == 5000);

        ASSERT_TRUE(exec_timeout_effective(false, 0, 600000) == BUS_EXEC_TIMEOUT_DEFAULT_MS);
        ASSERT_TRUE(exec_timeout_effective(true, INT64_MIN, 600000) == BUS_EXEC_TIMEOUT_MIN_MS);
        ASSERT_TRUE(exec_timeout_effective(true, 5000, 0) == BUS_EXEC_TIMEOUT_MIN_MS);

        json_object_put(last_doc);
        last_doc = NULL;
}

/* Composes a response and returns it parsed. */
static json_object *compose(const ExecResult *r, const void *data, size_t size, const Config *c) {
        HttpResponse *resp = NULL;
        json_object *o = NULL;

        ASSERT_TRUE(exec_result_compose(r, data, size, c, NULL, &resp) == 0);
        ASSERT_TRUE(http_response_flatten(resp) == 0);
        ASSERT_TRUE(resp->status == 200);
        ASSERT_TRUE(strlen(resp->body) == resp->size);
        ASSERT_TRUE(json_parse(resp->body, resp->size, JSON_DEPTH_MAX, &o) == 0);
        http_response_free(resp);
        return o;
}

static const char *member_string(json_object *o, const char *name) {
        json_object *v;

        ASSERT_TRUE(json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_string));
        return json_object_get_string(v);
}

static int64_t member_int(json_object *o, const char *name) {
        json_object *v;

        ASSERT_TRUE(json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_int));
        return json_object_get_int64(v);
}

static json_object *member_files(json_object *o) {
        json_object *v;

        ASSERT_TRUE(json_object_object_get_ex(o, "files", &v) && json_object_is_type(v, json_type_array));
        return v;
}

static void test_compose_basic(void) {
        static const char data[] = "4\nwarn\nXXhelloPNG";
        const ExecFile files[] = {
                { "result.txt", 9, 5 },
                { "charts/sub/plot.png", 14, 3 },
                { "noext", 17, 0 },
        };
        ExecResult r = {
                .exit_code = 0,
                .stdout_size = 2,
                .stderr_size = 5,
                .files = files,
                .n_files = 3,
                .timeout_ms = 120000,
        };
        Config c = test_config();
        json_object *o, *f, *e;

        /* Artifacts come after the streams; an unused gap in between is allowed. */
        o = compose(&r, data, sizeof(data) - 1, &c);
        ASSERT_STREQ(member_string(o, "stdout"), "4\n");
        ASSERT_STREQ(member_string(o, "stderr"), "warn\n");
        ASSERT_TRUE(member_int(o, "exit_code") == 0);
        f = member_files(o);
        ASSERT_TRUE(json_object_array_length(f) == 3);
        e = json_object_array_get_idx(f, 0);
        ASSERT_STREQ(member_string(e, "name"), "result.txt");
        ASSERT_STREQ(member_string(e, "mime_type"), "text/plain");
        ASSERT_STREQ(member_string(e, "data_base64"), "aGVsbG8=");
        e = json_object_array_get_idx(f, 1);
        ASSERT_STREQ(member_string(e, "name"), "plot.png");
        ASSERT_STREQ(member_string(e, "mime_type"), "image/png");
        ASSERT_STREQ(member_string(e, "data_base64"), "UE5H");
        e = json_object_array_get_idx(f, 2);
        ASSERT_STREQ(member_string(e, "name"), "noext");
        ASSERT_STREQ(member_string(e, "mime_type"), "application/octet-stream");
        ASSERT_STREQ(member_string(e, "data_base64"), "");
        json_object_put(o);

        /* Nothing at all. */
        r = (ExecResult) { .exit_code = 3, .timeout_ms = 1000 };
        o = compose(&r, NULL, 0, &c);
        ASSERT_TRUE(streq(member_string(o, "stdout"), "") && streq(member_string(o, "stderr"), ""));
        ASSERT_TRUE(member_int(o, "exit_code") == 3);
        ASSERT_TRUE(json_object_array_length(member_files(o)) == 0);
        json_object_put(o);

        /* Negative exit codes pass through (the manager reports 128+signal, but be faithful). */
        r = (ExecResult) { .exit_code = -1, .timeout_ms = 1000 };
        o = compose(&r, NULL, 0, &c);
        ASSERT_TRUE(member_int(o, "exit_code") == -1);
        json_object_put(o);
}

static void test_compose_exact_text(void) {
        static const char data[] = "out\x01\"\\";
        ExecResult r = { .exit_code = 1, .stdout_size = 6, .timeout_ms = 1000 };
        HttpResponse *resp = NULL;
        Config c = test_config();
        const char *expected =
                "{\"stdout\":\"out\\u0001\\\"\\\\\",\"stderr\":\"\",\"exit_code\":1,\"files\":[]}";

        ASSERT_TRUE(exec_result_compose(&r, data, 6, &c, NULL, &resp) == 0);
        ASSERT_TRUE(http_response_flatten(resp) == 0);
        if (!streq(resp->body, expected))
                fprintf(stderr, "got %s\n", resp->body);
        ASSERT_STREQ(resp->body, expected);
        http_response_free(resp);
}

static const char *compose_stderr(const ExecResult *r, const char *data, size_t size, const Config *c,
                                  json_object **keep) {
        *keep = compose(r, data, size, c);
        return member_string(*keep, "stderr");
}

static void test_compose_notes(void) {
        static const char data[] = "OUTERR";
        Config c = test_config();
        json_object *o;
        ExecResult r;

        /* Truncation markers, with the limit in KB from the configuration. */
        r = (ExecResult) { .stdout_size = 3, .stderr_size = 3, .timeout_ms = 1000,
                           .stdout_truncated = true, .stderr_truncated = true };
        o = compose(&r, data, 6, &c);
        ASSERT_STREQ(member_string(o, "stdout"), "OUT\n... [truncated, stdout exceeded 32KB]");
        ASSERT_STREQ(member_string(o, "stderr"), "ERR\n... [truncated, stderr exceeded 32KB]");
        json_object_put(o);

        c.max_output_bytes = 65536;
        r.stderr_truncated = false;
        o = compose(&r, data, 6, &c);
        ASSERT_STREQ(member_string(o, "stdout"), "OUT\n... [truncated, stdout exceeded 64KB]");
        ASSERT_STREQ(member_string(o, "stderr"), "ERR");
        json_object_put(o);
        c = test_config();

        /* Timeout: exit code 124, seconds with three decimals. */
#define KILLED(s) "[sandbox] execution exceeded " s " and was killed"
        r = (ExecResult) { .exit_code = 137, .stderr_size = 3, .timed_out = true, .timeout_ms = 1000 };
        ASSERT_STREQ(compose_stderr(&r, "ERR", 3, &c, &o), "ERR\n" KILLED("1.000s"));
        ASSERT_TRUE(member_int(o, "exit_code") == 124);
        json_object_put(o);
        r.timeout_ms = 2500;
        ASSERT_STREQ(compose_stderr(&r, "ERR", 3, &c, &o), "ERR\n" KILLED("2.500s"));
        json_object_put(o);
        r.timeout_ms = 1234;
        ASSERT_STREQ(compose_stderr(&r, "ERR", 3, &c, &o), "ERR\n" KILLED("1.234s"));
        json_object_put(o);
        r.timeout_ms = 600000;
        r.stderr_size = 0;
        ASSERT_STREQ(compose_stderr(&r, "", 0, &c, &o), "\n" KILLED("600.000s"));
        json_object_put(o);

        /* Skipped artifacts: a line of its own. */
#define SKIPPED(n) "[sandbox] skipped " n " output file(s) because artifact limits are 20 files, " \
                   "20971520 bytes per file, 52428800 bytes total"
        r = (ExecResult) { .files_skipped = 3, .timeout_ms = 1000 };
        ASSERT_STREQ(compose_stderr(&r, "", 0, &c, &o), SKIPPED("3"));
        json_object_put(o);
        r.stderr_size = 2;
        ASSERT_STREQ(compose_stderr(&r, "E\n", 2, &c, &o), "E\n" SKIPPED("3"));
        json_object_put(o);
        r.stderr_size = 1;
        ASSERT_STREQ(compose_stderr(&r, "E", 1, &c, &o), "E\n" SKIPPED("3"));
        json_object_put(o);

        /* All of it, in order: truncation, timeout, skipped. */
        r = (ExecResult) { .stderr_size = 1, .stderr_truncated = true, .timed_out = true, .files_skipped = 1,
                           .timeout_ms = 5000 };
        ASSERT_STREQ(compose_stderr(&r, "E", 1, &c, &o),
                     "E\n... [truncated, stderr exceeded 32KB]\n" KILLED("5.000s") "\n" SKIPPED("1"));
        json_object_put(o);
#undef KILLED
#undef SKIPPED
}

/* Refused system calls: structured fields always, a note on stderr only when the code failed. */
static void test_compose_blocked(void) {
        static const ExecBlocked calls[] = { { "mount", "EPERM", 2 }, { "socket", "EAFNOSUPPORT", 1 } };
        Config c = test_config();
        json_object *o, *v, *first;
        ExecResult r;

        /* Nothing refused: the response has its usual shape. */
        r = (ExecResult) { .timeout_ms = 1000 };
        o = compose(&r, "", 0, &c);
        ASSERT_TRUE(!json_object_object_get_ex(o, "blocked_syscalls", NULL));
        json_object_put(o);

        /* Refused but coped with: listed, stderr untouched. */
        r = (ExecResult) { .stderr_size = 2, .timeout_ms = 1000, .blocked = calls, .n_blocked = 2 };
        ASSERT_STREQ(compose_stderr(&r, "E\n", 2, &c, &o), "E\n");
        ASSERT_TRUE(json_object_object_get_ex(o, "blocked_syscalls", &v) &&
                    json_object_array_length(v) == 2);
        first = json_object_array_get_idx(v, 0);
        ASSERT_STREQ(member_string(first, "name"), "mount");
        ASSERT_STREQ(member_string(first, "verdict"), "EPERM");
        ASSERT_TRUE(member_int(first, "count") == 2);
        json_object_put(o);

        /* The code failed: the note names every refused call, on a line of its own. */
        r.exit_code = 1;
        r.stderr_size = 1;
        ASSERT_STREQ(
                compose_stderr(&r, "E", 1, &c, &o),
                "E\n[sandbox] the sandbox refused these system calls: mount (EPERM), socket (EAFNOSUPPORT)");
        json_object_put(o);

        /* A timeout explains itself; the refused calls stay in the fields only. */
        r.timed_out = true;
        ASSERT_STREQ(compose_stderr(&r, "E", 1, &c, &o),
                     "E\n[sandbox] execution exceeded 1.000s and was killed");
        json_object_put(o);

        /* Killed by the filter: the note says so (the kernel kill leaves no name). */
        r = (ExecResult) { .exit_code = 159, .signal = SIGSYS, .stderr_size = 1, .timeout_ms = 1000 };
        ASSERT_STREQ(
                compose_stderr(&r, "E", 1, &c, &o),
                "E\n[sandbox] killed: the code made a system call that is never allowed in the sandbox "
                "(SIGSYS)");
        json_object_put(o);
}

static void test_compose_utf8(void) {
        /* Invalid bytes become U+FFFD, valid multi-byte characters stay, a cut character too. */
        static const char data[] = "a\xff" "b\xe4\xbd\xa0" "c\xe4\xbd";
        ExecResult r = { .stdout_size = 3, .stderr_size = 7, .timeout_ms = 1000 };
        Config c = test_config();
        json_object *o;

        o = compose(&r, data, 10, &c);
        ASSERT_STREQ(member_string(o, "stdout"), "a\xef\xbf\xbd" "b");
        ASSERT_STREQ(member_string(o, "stderr"), "\xe4\xbd\xa0" "c\xef\xbf\xbd\xef\xbf\xbd");
        json_object_put(o);
}

static void test_compose_large(void) {
        /* Artifacts of awkward sizes encode like the reference encoder. */
        size_t n = 3 * 100000 + 2;
        uint8_t *data = malloc(n);
        ExecFile f = { "big.bin", 0, n };
        ExecResult r = { .files = &f, .n_files = 1, .timeout_ms = 1000 };
        Config c = test_config();
        _cleanup_free_ char *expected = NULL;
        json_object *o;

        ASSERT_TRUE(data);
        for (size_t i = 0; i < n; i++)
                data[i] = (uint8_t) (i * 7 + 3);
        expected = base64_encode(data, n);
        ASSERT_TRUE(expected);
        o = compose(&r, data, n, &c);
        ASSERT_STREQ(member_string(json_object_array_get_idx(member_files(o), 0), "data_base64"), expected);
        json_object_put(o);
        free(data);
}

static void check_hostile(const ExecResult *r, size_t data_size) {
        static const char data[64] = {};
        HttpResponse *resp = NULL;
        Config c = test_config();

        ASSERT_TRUE(exec_result_validate(r, data_size) == -EBADMSG);
        ASSERT_TRUE(exec_result_compose(r, data, data_size, &c, NULL, &resp) == -EBADMSG);
        ASSERT_TRUE(!resp);
}

static void test_compose_hostile(void) {
        ExecFile f[3];
        ExecResult r;

        /* Streams beyond the buffer, or wrapping around. */
        check_hostile(&(ExecResult) { .stdout_size = 65 }, 64);
        check_hostile(&(ExecResult) { .stdout_size = 60, .stderr_size = 5 }, 64);
        check_hostile(&(ExecResult) { .stdout_size = UINT64_MAX, .stderr_size = 2 }, 64);
        check_hostile(&(ExecResult) { .stdout_size = 1, .stderr_size = UINT64_MAX }, 64);

        /* Files beyond the buffer, wrapping, or inside the streams. */
        r = (ExecResult) { .stdout_size = 4, .stderr_size = 4, .files = f, .n_files = 1 };
        f[0] = (ExecFile) { "a", 60, 5 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "a", 65, 0 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "a", 10, UINT64_MAX };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "a", UINT64_MAX, 2 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "a", 0, 8 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "a", 7, 2 };
        check_hostile(&r, 64);

        /* The same bytes listed many times (would multiply the response). */
        f[0] = (ExecFile) { "a", 8, 40 };
        f[1] = (ExecFile) { "b", 8, 40 };
        r.n_files = 2;
        check_hostile(&r, 64);
        f[1] = (ExecFile) { "b", 48, 16 };
        ASSERT_TRUE(exec_result_validate(&r, 64) == 0);

        /* Names that cannot be names. */
        r.n_files = 1;
        f[0] = (ExecFile) { "", 8, 1 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { NULL, 8, 1 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "dir/", 8, 1 };
        check_hostile(&r, 64);
        f[0] = (ExecFile) { "x\xff.txt", 8, 1 };
        check_hostile(&r, 64);

        /* Too many files, or files without an array. */
        r = (ExecResult) { .files = f, .n_files = BUS_EXEC_FILES_MAX + 1 };
        check_hostile(&r, 64);
        r = (ExecResult) { .files = NULL, .n_files = 1 };
        check_hostile(&r, 64);
}

static void test_accept_event_stream(void) {
        static const struct {
                const char *value;
                bool yes;
        } cases[] = {
                { "text/event-stream", true },
                { "TEXT/Event-Stream", true },
                { "application/json, text/event-stream;q=0.9", true },
                { " text/event-stream ; charset=utf-8", true },
                { "*/*", false },
                { "text/*", false },
                { "application/json", false },
                { "text/event-streamx", false },
                { "text/event-stream;q=0", false },
                { "text/event-stream; q=0.000", false },
                { "text/event-stream;q=0.1", true },
                { "", false },
                { ",,,", false },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                ASSERT_EQ(http_accept_event_stream(cases[i].value, strlen(cases[i].value)), cases[i].yes);
        ASSERT_TRUE(!http_accept_event_stream(NULL, 0));
        /* By length: what follows a NUL is not looked at as a C string would hide it. */
        ASSERT_TRUE(!http_accept_event_stream("a/b\0text/event-stream", 3));
}

/* The text members of the events in 'w' for stream 'name', concatenated (their JSON, unquoted). */
static char *sse_texts(const JsonWriter *w, const char *name, size_t *ret_size) {
        char prefix[64], *out = calloc(1, w->buf.len + 1), *p = w->buf.s ?: (char *) "";
        size_t n = 0, lp;

        ASSERT_TRUE(out);
        snprintf(prefix, sizeof(prefix), "event: %s\ndata: {\"text\":\"", name);
        lp = strlen(prefix);
        while ((p = strstr(p, prefix))) {
                char *end = strstr(p + lp, "\"}\n\n");

                ASSERT_TRUE(end);
                memcpy(out + n, p + lp, (size_t) (end - p - lp));
                n += (size_t) (end - p - lp);
                p = end;
        }
        *ret_size = n;
        return out;
}

/* Split anywhere, the chunks say what the whole says: no U+FFFD for a character cut in two, the
 * same U+FFFD where the bytes are invalid, whatever the cut. */
static void test_sse_chunks_utf8(void) {
        static const char *const texts[] = {
                "plain ascii\n",
                "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87",
                "bad \xff\xfe lone \x80 cut \xe2\x82 end",
                "\xf0\x9f\x98",  /* incomplete at the very end */
                "\xe0\x80\x80 overlong \xed\xa0\x80 surrogate \"quote\" \\ \x01",
        };

        for (size_t t = 0; t < ELEMENTSOF(texts); t++) {
                const uint8_t *p = (const uint8_t *) texts[t];
                size_t n = strlen(texts[t]);
                JsonWriter whole = {};

                ASSERT_EQ(json_writer_append_text_lossy(&whole, p, n), 0);
                for (size_t a = 0; a <= n; a++)
                        for (size_t b = a; b <= n; b++) {
                                JsonWriter w = {}, expect = {};
                                uint8_t held[4];
                                size_t n_held = 0, got_size;
                                _cleanup_free_ char *got = NULL;

                                ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held, p, a,
                                                                false),
                                          0);
                                ASSERT_TRUE(n_held <= 3);
                                ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held,
                                                                p + a, b - a, false),
                                          0);
                                ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held,
                                                                p + b, n - b, false),
                                          0);
                                ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held, NULL,
                                                                0, true),
                                          0);
                                ASSERT_EQ(n_held, 0);
                                got = sse_texts(&w, "stdout", &got_size);
                                /* The whole text, escaped as one JSON string, without its quotes. */
                                ASSERT_EQ(
                                        json_writer_append_string(&expect, whole.buf.s ?: "", whole.buf.len),
                                        0);
                                ASSERT_EQ(got_size, expect.buf.len - 2);
                                ASSERT_TRUE(memcmp(got, expect.buf.s + 1, got_size) == 0);
                                /* Nothing but events: an empty chunk gives none. */
                                ASSERT_TRUE(!w.buf.s || strstr(w.buf.s, "event: stderr") == NULL);
                                json_writer_done(&w);
                                json_writer_done(&expect);
                        }
                json_writer_done(&whole);
        }
}

static void test_sse_chunk_format(void) {
        JsonWriter w = {};
        uint8_t held[4];
        size_t n_held = 0;

        ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDERR, held, &n_held, (const uint8_t *) "a\nb\"",
                                        4, false),
                  0);
        ASSERT_STREQ(w.buf.s, "event: stderr\ndata: {\"text\":\"a\\nb\\\"\"}\n\n");
        json_writer_done(&w);
        /* Only the start of a character: nothing yet. */
        ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held, (const uint8_t *) "\xe2\x82",
                                        2, false),
                  0);
        ASSERT_TRUE(w.buf.len == 0);
        ASSERT_EQ(n_held, 2);
        ASSERT_EQ(exec_sse_format_chunk(&w, STREAM_FRAME_STDOUT, held, &n_held, (const uint8_t *) "\xac", 1,
                                        false),
                  0);
        ASSERT_STREQ(w.buf.s, "event: stdout\ndata: {\"text\":\"\xe2\x82\xac\"}\n\n");
        json_writer_done(&w);
}

int main(void) {
        RUN(test_request);
        RUN(test_compose_basic);
        RUN(test_compose_exact_text);
        RUN(test_compose_notes);
        RUN(test_compose_blocked);
        RUN(test_compose_utf8);
        RUN(test_compose_large);
        RUN(test_compose_hostile);
        RUN(test_accept_event_stream);
        RUN(test_sse_chunk_format);
        RUN(test_sse_chunks_utf8);
        return 0;
}
