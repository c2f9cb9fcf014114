/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the /storage resources: validation, base64 into memfds, responses, per-route body limits. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "bus-client.h"
#include "bus-util.h"
#include "http-apis.h"
#include "http-router.h"
#include "http-storage.h"
#include "io-util.h"
#include "json-util.h"
#include "storage-config.h"
#include "string-util.h"
#include "tests.h"

#define DETAIL(s) "{\"detail\":\"" s "\"}"
#define PYDANTIC(type, loc, msg) \
        "{\"detail\":[{\"type\":\"" type "\",\"loc\":[" loc "],\"msg\":\"" msg "\"}]}"
#define ZEROS "{\"deleted\":0,\"scanned\":0,\"freed_bytes\":0}"
#define LOCAL "{\"provider\":\"local\",\"prefix\":\"aivory/\"}"
/* A body with 'members' and the local storage block. */
#define WITH_LOCAL(members) "{" members ",\"storage\":" LOCAL "}"
#define NOT_CONFIGURED DETAIL("storage backend not configured")
#define BODY_TOO_LARGE(n) "{\"error\":\"request body exceeds " #n " bytes\"}"

#define PUT STORAGE_REQUEST_PUT
#define DEL STORAGE_REQUEST_DELETE
#define GC  STORAGE_REQUEST_GC

static void check_body(const HttpResponse *r, unsigned status, const char *body) {
        ASSERT_TRUE(r);
        if (r->status != status || r->size != strlen(body) || memcmp(r->body, body, r->size) != 0) {
                fprintf(stderr, "got %u %.*s\nexpected %u %s\n", r->status, (int) r->size, r->body, status,
                        body);
                abort();
        }
        ASSERT_TRUE(strlen(r->body) == r->size);
}

/* The document the last parse() borrowed from: a StorageRequest points into it. */
static json_object *last_doc = NULL;

/* Parses 'text' as a body of 'kind'. Returns 1 (go ahead, *ret filled) or 0 with the answer's
 * status and body. */
static int parse(StorageRequestKind kind, const char *text, StorageRequest *ret, unsigned *ret_status,
                 char **ret_body) {
        HttpResponse *answer = (HttpResponse *) 0x1;
        int r;

        json_object_put(last_doc);
        last_doc = NULL;
        if (text)
                ASSERT_TRUE(json_parse(text, strlen(text), JSON_DEPTH_MAX, &last_doc) == 0);
        *ret = (StorageRequest) {};
        r = storage_request_parse(kind, last_doc, ret, &answer);
        ASSERT_TRUE(r == 0 || r == 1);
        if (r == 1) {
                ASSERT_TRUE(answer == NULL);
                return 1;
        }
        ASSERT_TRUE(answer);
        /* Nothing handed out with an answer. */
        ASSERT_TRUE(!ret->storage && !ret->key && !ret->data_base64);
        *ret_status = answer->status;
        *ret_body = strndup(answer->body, answer->size);
        ASSERT_TRUE(*ret_body);
        http_response_free(answer);
        return 0;
}

static void check_answer(StorageRequestKind kind, const char *text, unsigned status, const char *body) {
        StorageRequest x;
        unsigned s = 0;
        char *b = NULL;

        if (parse(kind, text, &x, &s, &b) != 0) {
                fprintf(stderr, "%s\n  accepted, expected %u %s\n", strempty(text), status, body);
                abort();
        }
        if (s != status || !streq(b, body)) {
                fprintf(stderr, "%s\n  got %u %s\n  expected %u %s\n", strempty(text), s, b, status, body);
                abort();
        }
        free(b);
}

static StorageRequest check_accepted(StorageRequestKind kind, const char *text) {
        StorageRequest x;
        unsigned s = 0;
        char *b = NULL;

        if (parse(kind, text, &x, &s, &b) != 1) {
                fprintf(stderr, "%s\n  refused with %u %s\n", text, s, b);
                abort();
        }
        return x;
}

/* A JSON body whose storage block serialises to more than 'size' bytes. */
static char *big_storage_body(const char *members, size_t size) {
        char *filler, *text;

        filler = malloc(size + 1);
        ASSERT_TRUE(filler);
        memset(filler, 'a', size);
        filler[size] = 0;
        ASSERT_TRUE(asprintf(&text, "{%s\"storage\":{\"provider\":\"s3\",\"s3_bucket\":\"%s\"}}", members,
                             filler) > 0);
        free(filler);
        return text;
}

