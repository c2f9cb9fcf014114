/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the dify-sandbox API: error composition and envelopes, binding, trace context, the
 * dependency list, auth and routing, and Run() against a fake session manager. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-util.h"
#include "fake-manager.h"
#include "gateway-server.h"
#include "http-apis.h"
#include "http-dify.h"
#include "http-router.h"
#include "io-util.h"
#include "string-util.h"
#include "tests.h"

#define check_body(resp, expected)                                                              \
        do {                                                                                    \
                HttpResponse *_r_ = (resp);                                                     \
                const char *_e_ = (expected);                                                   \
                ASSERT_TRUE(_r_);                                                               \
                ASSERT_TRUE(http_response_flatten(_r_) == 0);                                   \
                if (_r_->size != strlen(_e_) || memcmp(_r_->body, _e_, _r_->size) != 0) {       \
                        fprintf(stderr, "%s:%d: body\n  got:      %.*s\n  expected: %s\n",       \
                                __FILE__, __LINE__, (int) _r_->size, _r_->body, _e_);           \
                        abort();                                                                \
                }                                                                               \
        } while (0)

#define ENVELOPE(stdout_, stderr_, error_, exit_code_)                                           \
        "{\"code\":0,\"message\":\"success\",\"data\":{\"stdout\":\"" stdout_ "\",\"stderr\":\"" \
        stderr_ "\",\"error\":\"" error_ "\",\"exit_code\":" exit_code_ "}}"
#define TRACEPARENT "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define ERROR_BODY(code, message) "{\"code\":" code ",\"message\":\"" message "\",\"data\":null}"
#define CUT(stream, n)                                                                                      \
        "error: " stream " exceeded SANDBOX_DIFY_MAX_OUTPUT_BYTES (" n " bytes) and was cut off\\n"
#define CODE_TOO_LARGE "code too large: more than 1024 bytes (SANDBOX_DIFY_MAX_CODE_BYTES)"

/* Composes a run result whose data buffer is stdout followed by stderr. */
static HttpResponse *compose(const DifyResult *base, const char *out, const char *err) {
        DifyResult r = *base;
        HttpResponse *resp = NULL;
        char data[4096];

        r.stdout_size = strlen(out);
        r.stderr_size = strlen(err);
        ASSERT_TRUE(r.stdout_size + r.stderr_size <= sizeof(data));
        memcpy(data, out, r.stdout_size);
        memcpy(data + r.stdout_size, err, r.stderr_size);
        ASSERT_TRUE(dify_result_compose(&r, data, r.stdout_size + r.stderr_size, &resp) == 0);
        ASSERT_TRUE(http_response_flatten(resp) == 0);
        ASSERT_TRUE(resp->status == 200);
        return resp;
}

static void check_compose(const DifyResult *r, const char *out, const char *err, const char *expected) {
        HttpResponse *resp = compose(r, out, err);

        check_body(resp, expected);
        http_response_free(resp);
}

static void test_error_composition(void) {
        static const ExecBlocked eperm[] = { { "fork", "EPERM", 1 } };
        static const ExecBlocked probes[] = { { "ioctl", "ENOTTY", 3 }, { "clone3", "ENOSYS", 1 } };
        static const ExecBlocked inet[] = { { "socket", "EAFNOSUPPORT", 2 } };
        JsonWriter w = {};

        /* Success: error stays empty whatever stderr holds (TestPythonLoggingStaysInStderr). */
        check_compose(&(DifyResult) { .exit_code = 0 }, "ok\n", "INFO:root:Starting task...\n",
                      ENVELOPE("ok\\n", "INFO:root:Starting task...\\n", "", "0"));
        /* A refusal the code coped with says nothing either. */
        check_compose(&(DifyResult) { .exit_code = 0, .blocked = eperm, .n_blocked = 1 }, "fine\n", "",
                      ENVELOPE("fine\\n", "", "", "0"));

        /* Failure: the exit code, then the whole stderr on the next line. */
        check_compose(&(DifyResult) { .exit_code = 7 }, "partial\n",
                      "Traceback (most recent call last):\nValueError: bad input\n",
                      ENVELOPE("partial\\n", "Traceback (most recent call last):\\nValueError: bad input\\n",
                               "process exited with code 7\\nTraceback (most recent call last):\\n"
                               "ValueError: bad input\\n", "7"));
        /* Nothing to add: no newline after the first line. */
        check_compose(&(DifyResult) { .exit_code = 1 }, "", "",
                      ENVELOPE("", "", "process exited with code 1", "1"));

        /* Timeout: -1 whatever the manager says, the sandbox's line, then stderr. */
        check_compose(&(DifyResult) { .exit_code = 137, .timed_out = true, .signal = SIGKILL }, "", "",
                      ENVELOPE("", "", "process exited with code -1\\nerror: timeout\\n", "-1"));
        check_compose(&(DifyResult) { .exit_code = 137, .timed_out = true, .signal = SIGKILL }, "tick\n",
                      "still going",
                      ENVELOPE("tick\\n", "still going",
                               "process exited with code -1\\nerror: timeout\\nstill going", "-1"));

        /* Refused calls: "operation not permitted" between the exit code and stderr. */
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = eperm, .n_blocked = 1 }, "",
                      "PermissionError: [Errno 1] Operation not permitted\n",
                      ENVELOPE("", "PermissionError: [Errno 1] Operation not permitted\\n",
                               "process exited with code 1\\nerror: operation not permitted\\n"
                               "PermissionError: [Errno 1] Operation not permitted\\n", "1"));
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = eperm, .n_blocked = 1 }, "",
                      "node:events:495\n      throw er;\nError: spawn EPERM\n",
                      ENVELOPE("", "node:events:495\\n      throw er;\\nError: spawn EPERM\\n",
                               "process exited with code 1\\nerror: operation not permitted\\n"
                               "node:events:495\\n      throw er;\\nError: spawn EPERM\\n", "1"));
        /* A refusal the code got over (pandas asks "uname -p" at import) is not why it failed. */
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = eperm, .n_blocked = 1 }, "",
                      "ValueError: bad input\n",
                      ENVELOPE("", "ValueError: bad input\\n",
                               "process exited with code 1\\nValueError: bad input\\n", "1"));
        /* Library probes answered ENOTTY/ENOSYS, or sockets without a network, are no refusal. */
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = inet, .n_blocked = 1 }, "",
                      "OSError: [Errno 97] Address family not supported by protocol\n",
                      ENVELOPE("", "OSError: [Errno 97] Address family not supported by protocol\\n",
                               "process exited with code 1\\n"
                               "OSError: [Errno 97] Address family not supported by protocol\\n", "1"));
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = probes, .n_blocked = 2 }, "",
                      "Operation not permitted\n",
                      ENVELOPE("", "Operation not permitted\\n",
                               "process exited with code 1\\nOperation not permitted\\n", "1"));
        check_compose(&(DifyResult) { .exit_code = 1, .blocked = probes, .n_blocked = 2 }, "", "boom\n",
                      ENVELOPE("", "boom\\n", "process exited with code 1\\nboom\\n", "1"));
        /* Killed by the filter (SIGSYS): -1 like upstream, and the refusal. */
        check_compose(&(DifyResult) { .exit_code = 128 + SIGSYS, .signal = SIGSYS }, "", "",
                      ENVELOPE("", "", "process exited with code -1\\nerror: operation not permitted\\n",
                               "-1"));
        /* Any other signal: -1, no sandbox line. */
        check_compose(&(DifyResult) { .exit_code = 128 + SIGSEGV, .signal = SIGSEGV }, "", "",
                      ENVELOPE("", "", "process exited with code -1", "-1"));
        /* Both lines when a run that failed on a refusal then ran out of time. */
        check_compose(&(DifyResult) { .exit_code = 137, .timed_out = true, .signal = SIGKILL,
                                      .blocked = eperm, .n_blocked = 1 }, "", "EPERM\n",
                      ENVELOPE("", "EPERM\\n", "process exited with code -1\\nerror: timeout\\n"
                               "error: operation not permitted\\nEPERM\\n", "-1"));

        /* Raw streams: escaped, NULs kept, invalid UTF-8 replaced, in "error" as in "stderr". */
        check_compose(&(DifyResult) { .exit_code = 2 }, "<<RESULT>>{\"a\": 1}<<RESULT>>\n", "bad \xff\t\n",
                      ENVELOPE("<<RESULT>>{\\\"a\\\": 1}<<RESULT>>\\n", "bad \xef\xbf\xbd\\t\\n",
                               "process exited with code 2\\nbad \xef\xbf\xbd\\t\\n", "2"));

        /* Streams cut at SANDBOX_DIFY_MAX_OUTPUT_BYTES say so in "error", also with exit code 0 (Dify
         * raises it rather than finding no <<RESULT>> tag); stdout is left as it came. */
        check_compose(&(DifyResult) { .exit_code = 0, .stdout_truncated = true, .output_limit = 1024 },
                      "<<RESULT>>{\"a\"", "",
                      ENVELOPE("<<RESULT>>{\\\"a\\\"", "", CUT("stdout", "1024"), "0"));
        check_compose(&(DifyResult) { .exit_code = 3, .stdout_truncated = true, .stderr_truncated = true,
                                      .output_limit = 2048 }, "x", "Traceback",
                      ENVELOPE("x", "Traceback", "process exited with code 3\\n" CUT("stdout", "2048")
                               CUT("stderr", "2048") "Traceback", "3"));
        check_compose(&(DifyResult) { .exit_code = 137, .timed_out = true, .signal = SIGKILL,
                                      .stderr_truncated = true, .output_limit = 1024 }, "", "e",
                      ENVELOPE("", "e", "process exited with code -1\\nerror: timeout\\n"
                               CUT("stderr", "1024") "e", "-1"));

        /* Sizes beyond the buffer are refused. */
        {
                HttpResponse *resp = NULL;

                DifyResult r = { .stdout_size = 3, .stderr_size = 2 };

                ASSERT_TRUE(dify_result_compose(&r, "abcd", 4, &resp) == -EBADMSG);
                r.stdout_size = UINT64_MAX;
                ASSERT_TRUE(dify_result_compose(&r, "abcd", 4, &resp) == -EBADMSG);
                ASSERT_TRUE(!resp);
        }

        /* The composition on its own, as upstream's run_code_test.go pins it. */
        ASSERT_TRUE(dify_error_compose(-1, DIFY_ERROR_TIMEOUT, "", 0, &w) == 0);
        ASSERT_EQ(w.buf.len, strlen("process exited with code -1\nerror: timeout\n"));
        ASSERT_TRUE(memcmp(w.buf.s, "process exited with code -1\nerror: timeout\n", w.buf.len) == 0);
        json_writer_done(&w);
        ASSERT_TRUE(dify_error_compose(0, DIFY_ERROR_TIMEOUT, "x", 1, &w) == 0 && w.buf.len == 0);
        ASSERT_TRUE(dify_error_compose(3, "", "x", 1, &w) == 0);
        ASSERT_TRUE(w.buf.len == strlen("process exited with code 3\nx") &&
                    memcmp(w.buf.s, "process exited with code 3\nx", w.buf.len) == 0);
        json_writer_done(&w);
}

