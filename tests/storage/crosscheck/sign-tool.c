/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Cross-check helper: prints our S3 (SigV4) and OSS signatures for the cases of a cases.json table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "macro.h"
#include "oss-sign.h"
#include "sigv4.h"

/* Usage: sign-tool CASES.json   (or "-" for standard input)
 *
 * Output: one "id<TAB>field<TAB>value" line per signed value, in the format and order of aws.mjs and
 * oss.mjs, so that the two can be compared line by line. A case that cannot be signed prints an
 * "id<TAB>error<TAB>message" line and makes the exit status non-zero. */

DEFINE_CLEANUP_FUNC(json_object *, json_object_put);

static const char *get_string(json_object *o, const char *key) {
        json_object *v;

        if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        return json_object_get_string(v);
}

static bool get_bool(json_object *o, const char *key) {
        json_object *v;

        return o && json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

static int64_t get_int(json_object *o, const char *key, int64_t def) {
        json_object *v;

        if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return def;
        return json_object_get_int64(v);
}

static json_object *get(json_object *o, const char *key) {
        json_object *v;

        if (!o || !json_object_object_get_ex(o, key, &v))
                return NULL;
        return v;
}

/* One [name, value|null] element of a pair list. */
static int parse_pair(json_object *e, const char **ret_name, const char **ret_value) {
        json_object *k, *v;

        if (!json_object_is_type(e, json_type_array) || json_object_array_length(e) != 2)
                return -EINVAL;
        k = json_object_array_get_idx(e, 0);
        v = json_object_array_get_idx(e, 1);
        if (!json_object_is_type(k, json_type_string) || (v && !json_object_is_type(v, json_type_string)))
                return -EINVAL;
        *ret_name = json_object_get_string(k);
        *ret_value = v ? json_object_get_string(v) : NULL;
        return 0;
}

/* [[name, value|null], …] → pairs pointing into the JSON tree; the array is malloc()ed (with room
 * for one more entry). An absent key is an empty list. */
static int get_pairs(json_object *o, const char *key, SignPair **ret, size_t *ret_n) {
        json_object *a = get(o, key);
        size_t n = 0;
        SignPair *p;

        if (a && !json_object_is_type(a, json_type_array))
                return -EINVAL;
        if (a)
                n = json_object_array_length(a);
        p = calloc(n + 1, sizeof(SignPair));
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (parse_pair(json_object_array_get_idx(a, i), &p[i].name, &p[i].value) < 0) {
                        free(p);
                        return -EINVAL;
                }
        *ret = p;
        *ret_n = n;
        return 0;
}

static void emit(const char *id, const char *field, const char *value) {
        printf("%s\t%s\t%s\n", id, field, value);
}

static int fail(const char *id, const char *what, int r) {
        printf("%s\terror\t%s: %s\n", id, what, strerror(-r));
        return r;
}

static int sigv4_case(json_object *c, json_object *cases, time_t now) {
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_free_ SigV4Pair *query = NULL, *headers = NULL;
        _cleanup_free_ char *payload_hash = NULL;
        const char *id = strempty(get_string(c, "id")), *mode = get_string(c, "mode"), *body;
        json_object *creds_json;
        size_t n_query, n_headers;
        int r;

        creds_json = get(cases, streq_ptr(get_string(c, "credentials"), "suite") ? "suite_credentials"
                                                                                  : "s3_credentials");
        const SigV4Credentials creds = {
                .access_key_id = get_string(creds_json, "accessKeyId"),
                .secret = get_string(creds_json, "secretAccessKey"),
        };

        r = get_pairs(c, "query", &query, &n_query);
        if (r >= 0)
                r = get_pairs(c, "headers", &headers, &n_headers);
        if (r < 0)
                return fail(id, "bad case", r);

        body = get_string(c, "body");
        if (body) {
                r = sigv4_sha256_hex(body, strlen(body), &payload_hash);
                if (r < 0)
                        return fail(id, "hash", r);
        } else if (streq_ptr(get_string(c, "payload"), "empty")) {
                payload_hash = strdup(SIGV4_EMPTY_SHA256);
                if (!payload_hash)
                        return fail(id, "hash", -ENOMEM);
        }

        SigV4Request req = {
                .method = get_string(c, "method"),
                .host = get_string(c, "host"),
                .path = get_string(c, "path"),
                .query = query,
                .n_query = n_query,
                .headers = headers,
                .n_headers = n_headers,
                .payload_hash = payload_hash,
                .region = get_string(c, "region"),
                .service = get_string(c, "service"),
                .flags = get_bool(c, "normalize") ? SIGV4_NORMALIZE_PATH : 0,
        };

        if (streq_ptr(mode, "sign")) {
                r = sigv4_sign_headers(&req, &creds, now, &res);
                if (r < 0)
                        return fail(id, "sigv4_sign_headers", r);
                emit(id, "authorization", res.authorization);
        } else if (streq_ptr(mode, "presign")) {
                r = sigv4_presign(&req, &creds, now, (unsigned) get_int(c, "expires", 0), &res);
                if (r < 0)
                        return fail(id, "sigv4_presign", r);
                emit(id, "query", res.query);
        } else
                return fail(id, "unknown mode", -EINVAL);
        return 0;
}

static int s3_case(json_object *c, json_object *cases, time_t now) {
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_free_ SigV4Pair *query = NULL, *headers = NULL;
        _cleanup_free_ char *payload_hash = NULL, *url = NULL;
        const char *id = strempty(get_string(c, "id")), *mode = get_string(c, "mode"), *body;
        json_object *client = get(c, "client"), *wire = get(c, "wire"), *creds_json;
        size_t n_query, n_headers;
        int r;

        creds_json = get(cases, "s3_credentials");
        const SigV4Credentials creds = {
                .access_key_id = get_string(creds_json, "accessKeyId"),
                .secret = get_string(creds_json, "secretAccessKey"),
        };
        const S3Location loc = {
                .endpoint = get_string(client, "endpoint"),
                .region = get_string(client, "region"),
                .bucket = get_string(wire, "bucket"),
                .key = get_string(wire, "key"),
                .path_style = get_bool(client, "forcePathStyle"),
        };
        const char *method = get_string(wire, "method");

        r = get_pairs(wire, "query", &query, &n_query);
        if (r >= 0)
                r = get_pairs(wire, "headers", &headers, &n_headers);
        if (r < 0)
                return fail(id, "bad case", r);

        if (streq_ptr(mode, "header")) {
                body = get_string(wire, "body");
                if (body) {
                        r = sigv4_sha256_hex(body, strlen(body), &payload_hash);
                        if (r < 0)
                                return fail(id, "hash", r);
                }
                r = s3_sign_request(&loc, method, query, n_query, headers, n_headers, payload_hash, &creds,
                                    now, &res, &url);
                if (r < 0)
                        return fail(id, "s3_sign_request", r);
                emit(id, "url", url);
                emit(id, "authorization", res.authorization);
                emit(id, "x-amz-date", res.amz_date);
                emit(id, "x-amz-content-sha256", res.content_sha256);
        } else if (streq_ptr(mode, "presign")) {
                /* The AWS SDK's presigner puts X-Amz-Content-Sha256=UNSIGNED-PAYLOAD into its URLs. */
                r = s3_presign_url(&loc, method, query, n_query, headers, n_headers, &creds, now,
                                   (unsigned) get_int(c, "expires", 0), SIGV4_PRESIGN_CONTENT_SHA256_PARAM,
                                   &url);
                if (r < 0)
                        return fail(id, "s3_presign_url", r);
                emit(id, "url", url);
        } else
                return fail(id, "unknown mode", -EINVAL);
        return 0;
}

static int oss_case(json_object *c, json_object *cases, time_t now) {
        _cleanup_free_ OssPair *query = NULL, *headers = NULL, *sub = NULL;
        _cleanup_free_ char *authorization = NULL, *url = NULL;
        const char *id = strempty(get_string(c, "id")), *mode = get_string(c, "mode");
        json_object *client = get(c, "client"), *wire = get(c, "wire"), *creds_json;
        size_t n_query, n_headers, n_sub;
        char date[OSS_HTTP_DATE_LEN + 1];
        int r;

        creds_json = get(cases, "oss_credentials");
        const OssCredentials creds = {
                .access_key_id = get_string(creds_json, "accessKeyId"),
                .secret = get_string(creds_json, "accessKeySecret"),
        };
        const OssLocation loc = {
                .endpoint = get_string(client, "endpoint"),
                .bucket = get_string(client, "bucket"),
                .key = get_string(wire, "key"),
                .path_style = get_bool(client, "sldEnable"),
        };
        const char *method = get_string(wire, "method");

        r = get_pairs(wire, "query", &query, &n_query);
        if (r >= 0)
                r = get_pairs(wire, "headers", &headers, &n_headers);
        if (r >= 0)
                r = get_pairs(wire, "subresources", &sub, &n_sub);
        if (r < 0)
                return fail(id, "bad case", r);

        if (streq_ptr(mode, "header")) {
                /* Like ali-oss: the date goes into x-oss-date, which is also the Date line. */
                r = oss_http_date(now, date);
                if (r < 0)
                        return fail(id, "oss_http_date", r);
                /* get_pairs() left room for one more header. */
                headers[n_headers++] = (OssPair) { "x-oss-date", date };

                const OssRequest req = {
                        .method = method,
                        .bucket = loc.bucket,
                        .key = loc.key,
                        .headers = headers,
                        .n_headers = n_headers,
                        .subresources = sub,
                        .n_subresources = n_sub,
                };
                r = oss_v1_authorization(&req, &creds, date, &authorization, NULL);
                if (r < 0)
                        return fail(id, "oss_v1_authorization", r);
                r = oss_request_url(&loc, query, n_query, &url);
                if (r < 0)
                        return fail(id, "oss_request_url", r);
                emit(id, "url", url);
                emit(id, "authorization", authorization);
                emit(id, "x-oss-date", date);
        } else if (streq_ptr(mode, "url")) {
                r = oss_v1_signed_url(&loc, method, headers, n_headers, sub, n_sub, &creds, now,
                                      (unsigned) get_int(wire, "expires", 1800), &url);
                if (r < 0)
                        return fail(id, "oss_v1_signed_url", r);
                emit(id, "url", url);
        } else
                return fail(id, "unknown mode", -EINVAL);
        return 0;
}

static int parse_now(const char *s, time_t *ret) {
        struct tm tm = {};
        const char *e;

        if (!s)
                return -EINVAL;
        e = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (!e || *e)
                return -EINVAL;
        *ret = timegm(&tm);
        return 0;
}

int main(int argc, char *argv[]) {
        _cleanup_(json_object_putp) json_object *cases = NULL;
        static const struct {
                const char *section;
                int (*run)(json_object *c, json_object *cases, time_t now);
        } sections[] = {
                { "sigv4", sigv4_case },
                { "s3", s3_case },
                { "oss", oss_case },
        };
        time_t now;
        int failed = 0;

        if (argc != 2) {
                fprintf(stderr, "Usage: %s CASES.json|-\n", program_invocation_short_name);
                return EXIT_FAILURE;
        }
        cases = streq(argv[1], "-") ? json_object_from_fd(STDIN_FILENO) : json_object_from_file(argv[1]);
        if (!cases) {
                fprintf(stderr, "Failed to parse '%s': %s\n", argv[1], json_util_get_last_err() ?: "?");
                return EXIT_FAILURE;
        }
        if (parse_now(get_string(cases, "now"), &now) < 0) {
                fprintf(stderr, "Missing or malformed \"now\" in '%s'\n", argv[1]);
                return EXIT_FAILURE;
        }

        for (size_t s = 0; s < ELEMENTSOF(sections); s++) {
                json_object *list = get(cases, sections[s].section);
                size_t n = 0;

                if (list && json_object_is_type(list, json_type_array))
                        n = json_object_array_length(list);

                for (size_t i = 0; i < n; i++)
                        if (sections[s].run(json_object_array_get_idx(list, i), cases, now) < 0)
                                failed++;
        }

        if (fflush(stdout) != 0) {
                fprintf(stderr, "Failed to write output: %m\n");
                return EXIT_FAILURE;
        }
        return failed > 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