static void test_parse_put(void) {
        StorageRequest x;
        char *text, *key;

        /* Schema first, in the contract's member order. */
        check_answer(PUT, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_answer(PUT, "[]", 422,
                     PYDANTIC("model_attributes_type", "\"body\"",
                              "Input should be a valid dictionary or object to extract fields from"));
        check_answer(PUT, "{}", 422,
                     PYDANTIC("missing", "\"body\",\"key\"", "Field required"));
        check_answer(PUT, "{\"key\":\"a\"}", 422,
                     PYDANTIC("missing", "\"body\",\"data_base64\"", "Field required"));
        check_answer(PUT, "{\"key\":null,\"data_base64\":\"\"}", 422,
                     PYDANTIC("string_type", "\"body\",\"key\"", "Input should be a valid string"));
        check_answer(PUT, "{\"key\":1,\"data_base64\":\"\"}", 422,
                     PYDANTIC("string_type", "\"body\",\"key\"", "Input should be a valid string"));
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\",\"content_type\":5}", 422,
                     PYDANTIC("string_type", "\"body\",\"content_type\"", "Input should be a valid string"));
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\",\"expires_in\":\"1\"}", 422,
                     PYDANTIC("int_type", "\"body\",\"expires_in\"", "Input should be a valid integer"));
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\",\"storage\":\"s3\"}", 422,
                     PYDANTIC("dict_type", "\"body\",\"storage\"", "Input should be a valid dictionary"));
        /* A schema error wins over a storage block that is too large. */
        text = big_storage_body("\"key\":1,\"data_base64\":\"\",", 70000);
        check_answer(PUT, text, 422,
                     PYDANTIC("string_type", "\"body\",\"key\"", "Input should be a valid string"));
        free(text);

        /* The storage block: too large, then missing. */
        text = big_storage_body("\"key\":\"\\u0000\",\"data_base64\":\"!\",", BUS_STORAGE_JSON_MAX);
        check_answer(PUT, text, 400, DETAIL("storage is too large"));
        free(text);
        check_answer(PUT, "{\"key\":\"../x\",\"data_base64\":\"!\"}", 400,
                     NOT_CONFIGURED);
        check_answer(PUT, "{\"key\":\"\\u0000\",\"data_base64\":\"\",\"storage\":null}", 400,
                     NOT_CONFIGURED);

        /* Keys the bus cannot carry, or longer than the agent would take. */
        check_answer(PUT, WITH_LOCAL("\"key\":\"a\\u0000b\",\"data_base64\":\"\""),
                     400, DETAIL("invalid storage key"));
        check_answer(PUT, WITH_LOCAL("\"key\":\"\\u0000\",\"data_base64\":\"\""),
                     400, DETAIL("invalid storage key"));
        key = malloc(STORAGE_KEY_MAX + 2);
        ASSERT_TRUE(key);
        memset(key, 'k', STORAGE_KEY_MAX + 1);
        key[STORAGE_KEY_MAX + 1] = 0;
        ASSERT_TRUE(asprintf(&text, WITH_LOCAL("\"key\":\"%s\",\"data_base64\":\"\""), key) > 0);
        check_answer(PUT, text, 400, DETAIL("invalid storage key"));
        free(text);
        /* At the limit it goes to the agent, which judges the rest of the rules. */
        key[STORAGE_KEY_MAX] = 0;
        ASSERT_TRUE(asprintf(&text, WITH_LOCAL("\"key\":\"%s\",\"data_base64\":\"\""), key) > 0);
        x = check_accepted(PUT, text);
        ASSERT_EQ(strlen(x.key), STORAGE_KEY_MAX);
        free(text);
        free(key);
        x = check_accepted(PUT, WITH_LOCAL("\"key\":\"../x\",\"data_base64\":\"\""));
        ASSERT_STREQ(x.key, "../x");
        x = check_accepted(PUT, WITH_LOCAL("\"key\":\"\",\"data_base64\":\"\""));
        ASSERT_STREQ(x.key, "");

        /* Content types: defaulted, passed, or refused when they could break a header. */
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"mineru/a.pdf\",\"data_base64\":\"QUJD\""));
        ASSERT_STREQ(x.content_type, "application/octet-stream");
        ASSERT_STREQ(x.storage, LOCAL);
        ASSERT_STREQ(x.key, "mineru/a.pdf");
        ASSERT_EQ(x.data_base64_size, 4);
        ASSERT_TRUE(memcmp(x.data_base64, "QUJD", 4) == 0);
        ASSERT_EQ(x.expires_in, 0);
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"content_type\":null"));
        ASSERT_STREQ(x.content_type, "application/octet-stream");
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"content_type\":\"\""));
        ASSERT_STREQ(x.content_type, "application/octet-stream");
        x = check_accepted(PUT, "{\"key\":\"a\",\"data_base64\":\"\","
                           "\"content_type\":\"application/pdf; name=\\\"x\\\"\",\"storage\":" LOCAL "}");
        ASSERT_STREQ(x.content_type, "application/pdf; name=\"x\"");
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\","
                     "\"content_type\":\"text/plain\\r\\nx-amz-acl: public-read\",\"storage\":" LOCAL "}",
                     400, DETAIL("invalid content_type"));
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\","
                     "\"content_type\":\"text/plain\\u0000\",\"storage\":" LOCAL "}",
                     400, DETAIL("invalid content_type"));
        check_answer(PUT, WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"content_type\":\"\\u0000text\""),
                     400, DETAIL("invalid content_type"));
        check_answer(PUT, "{\"key\":\"a\",\"data_base64\":\"\","
                     "\"content_type\":\"a\\u007f\",\"storage\":" LOCAL "}",
                     400, DETAIL("invalid content_type"));
        key = malloc(STORAGE_CONTENT_TYPE_MAX + 2);
        ASSERT_TRUE(key);
        memset(key, 't', STORAGE_CONTENT_TYPE_MAX + 1);
        key[STORAGE_CONTENT_TYPE_MAX + 1] = 0;
        ASSERT_TRUE(asprintf(&text, WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"content_type\":\"%s\""),
                             key) > 0);
        check_answer(PUT, text, 400, DETAIL("invalid content_type"));
        free(text);
        key[STORAGE_CONTENT_TYPE_MAX] = 0;
        ASSERT_TRUE(asprintf(&text, WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"content_type\":\"%s\""),
                             key) > 0);
        x = check_accepted(PUT, text);
        ASSERT_EQ(strlen(x.content_type), STORAGE_CONTENT_TYPE_MAX);
        free(text);
        free(key);

        /* expires_in: absent, null, 0 and negative all leave it to the agent. */
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"expires_in\":null"));
        ASSERT_EQ(x.expires_in, 0);
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"expires_in\":-5"));
        ASSERT_EQ(x.expires_in, 0);
        x = check_accepted(PUT,
                           WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"\",\"expires_in\":7200.0"));
        ASSERT_EQ(x.expires_in, 7200);
        x = check_accepted(PUT, "{\"key\":\"a\",\"data_base64\":\"\","
                           "\"expires_in\":9223372036854775807,\"storage\":" LOCAL "}");
        ASSERT_TRUE(x.expires_in == INT64_MAX);

        /* The base64 text keeps its length: a NUL inside must fail decoding, not end it. */
        x = check_accepted(PUT,
                           "{\"key\":\"a\",\"data_base64\":\"QQ==\\u0000AAA\",\"storage\":{}}");
        ASSERT_EQ(x.data_base64_size, 8);
        ASSERT_STREQ(x.storage, "{}");

        /* The block is forwarded as given, compact, credentials and all (the agent parses it). */
        x = check_accepted(PUT, "{\"key\":\"a\",\"data_base64\":\"\",\"storage\": {\"provider\":"
                           " \"s3\", \"s3_bucket\": \"b\", \"s3_endpoint\": \"http://x/y\","
                           " \"n\": \"\\u0000\"}}");
        ASSERT_STREQ(x.storage,
                     "{\"provider\":\"s3\",\"s3_bucket\":\"b\",\"s3_endpoint\":\"http://x/y\","
                     "\"n\":\"\\u0000\"}");

        json_object_put(last_doc);
        last_doc = NULL;
}