static void test_error_envelopes(void) {
        HttpResponse *r = NULL;

        ASSERT_TRUE(dify_response_new_error(503, DIFY_CODE_UNAVAILABLE, DIFY_MESSAGE_TOO_MANY_REQUESTS,
                                            &r) == 0);
        ASSERT_TRUE(r->status == 503);
        check_body(r, ERROR_BODY("-503", "Too many requests"));
        r = http_response_free(r);

        ASSERT_TRUE(dify_response_new_error(400, DIFY_CODE_BAD_REQUEST, DIFY_MESSAGE_UNSUPPORTED_LANGUAGE,
                                            &r) == 0);
        check_body(r, ERROR_BODY("-400", "unsupported language"));
        r = http_response_free(r);

        ASSERT_TRUE(dify_response_new_error(200, DIFY_CODE_BAD_REQUEST, DIFY_MESSAGE_NETWORK_DISABLED,
                                            &r) == 0);
        check_body(r, ERROR_BODY("-400", "network is disabled, please enable it in the configuration"));
        r = http_response_free(r);

        ASSERT_TRUE(dify_response_new_error(200, DIFY_CODE_INTERNAL, "a\"b\n\xff", &r) == 0);
        check_body(r, ERROR_BODY("-500", "a\\\"b\\n\xef\xbf\xbd"));
        r = http_response_free(r);
}

static void check_run_bind(const char *body, const char *content_type, const char *language,
                           const char *code, const char *preload, bool network) {
        DifyRunRequest b = {};
        char *message = NULL;
        int r;

        r = dify_run_request_bind(body, strlen(body), content_type, &b, &message);
        if (r != 0)
                fprintf(stderr, "bind of %s failed: %s\n", body, strempty(message));
        ASSERT_TRUE(r == 0 && !message);
        ASSERT_STREQ(b.language.data, language);
        ASSERT_STREQ(b.code.data, code);
        ASSERT_STREQ(strempty(b.preload.data), preload);
        ASSERT_TRUE(b.enable_network == network);
        dify_run_request_done(&b);
}

static void check_run_bind_fails(const char *body, size_t size, const char *content_type, int expected_r,
                                 const char *expected) {
        DifyRunRequest b = {};
        char *message = NULL;

        ASSERT_TRUE(dify_run_request_bind(body, size, content_type, &b, &message) == expected_r);
        ASSERT_STREQ(message, expected);
        free(message);
        dify_run_request_done(&b);
}

#define FAILS(body, type, expected) check_run_bind_fails(body, strlen(body), type, -EINVAL, expected)
/* A string field refused for what it holds: 400 whatever the media type. */
#define REFUSES(body, type, expected) check_run_bind_fails(body, sizeof(body) - 1, type, -EBADMSG, expected)

