/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the gateway's HTTP layer: error shapes, bus errors, routing, pre-body checks, body caps. */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus-util.h"
#include "gateway-auth.h"
#include "gateway-server.h"
#include "http-apis.h"
#include "http-dify.h"
#include "http-router.h"
#include "http-storage.h"
#include "http-util.h"
#include "json-util.h"
#include "string-util.h"
#include "tests.h"

#define check_body(resp, expected)                                                      \
        do {                                                                            \
                const HttpResponse *_r_ = (resp);                                       \
                ASSERT_TRUE(_r_);                                                             \
                if (_r_->size != strlen(expected) || memcmp(_r_->body, expected, _r_->size) != 0) { \
                        fprintf(stderr, "%s:%d: body\n  got:      %.*s\n  expected: %s\n", __FILE__, \
                                __LINE__, (int) _r_->size, _r_->body, expected);        \
                        abort();                                                        \
                }                                                                       \
        } while (0)

#define SID "0123456789abcdef0123456789abcdef"
#define DETAIL(s) "{\"detail\":\"" s "\"}"
#define PYDANTIC(type, loc, msg) \
        "{\"detail\":[{\"type\":\"" type "\",\"loc\":[" loc "],\"msg\":\"" msg "\"}]}"

static void test_error_shapes(void) {
        HttpResponse *r = NULL;
        JsonDispatchError e;

        ASSERT_TRUE(http_response_new_detail(404, "session not found or not running", &r) == 0);
        ASSERT_TRUE(r->status == 404);
        check_body(r, DETAIL("session not found or not running"));
        r = http_response_free(r);

        ASSERT_TRUE(http_response_new_error(401, "unauthorized", &r) == 0);
        check_body(r, "{\"error\":\"unauthorized\"}");
        r = http_response_free(r);

        /* Quotes, backslashes, control characters and slashes (json-c would escape those). */
        ASSERT_TRUE(http_response_new_detail(400, "a\"b\\c\nd\x01/e", &r) == 0);
        check_body(r, DETAIL("a\\\"b\\\\c\\nd\\u0001/e"));
        r = http_response_free(r);

        /* Invalid UTF-8 never reaches the client raw. */
        ASSERT_TRUE(http_response_new_detail(400, "x\xff", &r) == 0);
        check_body(r, DETAIL("x\xef\xbf\xbd"));
        r = http_response_free(r);

        e = (JsonDispatchError) { "code", "missing", "Field required" };
        ASSERT_TRUE(http_response_new_validation(&e, &r) == 0);
        ASSERT_TRUE(r->status == 422);
        check_body(r, PYDANTIC("missing", "\"body\",\"code\"", "Field required"));
        r = http_response_free(r);

        e = (JsonDispatchError) { NULL, "model_attributes_type",
                                  "Input should be a valid dictionary or object to extract fields from" };
        ASSERT_TRUE(http_response_new_validation(&e, &r) == 0);
        check_body(r, PYDANTIC("model_attributes_type", "\"body\"",
                               "Input should be a valid dictionary or object to extract fields from"));
        r = http_response_free(r);

        ASSERT_TRUE(http_response_new_json_invalid(&r) == 0);
        ASSERT_TRUE(r->status == 422);
        check_body(r, PYDANTIC("json_invalid", "\"body\",0", "JSON decode error"));
        r = http_response_free(r);

        ASSERT_TRUE(http_response_new_body_missing(&r) == 0);
        check_body(r, PYDANTIC("missing", "\"body\"", "Field required"));
        r = http_response_free(r);
}

static void check_call_map(const char *name, const char *message, bool recipient_gone, unsigned status,
                           const char *body, bool internal, const char *retry_after) {
        sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(name, message);
        HttpResponse *r = NULL;
        bool is_internal = !internal;
        const char *detail = NULL;
        unsigned s = 0;

        ASSERT_TRUE(http_response_new_call_error(&e, recipient_gone, &r, &is_internal) == 0);
        if (r->status != status)
                fprintf(stderr, "%s: got %u, expected %u\n", name, r->status, status);
        ASSERT_TRUE(r->status == status);
        check_body(r, body);
        ASSERT_TRUE(is_internal == internal);
        /* Only what a retry cures says when to retry. */
        ASSERT_TRUE(streq_ptr(r->retry_after, retry_after));
        http_response_free(r);

        /* The one table behind both (the dify-sandbox API's envelope takes status and text). */
        is_internal = !internal;
        http_bus_error_describe(&e, recipient_gone, &s, &detail, &is_internal);
        ASSERT_TRUE(s == status && detail && is_internal == internal);
}

static void check_map(const char *name, const char *message, unsigned status, const char *body,
                      bool internal) {
        HttpResponse *r = NULL;
        sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(name, message);

        /* 429 (a queue's timeout, a limit) and 503 say when to retry. */
        check_call_map(name, message, false, status, body, internal,
                       status == 503 || status == 429 ? "1" : NULL);
        /* The answer of a call whose end is not known is the same. */
        ASSERT_TRUE(http_response_new_bus_error(&e, &r, NULL) == 0);
        ASSERT_TRUE(r->status == status);
        check_body(r, body);
        http_response_free(r);
}

#define NOT_CONFIGURED DETAIL("storage backend not configured")
#define INTERNAL       DETAIL("internal error")
#define RESTARTED      DETAIL("session manager restarted, retry")