static void test_parse_delete(void) {
        StorageRequest x;
        char *text;

        check_answer(DEL, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_answer(DEL, "{\"storage\":" LOCAL "}", 422,
                     PYDANTIC("missing", "\"body\",\"key\"", "Field required"));
        check_answer(DEL, WITH_LOCAL("\"key\":[]"), 422,
                     PYDANTIC("string_type", "\"body\",\"key\"", "Input should be a valid string"));
        check_answer(DEL, "{\"key\":\"a\",\"storage\":[]}", 422,
                     PYDANTIC("dict_type", "\"body\",\"storage\"", "Input should be a valid dictionary"));
        text = big_storage_body("\"key\":\"a\",", BUS_STORAGE_JSON_MAX);
        check_answer(DEL, text, 400, DETAIL("storage is too large"));
        free(text);
        /* Just at the limit: forwarded. */
        text = big_storage_body("\"key\":\"a\",", BUS_STORAGE_JSON_MAX - strlen("{\"provider\":\"s3\","
                                                                          "\"s3_bucket\":\"\"}"));
        x = check_accepted(DEL, text);
        ASSERT_EQ(strlen(x.storage), BUS_STORAGE_JSON_MAX);
        free(text);

        check_answer(DEL, "{\"key\":\"a\"}", 400, NOT_CONFIGURED);
        check_answer(DEL, "{\"key\":\"a\",\"storage\":null}", 400,
                     NOT_CONFIGURED);
        check_answer(DEL, WITH_LOCAL("\"key\":\"a\\u0000\""), 400,
                     DETAIL("invalid storage key"));

        x = check_accepted(DEL,
                           "{\"key\":\"aivory/mineru/x.pdf\",\"storage\":" LOCAL ",\"content_type\":7}");
        ASSERT_STREQ(x.key, "aivory/mineru/x.pdf");
        ASSERT_STREQ(x.storage, LOCAL);
        ASSERT_TRUE(!x.data_base64 && !x.content_type);

        json_object_put(last_doc);
        last_doc = NULL;
}

static void test_parse_gc(void) {
        StorageRequest x;
        char *text;

        check_answer(GC, NULL, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        check_answer(GC, "{\"storage\":" LOCAL "}", 422,
                     PYDANTIC("missing", "\"body\",\"max_age_seconds\"", "Field required"));
        check_answer(GC, WITH_LOCAL("\"max_age_seconds\":null"), 422,
                     PYDANTIC("int_type", "\"body\",\"max_age_seconds\"",
                              "Input should be a valid integer"));
        check_answer(GC, WITH_LOCAL("\"max_age_seconds\":1.5"), 422,
                     PYDANTIC("int_from_float", "\"body\",\"max_age_seconds\"",
                              "Input should be a valid integer, got a number with a fractional part"));
        check_answer(GC, "{\"max_age_seconds\":1,\"storage\":1}", 422,
                     PYDANTIC("dict_type", "\"body\",\"storage\"", "Input should be a valid dictionary"));

        text = big_storage_body("\"max_age_seconds\":0,", BUS_STORAGE_JSON_MAX);
        check_answer(GC, text, 400, DETAIL("storage is too large"));
        free(text);

        /* Nothing to sweep: zeros without asking anyone. */
        check_answer(GC, "{\"max_age_seconds\":604800}", 200, ZEROS);
        check_answer(GC, "{\"max_age_seconds\":604800,\"storage\":null}", 200, ZEROS);
        check_answer(GC, WITH_LOCAL("\"max_age_seconds\":0"), 200, ZEROS);
        check_answer(GC, WITH_LOCAL("\"max_age_seconds\":-5"), 200, ZEROS);
        check_answer(GC, "{\"max_age_seconds\":-9223372036854775808,\"storage\":{}}", 200,
                     ZEROS);

        x = check_accepted(GC, WITH_LOCAL("\"max_age_seconds\":604800"));
        ASSERT_EQ(x.max_age_sec, 604800);
        ASSERT_STREQ(x.storage, LOCAL);
        ASSERT_TRUE(!x.key);
        x = check_accepted(GC, "{\"max_age_seconds\":1,\"storage\":{\"provider\":\"nope\"}}");
        ASSERT_EQ(x.max_age_sec, 1);
        ASSERT_STREQ(x.storage, "{\"provider\":\"nope\"}");

        json_object_put(last_doc);
        last_doc = NULL;
}

/* Decodes with storage_data_memfd(); returns its result and, on success, the content. */
static int decode(const char *text, size_t n, size_t chunk, char **ret, size_t *ret_size) {
        int fd = -EBADF, r, seals;

        r = storage_data_memfd(text, n, chunk, &fd);
        if (r < 0) {
                ASSERT_TRUE(fd == -EBADF);
                return r;
        }
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        seals = fcntl(fd, F_GET_SEALS);
        ASSERT_TRUE(seals >= 0);
        ASSERT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL),
                  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
        ASSERT_TRUE(read_full_memfd(fd, SIZE_MAX - 1, ret, ret_size) == 0);
        ASSERT_TRUE(close(fd) == 0);
        return 0;
}

static void check_decode(const char *text, size_t n, size_t chunk) {
        void *want = NULL;
        size_t want_size = 0, got_size = 0;
        char *got = NULL;
        int r, k;

        r = base64_decode(text, n, &want, &want_size);
        ASSERT_TRUE(r == 0 || r == -EINVAL);
        k = decode(text, n, chunk, &got, &got_size);
        if (k != r) {
                fprintf(stderr, "\"%.*s\" with chunk %zu: %d, whole text: %d\n", (int) n, text, chunk, k, r);
                abort();
        }
        if (r == 0) {
                ASSERT_EQ(got_size, want_size);
                ASSERT_TRUE(want_size == 0 || memcmp(got, want, want_size) == 0);
        }
        free(want);
        free(got);
}

static void test_data_memfd(void) {
        static const char *const texts[] = {
                "", "QQ==", "QUI=", "QUJD", "QUJDRA==", "QUJDREVG", "QUJDREVGRw==",
                /* accepted by Python's b64decode(validate=True): trailing bits, extra '=' */
                "QR==", "QUJ=", "QUJD====", "QUJDQUJD=", "QUJDQUJD==========",
                /* refused */
                "Q", "QQ", "QQ=", "QQ=A", "QQ==QQ==", "QUJD\n", "QU JD", "Q===", "=", "====", "QUI==",
                "-_-_", "data:application/pdf;base64,QUJD", "QQ==QUJD", "QUJD=QUJD",
        };
        char *got = NULL, *text, *enc;
        uint8_t bin[1000];
        size_t size = 0;

        for (size_t i = 0; i < ELEMENTSOF(texts); i++)
                for (size_t chunk = 4; chunk <= 16; chunk += 4)
                        check_decode(texts[i], strlen(texts[i]), chunk);

        /* An embedded NUL is a character like any other bad one. */
        check_decode("QQ==\0AAA", 8, 4);
        check_decode("QUJD\0AAA", 8, 4);
        check_decode("QUJD\0AA=", 8, 8);

        /* Every step boundary against the whole-text decoder, on random base64-ish texts. */
        srand(4711);
        for (unsigned round = 0; round < 3000; round++) {
                static const char alphabet[] =
                        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
                char buf[40];
                size_t n = (size_t) rand() % sizeof(buf);

                for (size_t i = 0; i < n; i++)
                        buf[i] = rand() % 8 == 0 ? '=' : alphabet[rand() % 64];
                for (size_t chunk = 4; chunk <= 44; chunk += 4)
                        check_decode(buf, n, chunk);
        }

        /* Real data of every length, through small and large steps. */
        for (size_t i = 0; i < sizeof(bin); i++)
                bin[i] = (uint8_t) (i * 131 + 7);
        for (size_t n = 0; n <= sizeof(bin); n += 37) {
                enc = base64_encode(bin, n);
                ASSERT_TRUE(enc);
                for (size_t chunk = 4; chunk <= 64; chunk += 12) {
                        ASSERT_TRUE(decode(enc, strlen(enc), chunk, &got, &size) == 0);
                        ASSERT_EQ(size, n);
                        ASSERT_TRUE(n == 0 || memcmp(got, bin, n) == 0);
                        free(got);
                }
                ASSERT_TRUE(decode(enc, strlen(enc), STORAGE_DECODE_CHUNK, &got, &size) == 0);
                ASSERT_EQ(size, n);
                free(got);
                free(enc);
        }

        /* Larger than one step of the real size. */
        text = malloc(STORAGE_DECODE_CHUNK * 2 + 8 + 1);
        ASSERT_TRUE(text);
        memset(text, 'A', STORAGE_DECODE_CHUNK * 2 + 8);
        memcpy(text + STORAGE_DECODE_CHUNK * 2 + 4, "QUI=", 4);
        ASSERT_TRUE(decode(text, STORAGE_DECODE_CHUNK * 2 + 8, STORAGE_DECODE_CHUNK, &got, &size) == 0);
        ASSERT_EQ(size, STORAGE_DECODE_CHUNK / 4 * 3 * 2 + 3 + 2);
        ASSERT_TRUE(memcmp(got + size - 2, "AB", 2) == 0);
        free(got);
        /* Padding at the end of the first step, more text after it. */
        memcpy(text + STORAGE_DECODE_CHUNK - 4, "QQ==", 4);
        ASSERT_TRUE(decode(text, STORAGE_DECODE_CHUNK * 2 + 8, STORAGE_DECODE_CHUNK, &got, &size) ==
                    -EINVAL);
        free(text);
}

static void test_responses(void) {
        HttpResponse *r = NULL;

        ASSERT_TRUE(storage_put_response_new("s3", "aivory/mineru/document.pdf",
                                             "https://storage.example/b/aivory/mineru/document.pdf"
                                             "?X-Amz-Signature=ab&x=1", 3600, &r) == 0);
        check_body(r, 200, "{\"provider\":\"s3\",\"key\":\"aivory/mineru/document.pdf\","
                   "\"url\":\"https://storage.example/b/aivory/mineru/document.pdf?X-Amz-Signature=ab&x=1\","
                   "\"expires_in\":3600}");
        http_response_free(r);

        /* Keys are escaped, never spliced. */
        ASSERT_TRUE(storage_put_response_new("aliyun_oss", "p/\"a\\b\"/\xe6\x96\x87.pdf", "u", UINT64_MAX,
                                             &r) == 0);
        check_body(r, 200, "{\"provider\":\"aliyun_oss\",\"key\":\"p/\\\"a\\\\b\\\"/\xe6\x96\x87.pdf\","
                   "\"url\":\"u\",\"expires_in\":18446744073709551615}");
        http_response_free(r);
        ASSERT_TRUE(storage_put_response_new("s3", "a\xff", "u", 1, &r) == -EBADMSG);
        ASSERT_TRUE(storage_put_response_new("s3", "a", "\xc3\x28", 1, &r) == -EBADMSG);

        ASSERT_TRUE(storage_delete_response_new("aivory/mineru/document.pdf", &r) == 0);
        check_body(r, 200, "{\"ok\":true,\"key\":\"aivory/mineru/document.pdf\"}");
        http_response_free(r);
        ASSERT_TRUE(storage_delete_response_new("a\x01\"", &r) == 0);
        check_body(r, 200, "{\"ok\":true,\"key\":\"a\\u0001\\\"\"}");
        http_response_free(r);
        ASSERT_TRUE(storage_delete_response_new("\xed\xa0\x80", &r) == -EBADMSG);

        ASSERT_TRUE(storage_gc_response_new(3, 12, 10485760, &r) == 0);
        check_body(r, 200, "{\"deleted\":3,\"scanned\":12,\"freed_bytes\":10485760}");
        http_response_free(r);
        ASSERT_TRUE(storage_gc_response_new(0, 0, 0, &r) == 0);
        check_body(r, 200, ZEROS);
        http_response_free(r);
}

static void check_error(StorageRequestKind kind, const char *name, const char *message, unsigned status,
                        const char *body, bool internal) {
        sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(name, message);
        HttpResponse *r = NULL;
        bool is_internal = !internal;

        ASSERT_TRUE(storage_response_new_bus_error(kind, &e, &r, &is_internal) == 0);
        check_body(r, status, body);
        ASSERT_TRUE(is_internal == internal);
        http_response_free(r);
}

static void test_bus_errors(void) {
        for (StorageRequestKind k = 0; k < _STORAGE_REQUEST_KIND_MAX; k++) {
                /* The agent's texts are the details. */
                check_error(k, SD_BUS_ERROR_INVALID_ARGS, "invalid storage key", 400,
                            DETAIL("invalid storage key"), false);
                check_error(k, SD_BUS_ERROR_INVALID_ARGS, "presigned URLs are unsupported for local storage",
                            400, DETAIL("presigned URLs are unsupported for local storage"), false);
                check_error(k, SD_BUS_ERROR_INVALID_ARGS, "unsupported storage provider", 400,
                            DETAIL("unsupported storage provider"), false);
                check_error(k, SD_BUS_ERROR_INVALID_ARGS, NULL, 400, DETAIL("invalid argument"), false);
                check_error(k, BUS_ERROR_STORAGE_FAILED, "S3 PutObject failed: 403 AccessDenied", 502,
                            DETAIL("S3 PutObject failed: 403 AccessDenied"), false);
                check_error(k, BUS_ERROR_STORAGE_FAILED, NULL, 502, DETAIL("storage operation failed"),
                            false);
                check_error(k, BUS_ERROR_STORAGE_FAILED, "storage backend not configured", 502,
                            NOT_CONFIGURED, false);

                /* Ours: hidden, and named after the agent, not the session manager. */
                check_error(k, SD_BUS_ERROR_NO_REPLY, "Method call timed out", 500,
                            DETAIL("storage agent did not answer"), true);
                check_error(k, SD_BUS_ERROR_TIMEOUT, NULL, 500, DETAIL("storage agent did not answer"),
                            true);
                check_error(k, SD_BUS_ERROR_SERVICE_UNKNOWN, "The name is not activatable", 500,
                            DETAIL("storage agent unavailable"), true);
                check_error(k, SD_BUS_ERROR_NAME_HAS_NO_OWNER, NULL, 500,
                            DETAIL("storage agent unavailable"), true);
                check_error(k, SD_BUS_ERROR_DISCONNECTED, NULL, 500, DETAIL("storage agent unavailable"),
                            true);
                check_error(k, "org.freedesktop.DBus.Error.Spawn.ChildExited", "/usr/libexec/... failed",
                            500, DETAIL("internal error"), true);
                check_error(k, SD_BUS_ERROR_ACCESS_DENIED, "Rejected send message", 500,
                            DETAIL("internal error"), true);
                check_error(k, SD_BUS_ERROR_UNKNOWN_METHOD, "Unknown method PutObject", 500,
                            DETAIL("internal error"), true);
                /* Session-manager errors mean nothing here. */
                check_error(k, BUS_ERROR_NO_SUCH_SESSION, "gone", 500, DETAIL("internal error"), true);
                check_error(k, BUS_ERROR_TOO_LARGE, "too large", 500, DETAIL("internal error"), true);
        }

        /* Storage that is not in effect, by its name: 400 for put and delete, zeros for gc; the
         * agent's words change nothing. */
        check_error(PUT, BUS_ERROR_STORAGE_NOT_CONFIGURED, "storage backend not configured", 400,
                    NOT_CONFIGURED, false);
        check_error(DEL, BUS_ERROR_STORAGE_NOT_CONFIGURED, "no bucket in the block", 400, NOT_CONFIGURED,
                    false);
        check_error(PUT, BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL, 400, NOT_CONFIGURED, false);
        check_error(GC, BUS_ERROR_STORAGE_NOT_CONFIGURED, "storage backend not configured", 200, ZEROS,
                    false);
        check_error(GC, BUS_ERROR_STORAGE_NOT_CONFIGURED, "anything at all", 200, ZEROS, false);
        /* The same words under another name are that other error: a text decides nothing. */
        check_error(GC, SD_BUS_ERROR_INVALID_ARGS, "storage backend not configured", 400, NOT_CONFIGURED,
                    false);
        check_error(GC, SD_BUS_ERROR_INVALID_ARGS, "invalid storage config", 400,
                    DETAIL("invalid storage config"), false);

        for (StorageRequestKind k = 0; k < _STORAGE_REQUEST_KIND_MAX; k++) {
                HttpResponse *r = NULL;
                sd_bus_error e = SD_BUS_ERROR_MAKE_CONST(BUS_ERROR_POLICY_UNAVAILABLE, "no route");

                /* The endpoint policy refused the block: the agent's reason; a sweep finds nothing. */
                if (k == GC)
                        check_error(k, BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed", 200, ZEROS,
                                    false);
                else {
                        check_error(k, BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed", 400,
                                    DETAIL("storage endpoint not allowed"), false);
                        check_error(k, BUS_ERROR_STORAGE_REFUSED, NULL, 400,
                                    DETAIL("storage endpoint refused"), false);
                }
                /* The agent could not tell: 503, ours, with a time to retry after. */
                check_error(k, BUS_ERROR_POLICY_UNAVAILABLE, "route lookup failed", 503,
                            DETAIL("route lookup failed"), true);
                ASSERT_TRUE(storage_response_new_bus_error(k, &e, &r, NULL) == 0);
                ASSERT_TRUE(streq_ptr(r->retry_after, "5"));
                http_response_free(r);
                /* Archive errors are between the manager and the agent: never for these calls. */
                check_error(k, BUS_ERROR_UNKNOWN_TOKEN, "stale", 500, DETAIL("internal error"), true);
                check_error(k, BUS_ERROR_ARCHIVE_DAMAGED, "corrupt", 500, DETAIL("internal error"), true);
        }
}

static void test_timeouts(void) {
        Config c = { .archive_timeout_sec = 120 };

        ASSERT_TRUE(bus_timeout_storage_usec(&c) == 180 * USEC_PER_SEC);
        ASSERT_TRUE(bus_timeout_storage_gc_usec(&c) == 780 * USEC_PER_SEC);
}

/* A server as the router sees it, without sockets, bus or event loop. */
static void server_init(Server *s) {
        *s = (Server) {
                .config.max_body_bytes = 1000,
                .config.max_storage_body_bytes = 5000,
                .config.archive_timeout_sec = 120,
                .body_budget = 1ULL << 30,
        };
        ASSERT_TRUE(server_add_api(s, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(s, &http_dify_api) == 0);
        ASSERT_TRUE(server_set_api_key(s, "k") == 0);
}

static void server_done(Server *s) {
        ASSERT_TRUE(!s->requests && s->n_requests == 0);
        ASSERT_TRUE(s->body_bytes == 0);
        ASSERT_TRUE(server_set_api_key(s, NULL) == 0);
}

static HttpRequest *begin(Server *s, const char *method, const char *path, const char *authorization,
                          const char *content_length) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(s, NULL, NULL, method, path, &req) == 0);
        ASSERT_TRUE(http_request_begin(req, &(HttpRequestHeaders) {
                                .n = 3, .bytes = 100,
                                .n_authorization = !!authorization, .authorization = authorization,
                                .authorization_size = authorization ? strlen(authorization) : 0,
                                .n_content_length = !!content_length, .content_length = content_length,
                        }) == 0);
        return req;
}