static void test_bind(void) {
        const char *json = "application/json", *form = "application/x-www-form-urlencoded";
        DifyLanguageRequest l = {};
        DifyRunRequest b = {};
        char *message = NULL;

        check_run_bind("{\"language\":\"python3\",\"code\":\"print(1)\"}", json, "python3", "print(1)", "",
                       false);
        check_run_bind("{\"language\":\"nodejs\",\"code\":\"x\",\"preload\":\"p\",\"enable_network\":true,"
                       "\"unknown\":[1]}", json, "nodejs", "x", "p", true);
        /* encoding/json: member names match case-insensitively, the last one wins, null sets nothing. */
        check_run_bind("{\"Language\":\"python3\",\"CODE\":\"a\",\"code\":\"b\",\"preload\":null}", json,
                       "python3", "b", "", false);
        check_run_bind("{\"language\":\"python3\",\"code\":\"a\",\"enable_network\":null}", json,
                       "python3", "a", "", false);
        /* Media type parameters and case do not matter for the choice of binder. */
        check_run_bind("{\"language\":\"python3\",\"code\":\"c\"}", "Application/JSON; charset=utf-8",
                       "python3", "c", "", false);

        /* A form, like gin's ShouldBind: first value wins, '+' is a space, Go's ParseBool. */
        check_run_bind("language=python3&code=print%28%22a+b%22%29&code=ignored&enable_network=True&x=%41",
                       "application/x-www-form-urlencoded", "python3", "print(\"a b\")", "", true);
        check_run_bind("language=nodejs&code=1&enable_network=&preload=",
                       "application/x-www-form-urlencoded; charset=utf-8", "nodejs", "1", "", false);

        /* A NUL would cut the value it is in: refused, never bound as the text before it (the JSON
         * parser may already refuse it). */
        ASSERT_TRUE(dify_run_request_bind("{\"language\":\"python3\",\"code\":\"a\\u0000b\"}", 40, json, &b,
                                          &message) < 0);
        message = mfree(message);
        dify_run_request_done(&b);
        ASSERT_TRUE(dify_run_request_bind("{\"language\":\"python3\\u0000junk\",\"code\":\"x\"}", 43, json,
                                          &b, &message) < 0);
        message = mfree(message);
        dify_run_request_done(&b);
        REFUSES("language=python3%00junk&code=x", form, "language contains a NUL byte");
        REFUSES("language=python3&code=a%00b", form, "code contains a NUL byte");
        REFUSES("language=python3&code=x&preload=%00", form, "preload contains a NUL byte");
        REFUSES("language=py\0thon3&code=x", form, "language contains a NUL byte");
        REFUSES("language=python3&code=x&lang%00uage=x", form, "form field name contains a NUL byte");

        FAILS("", json, "request body is empty");
        FAILS("{\"language\"", json, "invalid JSON body");
        FAILS("{\"code\":\"a\",\"code\":\"b\",\"language\":\"python3\"}", json,
              "duplicate member in the JSON body");
        FAILS("[1,2]", json, "the JSON body must be an object");
        FAILS("\"python3\"", json, "the JSON body must be an object");
        FAILS("null", json, "language is required");
        FAILS("{}", json, "language is required");
        FAILS("{\"language\":\"python3\"}", json, "code is required");
        FAILS("{\"language\":\"python3\",\"code\":\"\"}", json, "code is required");
        FAILS("{\"language\":\"python3\",\"code\":null}", json, "code is required");
        FAILS("{\"language\":3,\"code\":\"x\"}", json, "language must be a string");
        FAILS("{\"language\":\"python3\",\"code\":[\"x\"]}", json, "code must be a string");
        FAILS("{\"language\":\"python3\",\"code\":\"x\",\"enable_network\":\"yes\"}", json,
              "enable_network must be a boolean");
        FAILS("{\"language\":\"python3\",\"code\":\"x\",\"enable_network\":1}", json,
              "enable_network must be a boolean");
        /* Any other media type binds nothing (gin's form binder finds no fields in it). */
        FAILS("{\"language\":\"python3\",\"code\":\"x\"}", "text/plain", "language is required");
        FAILS("{\"language\":\"python3\",\"code\":\"x\"}", NULL, "language is required");
        FAILS("language=python3&code=%zz", form, "invalid escape in the form body");
        FAILS("language=python3&code=%4", form, "invalid escape in the form body");
        FAILS("language=python3;code=x", "application/x-www-form-urlencoded",
              "invalid semicolon separator in the form body");
        FAILS("language=python3&code=x&enable_network=yes", "application/x-www-form-urlencoded",
              "enable_network must be a boolean");
        REFUSES("language=python3&code=%ff", "application/x-www-form-urlencoded", "code is not valid UTF-8");

        /* gin's BindJSON answers 400 (Content-Type exactly application/json), the other binders 200. */
        ASSERT_EQ(dify_bind_failure_status("application/json", -EINVAL), 400);
        ASSERT_EQ(dify_bind_failure_status("application/json; charset=utf-8", -EINVAL), 200);
        ASSERT_EQ(dify_bind_failure_status("application/x-www-form-urlencoded", -EINVAL), 200);
        ASSERT_EQ(dify_bind_failure_status(NULL, -EINVAL), 200);
        ASSERT_EQ(dify_bind_failure_status("application/x-www-form-urlencoded", -EBADMSG), 400);
        ASSERT_EQ(dify_bind_failure_status(NULL, -EBADMSG), 400);

        /* The dependency resources: the query unless the body is JSON. */
        ASSERT_TRUE(dify_language_request_bind(NULL, 0, NULL, "python3", 7, &l, &message) == 0);
        ASSERT_STREQ(l.language.data, "python3");
        dify_language_request_done(&l);
        ASSERT_TRUE(dify_language_request_bind("language=nodejs", 15, "application/x-www-form-urlencoded",
                                               "python3", 7, &l, &message) == 0);
        ASSERT_STREQ(l.language.data, "nodejs");
        dify_language_request_done(&l);
        ASSERT_TRUE(dify_language_request_bind("{\"language\":\"nodejs\"}", 21, json, "python3", 7, &l,
                                               &message) == 0);
        ASSERT_STREQ(l.language.data, "nodejs");
        dify_language_request_done(&l);
        ASSERT_TRUE(dify_language_request_bind(NULL, 0, NULL, NULL, 0, &l, &message) == -EINVAL);
        ASSERT_STREQ(message, "language is required");
        message = mfree(message);
        ASSERT_TRUE(dify_language_request_bind(NULL, 0, NULL, "", 0, &l, &message) == -EINVAL);
        message = mfree(message);
        ASSERT_TRUE(dify_language_request_bind(NULL, 0, json, "python3", 7, &l, &message) == -EINVAL);
        ASSERT_STREQ(message, "request body is empty");
        message = mfree(message);
        /* The query argument with its length: "python3%00junk" is no "python3". */
        ASSERT_TRUE(dify_language_request_bind(NULL, 0, NULL, "python3\0junk", 12, &l, &message) ==
                    -EBADMSG);
        ASSERT_STREQ(message, "language contains a NUL byte");
        message = mfree(message);
        dify_language_request_done(&l);

        ASSERT_TRUE(dify_language_is_supported("python3") && dify_language_is_supported("nodejs"));
        ASSERT_TRUE(!dify_language_is_supported("python") && !dify_language_is_supported("Python3") &&
                    !dify_language_is_supported("") && !dify_language_is_supported(NULL));
}

