/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the /files resources: validation order, upload size math, error and response shapes. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "bus-client.h"
#include "bus-util.h"
#include "http-files.h"
#include "json-util.h"
#include "string-util.h"
#include "tests.h"

#define SID "0123456789abcdef0123456789abcdef"
#define DETAIL(s) "{\"detail\":\"" s "\"}"
#define PYDANTIC(type, loc, msg) \
        "{\"detail\":[{\"type\":\"" type "\",\"loc\":[" loc "],\"msg\":\"" msg "\"}]}"

static Config test_config(void) {
        return (Config) {
                .max_upload_bytes = 10,
                .queue_timeout_sec = 150,
                .exec_timeout_cap_ms = 600000,
                .archive_timeout_sec = 120,
        };
}

/* The document the last parse() borrowed from: a FilesRequest points into it. */
static json_object *last_doc = NULL;

static void check_body(const HttpResponse *r, unsigned status, const char *body) {
        ASSERT_TRUE(r);
        if (r->status != status || r->size != strlen(body) || memcmp(r->body, body, r->size) != 0) {
                fprintf(stderr, "got %u %.*s\nexpected %u %s\n", r->status, (int) r->size, r->body, status,
                        body);
                abort();
        }
        ASSERT_TRUE(strlen(r->body) == r->size);
}

/* Parses 'text' as a body of 'kind'; returns the status it would get (200 = valid). */
static unsigned parse(FilesRequestKind kind, const char *text, const Config *c, FilesRequest *ret,
                      char **ret_body) {
        HttpResponse *error = (HttpResponse *) 0x1;
        unsigned status;
        int r;

        json_object_put(last_doc);
        last_doc = NULL;
        if (text)
                ASSERT_TRUE(json_parse(text, strlen(text), JSON_DEPTH_MAX, &last_doc) == 0);
        *ret = (FilesRequest) {};
        r = files_request_parse(kind, last_doc, c, ret, &error);
        if (r == 0) {
                ASSERT_TRUE(error == NULL);
                if (ret_body)
                        *ret_body = NULL;
                return 200;
        }
        ASSERT_TRUE(error);
        /* Nothing handed out on failure. */
        ASSERT_TRUE(!ret->data && !ret->session_id);
        status = error->status;
        if (ret_body)
                *ret_body = strndup(error->body, error->size);
        http_response_free(error);
        return status;
}

static void check_refused_with(FilesRequestKind kind, const Config *c, const char *text, unsigned status,
                               const char *body) {
        FilesRequest x;
        char *b = NULL;
        unsigned s = parse(kind, text, c, &x, &b);

        if (s != status || !streq_ptr(b, body))
                fprintf(stderr, "%s\n  got %u %s\n  expected %u %s\n", strempty(text), s, strempty(b),
                        status, body);
        ASSERT_TRUE(s == status && streq_ptr(b, body));
        free(b);
}

static void check_refused(FilesRequestKind kind, const char *text, unsigned status, const char *body) {
        Config c = test_config();

        check_refused_with(kind, &c, text, status, body);
}

/* Parses a valid upload and checks what it decoded to. */
static void check_upload(const Config *c, const char *text, const void *data, size_t size) {
        FilesRequest x;

        ASSERT_TRUE(parse(FILES_REQUEST_WRITE, text, c, &x, NULL) == 200);
        ASSERT_TRUE(x.data && x.data_size == size);
        ASSERT_TRUE(memcmp(x.data, data, size) == 0);
        ASSERT_STREQ(x.session_id, SID);
        files_request_done(&x);
        ASSERT_TRUE(!x.data && !x.session_id);
}

#define W(path, data) "{\"session_id\":\"" SID "\",\"path\":" path ",\"data_base64\":" data "}"
#define WD(data) W("\"uploads/a.bin\"", "\"" data "\"")