static void check_begin(Server *s, const char *method, const char *path, const char *content_length,
                        unsigned status, const char *body) {
        HttpRequest *req = begin(s, method, path, "Bearer k", content_length);

        if (status == 0) {
                if (req->response)
                        fprintf(stderr, "%s %s: refused with %.*s\n", method, path,
                                (int) req->response->size, req->response->body);
                ASSERT_TRUE(!req->response && req->state == HTTP_REQUEST_RECEIVING);
        } else
                check_body(req->response, status, body);
        http_request_free(req);
}

static int lookup(const char *path, const HttpRoute **ret) {
        return http_route_lookup(http_sidecar_routes, "POST", path, ret, NULL, NULL, 0);
}

static void test_body_limits(void) {
        const HttpRoute *route = NULL;
        char chunk[1000];
        HttpRequest *req;
        Server s;

        server_init(&s);
        memset(chunk, 'x', sizeof(chunk));

        /* Only /storage/put gets the storage body limit. */
        for (const HttpRoute *r = http_sidecar_routes; r->method; r++)
                ASSERT_EQ(http_route_body_max(r, &s.config), streq(r->path, "/storage/put") ? 5000 : 1000);
        ASSERT_TRUE(lookup("/storage/put", &route) == 0);
        ASSERT_TRUE(route->body_max == http_storage_put_body_max);
        ASSERT_TRUE(lookup("/storage/delete", &route) == 0);
        ASSERT_TRUE(!route->body_max);
        ASSERT_TRUE(lookup("/storage/gc", &route) == 0);
        ASSERT_TRUE(!route->body_max);
        ASSERT_TRUE(lookup("/storage/put/", &route) == -ENOENT);
        ASSERT_TRUE(lookup("/storage", &route) == -ENOENT);

        /* Content-Length, checked before reading, names the route's own limit. */
        check_begin(&s, "POST", "/storage/put", "5000", 0, NULL);
        check_begin(&s, "POST", "/storage/put", "1001", 0, NULL);
        check_begin(&s, "POST", "/storage/put", "5001", 413, BODY_TOO_LARGE(5000));
        check_begin(&s, "POST", "/storage/put", "99999999999999999999999", 413,
                    BODY_TOO_LARGE(5000));
        check_begin(&s, "POST", "/storage/delete", "1000", 0, NULL);
        check_begin(&s, "POST", "/storage/delete", "1001", 413, BODY_TOO_LARGE(1000));
        check_begin(&s, "POST", "/storage/gc", "1001", 413, BODY_TOO_LARGE(1000));
        check_begin(&s, "POST", "/exec", "1001", 413, BODY_TOO_LARGE(1000));
        check_begin(&s, "POST", "/files", "5000", 413, BODY_TOO_LARGE(1000));
        check_begin(&s, "GET", "/storage/put", NULL, 405, "{\"detail\":\"Method Not Allowed\"}");
        check_begin(&s, "GET", "/storage/gc", NULL, 405, "{\"detail\":\"Method Not Allowed\"}");

        /* Auth before the size, as everywhere. */
        req = begin(&s, "POST", "/storage/put", NULL, "99999");
        check_body(req->response, 401, "{\"error\":\"unauthorized\"}");
        http_request_free(req);
        req = begin(&s, "POST", "/storage/gc", "Bearer x", NULL);
        check_body(req->response, 401, "{\"error\":\"unauthorized\"}");
        http_request_free(req);

        /* Chunked: the route's cap holds while the body streams in. */
        req = begin(&s, "POST", "/storage/put", "Bearer k", NULL);
        for (unsigned i = 0; i < 5; i++)
                ASSERT_TRUE(http_request_append_body(req, chunk, sizeof(chunk)) == 0);
        ASSERT_TRUE(http_request_append_body(req, chunk, 1) == -EFBIG);
        ASSERT_TRUE(req->body_size == 5000 && s.body_bytes >= 5000);
        http_request_free(req);
        req = begin(&s, "POST", "/storage/delete", "Bearer k", NULL);
        ASSERT_TRUE(http_request_append_body(req, chunk, sizeof(chunk)) == 0);
        ASSERT_TRUE(http_request_append_body(req, chunk, 1) == -EFBIG);
        http_request_free(req);
        req = begin(&s, "POST", "/exec", "Bearer k", NULL);
        ASSERT_TRUE(http_request_append_body(req, chunk, sizeof(chunk)) == 0);
        ASSERT_TRUE(http_request_append_body(req, chunk, 1) == -EFBIG);
        http_request_free(req);

        /* Content-Length reserves the larger size against the server-wide budget too. */
        s.body_budget = 4999;
        check_begin(&s, "POST", "/storage/put", "5000", 503, "{\"error\":\"server busy, retry later\"}");
        s.body_budget = 1ULL << 30;

        server_done(&s);
}