static void string_set(DifyString *s, const char *text) {
        s->data = strdup(text);
        ASSERT_TRUE(s->data);
        s->size = strlen(text);
}

static void check_run_code(const char *code, const char *preload, bool enabled, uint64_t max, int expected_r,
                           const char *expected) {
        DifyRunRequest b = {};
        char *s = NULL;
        size_t n = 0;

        string_set(&b.code, code);
        string_set(&b.preload, preload);
        ASSERT_EQ(dify_run_code(&b, enabled, max, &s, &n), expected_r);
        if (expected_r == 0) {
                ASSERT_STREQ(s, expected);
                ASSERT_EQ(n, strlen(expected));
        }
        free(s);
        dify_run_request_done(&b);
}

static void test_run_code(void) {
        check_run_code("print(1)", "import os", false, 100, 0, "print(1)");
        check_run_code("print(1)", "import os", true, 100, 0, "import os\nprint(1)");
        check_run_code("print(1)", "", true, 100, 0, "print(1)");
        /* Counted with the preload and its newline; exactly at the limit is fine. */
        check_run_code("12345", "abc", true, 9, 0, "abc\n12345");
        check_run_code("12345", "abc", true, 8, -EFBIG, NULL);
        check_run_code("12345", "abc", false, 5, 0, "12345");
        check_run_code("123456", "", false, 5, -EFBIG, NULL);
}

static void test_traceparent(void) {
        char buf[TRACEPARENT_LEN + 1];
        TraceContext t, u;

        ASSERT_TRUE(trace_context_parse(TRACEPARENT, &t) == 0);
        ASSERT_STREQ(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        ASSERT_STREQ(t.span_id, "00f067aa0ba902b7");
        ASSERT_STREQ(t.flags, "01");
        trace_context_format(&t, buf);
        ASSERT_STREQ(buf, TRACEPARENT);

        /* A later version may carry more fields after a dash. */
        ASSERT_TRUE(trace_context_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-ever",
                                        &t) == 0);
        ASSERT_STREQ(t.flags, "00");
        ASSERT_TRUE(trace_context_parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &t) == 0);

        static const char *const invalid[] = {
                "",
                "00",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",         /* 00 has no more */
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",         /* not a dash */
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",          /* forbidden version */
                "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",          /* uppercase */
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",          /* all-zero ids */
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
                " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(invalid); i++) {
                if (trace_context_parse(invalid[i], &t) != -EINVAL)
                        fprintf(stderr, "accepted: \"%s\"\n", invalid[i]);
                ASSERT_TRUE(trace_context_parse(invalid[i], &t) == -EINVAL);
        }
        ASSERT_TRUE(trace_context_parse(NULL, &t) == -EINVAL);

        /* Generated ones are valid and differ. */
        ASSERT_TRUE(trace_context_generate(&t) == 0);
        ASSERT_TRUE(trace_context_generate(&u) == 0);
        trace_context_format(&t, buf);
        ASSERT_TRUE(strlen(buf) == TRACEPARENT_LEN);
        ASSERT_TRUE(trace_context_parse(buf, &u) == 0);
        ASSERT_STREQ(u.trace_id, t.trace_id);
        ASSERT_STREQ(u.span_id, t.span_id);
        ASSERT_STREQ(u.flags, "00");
        ASSERT_TRUE(trace_context_generate(&u) == 0 && !streq(u.trace_id, t.trace_id));
}

#define DEPS(list) "{\"code\":0,\"message\":\"success\",\"data\":{\"dependencies\":[" list "]}}"

static void test_dependencies(void) {
        static const char text[] =
                "[{\"name\":\"numpy\",\"version\":\"1.24.2\"},{\"name\":\"\",\"version\":\"1\"},"
                "{\"version\":\"2\"},7,{\"name\":\"odd\\\"name\"},{\"name\":\"x\",\"version\":3}]";
        char path[] = "/tmp/test-gateway-dify-XXXXXX";
        HttpResponse *r = NULL;
        int fd;

        ASSERT_TRUE(dify_dependencies_compose(text, strlen(text), &r) == 0);
        ASSERT_TRUE(r->status == 200);
        check_body(r, DEPS("{\"name\":\"numpy\",\"version\":\"1.24.2\"},"
                           "{\"name\":\"odd\\\"name\",\"version\":\"\"},"
                           "{\"name\":\"x\",\"version\":\"\"}"));
        r = http_response_free(r);

        ASSERT_TRUE(dify_dependencies_compose(NULL, 0, &r) == 0);
        check_body(r, DEPS(""));
        r = http_response_free(r);
        ASSERT_TRUE(dify_dependencies_compose("{}", 2, &r) == -EBADMSG);
        ASSERT_TRUE(dify_dependencies_compose("[", 1, &r) == -EBADMSG);
        ASSERT_TRUE(!r);

        fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(write_all(fd, "[{\"name\":\"a\",\"version\":\"1\"}]", 28) == 0);
        close(fd);
        ASSERT_TRUE(dify_dependencies_load(path, &r) == 0);
        check_body(r, DEPS("{\"name\":\"a\",\"version\":\"1\"}"));
        r = http_response_free(r);
        ASSERT_TRUE(unlink(path) == 0);
        /* Not installed: an empty list. */
        ASSERT_TRUE(dify_dependencies_load(path, &r) == 0);
        check_body(r, DEPS(""));
        r = http_response_free(r);
}

/* A server as the router sees it, without sockets or event loop; 'bus' may be NULL. */
static void server_init(Server *s, const char *key, sd_bus *bus, sd_event *event) {
        *s = (Server) {
                .event = event,
                .bus = bus,
                .config = {
                        .max_body_bytes = 1000,
                        .max_code_bytes = 16,
                        .dify_max_code_bytes = 1024,
                        .dify_max_requests = 2,
                        .dify_max_workers = 1,
                        .dify_worker_timeout_sec = 15,
                        .dify_max_output_bytes = 1 << 20,
                },
                .body_budget = 1ULL << 30,
        };
        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        ASSERT_TRUE(server_set_api_key(s, key) == 0);
}

static void server_done(Server *s) {
        ASSERT_TRUE(!s->requests && s->n_requests == 0 && *dify_runs(s) == 0);
        ASSERT_TRUE(server_set_api_key(s, NULL) == 0);
}

static HttpRequest *begin(Server *s, const char *method, const char *path, const HttpRequestHeaders *h) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(s, NULL, NULL, method, path, &req) == 0);
        ASSERT_TRUE(http_request_begin(req, h) == 0);
        return req;
}

#define H(...)            &(HttpRequestHeaders) { __VA_ARGS__ }
#define RUN_PATH          "/v1/sandbox/run"
#define DEPS_PATH         "/v1/sandbox/dependencies"
#define DEPS_UPDATE       "/v1/sandbox/dependencies/update"
#define DEPS_REFRESH      "/v1/sandbox/dependencies/refresh"
#define API_KEY(k) .n_api_key = 1, .api_key = (k), .api_key_size = strlen(k)
#define BEARER(k)  .n_authorization = 1, .authorization = (k), .authorization_size = strlen(k)