static void test_bus_error_mapping(void) {
        /* The exact text clients match, whatever the manager says. */
        check_map(BUS_ERROR_NO_SUCH_SESSION, "Session 0123 is being torn down", 404,
                  DETAIL("session not found or not running"), false);
        check_map(BUS_ERROR_NO_SUCH_SESSION, NULL, 404, DETAIL("session not found or not running"), false);

        /* Client-side conditions: the manager's message is the detail. */
        check_map(BUS_ERROR_LIMIT_EXCEEDED, "too many active sessions", 429,
                  DETAIL("too many active sessions"), false);
        check_map(BUS_ERROR_LIMIT_EXCEEDED, "exec queue is full", 429, DETAIL("exec queue is full"), false);
        check_map(BUS_ERROR_BUSY, "session is busy", 429, DETAIL("session is busy"), false);
        check_map(BUS_ERROR_BUSY, "", 429, DETAIL("session is busy"), false);
        check_map(SD_BUS_ERROR_INVALID_ARGS, "Invalid timeout_ms", 400, DETAIL("Invalid timeout_ms"), false);
        check_map(BUS_ERROR_INVALID_PATH, "path must be under /workspace", 400,
                  DETAIL("path must be under /workspace"), false);
        check_map(BUS_ERROR_TOO_LARGE, "file too large", 413, DETAIL("file too large"), false);
        /* dbus-daemon's bound of calls waiting for replies: nothing was done, retry. */
        check_map(SD_BUS_ERROR_LIMITS_EXCEEDED, "The maximum number of pending replies per connection has "
                  "been reached", 503, DETAIL("too many requests in flight, retry later"), true);
        check_map(BUS_ERROR_NOT_FOUND, "file not found", 404, DETAIL("file not found"), false);
        check_map(BUS_ERROR_STORAGE_FAILED, "S3 said 403", 502, DETAIL("S3 said 403"), false);
        check_map(BUS_ERROR_NOT_RUNNING, "nothing runs here", 409, DETAIL("no exec is running"), false);
        check_map(BUS_ERROR_DRAINING, "draining since 12:00", 503, DETAIL("node is draining"), true);

        /* The storage block, decided on the name alone. Not in effect: the contract's text, whatever
         * the daemon's words. */
        check_map(BUS_ERROR_STORAGE_NOT_CONFIGURED, "no bucket", 400, NOT_CONFIGURED, false);
        check_map(BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL, 400, NOT_CONFIGURED, false);
        /* Refused by the endpoint policy: the reason, which names only what the client sent. */
        check_map(BUS_ERROR_STORAGE_REFUSED, "storage endpoint 127.0.0.2 is an address of this host", 400,
                  DETAIL("storage endpoint 127.0.0.2 is an address of this host"), false);
        check_map(BUS_ERROR_STORAGE_REFUSED, NULL, 400, DETAIL("storage endpoint refused"), false);
        /* The agent could not tell: 503, ours, retried after a while like a failed restore. */
        check_call_map(BUS_ERROR_POLICY_UNAVAILABLE, "route lookup failed", false, 503,
                       DETAIL("route lookup failed"), true, "5");
        check_call_map(BUS_ERROR_POLICY_UNAVAILABLE, NULL, false, 503,
                       DETAIL("storage endpoint could not be checked, retry later"), true, "5");
        check_call_map(BUS_ERROR_RESTORE_FAILED, "failed to restore: x; retry later", false, 503,
                       DETAIL("failed to restore: x; retry later"), true, "5");

        /* Our failures: a generic text, the details stay in our log. */
        check_map(BUS_ERROR_BACKEND_FAILED, "Failed to start scopebox-runner-x.scope: /secret/path", 500,
                  DETAIL("sandbox backend failure"), true);
        /* Between the manager and the storage agent only: never meant for a client. */
        check_map(BUS_ERROR_UNKNOWN_TOKEN, "unknown archive token 1f2e", 500, INTERNAL, true);
        check_map(BUS_ERROR_ARCHIVE_DAMAGED, "checksum mismatch in /var/lib/x", 500, INTERNAL, true);
        check_map(BUS_ERROR_CANCELLED, "cancelled: the caller hung up", 500, DETAIL("internal error"), true);
        check_map(SD_BUS_ERROR_NO_REPLY, "Connection timed out", 500,
                  DETAIL("session manager did not answer"), true);
        check_map(SD_BUS_ERROR_NO_REPLY, "Method call timed out", 500,
                  DETAIL("session manager did not answer"), true);
        check_map(SD_BUS_ERROR_TIMEOUT, "x", 500, DETAIL("session manager did not answer"), true);
        /* The bus daemon's words for a recipient that went away decide nothing by themselves. */
        check_map(SD_BUS_ERROR_NO_REPLY, "Message recipient disconnected from message bus without replying",
                  500, DETAIL("session manager did not answer"), true);
        check_map(SD_BUS_ERROR_NO_REPLY, "Remote peer disconnected", 500,
                  DETAIL("session manager did not answer"), true);
        check_map(SD_BUS_ERROR_SERVICE_UNKNOWN, "The name io.scopebox.SessionManager1 was not provided", 500,
                  DETAIL("session manager unavailable"), true);
        check_map(SD_BUS_ERROR_DISCONNECTED, "x", 500, DETAIL("session manager unavailable"), true);
        check_map("org.freedesktop.DBus.Error.Spawn.ChildExited", "exit status 1", 500,
                  DETAIL("internal error"), true);
        check_map(SD_BUS_ERROR_ACCESS_DENIED, "Rejected send message", 500, DETAIL("internal error"), true);
        check_map("io.scopebox.Error.SomethingNew", "x", 500, DETAIL("internal error"), true);

        /* The manager died with the call: retry, whatever the words. */
        check_call_map(SD_BUS_ERROR_NO_REPLY, "Remote peer disconnected", true, 503, RESTARTED, true, "1");
        check_call_map(SD_BUS_ERROR_NO_REPLY, "Méthode expirée", true, 503, RESTARTED, true, "1");
        check_call_map(SD_BUS_ERROR_NO_REPLY, NULL, true, 503, RESTARTED, true, "1");
}

/* A NoReply is the recipient's going away when it came on an open connection before the call's own
 * timeout could have fired; the message plays no part. */
static void test_recipient_gone(void) {
        static const char *const messages[] = {
                NULL,
                "",
                "Method call timed out",
                "Message recipient disconnected from message bus without replying",
                "Remote peer disconnected",
                "Connection terminated",
        };
        const uint64_t timeout = 90 * USEC_PER_SEC;

        for (size_t i = 0; i < ELEMENTSOF(messages); i++) {
                sd_bus_error no_reply = SD_BUS_ERROR_MAKE_CONST(SD_BUS_ERROR_NO_REPLY, messages[i]);
                sd_bus_error timed_out = SD_BUS_ERROR_MAKE_CONST(SD_BUS_ERROR_TIMEOUT, messages[i]);
                sd_bus_error disconnected = SD_BUS_ERROR_MAKE_CONST(SD_BUS_ERROR_DISCONNECTED, messages[i]);

                HttpCallEnd at_once = { 0, timeout, true }, midway = { timeout / 2, timeout, true },
                            just_before = { timeout - 1, timeout, true },
                            at_timeout = { timeout, timeout, true }, after = { timeout + 1, timeout, true },
                            long_after = { UINT64_MAX, timeout, true }, broken = { 0, timeout, false };

                /* At once, in the middle, a moment before the timeout: the recipient went away. */
                ASSERT_TRUE(http_call_recipient_gone(&no_reply, &at_once));
                ASSERT_TRUE(http_call_recipient_gone(&no_reply, &midway));
                ASSERT_TRUE(http_call_recipient_gone(&no_reply, &just_before));
                /* Once the timeout may have fired, it is the timeout. */
                ASSERT_TRUE(!http_call_recipient_gone(&no_reply, &at_timeout));
                ASSERT_TRUE(!http_call_recipient_gone(&no_reply, &after));
                ASSERT_TRUE(!http_call_recipient_gone(&no_reply, &long_after));
                /* Our own connection broke: not the recipient's doing. */
                ASSERT_TRUE(!http_call_recipient_gone(&no_reply, &broken));
                /* Other errors never are, nor an error of a call nobody knows. */
                ASSERT_TRUE(!http_call_recipient_gone(&timed_out, &at_once));
                ASSERT_TRUE(!http_call_recipient_gone(&disconnected, &at_once));
                ASSERT_TRUE(!http_call_recipient_gone(&no_reply, NULL));
        }
        ASSERT_TRUE(!http_call_recipient_gone(NULL, &(HttpCallEnd) { 0, timeout, true }));
        /* A timeout of 0 (none known) never makes a NoReply early. */
        ASSERT_TRUE(!http_call_recipient_gone(&SD_BUS_ERROR_MAKE_CONST(SD_BUS_ERROR_NO_REPLY, NULL),
                                              &(HttpCallEnd) { 0, 0, true }));
}