static HttpRequest *dispatch(Server *s, const char *path, const char *body, int expect) {
        HttpRequest *req = begin(s, "POST", path, "Bearer k", NULL);

        ASSERT_TRUE(!req->response);
        ASSERT_TRUE(http_request_append_body(req, body, strlen(body)) == 0);
        ASSERT_EQ(http_request_dispatch(req), expect);
        ASSERT_TRUE(!req->body && !req->slot);
        return req;
}

static void check_dispatch(Server *s, const char *path, const char *body, unsigned status,
                           const char *answer) {
        HttpRequest *req = dispatch(s, path, body, 0);

        check_body(req->response, status, answer);
        http_request_free(req);
}

static void test_dispatch(void) {
        HttpRequest *req;
        Server s;

        server_init(&s);

        check_dispatch(&s, "/storage/put", "{\"key\":\"a\",", 422,
                       PYDANTIC("json_invalid", "\"body\",0", "JSON decode error"));
        check_dispatch(&s, "/storage/put", "{\"key\":\"a\",\"data_base64\":\"QQ==\"}", 400,
                       NOT_CONFIGURED);
        check_dispatch(&s, "/storage/put", WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"QQ=\""), 400,
                       DETAIL("invalid base64"));
        check_dispatch(&s, "/storage/put", WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"QUJD\\n\""),
                       400, DETAIL("invalid base64"));
        check_dispatch(&s, "/storage/put", "{\"key\":\"a\",\"data_base64\":\"QQ==\\u0000AAA\",\"storage\":"
                       LOCAL "}", 400, DETAIL("invalid base64"));
        check_dispatch(&s, "/storage/delete", "{\"key\":\"a\"}", 400, NOT_CONFIGURED);
        check_dispatch(&s, "/storage/gc", WITH_LOCAL("\"max_age_seconds\":0"), 200, ZEROS);
        check_dispatch(&s, "/storage/gc", "{\"max_age_seconds\":86400}", 200, ZEROS);
        check_dispatch(&s, "/storage/gc", "{}", 422,
                       PYDANTIC("missing", "\"body\",\"max_age_seconds\"", "Field required"));
        req = begin(&s, "POST", "/storage/gc", "Bearer k", "0");
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        check_body(req->response, 422, PYDANTIC("missing", "\"body\"", "Field required"));
        http_request_free(req);

        /* Valid requests need the agent, which this server cannot reach. */
        req = dispatch(&s, "/storage/put", WITH_LOCAL("\"key\":\"a\",\"data_base64\":\"QUJD\""),
                       -ENOTCONN);
        http_request_free(req);
        req = dispatch(&s, "/storage/delete", WITH_LOCAL("\"key\":\"a\""), -ENOTCONN);
        http_request_free(req);
        req = dispatch(&s, "/storage/gc", WITH_LOCAL("\"max_age_seconds\":1"), -ENOTCONN);
        http_request_free(req);

        server_done(&s);
}

int main(void) {
        RUN(test_parse_put);
        RUN(test_parse_delete);
        RUN(test_parse_gc);
        RUN(test_data_memfd);
        RUN(test_responses);
        RUN(test_bus_errors);
        RUN(test_timeouts);
        RUN(test_body_limits);
        RUN(test_dispatch);
        return 0;
}