static void check_begin(Server *s, const char *method, const char *path, const HttpRequestHeaders *h,
                        unsigned status, const char *body) {
        HttpRequest *req = begin(s, method, path, h);

        if (status == 0) {
                if (req->response)
                        fprintf(stderr, "%s %s: refused with %u %.*s\n", method, path, req->response->status,
                                (int) req->response->size, req->response->body);
                ASSERT_TRUE(!req->response && req->state == HTTP_REQUEST_RECEIVING);
        } else {
                ASSERT_TRUE(req->response);
                if (req->response->status != status)
                        fprintf(stderr, "%s %s: %u, expected %u\n", method, path, req->response->status,
                                status);
                ASSERT_TRUE(req->response->status == status);
                check_body(req->response, body);
        }
        http_request_free(req);
}

static void test_routes_and_auth(void) {
        const HttpRoute *r = NULL;
        char limit[64];
        Server s;

        ASSERT_TRUE(http_route_lookup(http_dify_routes, "POST", RUN_PATH, &r, NULL, NULL, 0) == 0);
        ASSERT_TRUE(r->handler == http_dify_run && (r->flags & HTTP_ROUTE_API_KEY) &&
                    (r->flags & HTTP_ROUTE_RAW_BODY));
        ASSERT_TRUE(http_route_lookup(http_dify_routes, "GET", "/health", &r, NULL, NULL, 0) == 0);
        ASSERT_TRUE(r->flags & HTTP_ROUTE_PUBLIC);
        ASSERT_TRUE(http_route_lookup(http_dify_routes, "GET", DEPS_PATH, &r, NULL, NULL, 0) == 0);
        ASSERT_TRUE(http_route_lookup(http_dify_routes, "POST", DEPS_UPDATE, &r, NULL, NULL,
                                      0) == 0);
        ASSERT_TRUE(http_route_lookup(http_dify_routes, "GET", DEPS_REFRESH, &r, NULL, NULL,
                                      0) == 0);
        ASSERT_TRUE(http_route_lookup(http_dify_routes, "GET", RUN_PATH, &r, NULL, NULL, 0) == -EOPNOTSUPP);
        /* Disjoint from the sidecar API. */
        for (const HttpRoute *d = http_dify_routes; d->method; d++)
                ASSERT_EQ(http_route_lookup(http_sidecar_routes, d->method, d->path, NULL, NULL, NULL, 0),
                          -ENOENT);
        for (const HttpRoute *d = http_sidecar_routes; d->method; d++)
                ASSERT_EQ(http_route_lookup(http_dify_routes, d->method, d->path, NULL, NULL, NULL, 0),
                          -ENOENT);

        server_init(&s, "sekrit", NULL, NULL);

        /* /health is open; /v1 wants X-Api-Key and answers 401 with nothing else. */
        check_begin(&s, "GET", "/health", H(), 0, NULL);
        check_begin(&s, "HEAD", "/health", H(), 0, NULL);
        check_begin(&s, "POST", RUN_PATH, H(), 401, "");
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("wrong")), 401, "");
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("sekri")), 401, "");
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("sekrit ")), 401, "");
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("")), 401, "");
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("Bearer sekrit")), 401, "");
        /* The sidecar's header is no key here, nor is a repeated X-Api-Key. */
        check_begin(&s, "POST", RUN_PATH, H(BEARER("Bearer sekrit")), 401, "");
        check_begin(&s, "POST", RUN_PATH,
                    H(.n_api_key = 2, .api_key = "sekrit", .api_key_size = 6), 401, "");
        /* Before the body: the size says nothing to a stranger. */
        check_begin(&s, "POST", RUN_PATH,
                    H(.n_content_length = 1, .content_length = "99999999"), 401, "");
        check_begin(&s, "GET", DEPS_PATH, H(BEARER("Bearer sekrit")), 401,
                    "");
        check_begin(&s, "GET", DEPS_PATH, H(API_KEY("sekrit")), 0, NULL);
        check_begin(&s, "POST", DEPS_UPDATE, H(API_KEY("sekrit")), 0,
                    NULL);
        check_begin(&s, "GET", DEPS_REFRESH, H(API_KEY("sekrit")), 0,
                    NULL);
        check_begin(&s, "POST", RUN_PATH, H(API_KEY("sekrit")), 0, NULL);

        /* The sidecar's routes keep their Bearer key: X-Api-Key opens none of them. */
        check_begin(&s, "POST", "/exec", H(API_KEY("sekrit")), 401,
                    "{\"error\":\"unauthorized\"}");
        check_begin(&s, "POST", "/exec", H(BEARER("Bearer sekrit")), 0, NULL);
        /* Unknown paths and methods: either key shows them, neither hides them. */
        check_begin(&s, "GET", "/nope", H(), 401, "{\"error\":\"unauthorized\"}");
        check_begin(&s, "GET", RUN_PATH, H(), 401, "{\"error\":\"unauthorized\"}");
        check_begin(&s, "GET", "/nope", H(API_KEY("sekrit")), 404, "{\"detail\":\"Not Found\"}");
        check_begin(&s, "GET", RUN_PATH, H(API_KEY("sekrit")), 405,
                    "{\"detail\":\"Method Not Allowed\"}");
        check_begin(&s, "GET", "/nope", H(BEARER("Bearer sekrit"), API_KEY("wrong")), 404,
                    "{\"detail\":\"Not Found\"}");

        /* The run's body limit follows SANDBOX_DIFY_MAX_CODE_BYTES, not SANDBOX_MAX_BODY_BYTES; past
         * a limit, the dify routes answer 200 and their envelope (Dify shows messages, not statuses). */
        ASSERT_EQ(dify_run_body_max(&s.config), 1024 * 6 + 64 * 1024);
        (void) snprintf(limit, sizeof(limit), "%u", 1024 * 6 + 64 * 1024);
        check_begin(&s, "POST", RUN_PATH,
                    H(API_KEY("sekrit"), .n_content_length = 1, .content_length = limit), 0,
                    NULL);
        (void) snprintf(limit, sizeof(limit), "%u", 1024 * 6 + 64 * 1024 + 1);
        check_begin(&s, "POST", RUN_PATH,
                    H(API_KEY("sekrit"), .n_content_length = 1, .content_length = limit), 200,
                    ERROR_BODY("-400", "request body exceeds 71680 bytes (6 per byte of "
                               "SANDBOX_DIFY_MAX_CODE_BYTES, plus 64 KiB)"));
        check_begin(&s, "POST", DEPS_UPDATE,
                    H(API_KEY("sekrit"), .n_content_length = 1, .content_length = "1001"), 200,
                    ERROR_BODY("-400", "request body exceeds 1000 bytes (SANDBOX_MAX_BODY_BYTES)"));
        /* The sidecar's routes keep their 413. */
        check_begin(&s, "POST", "/exec",
                    H(BEARER("Bearer sekrit"), .n_content_length = 1, .content_length = "1001"), 413,
                    "{\"error\":\"request body exceeds 1000 bytes\"}");

        server_done(&s);

        /* Without a key, the dify routes are open too. */
        server_init(&s, NULL, NULL, NULL);
        check_begin(&s, "POST", RUN_PATH, H(), 0, NULL);
        server_done(&s);
}