static void test_content_length(void) {
        uint64_t v = 7;

        ASSERT_TRUE(http_parse_content_length("0", 100, &v) == 0 && v == 0);
        ASSERT_TRUE(http_parse_content_length("100", 100, &v) == 0 && v == 100);
        ASSERT_TRUE(http_parse_content_length("0100", 100, &v) == 0 && v == 100);
        ASSERT_TRUE(http_parse_content_length("101", 100, &v) == -EFBIG);
        ASSERT_TRUE(http_parse_content_length("18446744073709551615", 100, &v) == -EFBIG);
        ASSERT_TRUE(http_parse_content_length("99999999999999999999999", 100, &v) == -EFBIG);

        v = 7;
        ASSERT_TRUE(http_parse_content_length("", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length(NULL, 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("abc", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("-1", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("+1", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length(" 1", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("1 ", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("1,1", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("0x10", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("1e3", 100, &v) == -EINVAL);
        ASSERT_TRUE(http_parse_content_length("1_000", 10000, &v) == -EINVAL);
        ASSERT_TRUE(v == 7); /* untouched on failure */
}

static void test_route_lookup(void) {
        const HttpRoute *r = NULL;
        const char *arg = NULL;
        char allow[48];

#define LOOKUP(method, path) \
        http_route_lookup(http_sidecar_routes, method, path, &r, &arg, allow, sizeof(allow))
        ASSERT_TRUE(LOOKUP("GET", "/healthz") == 0);
        ASSERT_TRUE(streq(r->path, "/healthz") && (r->flags & HTTP_ROUTE_PUBLIC) && !arg);
        ASSERT_TRUE(LOOKUP("HEAD", "/healthz") == 0);
        ASSERT_TRUE(LOOKUP("POST", "/healthz") == -EOPNOTSUPP);
        ASSERT_STREQ(allow, "GET, HEAD");

        ASSERT_TRUE(LOOKUP("POST", "/sessions") == 0);
        ASSERT_TRUE(r->handler == http_sessions_post && !(r->flags & HTTP_ROUTE_PUBLIC));
        ASSERT_TRUE(LOOKUP("GET", "/sessions") == -EOPNOTSUPP);
        ASSERT_STREQ(allow, "POST");

        ASSERT_TRUE(LOOKUP("DELETE", "/sessions/abc") == 0);
        ASSERT_TRUE(r->handler == http_sessions_delete && streq(arg, "abc"));
        ASSERT_TRUE(LOOKUP("PUT", "/sessions/abc") == -EOPNOTSUPP);
        ASSERT_STREQ(allow, "DELETE");
        ASSERT_TRUE(LOOKUP("DELETE", "/sessions/") == -ENOENT);
        ASSERT_TRUE(LOOKUP("DELETE", "/sessions/a/b") == -ENOENT);
        /* One segment in the star's place, handed over with the rest of the path. */
        ASSERT_TRUE(LOOKUP("POST", "/sessions/abc/reset") == 0);
        ASSERT_TRUE(r->handler == http_sessions_reset && streq(arg, "abc/reset"));
        ASSERT_TRUE(LOOKUP("DELETE", "/sessions/abc/reset") == -EOPNOTSUPP);
        ASSERT_STREQ(allow, "POST");
        ASSERT_TRUE(LOOKUP("POST", "/sessions//reset") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/sessions/reset") == -EOPNOTSUPP); /* DELETE /sessions/{id} */
        ASSERT_TRUE(LOOKUP("POST", "/sessions/abc/reset/") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/sessions/abc/resets") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/sessions/abc/rese") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/sessions/a/b/reset") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/sessions/abc") == -EOPNOTSUPP);

        ASSERT_TRUE(LOOKUP("POST", "/exec") == 0);
        ASSERT_TRUE(r->handler == http_exec_post);
        ASSERT_TRUE(LOOKUP("post", "/exec") == -EOPNOTSUPP);  /* methods are case-sensitive */
        ASSERT_TRUE(LOOKUP("POST", "/exec/") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/EXEC") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/files") == 0);
        ASSERT_TRUE(r->handler == http_files_post && (r->flags & HTTP_ROUTE_JSON) && !arg);
        ASSERT_TRUE(LOOKUP("POST", "/files/get") == 0);
        ASSERT_TRUE(r->handler == http_files_get && (r->flags & HTTP_ROUTE_JSON));
        ASSERT_TRUE(LOOKUP("GET", "/files/get") == -EOPNOTSUPP);
        ASSERT_STREQ(allow, "POST");
        ASSERT_TRUE(LOOKUP("POST", "/files/list") == 0);
        ASSERT_TRUE(r->handler == http_files_list);
        ASSERT_TRUE(LOOKUP("POST", "/files/reset-inputs") == 0);
        ASSERT_TRUE(r->handler == http_files_reset_inputs && !(r->flags & HTTP_ROUTE_PUBLIC));
        ASSERT_TRUE(LOOKUP("PUT", "/files") == -EOPNOTSUPP);
        ASSERT_TRUE(LOOKUP("POST", "/files/") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/files/put") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/files/get/x") == -ENOENT);
        ASSERT_TRUE(LOOKUP("POST", "/files/reset") == -ENOENT);
        /* The storage endpoints (tested in test-gateway-storage.c). */
        ASSERT_TRUE(LOOKUP("POST", "/storage/put") == 0);
        ASSERT_TRUE(r->handler == http_storage_put && r->body_max == http_storage_put_body_max);
        ASSERT_TRUE(LOOKUP("GET", "/healthz/") == -ENOENT);
        ASSERT_TRUE(LOOKUP("GET", "") == -ENOENT);
        ASSERT_TRUE(LOOKUP("GET", "/") == -ENOENT);
#undef LOOKUP

        /* Without the optional outputs. */
        ASSERT_TRUE(http_route_lookup(http_sidecar_routes, "POST", "/healthz", NULL, NULL, NULL, 0) ==
              -EOPNOTSUPP);
}

static void test_sanitize_for_log(void) {
        char buf[4 * 8 + 4], tiny[8];

        http_sanitize_for_log("/exec", 8, buf, sizeof(buf));
        ASSERT_STREQ(buf, "/exec");
        http_sanitize_for_log("/a\"b\\c", 8, buf, sizeof(buf));
        ASSERT_STREQ(buf, "/a\\\"b\\\\c");
        http_sanitize_for_log("/\n\x1b[31m\xff", 8, buf, sizeof(buf));
        ASSERT_STREQ(buf, "/\\x0a\\x1b[31m\\xff");
        http_sanitize_for_log("/0123456789", 8, buf, sizeof(buf));
        ASSERT_STREQ(buf, "/0123456...");
        http_sanitize_for_log(NULL, 8, buf, sizeof(buf));
        ASSERT_STREQ(buf, "");
        /* A buffer too small for the escapes still ends up terminated, marked as cut. */
        http_sanitize_for_log("\x01\x02\x03\x04", 8, tiny, sizeof(tiny));
        ASSERT_TRUE(strlen(tiny) < sizeof(tiny));
        ASSERT_TRUE(endswith(tiny, "..."));
}

static void test_json_writer(void) {
        JsonWriter w = {};
        size_t n;
        char *s;

        ASSERT_TRUE(json_writer_append_str(&w, "[") == 0);
        ASSERT_TRUE(json_writer_append_string(&w, "a\tb\x1f\"", 5) == 0);
        ASSERT_TRUE(json_writer_append_str(&w, ",") == 0);
        ASSERT_TRUE(json_writer_append_base64(&w, "hello", 5) == 0);
        ASSERT_TRUE(json_writer_append_str(&w, ",") == 0);
        ASSERT_TRUE(json_writer_append_base64(&w, "", 0) == 0);
        ASSERT_TRUE(json_writer_append_str(&w, ",") == 0);
        /* Embedded NUL bytes are escaped, not cut. */
        ASSERT_TRUE(json_writer_append_string(&w, "x\0y", 3) == 0);
        ASSERT_TRUE(json_writer_appendf(&w, ",%d]", 42) == 0);
        s = json_writer_steal(&w, &n);
        ASSERT_TRUE(s && strlen(s) == n);
        ASSERT_STREQ(s, "[\"a\\tb\\u001f\\\"\",\"aGVsbG8=\",\"\",\"x\\u0000y\",42]");
        ASSERT_TRUE(!w.buf.s && w.buf.len == 0);
        free(s);

        /* An empty writer yields an empty string. */
        s = json_writer_steal(&w, &n);
        ASSERT_TRUE(s && n == 0 && streq(s, ""));
        free(s);
        json_writer_done(&w);
}

static void test_ratelimit(void) {
        RateLimit rl = { .interval_usec = 10, .burst = 2 };

        ASSERT_TRUE(ratelimit_below(&rl, 100));
        ASSERT_TRUE(ratelimit_below(&rl, 101));
        ASSERT_TRUE(!ratelimit_below(&rl, 105));
        ASSERT_TRUE(ratelimit_below(&rl, 110)); /* new interval */
        ASSERT_TRUE(ratelimit_below(&rl, 50));  /* clock went backwards: start over rather than block */
}

/* A server as the router sees it, without sockets, bus or event loop. */
static void server_init(Server *s, uint64_t max_body, uint64_t budget, const char *key) {
        *s = (Server) {
                .config.max_body_bytes = max_body,
                .config.max_code_bytes = 1024,
                .config.exec_timeout_cap_ms = 600000,
        };
        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        s->body_budget = budget;
        ASSERT_TRUE(server_set_api_key(s, key) == 0);
}

static void server_done(Server *s) {
        ASSERT_TRUE(!s->requests && s->n_requests == 0);
        ASSERT_TRUE(s->body_bytes == 0);
        ASSERT_TRUE(server_set_api_key(s, NULL) == 0);
}

static HttpRequest *begin_headers(Server *s, const char *method, const char *path,
                                  const HttpRequestHeaders *h) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(s, NULL, NULL, method, path, &req) == 0);
        ASSERT_TRUE(http_request_begin(req, h) == 0);
        return req;
}

static HttpRequest *begin(Server *s, const char *method, const char *path, const char *authorization,
                          const char *content_length, unsigned n_headers, size_t header_bytes) {
        return begin_headers(s, method, path, &(HttpRequestHeaders) {
                .n = n_headers,
                .bytes = header_bytes,
                .target_bytes = strlen(path),
                .n_authorization = !!authorization,
                .authorization = authorization,
                .authorization_size = authorization ? strlen(authorization) : 0,
                .n_content_length = !!content_length,
                .content_length = content_length,
        });
}

static void check_refused(Server *s, const char *method, const char *path, const char *authorization,
                          const char *content_length, unsigned status, const char *body) {
        HttpRequest *req = begin(s, method, path, authorization, content_length, 3, 100);

        if (!req->response || req->response->status != status)
                fprintf(stderr, "%s %s: got %u, expected %u\n", method, path,
                        req->response ? req->response->status : 0, status);
        ASSERT_TRUE(req->response && req->response->status == status);
        check_body(req->response, body);
        http_request_free(req);
}

static void check_accepted(Server *s, const char *method, const char *path, const char *authorization,
                           const char *content_length) {
        HttpRequest *req = begin(s, method, path, authorization, content_length, 3, 100);

        if (req->response)
                fprintf(stderr, "%s %s: refused with %.*s\n", method, path, (int) req->response->size,
                        req->response->body);
        ASSERT_TRUE(!req->response);
        ASSERT_TRUE(req->state == HTTP_REQUEST_RECEIVING && req->route);
        http_request_free(req);
}

static void test_request_begin(void) {
        const char *auth = "Bearer sekrit";
        HttpRequest *req;
        Server s;

        server_init(&s, 1000, 1ULL << 30, "sekrit");

        /* Auth first, everywhere but GET /healthz, and it hides which paths exist. */
        check_accepted(&s, "GET", "/healthz", NULL, NULL);
        check_accepted(&s, "HEAD", "/healthz", NULL, NULL);
        check_refused(&s, "POST", "/healthz", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "GET", "/nope", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "Bearer wrong", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "bearer sekrit", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "Bearer  sekrit", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "Bearer sekrit ", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "sekrit", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/exec", "", NULL, 401, "{\"error\":\"unauthorized\"}");
        /* Auth comes before the body size: no hint about limits to strangers. */
        check_refused(&s, "POST", "/exec", NULL, "999999", 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/files", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/files/get", "Bearer wrong", NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/files/list", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/files/reset-inputs", NULL, "10", 401, "{\"error\":\"unauthorized\"}");
        check_refused(&s, "POST", "/storage/put", NULL, NULL, 401, "{\"error\":\"unauthorized\"}");

        check_accepted(&s, "POST", "/exec", auth, NULL);
        check_accepted(&s, "POST", "/files", auth, "1000");
        check_accepted(&s, "POST", "/files/get", auth, NULL);
        check_accepted(&s, "POST", "/files/list", auth, NULL);
        check_accepted(&s, "POST", "/files/reset-inputs", auth, NULL);
        check_refused(&s, "POST", "/files", auth, "1001", 413,
                      "{\"error\":\"request body exceeds 1000 bytes\"}");
        check_accepted(&s, "POST", "/sessions", auth, "0");
        check_accepted(&s, "DELETE", "/sessions/0123456789abcdef0123456789abcdef", auth, "2");
        check_refused(&s, "GET", "/nope", auth, NULL, 404, "{\"detail\":\"Not Found\"}");
        check_refused(&s, "GET", "/exec", auth, NULL, 405, "{\"detail\":\"Method Not Allowed\"}");

        req = begin(&s, "GET", "/exec", auth, NULL, 1, 10);
        ASSERT_TRUE(req->response->status == 405 && streq(req->response->allow, "POST"));
        http_request_free(req);

        /* Content-Length: checked before reading, exact limit allowed. */
        check_accepted(&s, "POST", "/exec", auth, "1000");
        check_refused(&s, "POST", "/exec", auth, "1001", 413,
                      "{\"error\":\"request body exceeds 1000 bytes\"}");
        check_refused(&s, "POST", "/exec", auth, "99999999999999999999999", 413,
                      "{\"error\":\"request body exceeds 1000 bytes\"}");
        check_refused(&s, "POST", "/exec", auth, "ten", 400, "{\"error\":\"invalid content-length\"}");
        check_refused(&s, "POST", "/exec", auth, "-5", 400, "{\"error\":\"invalid content-length\"}");
        check_refused(&s, "POST", "/exec", auth, "", 400, "{\"error\":\"invalid content-length\"}");

        /* Header caps. */
        req = begin(&s, "POST", "/exec", auth, NULL, HTTP_HEADERS_MAX + 1, 100);
        ASSERT_TRUE(req->response && req->response->status == 431);
        http_request_free(req);
        req = begin(&s, "POST", "/exec", auth, NULL, 3, HTTP_HEADER_BYTES_MAX + 1);
        ASSERT_TRUE(req->response && req->response->status == 431);
        http_request_free(req);
        req = begin(&s, "POST", "/exec", auth, NULL, HTTP_HEADERS_MAX, HTTP_HEADER_BYTES_MAX);
        ASSERT_TRUE(!req->response);
        http_request_free(req);

        server_done(&s);

        /* Without a key every path is open. */
        server_init(&s, 1000, 1ULL << 30, NULL);
        check_accepted(&s, "POST", "/exec", NULL, NULL);
        check_accepted(&s, "POST", "/exec", "Bearer whatever", NULL);
        check_refused(&s, "GET", "/nope", NULL, NULL, 404, "{\"detail\":\"Not Found\"}");
        server_done(&s);
}

static HttpRequest *begin_target(Server *s, const char *method, const char *path, const char *raw,
                                  const HttpRequestHeaders *h) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(s, NULL, NULL, method, path, &req) == 0);
        if (raw)
                ASSERT_TRUE(http_request_set_raw_target(req, raw) == 0);
        ASSERT_TRUE(http_request_begin(req, h) == 0);
        return req;
}

static void check_target(Server *s, const char *method, const char *path, const char *raw,
                         const HttpRequestHeaders *h, unsigned status, const char *body) {
        HttpRequest *req = begin_target(s, method, path, raw, h);

        if (status == 0)
                ASSERT_TRUE(!req->response && req->state == HTTP_REQUEST_RECEIVING);
        else {
                ASSERT_TRUE(req->response && req->response->status == status);
                check_body(req->response, body);
        }
        http_request_free(req);
}

static void check_framing(Server *s, const HttpRequestHeaders *h, unsigned status, const char *body) {
        check_target(s, "POST", "/exec", NULL, h, status, body);
}


static void test_request_framing(void) {
        const HttpRequestHeaders base = {
                .n = 3, .bytes = 100, .target_bytes = 5,
                .n_authorization = 1, .authorization = "Bearer k", .authorization_size = 8,
        };
        HttpRequestHeaders h;
        Server s;

        server_init(&s, 1000, 1ULL << 30, "k");

        check_framing(&s, &base, 0, NULL);
        h = base, h.n_content_length = 1, h.content_length = "10";
        check_framing(&s, &h, 0, NULL);
        h = base, h.n_transfer_encoding = 1, h.transfer_encoding = "chunked";
        check_framing(&s, &h, 0, NULL);
        h.transfer_encoding = "Chunked";
        check_framing(&s, &h, 0, NULL);

        /* Where the body ends must be unambiguous. */
        h = base, h.n_content_length = 2, h.content_length = "10";
        check_framing(&s, &h, 400, "{\"error\":\"invalid content-length\"}");
        h = base, h.n_content_length = 1, h.content_length = "10";
        h.n_transfer_encoding = 1, h.transfer_encoding = "chunked";
        check_framing(&s, &h, 400, "{\"error\":\"invalid transfer-encoding\"}");
        h = base, h.n_transfer_encoding = 2, h.transfer_encoding = "chunked";
        check_framing(&s, &h, 400, "{\"error\":\"invalid transfer-encoding\"}");
        h.n_transfer_encoding = 1;
        for (unsigned i = 0; i < 4; i++) {
                h.transfer_encoding = (const char *[]) { "gzip, chunked", "chunked ", "identity", "" }[i];
                check_framing(&s, &h, 501, "{\"error\":\"unsupported transfer-encoding\"}");
        }
        h = base, h.n_invalid = 1;
        check_framing(&s, &h, 400, "{\"error\":\"invalid header field\"}");

        /* These protocol errors come before auth: they close the connection and say nothing about us. */
        h = base, h.n_authorization = 0, h.n_content_length = 2, h.content_length = "1";
        check_framing(&s, &h, 400, "{\"error\":\"invalid content-length\"}");

        /* The request target. */
        h = base, h.target_bytes = HTTP_REQUEST_TARGET_MAX;
        check_framing(&s, &h, 0, NULL);
        h.target_bytes++;
        check_framing(&s, &h, 414, "{\"error\":\"request target too long\"}");

        /* A repeated Authorization is no key, even the right one twice. */
        h = base, h.n_authorization = 2;
        check_framing(&s, &h, 401, "{\"error\":\"unauthorized\"}");

        server_done(&s);
}

/* Nothing that libmicrohttpd hands over as a C string may end early at a NUL: 400, naming the field. */
static void test_request_fields(void) {
        const char *id = "0123456789abcdef0123456789abcdef";
        const HttpRequestHeaders base = {
                .n = 3, .bytes = 100, .target_bytes = 5,
                .n_authorization = 1, .authorization = "Bearer k", .authorization_size = 8,
        };
        char path[64], raw[64];
        HttpRequestHeaders h;
        Server s;

        ASSERT_TRUE(!http_text_check("python3", 7) && !http_text_check(NULL, 0) && !http_text_check("", 0));
        ASSERT_STREQ(http_text_check("python3\0junk", 12), "contains a NUL byte");
        ASSERT_STREQ(http_text_check("\xff", 1), "is not valid UTF-8");
        ASSERT_STREQ(http_text_check("\xc3", 1), "is not valid UTF-8");
        ASSERT_TRUE(!http_text_check("\xc3\xa4", 2));

        server_init(&s, 1000, 1ULL << 30, "k");

        /* DELETE /sessions/<id>%00 is no DELETE /sessions/<id>. */
        (void) snprintf(path, sizeof(path), "/sessions/%s", id);
        (void) snprintf(raw, sizeof(raw), "/sessions/%s", id);
        check_target(&s, "DELETE", path, raw, &base, 0, NULL);
        (void) snprintf(raw, sizeof(raw), "/sessions/%s%%00", id);
        check_target(&s, "DELETE", path, raw, &base, 400, "{\"detail\":\"path contains a NUL byte\"}");
        (void) snprintf(raw, sizeof(raw), "/sessions/%s%%00junk?x=1", id);
        check_target(&s, "DELETE", path, raw, &base, 400, "{\"detail\":\"path contains a NUL byte\"}");
        /* "%2500" is the text "%00", and a %00 in the query is judged as a query parameter. */
        check_target(&s, "POST", "/exec", "/exec?a=%2500", &base, 0, NULL);
        check_target(&s, "POST", "/exec", "/exec?a=%00", &base, 0, NULL);
        check_target(&s, "POST", "/exe%00c", "/exe%00c", &base, 400,
                     "{\"detail\":\"path contains a NUL byte\"}");
        /* Invalid UTF-8, seen in the decoded path. */
        check_target(&s, "GET", "/sessions/\xff", NULL, &base, 400,
                     "{\"detail\":\"path is not valid UTF-8\"}");
        check_target(&s, "GET", "/nope\xc3", "/nope%c3", &base, 400,
                     "{\"detail\":\"path is not valid UTF-8\"}");
        check_target(&s, "GET", "/n\xc3\xa4", NULL, &base, 404, "{\"detail\":\"Not Found\"}");

        /* Fields the header scan refused: after auth (a stranger learns nothing), before the route. */
        h = base;
        (void) snprintf(h.refused, sizeof(h.refused), "query parameter \"language\"");
        h.refused_reason = "contains a NUL byte";
        check_target(&s, "POST", "/exec", NULL, &h, 400,
                     "{\"detail\":\"query parameter \\\"language\\\" contains a NUL byte\"}");
        check_target(&s, "GET", "/nope", NULL, &h, 400,
                     "{\"detail\":\"query parameter \\\"language\\\" contains a NUL byte\"}");
        h.n_authorization = 0;
        check_target(&s, "POST", "/exec", NULL, &h, 401, "{\"error\":\"unauthorized\"}");

        /* The dify-sandbox API answers in its envelope. */
        h = (HttpRequestHeaders) { .n = 3, .bytes = 100, .n_api_key = 1, .api_key = "k", .api_key_size = 1 };
        (void) snprintf(h.refused, sizeof(h.refused), "query parameter \"language\"");
        h.refused_reason = "contains a NUL byte";
        check_target(&s, "GET", "/v1/sandbox/dependencies", NULL, &h, 400,
                     "{\"code\":-400,\"message\":\"query parameter \\\"language\\\" contains a NUL byte\","
                     "\"data\":null}");
        h.refused_reason = NULL;
        check_target(&s, "GET", "/v1/sandbox/dependencies", "/v1/sandbox/dependencies%00", &h, 400,
                     "{\"code\":-400,\"message\":\"path contains a NUL byte\",\"data\":null}");

        server_done(&s);
}

/* The router's scan of header fields relies on these (string-util): the smuggling forms fail. */
static void test_field_validity(void) {
        ASSERT_TRUE(http_token_is_valid("Transfer-Encoding"));
        ASSERT_TRUE(!http_token_is_valid("Transfer-Encoding "));
        ASSERT_TRUE(!http_token_is_valid("Transfer-Encoding\t"));
        ASSERT_TRUE(!http_token_is_valid(" Content-Length"));
        ASSERT_TRUE(!http_token_is_valid("a:b"));
        ASSERT_TRUE(!http_token_is_valid(""));
        ASSERT_TRUE(http_field_value_is_valid("Bearer k\t\xc3\xa4"));
        ASSERT_TRUE(!http_field_value_is_valid("chunked\rTransfer-Encoding: x"));
        ASSERT_TRUE(!http_field_value_is_valid("a\nb"));
        ASSERT_TRUE(!http_field_value_is_valid("a\x7f"));
}

static void test_body(void) {
        const char *auth = "Bearer k";
        HttpRequest *a, *b, *c;
        char chunk[300];
        Server s;

        memset(chunk, 'x', sizeof(chunk));
        server_init(&s, 1000, 2500, "k");

        /* Chunked (no Content-Length): the cap holds while streaming. */
        a = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        for (unsigned i = 0; i < 3; i++)
                ASSERT_TRUE(http_request_append_body(a, chunk, sizeof(chunk)) == 0);
        ASSERT_TRUE(a->body_size == 900);
        ASSERT_TRUE(http_request_append_body(a, chunk, 100) == 0);  /* exactly the limit */
        ASSERT_TRUE(http_request_append_body(a, chunk, 1) == -EFBIG);
        ASSERT_TRUE(a->body_size == 1000 && a->body[1000] == 0);
        ASSERT_TRUE(s.body_bytes == a->body_reserved && a->body_reserved >= 1000);

        /* Content-Length reserves nothing up front (a head alone takes nothing from others)... */
        b = begin(&s, "POST", "/exec", auth, "1000", 3, 100);
        ASSERT_TRUE(!b->response && s.body_bytes == a->body_reserved);
        /* ...the reservation follows the bytes received, up to the allocation... */
        ASSERT_TRUE(http_request_append_body(b, chunk, 10) == 0);
        ASSERT_TRUE(b->body_allocated == 1001 && b->body_reserved == 1001);
        ASSERT_TRUE(s.body_bytes == a->body_reserved + 1001);
        /* ...and a head that could not fit now is refused at once. */
        c = begin(&s, "POST", "/exec", auth, "1000", 3, 100);
        ASSERT_TRUE(c->response && c->response->status == 503);
        check_body(c->response, "{\"error\":\"server busy, retry later\"}");
        http_request_free(c);

        /* Streaming into a full budget fails too. */
        c = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(!c->response);
        ASSERT_TRUE(http_request_append_body(c, chunk, 1) == -ENOBUFS);
        http_request_free(c);

        /* A resource without a body never buffers one, even with the budget exhausted, but the
         * cap still bounds what it reads. */
        c = begin(&s, "GET", "/healthz", NULL, "1000", 3, 100);
        ASSERT_TRUE(!c->response);
        for (unsigned i = 0; i < 3; i++)
                ASSERT_TRUE(http_request_append_body(c, chunk, sizeof(chunk)) == 0);
        ASSERT_TRUE(http_request_append_body(c, chunk, 100) == 0);
        ASSERT_TRUE(http_request_append_body(c, chunk, 1) == -EFBIG);
        ASSERT_TRUE(!c->body && c->body_reserved == 0);
        ASSERT_TRUE(s.body_bytes == a->body_reserved + b->body_reserved);
        /* Without a bus connection health is a 503, not an internal error. */
        ASSERT_TRUE(http_request_dispatch(c) == 0);
        check_body(c->response,
                   "{\"ok\":false,\"image_ready\":false,\"error\":\"session manager unavailable\"}");
        ASSERT_TRUE(c->response->status == 503);
        http_request_free(c);

        /* A Content-Length body is allocated once, at its announced size. */
        for (unsigned i = 0; i < 3; i++)
                ASSERT_TRUE(http_request_append_body(b, chunk, 300) == 0);
        ASSERT_TRUE(http_request_append_body(b, chunk, 90) == 0);
        ASSERT_TRUE(b->body_allocated == 1001 && b->body_size == 1000);
        ASSERT_TRUE(s.body_bytes == a->body_reserved + 1001);

        /* Responses libmicrohttpd still holds share the budget with large bodies, not with small
         * ones: a client slow to read its answers never keeps an ordinary request out. */
        http_request_free(b);
        b = begin(&s, "POST", "/exec", auth, "1000", 3, 100);
        s.response_bytes = 1ULL << 40;
        ASSERT_TRUE(http_request_append_body(b, chunk, 10) == 0);
        s.response_bytes = 0;

        http_request_free(a);
        http_request_free(b);
        ASSERT_TRUE(s.body_bytes == 0);
        server_done(&s);

        /* Past the small size, queued responses count: 3 MiB of them and a 2 MiB body do not
         * fit in 4 MiB, refused at the head; a body that grows past the small size is refused
         * as it does. */
        server_init(&s, 8U << 20, 4U << 20, "k");
        s.response_bytes = 3U << 20;
        c = begin(&s, "POST", "/files", auth, "2097152", 3, 100);
        ASSERT_TRUE(c->response && c->response->status == 503);
        http_request_free(c);
        c = begin(&s, "POST", "/files", auth, NULL, 3, 100);
        ASSERT_TRUE(!c->response);
        {
                _cleanup_free_ char *big = calloc(1, 1U << 20);
                ASSERT_TRUE(big);
                ASSERT_TRUE(http_request_append_body(c, big, 1U << 20) == 0);
                ASSERT_TRUE(http_request_append_body(c, big, 1) == -ENOBUFS);
        }
        http_request_free(c);
        s.response_bytes = 0;
        server_done(&s);

        /* Large bodies leave the last 64 MiB to small ones: uploads that fill the budget still
         * leave room for an exec's code. */
        server_init(&s, 200U << 20, 128U << 20, "k");
        c = begin(&s, "POST", "/files", auth, "104857600", 3, 100);
        ASSERT_TRUE(c->response && c->response->status == 503);
        http_request_free(c);
        b = begin(&s, "POST", "/files", auth, "62914560", 3, 100);
        ASSERT_TRUE(!b->response);
        {
                _cleanup_free_ char *big = calloc(1, 60U << 20);
                ASSERT_TRUE(big);
                ASSERT_TRUE(http_request_append_body(b, big, 60U << 20) == 0);
        }
        c = begin(&s, "POST", "/files", auth, "10485760", 3, 100);
        ASSERT_TRUE(c->response && c->response->status == 503);
        http_request_free(c);
        c = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(!c->response);
        ASSERT_TRUE(http_request_append_body(c, chunk, sizeof(chunk)) == 0);
        http_request_free(c);
        http_request_free(b);
        server_done(&s);
}

static int append_text(HttpRequest *req, const char *text) {
        return http_request_append_body(req, text, strlen(text));
}

static void test_dispatch(void) {
        const char *auth = "Bearer k";
        HttpRequest *req;
        Server s;

        server_init(&s, 1000, 1ULL << 30, "k");

        /* Invalid JSON → 422 json_invalid, the body is released once parsed. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, "{\"a\":") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422);
        check_body(req->response, PYDANTIC("json_invalid", "\"body\",0", "JSON decode error"));
        ASSERT_TRUE(!req->body && s.body_bytes == req->body_reserved);
        http_request_free(req);
        ASSERT_TRUE(s.body_bytes == 0);

        /* Too deep. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        for (unsigned i = 0; i < 40; i++)
                ASSERT_TRUE(append_text(req, "[") == 0);
        for (unsigned i = 0; i < 40; i++)
                ASSERT_TRUE(append_text(req, "]") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422);
        http_request_free(req);

        /* Invalid UTF-8 inside a string. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, "{\"code\":\"\xc3\x28\"}") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422);
        http_request_free(req);

        /* Valid JSON reaches the resource, which validates it. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, "{\"session_id\":\"nope\",\"code\":\"1\"}") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 400);
        check_body(req->response, "{\"detail\":\"invalid session_id\"}");
        http_request_free(req);

        /* Empty body on /exec: the model is missing. */
        req = begin(&s, "POST", "/exec", auth, "0", 3, 100);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422);
        check_body(req->response, PYDANTIC("missing", "\"body\"", "Field required"));
        http_request_free(req);

        /* DELETE: the body is validated before the path (FastAPI order), and is optional. */
        req = begin(&s, "DELETE", "/sessions/xyz", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, "{\"discard\":\"yes\"}") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422);
        check_body(req->response,
                   PYDANTIC("bool_type", "\"body\",\"discard\"", "Input should be a valid boolean"));
        http_request_free(req);

        req = begin(&s, "DELETE", "/sessions/xyz", auth, NULL, 3, 100);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 400);
        check_body(req->response, "{\"detail\":\"invalid session_id\"}");
        http_request_free(req);

        /* A valid request needs the bus, which this server lacks: an internal error for the router. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, "{\"session_id\":\"" SID "\",\"code\":\"1\"}") == 0);
        ASSERT_TRUE(http_request_dispatch(req) == -ENOTCONN);
        ASSERT_TRUE(!req->slot);
        ASSERT_STREQ(req->session_id, "0123456789abcdef0123456789abcdef");
        http_request_free(req);

        server_done(&s);
}

static size_t heap_in_use(void) {
        struct mallinfo2 m = mallinfo2();

        return m.uordblks + m.hblkhd;
}

/* "[" + n copies of 'value' separated by commas + "]". */
static char *json_list_of(const char *value, size_t n) {
        size_t l = strlen(value);
        char *t = malloc(n * (l + 1) + 2), *p = t;

        ASSERT_TRUE(t);
        *p++ = '[';
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        *p++ = ',';
                memcpy(p, value, l);
                p += l;
        }
        *p++ = ']';
        *p = 0;
        return t;
}