static void test_write_order(void) {
        /* Schema first (422), in pydantic's shape and the model's field order. */
        check_refused(FILES_REQUEST_WRITE, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_refused(FILES_REQUEST_WRITE, "{}", 422,
                      PYDANTIC("missing", "\"body\",\"session_id\"", "Field required"));
        check_refused(FILES_REQUEST_WRITE, "{\"session_id\":\"" SID "\"}", 422,
                      PYDANTIC("missing", "\"body\",\"path\"", "Field required"));
        check_refused(FILES_REQUEST_WRITE, "{\"session_id\":\"" SID "\",\"path\":\"a\"}", 422,
                      PYDANTIC("missing", "\"body\",\"data_base64\"", "Field required"));
        check_refused(FILES_REQUEST_WRITE, W("\"a\"", "null"), 422,
                      PYDANTIC("string_type", "\"body\",\"data_base64\"", "Input should be a valid string"));
        check_refused(FILES_REQUEST_WRITE, W("null", "\"\""), 422,
                      PYDANTIC("string_type", "\"body\",\"path\"", "Input should be a valid string"));
        check_refused(FILES_REQUEST_WRITE, W("[\"a\"]", "\"\""), 422,
                      PYDANTIC("string_type", "\"body\",\"path\"", "Input should be a valid string"));
        check_refused(FILES_REQUEST_WRITE, "{\"session_id\":1,\"path\":\"a\",\"data_base64\":\"\"}", 422,
                      PYDANTIC("string_type", "\"body\",\"session_id\"", "Input should be a valid string"));
        check_refused(FILES_REQUEST_WRITE, "[]", 422,
                      PYDANTIC("model_attributes_type", "\"body\"",
                               "Input should be a valid dictionary or object to extract fields from"));
        /* A schema error wins over a bad id. */
        check_refused(FILES_REQUEST_WRITE, "{\"session_id\":\"bad\",\"path\":\"a\"}", 422,
                      PYDANTIC("missing", "\"body\",\"data_base64\"", "Field required"));

        /* Then the session id (400), before anything about the data or the path. */
        check_refused(FILES_REQUEST_WRITE, "{\"session_id\":\"bad\",\"path\":\"a\",\"data_base64\":\"!\"}",
                      400, DETAIL("invalid session_id"));
        check_refused(FILES_REQUEST_WRITE,
                      "{\"session_id\":\"bad\",\"path\":\"a\",\"data_base64\":\"AAAAAAAAAAAAAAAAAAAA\"}",
                      400, DETAIL("invalid session_id"));
        check_refused(FILES_REQUEST_WRITE,
                      "{\"session_id\":\"" SID "\\u0000\",\"path\":\"a\",\"data_base64\":\"\"}", 400,
                      DETAIL("invalid session_id"));
        check_refused(FILES_REQUEST_WRITE,
                      "{\"session_id\":\"0123456789ABCDEF0123456789abcdef\","
                      "\"path\":\"a\",\"data_base64\":\"\"}",
                      400, DETAIL("invalid session_id"));

        /* Then the size from the text's length (413): even a malformed text, it is not decoded. */
        check_refused(FILES_REQUEST_WRITE, WD("AAAAAAAAAAAAAAAA"), 413, DETAIL("file too large"));
        check_refused(FILES_REQUEST_WRITE, WD("!!!!!!!!!!!!!!!!"), 413, DETAIL("file too large"));
        check_refused(FILES_REQUEST_WRITE, W("\"a\\u0000b\"", "\"AAAAAAAAAAAAAAAA\""), 413,
                      DETAIL("file too large"));

        /* Then strict base64 (400), before the path. */
        check_refused(FILES_REQUEST_WRITE, W("\"a\\u0000b\"", "\"!\""), 400, DETAIL("invalid base64"));

        /* Then what the gateway can tell about the path (400); the manager judges the rest. */
        check_refused(FILES_REQUEST_WRITE, W("\"uploads/a\\u0000b\"", "\"\""), 400,
                      DETAIL("path must be under /workspace"));
        check_refused(FILES_REQUEST_WRITE, W("\"\\u0000\"", "\"QQ==\""), 400,
                      DETAIL("path must be under /workspace"));
}

static void test_write_base64(void) {
        static const char *const invalid[] = {
                "aGVs bG8=",                            /* whitespace inside */
                "aGVsbG8=\\n",                          /* a trailing newline (MIME line ends) */
                "aGVs\\r\\nbG8=",
                "\\taGVsbG8=",
                " aGVsbG8=",
                "data:text/plain;base64,aGVsbG8=",      /* a data: URL */
                "aGVsbG8",                              /* padding missing */
                "aGVsbA",
                "aGVsbA=",                              /* padding short */
                "aGVsbG8==",                            /* padding too long */
                "aGVsbA===",
                "=",
                "==",
                "====",
                "QQ=A",                                 /* padding in the middle */
                "QQ==QQ==",
                "-_-_",                                 /* the URL-safe alphabet */
                "aGVsbG8\\u0000",                       /* NUL: must not end the text early */
                "QUJD\\u0000AAA",
                "QUJD\\u0000",
                "\\u00e4AAA",                           /* a non-ASCII character */
        };
        Config c = test_config();

        /* Room for every text below: their sizes must not decide. */
        c.max_upload_bytes = 1000;
        for (size_t i = 0; i < ELEMENTSOF(invalid); i++) {
                _cleanup_free_ char *body = NULL;

                ASSERT_TRUE(asprintf(&body, W("\"a\"", "\"%s\""), invalid[i]) > 0);
                check_refused_with(FILES_REQUEST_WRITE, &c, body, 400, DETAIL("invalid base64"));
        }

        check_upload(&c, WD(""), "", 0);
        check_upload(&c, WD("aGVsbG8="), "hello", 5);
        check_upload(&c, WD("AP8A/w=="), "\x00\xff\x00\xff", 4);
        check_upload(&c, WD("+/+/"), "\xfb\xff\xbf", 3);
        /* As Python's b64decode(validate=True): non-zero trailing bits, '=' after a full quantum. */
        check_upload(&c, WD("QR=="), "A", 1);
        check_upload(&c, WD("QUJ="), "AB", 2);
        check_upload(&c, WD("QUJD=="), "ABC", 3);
}

static void test_write_limit(void) {
        uint8_t data[64];
        Config c = test_config();

        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (uint8_t) (0xff - i * 11);

        /* Exactly the limit passes, one byte more fails, whatever the padding of the last quantum:
         * limits of 3k, 3k+1 and 3k+2 bytes. */
        for (uint64_t max = 9; max <= 14; max++) {
                for (size_t size = 0; size <= max + 4; size++) {
                        _cleanup_free_ char *enc = NULL, *body = NULL;

                        enc = base64_encode(data, size);
                        ASSERT_TRUE(enc);
                        ASSERT_TRUE(asprintf(&body, WD("%s"), enc) > 0);
                        c.max_upload_bytes = max;
                        if (size <= max)
                                check_upload(&c, body, data, size);
                        else
                                check_refused_with(FILES_REQUEST_WRITE, &c, body, 413,
                                                   DETAIL("file too large"));
                }
        }
}

static void test_upload_size(void) {
        static const uint8_t data[300] = { 1, 2, 3 };
        const uint64_t mib40 = 40ULL << 20;
        char *big;
        size_t n;

        ASSERT_EQ(files_upload_size("", 0), 0);
        ASSERT_EQ(files_upload_size(NULL, 0), 0);
        ASSERT_EQ(files_upload_size("QQ==", 4), 1);
        ASSERT_EQ(files_upload_size("QUI=", 4), 2);
        ASSERT_EQ(files_upload_size("QUJD", 4), 3);
        ASSERT_EQ(files_upload_size("QUJDQQ==", 8), 4);
        /* Malformed texts: a bound, decoding refuses them anyway. */
        ASSERT_EQ(files_upload_size("Q", 1), 0);
        ASSERT_EQ(files_upload_size("QUJDR", 5), 3);
        ASSERT_EQ(files_upload_size("QUJDRR=", 7), 4);
        /* Python ignores '=' after a complete quantum. */
        ASSERT_EQ(files_upload_size("QUJD==", 6), 3);
        ASSERT_EQ(files_upload_size("QUJD=====", 9), 3);

        /* The exact size of every well-formed text. */
        for (size_t i = 0; i <= sizeof(data); i++) {
                _cleanup_free_ char *enc = base64_encode(data, i);

                ASSERT_TRUE(enc);
                ASSERT_EQ(files_upload_size(enc, strlen(enc)), i);
        }

        /* 40 MiB is 3k+1 bytes, so its text ends in "==": 3/4 of the length alone is 2 bytes over
         * the limit, and a file of exactly SANDBOX_MAX_UPLOAD_BYTES would be refused. */
        n = base64_encoded_size(mib40);
        ASSERT_EQ(n, 55924056);
        ASSERT_EQ(base64_decoded_size_max(n), mib40 + 2);
        big = malloc(n + 4);
        ASSERT_TRUE(big);
        memset(big, 'A', n + 4);
        memcpy(big + n - 2, "==", 2);
        ASSERT_EQ(files_upload_size(big, n), mib40);
        /* One and two bytes more fill the same last quantum: only the padding tells them apart. */
        memcpy(big + n - 2, "A=", 2);
        ASSERT_EQ(files_upload_size(big, n), mib40 + 1);
        memcpy(big + n - 2, "AA", 2);
        ASSERT_EQ(files_upload_size(big, n), mib40 + 2);
        ASSERT_EQ(files_upload_size(big, n + 4), mib40 + 5);
        /* The request the integration test sends (40 MiB + 4 bytes) fits in the 56 MiB body cap. */
        ASSERT_TRUE(base64_encoded_size(mib40 + 4) + 200 < (56ULL << 20));
        free(big);
}

static void test_path(void) {
        _cleanup_free_ char *longest = NULL, *body = NULL;
        Config c = test_config();
        FilesRequest x;

        /* The client's path goes to the manager unchanged, escapes and all: it normalises and
         * confines it, with the contract's texts. */
        static const char *const forwarded[] = {
                "uploads/data.csv",
                "/workspace/uploads/data.csv",
                "../etc/passwd",
                "/etc/passwd",
                "a//b/./c/",
                "",
                "\xe4\xbd\xa0\xe5\xa5\xbd.txt",
                "new\nline",
        };
        for (size_t i = 0; i < ELEMENTSOF(forwarded); i++) {
                _cleanup_json_ json_object *o = json_object_new_object();

                ASSERT_TRUE(o);
                ASSERT_TRUE(json_add_string(o, "session_id", SID) == 0);
                ASSERT_TRUE(json_add_string(o, "path", forwarded[i]) == 0);
                ASSERT_TRUE(json_add_string(o, "data_base64", "QQ==") == 0);
                ASSERT_TRUE(parse(FILES_REQUEST_WRITE, json_object_to_json_string(o), &c, &x, NULL) == 200);
                ASSERT_STREQ(x.path, forwarded[i]);
                files_request_done(&x);

                json_object_object_del(o, "data_base64");
                ASSERT_TRUE(parse(FILES_REQUEST_READ, json_object_to_json_string(o), &c, &x, NULL) == 200);
                ASSERT_STREQ(x.path, forwarded[i]);
                ASSERT_TRUE(!x.data);
        }

        /* A NUL cannot cross the bus. */
        check_refused(FILES_REQUEST_READ, "{\"session_id\":\"" SID "\",\"path\":\"x\\u0000\"}", 400,
                      DETAIL("path must be under /workspace"));
        check_refused(FILES_REQUEST_READ,
                      "{\"session_id\":\"" SID "\",\"path\":\"/workspace/\\u0000/../../etc\"}", 400,
                      DETAIL("path must be under /workspace"));

        /* Longer than any path can be: refused before it becomes a huge bus message. */
        longest = malloc(FILES_PATH_MAX + 2);
        ASSERT_TRUE(longest);
        memset(longest, 'a', FILES_PATH_MAX + 1);
        longest[FILES_PATH_MAX + 1] = 0;
        ASSERT_TRUE(asprintf(&body, "{\"session_id\":\"" SID "\",\"path\":\"%s\"}", longest) > 0);
        check_refused(FILES_REQUEST_READ, body, 400, DETAIL("path too long"));
        free(body);
        body = NULL;
        ASSERT_TRUE(asprintf(&body, W("\"%s\"", "\"\""), longest) > 0);
        check_refused(FILES_REQUEST_WRITE, body, 400, DETAIL("path too long"));
        free(body);
        body = NULL;
        longest[FILES_PATH_MAX] = 0;
        ASSERT_TRUE(asprintf(&body, "{\"session_id\":\"" SID "\",\"path\":\"%s\"}", longest) > 0);
        ASSERT_TRUE(parse(FILES_REQUEST_READ, body, &c, &x, NULL) == 200);
        ASSERT_TRUE(strlen(x.path) == FILES_PATH_MAX);
}

static void test_read_and_session_order(void) {
        Config c = test_config();
        FilesRequest x;

        check_refused(FILES_REQUEST_READ, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_refused(FILES_REQUEST_READ, "{\"path\":\"a\"}", 422,
                      PYDANTIC("missing", "\"body\",\"session_id\"", "Field required"));
        check_refused(FILES_REQUEST_READ, "{\"session_id\":\"bad\"}", 422,
                      PYDANTIC("missing", "\"body\",\"path\"", "Field required"));
        check_refused(FILES_REQUEST_READ, "{\"session_id\":\"bad\",\"path\":\"a\\u0000\"}", 400,
                      DETAIL("invalid session_id"));
        /* Members of other requests are ignored, like pydantic does by default. */
        ASSERT_TRUE(parse(FILES_REQUEST_READ,
                          "{\"session_id\":\"" SID "\",\"path\":\"a\",\"data_base64\":1}", &c, &x,
                          NULL) == 200);
        ASSERT_STREQ(x.path, "a");
        ASSERT_TRUE(!x.data);

        check_refused(FILES_REQUEST_SESSION, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_refused(FILES_REQUEST_SESSION, "{}", 422,
                      PYDANTIC("missing", "\"body\",\"session_id\"", "Field required"));
        check_refused(FILES_REQUEST_SESSION, "{\"session_id\":null}", 422,
                      PYDANTIC("string_type", "\"body\",\"session_id\"", "Input should be a valid string"));
        check_refused(FILES_REQUEST_SESSION, "{\"session_id\":\"\"}", 400, DETAIL("invalid session_id"));
        check_refused(FILES_REQUEST_SESSION, "{\"session_id\":\"../" SID "\"}", 400,
                      DETAIL("invalid session_id"));
        ASSERT_TRUE(parse(FILES_REQUEST_SESSION, "{\"session_id\":\"" SID "\",\"path\":\"\\u0000\"}", &c, &x,
                          NULL) == 200);
        ASSERT_STREQ(x.session_id, SID);
        ASSERT_TRUE(!x.path && !x.data);

        json_object_put(last_doc);
        last_doc = NULL;
}

static void check_error(const char *name, const char *message, unsigned status, const char *body,
                        bool internal) {
        sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(name, message);
        HttpResponse *r = NULL;
        bool is_internal = !internal;

        ASSERT_TRUE(files_response_new_bus_error(&e, &r, &is_internal) == 0);
        check_body(r, status, body);
        ASSERT_TRUE(is_internal == internal);
        http_response_free(r);
}

static void test_bus_errors(void) {
        /* The contract's text, whatever the manager's message says. */
        check_error(BUS_ERROR_NOT_FOUND, "No such file: /workspace/x", 404, DETAIL("file not found"), false);
        check_error(BUS_ERROR_NOT_FOUND, NULL, 404, DETAIL("file not found"), false);
        check_error(BUS_ERROR_TOO_LARGE, NULL, 413, DETAIL("file too large"), false);
        check_error(BUS_ERROR_TOO_LARGE, "", 413, DETAIL("file too large"), false);
        /* There is more than one reason for that one. */
        check_error(BUS_ERROR_TOO_LARGE, "file too large", 413, DETAIL("file too large"), false);
        check_error(BUS_ERROR_TOO_LARGE, "workspace is full", 413, DETAIL("workspace is full"), false);
        check_error(BUS_ERROR_NO_SUCH_SESSION, "Session x is gone", 404,
                    DETAIL("session not found or not running"), false);
        /* Path errors: the manager's text is the detail, it chooses between the two. */
        check_error(BUS_ERROR_INVALID_PATH, "path must be under /workspace", 400,
                    DETAIL("path must be under /workspace"), false);
        check_error(BUS_ERROR_INVALID_PATH, "path resolves outside /workspace", 400,
                    DETAIL("path resolves outside /workspace"), false);
        check_error(BUS_ERROR_BUSY, "session is busy", 429, DETAIL("session is busy"), false);
        check_error(BUS_ERROR_LIMIT_EXCEEDED, "exec queue is full", 429, DETAIL("exec queue is full"),
                    false);
        check_error(BUS_ERROR_BACKEND_FAILED, "openat2(/var/lib/scopebox/...): EIO", 500,
                    DETAIL("sandbox backend failure"), true);
        check_error("org.freedesktop.DBus.Error.UnknownMethod", "Unknown method WriteFile", 500,
                    DETAIL("internal error"), true);
}

static void check_reset(const char *name, const char *message, unsigned status, const char *body,
                        bool internal) {
        sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(name, message);
        HttpResponse *r = NULL;
        bool is_internal = !internal;

        ASSERT_TRUE(files_reset_inputs_response_new(name ? &e : NULL, &r, &is_internal) == 0);
        check_body(r, status, body);
        ASSERT_TRUE(is_internal == internal);
        http_response_free(r);
}

static void test_reset_inputs(void) {
        HttpResponse *r = NULL;
        sd_bus_error unset = SD_BUS_ERROR_NULL;

        check_reset(NULL, NULL, 200, "{\"ok\":true,\"session_gone\":false}", false);
        /* A reaped session: 200, not 404. */
        check_reset(BUS_ERROR_NO_SUCH_SESSION, "Session is gone", 200,
                    "{\"ok\":false,\"session_gone\":true}", false);
        check_reset(BUS_ERROR_NO_SUCH_SESSION, NULL, 200, "{\"ok\":false,\"session_gone\":true}", false);
        /* Everything else as usual. */
        check_reset(BUS_ERROR_BUSY, "session is busy", 429, DETAIL("session is busy"), false);
        check_reset(BUS_ERROR_LIMIT_EXCEEDED, "exec queue is full", 429, DETAIL("exec queue is full"),
                    false);
        check_reset(BUS_ERROR_BACKEND_FAILED, "rm -rf failed", 500, DETAIL("sandbox backend failure"), true);
        check_reset(SD_BUS_ERROR_NO_REPLY, "timeout", 500, DETAIL("session manager did not answer"), true);

        /* An error that is not set is no error. */
        ASSERT_TRUE(files_reset_inputs_response_new(&unset, &r, NULL) == 0);
        check_body(r, 200, "{\"ok\":true,\"session_gone\":false}");
        http_response_free(r);
}

static void test_read_response(void) {
        uint8_t all[256];
        _cleanup_free_ char *enc = NULL, *expected = NULL;
        HttpResponse *r = NULL;

        for (size_t i = 0; i < sizeof(all); i++)
                all[i] = (uint8_t) i;
        enc = base64_encode(all, sizeof(all));
        ASSERT_TRUE(enc);
        ASSERT_TRUE(asprintf(&expected, "{\"data_base64\":\"%s\"}", enc) > 0);

        ASSERT_TRUE(files_read_response_new(all, sizeof(all), &r) == 0);
        ASSERT_TRUE(http_response_flatten(r) == 0);
        check_body(r, 200, expected);
        http_response_free(r);

        ASSERT_TRUE(files_read_response_new(NULL, 0, &r) == 0);
        ASSERT_TRUE(http_response_flatten(r) == 0);
        check_body(r, 200, "{\"data_base64\":\"\"}");
        http_response_free(r);

        ASSERT_TRUE(files_read_response_new("hello", 5, &r) == 0);
        ASSERT_TRUE(http_response_flatten(r) == 0);
        check_body(r, 200, "{\"data_base64\":\"aGVsbG8=\"}");
        http_response_free(r);
}

/* Builds a list response and returns it parsed (strictly: any forged structure would show). */
static json_object *list(const FilesEntry *e, size_t n, const char **ret_text) {
        static char text[1 << 16];
        HttpResponse *r = NULL;
        json_object *o = NULL, *files;

        ASSERT_TRUE(files_list_response_new(e, n, &r) == 0);
        ASSERT_TRUE(r->status == 200 && strlen(r->body) == r->size);
        ASSERT_TRUE(json_parse(r->body, r->size, JSON_DEPTH_MAX, &o) == 0);
        if (ret_text) {
                ASSERT_TRUE(r->size < sizeof(text));
                memcpy(text, r->body, r->size + 1);
                *ret_text = text;
        }
        http_response_free(r);

        /* Exactly one member, an array of exactly n rows of exactly two members. */
        ASSERT_TRUE(json_object_object_length(o) == 1);
        ASSERT_TRUE(json_object_object_get_ex(o, "files", &files));
        ASSERT_TRUE(json_object_is_type(files, json_type_array));
        ASSERT_TRUE(json_object_array_length(files) == n);
        for (size_t i = 0; i < n; i++) {
                json_object *row = json_object_array_get_idx(files, i), *p, *s;

                ASSERT_TRUE(json_object_is_type(row, json_type_object));
                ASSERT_TRUE(json_object_object_length(row) == 2);
                ASSERT_TRUE(json_object_object_get_ex(row, "path", &p));
                ASSERT_TRUE(json_object_is_type(p, json_type_string));
                ASSERT_TRUE(json_object_object_get_ex(row, "size", &s));
                ASSERT_TRUE(json_object_is_type(s, json_type_int));
                ASSERT_TRUE((size_t) json_object_get_string_len(p) == strlen(e[i].path));
                ASSERT_STREQ(json_object_get_string(p), e[i].path);
                ASSERT_TRUE(json_object_get_uint64(s) == e[i].size);
        }
        return o;
}

static void test_list_response(void) {
        static const FilesEntry basic[] = {
                { "outputs/result.txt", 5 },
                { "uploads/data.csv", 17 },
        };
        static const FilesEntry hostile[] = {
                { "a\nb", 1 },
                { "a\",\"size\":1},{\"path\":\"forged", 2 },
                { "x\"}]}", 3 },
                { "back\\slash\\", 4 },
                { "cr\rlf\r\n", 5 },
                { "tab\tbell\x07" "esc\x1b[31m del\x7f", 6 },
                { "\x01\x02\x1f", 7 },
                { "\xe4\xbd\xa0\xe5\xa5\xbd/\xf0\x9f\x98\x80.txt", 8 },          /* 你好/😀.txt */
                { "line\xe2\x80\xa8sep\xe2\x80\xa9par", 9 },                    /* U+2028, U+2029 */
                { "</script><!--", 10 },
                { "uploads/\\u0022", 11 },
                { "big", UINT64_MAX },
        };
        FilesEntry many[FILES_LIST_MAX + 1];
        char names[FILES_LIST_MAX + 1][8];
        const char *text = NULL;
        HttpResponse *r = NULL;
        json_object *o;

        o = list(NULL, 0, &text);
        ASSERT_STREQ(text, "{\"files\":[]}");
        json_object_put(o);

        o = list(basic, ELEMENTSOF(basic), &text);
        ASSERT_STREQ(text, "{\"files\":[{\"path\":\"outputs/result.txt\",\"size\":5},"
                           "{\"path\":\"uploads/data.csv\",\"size\":17}]}");
        json_object_put(o);

        /* Every row comes back exactly, as one row, in the manager's order. */
        o = list(hostile, ELEMENTSOF(hostile), &text);
        /* Raw control characters never reach the text: the newline can't split a row for line-based
         * readers either. */
        for (const char *p = text; *p; p++)
                ASSERT_TRUE((unsigned char) *p >= 0x20);
        ASSERT_TRUE(strstr(text, "\"a\\nb\""));
        ASSERT_TRUE(strstr(text, "\"size\":18446744073709551615"));
        json_object_put(o);

        /* The contract's limit holds even if the manager broke it. */
        for (size_t i = 0; i <= FILES_LIST_MAX; i++) {
                (void) snprintf(names[i], sizeof(names[i]), "f%03zu", i);
                many[i] = (FilesEntry) { names[i], i };
        }
        o = list(many, FILES_LIST_MAX, NULL);
        json_object_put(o);
        ASSERT_TRUE(files_list_response_new(many, FILES_LIST_MAX + 1, &r) == -EBADMSG && !r);

        /* Names that are no names. */
        ASSERT_TRUE(files_list_response_new((const FilesEntry[]) { { "", 1 } }, 1, &r) == -EBADMSG && !r);
        ASSERT_TRUE(files_list_response_new((const FilesEntry[]) { { NULL, 1 } }, 1, &r) == -EBADMSG && !r);
        ASSERT_TRUE(files_list_response_new((const FilesEntry[]) { { "ok", 1 }, { "x\xff", 1 } }, 2, &r) ==
                    -EBADMSG && !r);
        ASSERT_TRUE(files_list_response_new((const FilesEntry[]) { { "\xed\xa0\x80", 1 } }, 1, &r) ==
                    -EBADMSG && !r);
}

static void test_bus_timeouts(void) {
        Config c = test_config();

        /* Defaults: queue 150 s, exec cap 600 s, archives 120 s. */
        ASSERT_EQ(bus_timeout_session_usec(&c), (150 + 120) * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC);
        ASSERT_EQ(bus_timeout_exec_usec(&c, 120000),
                  (2 * 150 + 120) * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC);
        ASSERT_EQ(bus_timeout_files_usec(&c), (150 + 600) * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC);

        /* They follow the configuration. */
        c.queue_timeout_sec = 10;
        c.exec_timeout_cap_ms = 5000;
        ASSERT_EQ(bus_timeout_exec_usec(&c, 5000), 25 * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC);
        ASSERT_EQ(bus_timeout_files_usec(&c), 15 * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC);

        /* The largest configuration does not overflow. */
        c.queue_timeout_sec = 86400;
        c.exec_timeout_cap_ms = 86400000;
        ASSERT_TRUE(bus_timeout_files_usec(&c) > 2 * 86400 * USEC_PER_SEC);
}

int main(void) {
        RUN(test_write_order);
        RUN(test_write_base64);
        RUN(test_write_limit);
        RUN(test_upload_size);
        RUN(test_path);
        RUN(test_read_and_session_order);
        RUN(test_bus_errors);
        RUN(test_reset_inputs);
        RUN(test_read_response);
        RUN(test_list_response);
        RUN(test_bus_timeouts);
        json_object_put(last_doc);
        return 0;
}