/* Runs a request through the router with 'body', without a bus: everything answered before the
 * call. Returns the request with its response. */
static HttpRequest *dispatch(Server *s, const char *method, const char *path, const HttpRequestHeaders *h,
                             const char *body) {
        HttpRequest *req = begin(s, method, path, h);

        ASSERT_TRUE(!req->response);
        if (body)
                ASSERT_TRUE(http_request_append_body(req, body, strlen(body)) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && !req->slot);
        /* The raw body is gone once the resource has bound it; its reservation stays until the
         * request completes. */
        ASSERT_TRUE(!req->body && s->body_bytes >= req->body_reserved);
        return req;
}

static void check_dispatch(Server *s, const char *method, const char *path, const HttpRequestHeaders *h,
                           const char *body, unsigned status, const char *expected) {
        HttpRequest *req = dispatch(s, method, path, h, body);

        if (req->response->status != status)
                fprintf(stderr, "%s %s: %u, expected %u\n", method, path, req->response->status, status);
        ASSERT_TRUE(req->response->status == status);
        check_body(req->response, expected);
        http_request_free(req);
}

static bool has_log_field(const HttpRequest *req, const char *field) {
        for (unsigned i = 0; i < req->n_log_fields; i++)
                if (streq(req->log_fields[i], field))
                        return true;
        return false;
}

#define JSON_HEADERS(...) H(API_KEY("k"), .content_type = "application/json", __VA_ARGS__)

static void test_answers_before_the_call(void) {
        HttpRequest *req;
        Server s;

        server_init(&s, "k", NULL, NULL);

        check_dispatch(&s, "GET", "/health", H(), NULL, 200, "\"ok\"");

        /* Bind errors: 400 under gin's BindJSON, 200 otherwise; -400 in both. */
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), "{\"language\"", 400,
                       ERROR_BODY("-400", "invalid JSON body"));
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), "{\"language\":\"python3\"}", 400,
                       ERROR_BODY("-400", "code is required"));
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), NULL, 400,
                       ERROR_BODY("-400", "request body is empty"));
        check_dispatch(&s, "POST", RUN_PATH,
                       H(API_KEY("k"), .content_type = "application/json; charset=utf-8"),
                       "{\"language\":\"python3\",\"code\":7}", 200,
                       ERROR_BODY("-400", "code must be a string"));
        check_dispatch(&s, "POST", RUN_PATH, H(API_KEY("k")),
                       "{\"language\":\"python3\",\"code\":\"1\"}", 200,
                       ERROR_BODY("-400", "language is required"));

        /* Then the language (HTTP 400), then the network (HTTP 200). */
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), "{\"language\":\"python2\",\"code\":\"1\"}",
                       400, ERROR_BODY("-400", "unsupported language"));
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(),
                       "{\"language\":\"python2\",\"code\":\"1\",\"enable_network\":true}", 400,
                       ERROR_BODY("-400", "unsupported language"));
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(),
                       "{\"language\":\"nodejs\",\"code\":\"1\",\"enable_network\":true}", 200,
                       ERROR_BODY("-400", "network is disabled, please enable it in the configuration"));

        /* Code over SANDBOX_DIFY_MAX_CODE_BYTES (1024 here), preload included when enabled: 200 and a
         * message naming the limit, whatever the media type. */
        {
                char body[2048], code[1026];

                memset(code, 'x', 1025);
                code[1025] = 0;
                (void) snprintf(body, sizeof(body), "{\"language\":\"python3\",\"code\":\"%s\"}", code);
                check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), body, 200,
                               ERROR_BODY("-400", CODE_TOO_LARGE));
                code[1024] = 0;
                s.config.dify_enable_preload = true;
                (void) snprintf(body, sizeof(body),
                                "{\"language\":\"python3\",\"code\":\"%s\",\"preload\":\"a\"}", code);
                check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), body, 200,
                               ERROR_BODY("-400", CODE_TOO_LARGE));
                s.config.dify_enable_preload = false;
        }

        /* MAX_REQUESTS in flight: 503 before anything else. */
        *dify_runs(&s) = 2;
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), "{\"language\":\"python3\",\"code\":\"1\"}",
                       503, ERROR_BODY("-503", "Too many requests"));
        check_dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(), "garbage", 503,
                       ERROR_BODY("-503", "Too many requests"));
        *dify_runs(&s) = 0;

        /* Trace context on the access-log entry: the client's, sanitized user fields. */
        req = dispatch(&s, "POST", RUN_PATH,
                       JSON_HEADERS(.n_traceparent = 1,
                                    .traceparent = TRACEPARENT,
                                    .user_id = "user-1\x1b[2J", .user_type = "account"),
                       "{}");
        ASSERT_TRUE(has_log_field(req, "SCOPEBOX_TRACE_ID=4bf92f3577b34da6a3ce929d0e0e4736"));
        ASSERT_TRUE(has_log_field(req, "SCOPEBOX_SPAN_ID=00f067aa0ba902b7"));
        ASSERT_TRUE(has_log_field(req, "SCOPEBOX_USER_ID=user-1\\x1b[2J"));
        ASSERT_TRUE(has_log_field(req, "SCOPEBOX_USER_TYPE=account"));
        http_request_free(req);
        /* Invalid or repeated traceparent: a new trace; no user fields without the headers. */
        req = dispatch(&s, "POST", RUN_PATH,
                       JSON_HEADERS(.n_traceparent = 2,
                                    .traceparent = TRACEPARENT),
                       "{}");
        ASSERT_TRUE(req->n_log_fields == 2);
        ASSERT_TRUE(startswith(req->log_fields[0], "SCOPEBOX_TRACE_ID=") &&
                    strlen(req->log_fields[0]) == 18 + 32);
        ASSERT_TRUE(!has_log_field(req, "SCOPEBOX_TRACE_ID=4bf92f3577b34da6a3ce929d0e0e4736"));
        http_request_free(req);
        /* Long user ids are cut to what the manager takes, escapes included. */
        {
                char id[300];

                memset(id, 'u', sizeof(id) - 1);
                id[sizeof(id) - 1] = 0;
                req = dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(.user_id = id), "{}");
                ASSERT_TRUE(req->n_log_fields == 3);
                ASSERT_TRUE(strlen(req->log_fields[2]) == strlen("SCOPEBOX_USER_ID=") + DIFY_USER_FIELD_MAX);
                ASSERT_TRUE(endswith(req->log_fields[2], "uuu..."));
                http_request_free(req);

                memset(id, '\x01', sizeof(id) - 1);
                req = dispatch(&s, "POST", RUN_PATH, JSON_HEADERS(.user_id = id), "{}");
                ASSERT_TRUE(startswith(req->log_fields[2], "SCOPEBOX_USER_ID=\\x01\\x01"));
                ASSERT_TRUE(strlen(req->log_fields[2]) <= strlen("SCOPEBOX_USER_ID=") + DIFY_USER_FIELD_MAX);
                http_request_free(req);
        }

        /* The dependency resources: python3 only. */
        check_dispatch(&s, "GET", DEPS_PATH, H(API_KEY("k"), .language = "nodejs", .language_size = 6),
                       NULL, 400, ERROR_BODY("-400", "unsupported language"));
        check_dispatch(&s, "GET", DEPS_REFRESH, H(API_KEY("k")), NULL,
                       200, ERROR_BODY("-400", "language is required"));
        check_dispatch(&s, "POST", DEPS_UPDATE, JSON_HEADERS(), "{\"language\":\"nodejs\"}",
                       400, ERROR_BODY("-400", "unsupported language"));
        req = dispatch(&s, "GET", DEPS_PATH, H(API_KEY("k"), .language = "python3", .language_size = 7),
                       NULL);
        ASSERT_TRUE(req->response->status == 200);
        ASSERT_TRUE(startswith(req->response->body,
                               "{\"code\":0,\"message\":\"success\",\"data\":{\"dependencies\":["));
        http_request_free(req);

        /* Past the checks, the call needs the bus. */
        req = begin(&s, "POST", RUN_PATH, JSON_HEADERS());
        ASSERT_TRUE(http_request_append_body(req, "{\"language\":\"python3\",\"code\":\"1\"}", 33) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == -ENOTCONN);
        ASSERT_TRUE(*dify_runs(&s) == 0);
        http_request_free(req);

        server_done(&s);
}