/* What json-c really allocates for the shapes that cost the most per byte of JSON stays within
 * what the budget reserves for them. */
static void test_json_footprint(void) {
        static const char *const shapes[] = {
                "0", "\"\"", "[]", "{}", "{\"a\":0,\"b\":[0]}", "\"0123456789abcdef\"",
        };

        for (size_t i = 0; i < ELEMENTSOF(shapes); i++) {
                _cleanup_free_ char *text = json_list_of(shapes[i], 4000);
                json_object *o = NULL;
                size_t before, used;
                uint64_t counted;

                before = heap_in_use();
                ASSERT_TRUE(json_parse(text, strlen(text), JSON_DEPTH_MAX, &o) == 0 && o);
                used = heap_in_use() - before;
                counted = json_structure_footprint(o) + strlen(text);
                if (counted < used)
                        fprintf(stderr, "%s: json-c took %zu bytes, %" PRIu64 " counted\n", shapes[i], used,
                                counted);
                ASSERT_TRUE(counted >= used);
                json_object_put(o);
        }
}

/* What a body parses into waits with it, counted: a few bytes of "{}" that parse into whole hash
 * tables find no room where their bytes alone would, and get 503 with Retry-After. */
static void test_dispatch_counts_the_document(void) {
        const char *auth = "Bearer k";
        _cleanup_free_ char *text = json_list_of("{}", 400);
        HttpRequest *req;
        Server s;

        server_init(&s, 100000, 4ULL << 20, "k");
        s.config.max_code_bytes = 100000;

        /* Room: the reservation grows by the document's structure, beyond the body. */
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, text) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 422); /* no object: the schema says */
        ASSERT_TRUE(s.body_bytes == req->body_reserved);
        ASSERT_TRUE(req->body_reserved >= strlen(text) + 400 * JSON_OBJECT_FOOTPRINT);
        http_request_free(req);
        ASSERT_TRUE(s.body_bytes == 0);

        /* No room for it: 503 with Retry-After, and nothing of it is held. */
        s.body_bytes = s.body_budget - 20000;
        req = begin(&s, "POST", "/exec", auth, NULL, 3, 100);
        ASSERT_TRUE(append_text(req, text) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->response && req->response->status == 503);
        check_body(req->response, "{\"error\":\"server busy, retry later\"}");
        ASSERT_STREQ(req->response->retry_after, "1");
        ASSERT_TRUE(!req->json);
        http_request_free(req);
        ASSERT_TRUE(s.body_bytes == s.body_budget - 20000);
        s.body_bytes = 0;

        server_done(&s);
}