/* A session manager that answers Run() on the other end of a socketpair. */
typedef enum FakeMode {
        FAKE_OK,
        FAKE_ERROR,      /* answer with fake->error_name */
        FAKE_HOLD,       /* keep the call, answer later */
} FakeMode;

typedef struct Fake {
        FakeMode mode;
        const char *error_name;
        sd_bus_message *held;
        unsigned calls;
        /* What the last call carried. */
        char *language, *code, *traceparent, *user_id, *user_type;
        size_t code_size;
        bool enable_network;
        unsigned n_options;
        int hangup;      /* a duplicate of the call's hang-up pipe */
} Fake;

static void fake_clear(Fake *f) {
        free(f->language);
        free(f->code);
        free(f->traceparent);
        free(f->user_id);
        free(f->user_type);
        safe_close(f->hangup);
        *f = (Fake) { .mode = f->mode, .error_name = f->error_name, .held = f->held, .calls = f->calls,
                      .hangup = -EBADF };
}

static int fake_run_reply(sd_bus_message *m) {
        static const char out[] = "<<RESULT>>{\"b\": 1}<<RESULT>>\n";
        static const char err[] = "PermissionError: [Errno 1] Operation not permitted\n";
        char data[sizeof(out) + sizeof(err)];
        _cleanup_close_ int fd = -EBADF;

        memcpy(data, out, sizeof(out) - 1);
        memcpy(data + sizeof(out) - 1, err, sizeof(err) - 1);
        fd = memfd_new_data("fake-run", data, sizeof(data) - 2);
        ASSERT_TRUE(fd >= 0);
        return sd_bus_reply_method_return(m, "itta{sv}h", 1, (uint64_t) sizeof(out) - 1,
                                          (uint64_t) sizeof(err) - 1, 5,
                                          "timed_out", "b", 0,
                                          "duration_usec", "t", (uint64_t) 1234,
                                          "signal", "i", 0,
                                          "blocked_syscalls", "a(ssu)", 1, "clone", "EPERM", 1,
                                          "future_key", "as", 1, "ignored",
                                          fd);
}

static int fake_run(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        const char *language;
        int fd, r;

        fake_clear(f);
        f->calls++;
        ASSERT_TRUE(sd_bus_message_read(m, "sh", &language, &fd) >= 0);
        f->language = strdup(language);
        ASSERT_TRUE(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE);
        ASSERT_TRUE(read_full_memfd(fd, 1 << 20, &f->code, &f->code_size) >= 0);

        ASSERT_TRUE(sd_bus_message_enter_container(m, 'a', "{sv}") >= 0);
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *k, *v;

                f->n_options++;
                ASSERT_TRUE(sd_bus_message_read(m, "s", &k) >= 0);
                if (streq(k, "enable_network")) {
                        int b;
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "b", &b) >= 0);
                        f->enable_network = b;
                } else if (streq(k, "hangup")) {
                        int h;
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "h", &h) >= 0);
                        /* (It may have hung up already: a client that went before the call left.) */
                        ASSERT_EQ(fd_is_pipe_read_end(h), 1);
                        f->hangup = fcntl(h, F_DUPFD_CLOEXEC, 3);
                        ASSERT_TRUE(f->hangup >= 0);
                } else {
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "s", &v) >= 0);
                        if (streq(k, "traceparent"))
                                f->traceparent = strdup(v);
                        else if (streq(k, "user_id"))
                                f->user_id = strdup(v);
                        else if (streq(k, "user_type"))
                                f->user_type = strdup(v);
                        else
                                ASSERT_TRUE(!"unexpected option");
                }
                ASSERT_TRUE(sd_bus_message_exit_container(m) >= 0);
        }
        ASSERT_TRUE(r >= 0 && sd_bus_message_exit_container(m) >= 0);

        switch (f->mode) {
        case FAKE_ERROR:
                return sd_bus_error_set(error, f->error_name,
                                        streq(f->error_name, SD_BUS_ERROR_INVALID_ARGS) ?
                                        "unsupported language" : "Failed to start unit: /run/secret");
        case FAKE_HOLD:
                f->held = sd_bus_message_ref(m);
                return 1;
        default:
                return fake_run_reply(m);
        }
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("Run", "sha{sv}", "itta{sv}h", fake_run, 0),
        SD_BUS_VTABLE_END,
};

typedef struct Env {
        sd_event *event;
        sd_bus *manager;
        Server server;
        Fake fake;
} Env;

static void env_setup(Env *env) {
        sd_bus *client = NULL;

        *env = (Env) { .fake.hangup = -EBADF };
        ASSERT_TRUE(sd_event_new(&env->event) >= 0);
        fake_manager_connect(env->event, fake_vtable, &env->fake, &env->manager, &client);
        server_init(&env->server, "k", client, env->event);
}

static void env_done(Env *env) {
        server_done(&env->server);
        fake_clear(&env->fake);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        env->manager = sd_bus_flush_close_unref(env->manager);
        env->server.bus = sd_bus_flush_close_unref(env->server.bus);
        env->event = sd_event_unref(env->event);
}

static HttpRequest *run_request(Env *env, const HttpRequestHeaders *h, const char *body) {
        HttpRequest *req = begin(&env->server, "POST", RUN_PATH, h);

        ASSERT_TRUE(!req->response);
        ASSERT_TRUE(http_request_append_body(req, body, strlen(body)) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->slot && !req->response);
        return req;
}