/* The body budget holds two of the largest body any registered route takes, at least
 * HTTP_BODY_BUDGET_MIN; each API's count is its own. */
static void test_apis(void) {
        Config config = { .max_body_bytes = 1000, .max_storage_body_bytes = 600ULL << 20,
                          .dify_max_code_bytes = 150ULL << 20 };
        _cleanup_(server_freep) Server *s = NULL;
        uint64_t run_max;

        ASSERT_TRUE(server_new(&config, &s) == 0);
        run_max = dify_run_body_max(&s->config);
        ASSERT_TRUE(run_max > s->config.max_storage_body_bytes);
        ASSERT_EQ(s->body_budget, HTTP_BODY_BUDGET_MIN);
        ASSERT_TRUE(!server_api_count(s, &http_dify_api));

        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_EQ(s->body_budget, 2 * s->config.max_storage_body_bytes);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        ASSERT_EQ(s->body_budget, 2 * run_max);

        ASSERT_TRUE(server_api_count(s, &http_sidecar_api) != server_api_count(s, &http_dify_api));
        ASSERT_TRUE(dify_runs(s) == server_api_count(s, &http_dify_api) && *dify_runs(s) == 0);
        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        ASSERT_EQ(server_add_api(s, &http_dify_api), -E2BIG);

        /* Small bodies only: the minimum. */
        s = server_free(s);
        config = (Config) { .max_body_bytes = 1000, .max_storage_body_bytes = 5000,
                            .dify_max_code_bytes = 16 };
        ASSERT_TRUE(server_new(&config, &s) == 0);
        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        ASSERT_EQ(s->body_budget, HTTP_BODY_BUDGET_MIN);
}

int main(void) {
        RUN(test_apis);
        RUN(test_error_shapes);
        RUN(test_bus_error_mapping);
        RUN(test_recipient_gone);
        RUN(test_content_length);
        RUN(test_route_lookup);
        RUN(test_sanitize_for_log);
        RUN(test_json_writer);
        RUN(test_ratelimit);
        RUN(test_request_begin);
        RUN(test_request_framing);
        RUN(test_field_validity);
        RUN(test_request_fields);
        RUN(test_body);
        RUN(test_dispatch);
        RUN(test_json_footprint);
        RUN(test_dispatch_counts_the_document);
        return 0;
}