static void wait_for_response(Env *env, HttpRequest *req) {
        for (unsigned i = 0; i < 200 && !req->response; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(req->response && !req->slot);
}

#define RUN_BODY "{\"language\":\"python3\",\"code\":\"print(1)\",\"preload\":\"import os\"}"

static void test_run(void) {
        HttpRequest *req, *second;
        Env env;

        env_setup(&env);

        /* The call: language, the code as a sealed memfd, the options; the reply in the envelope. */
        req = run_request(&env, JSON_HEADERS(.n_traceparent = 1,
                                             .traceparent = TRACEPARENT,
                                             .user_id = "u\"1", .user_type = "end_user"), RUN_BODY);
        ASSERT_EQ(*dify_runs(&env.server), 1);
        wait_for_response(&env, req);
        ASSERT_EQ(*dify_runs(&env.server), 0);
        ASSERT_TRUE(req->response->status == 200);
        check_body(req->response,
                   ENVELOPE("<<RESULT>>{\\\"b\\\": 1}<<RESULT>>\\n",
                            "PermissionError: [Errno 1] Operation not permitted\\n",
                            "process exited with code 1\\nerror: operation not permitted\\n"
                            "PermissionError: [Errno 1] Operation not permitted\\n", "1"));
        http_request_free(req);
        ASSERT_STREQ(env.fake.language, "python3");
        /* ENABLE_PRELOAD is off: the preload is dropped. */
        ASSERT_TRUE(env.fake.code_size == 8 && streq(env.fake.code, "print(1)"));
        ASSERT_TRUE(!env.fake.enable_network && env.fake.n_options == 5);
        /* The request is gone: so is the writer of its hang-up pipe. */
        ASSERT_EQ(pipe_hung_up(env.fake.hangup), 1);
        ASSERT_STREQ(env.fake.traceparent, TRACEPARENT);
        ASSERT_STREQ(env.fake.user_id, "u\\\"1");
        ASSERT_STREQ(env.fake.user_type, "end_user");

        /* With ENABLE_PRELOAD and ENABLE_NETWORK: preload, a newline, the code; the network asked for. */
        env.server.config.dify_enable_preload = true;
        env.server.config.dify_enable_network = true;
        req = run_request(&env, JSON_HEADERS(),
                          "{\"language\":\"nodejs\",\"code\":\"main()\",\"preload\":\"var a\","
                          "\"enable_network\":true}");
        wait_for_response(&env, req);
        http_request_free(req);
        ASSERT_STREQ(env.fake.language, "nodejs");
        ASSERT_STREQ(env.fake.code, "var a\nmain()");
        ASSERT_TRUE(env.fake.enable_network && env.fake.n_options == 3);
        ASSERT_TRUE(env.fake.traceparent && strlen(env.fake.traceparent) == TRACEPARENT_LEN);
        env.server.config.dify_enable_preload = false;
        env.server.config.dify_enable_network = false;

        /* MAX_REQUESTS (2) counts runs from acceptance to result. */
        env.fake.mode = FAKE_HOLD;
        req = run_request(&env, JSON_HEADERS(), RUN_BODY);
        for (unsigned i = 0; i < 200 && !env.fake.held; i++)
                ASSERT_TRUE(sd_event_run(env.event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(env.fake.held);
        second = run_request(&env, JSON_HEADERS(), RUN_BODY);
        ASSERT_EQ(*dify_runs(&env.server), 2);
        check_dispatch(&env.server, "POST", RUN_PATH, JSON_HEADERS(), RUN_BODY, 503,
                       ERROR_BODY("-503", "Too many requests"));
        /* A client that goes away (MHD completes its request) keeps its place until the manager
         * has ended its run: its hang-up pipe asks for that. */
        {
                void *cls = second;

                http_router_request_completed(NULL, NULL, &cls, MHD_REQUEST_TERMINATED_CLIENT_ABORT);
        }
        ASSERT_TRUE(second->orphaned && env.server.n_orphaned == 1);
        ASSERT_EQ(*dify_runs(&env.server), 2);
        check_dispatch(&env.server, "POST", RUN_PATH, JSON_HEADERS(), RUN_BODY, 503,
                       ERROR_BODY("-503", "Too many requests"));
        ASSERT_TRUE(fake_run_reply(env.fake.held) >= 0);
        env.fake.held = sd_bus_message_unref(env.fake.held);
        wait_for_response(&env, req);
        ASSERT_EQ(*dify_runs(&env.server), 1);
        ASSERT_TRUE(req->response->status == 200);
        http_request_free(req);
        /* The fake gets the second one's call now, sees its pipe hung up, and ends it. */
        for (unsigned i = 0; i < 200 && !env.fake.held; i++)
                ASSERT_TRUE(sd_event_run(env.event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(env.fake.held);
        ASSERT_EQ(pipe_hung_up(env.fake.hangup), 1);
        ASSERT_EQ(*dify_runs(&env.server), 1);
        ASSERT_TRUE(sd_bus_reply_method_errorf(env.fake.held, BUS_ERROR_CANCELLED, "cancelled") >= 0);
        env.fake.held = sd_bus_message_unref(env.fake.held);
        for (unsigned i = 0; i < 200 && env.server.requests; i++)
                ASSERT_TRUE(sd_event_run(env.event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_EQ(*dify_runs(&env.server), 0);
        ASSERT_TRUE(!env.server.requests && env.server.n_orphaned == 0);

        /* A request freed outright (the gateway stopping) gives its place back at once. */
        second = run_request(&env, JSON_HEADERS(), RUN_BODY);
        ASSERT_EQ(*dify_runs(&env.server), 1);
        http_request_free(second);
        ASSERT_EQ(*dify_runs(&env.server), 0);
        for (unsigned i = 0; i < 200 && !env.fake.held; i++)
                ASSERT_TRUE(sd_event_run(env.event, 10 * USEC_PER_MSEC) >= 0);
        env.fake.held = sd_bus_message_unref(env.fake.held);

        /* The manager's errors: its queue bound is a 503, a bad argument -400, the rest -500 with a
         * message that tells nothing of the host. */
        static const struct {
                const char *error;
                unsigned status;
                const char *body;
        } errors[] = {
                { BUS_ERROR_LIMIT_EXCEEDED,  503, ERROR_BODY("-503", "Too many requests")       },
                { SD_BUS_ERROR_INVALID_ARGS, 200, ERROR_BODY("-400", "unsupported language")    },
                { BUS_ERROR_BACKEND_FAILED,  200, ERROR_BODY("-500", "sandbox backend failure") },
                { SD_BUS_ERROR_ACCESS_DENIED, 200, ERROR_BODY("-500", "internal error")         },
                /* The manager died with the run: said so (the request is young, the connection up). */
                { SD_BUS_ERROR_NO_REPLY,     200, ERROR_BODY("-500", "session manager restarted, retry") },
        };
        env.fake.mode = FAKE_ERROR;
        for (size_t i = 0; i < ELEMENTSOF(errors); i++) {
                env.fake.error_name = errors[i].error;
                req = run_request(&env, JSON_HEADERS(), RUN_BODY);
                wait_for_response(&env, req);
                ASSERT_EQ(req->response->status, errors[i].status);
                check_body(req->response, errors[i].body);
                http_request_free(req);
        }
        ASSERT_EQ(*dify_runs(&env.server), 0);

        env_done(&env);
}

int main(void) {
        RUN(test_error_composition);
        RUN(test_error_envelopes);
        RUN(test_bind);
        RUN(test_run_code);
        RUN(test_traceparent);
        RUN(test_dependencies);
        RUN(test_routes_and_auth);
        RUN(test_answers_before_the_call);
        RUN(test_run);
        return 0;
}
