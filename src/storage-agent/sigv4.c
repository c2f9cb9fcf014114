/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* AWS Signature Version 4 signing (header and query-string forms) and S3 request locations. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <curl/curl.h>
#include <openssl/hmac.h>

#include "endpoint.h"
#include "macro.h"
#include "sigv4.h"
#include "strbuf.h"
#include "string-util.h"

/* curl_easy_escape() keeps exactly RFC 3986's unreserved set, A-Z a-z 0-9 - . _ ~, and writes the
 * rest as %XX with uppercase hex digits: AWS's UriEncode(). Paths are escaped a segment at a time. */
static void str_append_encoded(StrBuf *b, const char *s, bool keep_slash) {
        for (;;) {
                size_t l = keep_slash ? strcspn(s, "/") : strlen(s);
                char *e;

                if (l > 0) {
                        if (l > INT32_MAX) {
                                b->oom = true;
                                return;
                        }
                        /* The handle is ignored since libcurl 7.82 (it is only consulted for settings). */
                        e = curl_easy_escape(NULL, s, (int) l);
                        if (!e) {
                                b->oom = true;
                                return;
                        }
                        strbuf_append(b, e);
                        curl_free(e);
                }
                if (s[l] == 0)
                        return;
                strbuf_append_c(b, '/');
                s += l + 1;
        }
}

int sigv4_uri_encode(const char *s, bool keep_slash, char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};

        if (!s)
                return -EINVAL;
        str_append_encoded(&b, s, keep_slash);
        return strbuf_steal(&b, ret);
}

/* Region and service names end up in the scope, separated by '/'; NAME_CHARS stand there unquoted. */
static bool scope_part_ok(const char *s) {
        return name_is_valid(s);
}

/* The access key id ends up in "Credential=<id>/<scope>, " of the Authorization header. */
static bool credentials_ok(const SigV4Credentials *c) {
        return sign_credentials_ok(c, "/,");
}

static bool host_ok(const char *s) {
        if (isempty(s))
                return false;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p <= 0x20 || *p >= 0x7f || strchr("/?#@\\", *p))
                        return false;
        return true;
}

static bool payload_hash_ok(const char *s) {
        if (streq(s, SIGV4_UNSIGNED_PAYLOAD))
                return true;
        if (strlen(s) != 64)
                return false;
        for (; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

int sigv4_canonical_uri(const char *path, bool normalize, char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};

        if (isempty(path))
                path = "/";
        if (path[0] != '/')
                return -EINVAL;

        if (!normalize) {
                str_append_encoded(&b, path, true);
                return strbuf_steal(&b, ret);
        }

        /* Drop empty and "." segments, let ".." eat the previous one, keep a trailing slash if
         * anything is left: the normalization the AWS SDKs apply for services other than S3. */
        size_t n = 0, n_alloc = strlen(path) / 2 + 1;
        _cleanup_free_ const char **seg = calloc(n_alloc, sizeof(char *));
        _cleanup_free_ size_t *seg_len = calloc(n_alloc, sizeof(size_t));
        if (!seg || !seg_len)
                return -ENOMEM;

        for (const char *p = path; *p;) {
                size_t l;

                p += strspn(p, "/");
                l = strcspn(p, "/");
                if (l == 0)
                        break;
                if (l == 1 && p[0] == '.')
                        ;
                else if (l == 2 && p[0] == '.' && p[1] == '.') {
                        if (n > 0)
                                n--;
                } else {
                        assert(n < n_alloc);
                        seg[n] = p;
                        seg_len[n++] = l;
                }
                p += l;
        }

        strbuf_append_c(&b, '/');
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *s = strndup(seg[i], seg_len[i]);
                if (!s)
                        return -ENOMEM;
                if (i > 0)
                        strbuf_append_c(&b, '/');
                str_append_encoded(&b, s, false);
        }
        if (n > 0 && path[strlen(path) - 1] == '/')
                strbuf_append_c(&b, '/');
        return strbuf_steal(&b, ret);
}

/* Query parameters sort by name and then by value. */
static int encoded_pair_cmp(const void *a, const void *b) {
        const SignEntry *x = a, *y = b;
        int r;

        r = strcmp(x->name, y->name);
        if (r != 0)
                return r;
        return strcmp(x->value, y->value);
}

/* Encode and sort the query parameters; *ret has n entries. */
static int encode_query(const SigV4Pair *query, size_t n, SignEntry **ret) {
        SignEntry *p;
        int r;

        if (n > 0 && !query)
                return -EINVAL;
        p = sign_entries_new(n);
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (!query[i].name) {
                        sign_entries_free(p, n);
                        return -EINVAL;
                }
                r = sigv4_uri_encode(query[i].name, false, &p[i].name);
                if (r >= 0)
                        r = sigv4_uri_encode(strempty(query[i].value), false, &p[i].value);
                if (r < 0) {
                        sign_entries_free(p, n);
                        return r;
                }
                p[i].index = i;
        }
        qsort(p, n, sizeof(SignEntry), encoded_pair_cmp);
        *ret = p;
        return 0;
}

static void str_append_query(StrBuf *b, const SignEntry *p, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        strbuf_append_c(b, '&');
                strbuf_append(b, p[i].name);
                strbuf_append_c(b, '=');
                strbuf_append(b, p[i].value);
        }
}

int sigv4_canonical_query(const SigV4Pair *query, size_t n, char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};
        SignEntry *p = NULL;
        int r;

        r = encode_query(query, n, &p);
        if (r < 0)
                return r;
        str_append_query(&b, p, n);
        sign_entries_free(p, n);
        return strbuf_steal(&b, ret);
}

/* Lowercase name, value trimmed and inner runs of blanks collapsed to one space. */
static int normalize_header(const SigV4Pair *h, size_t index, SignEntry *ret) {
        char *name, *value, *o;
        const char *v;

        if (!h->name || !h->value || !http_token_is_valid(h->name) || !http_field_value_is_valid(h->value))
                return -EINVAL;

        name = strdup(h->name);
        value = malloc(strlen(h->value) + 1);
        if (!name || !value) {
                free(name);
                free(value);
                return -ENOMEM;
        }
        ascii_strlower(name);

        o = value;
        v = h->value;
        while (char_is_blank(*v))
                v++;
        while (*v) {
                if (char_is_blank(*v)) {
                        while (char_is_blank(*v))
                                v++;
                        if (*v)
                                *o++ = ' ';
                } else
                        *o++ = *v++;
        }
        *o = 0;

        *ret = (SignEntry) { .name = name, .value = value, .index = index };
        return 0;
}

int sigv4_canonical_headers(const SigV4Pair *headers, size_t n, char **ret_canonical, char **ret_signed) {
        _cleanup_(strbuf_done) StrBuf c = {}, s = {};
        _cleanup_free_ char *canonical = NULL;
        SignEntry *p;
        int r = 0;

        if (n == 0 || !headers)
                return -EINVAL; /* at least Host is always signed */

        p = sign_entries_new(n);
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                r = normalize_header(headers + i, i, p + i);
                if (r < 0)
                        goto finish;
        }
        qsort(p, n, sizeof(SignEntry), sign_entry_cmp_name_index);

        for (size_t i = 0; i < n; i++) {
                if (i > 0 && streq(p[i].name, p[i - 1].name)) {
                        strbuf_append_c(&c, ',');
                        strbuf_append(&c, p[i].value);
                        continue;
                }
                if (i > 0) {
                        strbuf_append_c(&c, '\n');
                        strbuf_append_c(&s, ';');
                }
                strbuf_append(&c, p[i].name);
                strbuf_append_c(&c, ':');
                strbuf_append(&c, p[i].value);
                strbuf_append(&s, p[i].name);
        }
        strbuf_append_c(&c, '\n');

        r = strbuf_steal(&c, &canonical);
        if (r < 0)
                goto finish;
        r = strbuf_steal(&s, ret_signed);
        if (r < 0)
                goto finish;
        *ret_canonical = TAKE_PTR(canonical);
finish:
        sign_entries_free(p, n);
        return r;
}

int sigv4_format_amz_date(time_t t, char ret[static SIGV4_AMZ_DATE_LEN + 1]) {
        struct tm tm;

        if (!gmtime_r(&t, &tm) || tm.tm_year < 70 || tm.tm_year > 9999 - 1900)
                return -ERANGE;
        if (strftime(ret, SIGV4_AMZ_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm) != SIGV4_AMZ_DATE_LEN)
                return -ERANGE;
        return 0;
}

int sigv4_sha256_hex(const void *data, size_t size, char **ret) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        char *h;

        if (!data && size > 0)
                return -EINVAL;
        if (EVP_Digest(data ?: "", size, md, &md_len, EVP_sha256(), NULL) != 1)
                return -EIO;
        h = hexmem(md, md_len);
        if (!h)
                return -ENOMEM;
        *ret = h;
        return 0;
}

static bool amz_date_ok(const char *d) {
        if (!d || strlen(d) != SIGV4_AMZ_DATE_LEN || d[8] != 'T' || d[15] != 'Z')
                return false;
        for (size_t i = 0; i < SIGV4_AMZ_DATE_LEN - 1; i++)
                if (i != 8 && !(d[i] >= '0' && d[i] <= '9'))
                        return false;
        return true;
}

int sigv4_scope(const char *amz_date, const char *region, const char *service, char **ret) {
        if (!amz_date_ok(amz_date) || !scope_part_ok(region) || !scope_part_ok(service))
                return -EINVAL;
        if (asprintf(ret, "%.8s/%s/%s/aws4_request", amz_date, region, service) < 0)
                return -ENOMEM;
        return 0;
}

int sigv4_string_to_sign(const char *amz_date, const char *region, const char *service,
                         const char *canonical_request, char **ret) {
        _cleanup_free_ char *scope = NULL, *hash = NULL;
        int r;

        if (!canonical_request)
                return -EINVAL;
        r = sigv4_scope(amz_date, region, service, &scope);
        if (r < 0)
                return r;
        r = sigv4_sha256_hex(canonical_request, strlen(canonical_request), &hash);
        if (r < 0)
                return r;
        if (asprintf(ret, SIGV4_ALGORITHM "\n%s\n%s\n%s", amz_date, scope, hash) < 0)
                return -ENOMEM;
        return 0;
}

static int hmac_sha256(const void *key, size_t key_len, const char *data, uint8_t out[static 32]) {
        unsigned out_len = 0;

        if (!HMAC(EVP_sha256(), key, (int) key_len, (const unsigned char *) data, strlen(data), out,
                  &out_len) || out_len != 32)
                return -EIO;
        return 0;
}

int sigv4_signing_key(const char *secret_access_key, const char *yyyymmdd, const char *region,
                      const char *service, uint8_t ret[static SIGV4_SIGNING_KEY_SIZE]) {
        _cleanup_erase_free_ char *k_secret = NULL;
        uint8_t k[32];
        int r;

        if (isempty(secret_access_key) || !yyyymmdd || strlen(yyyymmdd) != 8 ||
            strspn(yyyymmdd, "0123456789") != 8 || !scope_part_ok(region) || !scope_part_ok(service))
                return -EINVAL;

        if (asprintf(&k_secret, "AWS4%s", secret_access_key) < 0) {
                k_secret = NULL;
                return -ENOMEM;
        }

        r = hmac_sha256(k_secret, strlen(k_secret), yyyymmdd, k);
        if (r >= 0)
                r = hmac_sha256(k, sizeof(k), region, k);
        if (r >= 0)
                r = hmac_sha256(k, sizeof(k), service, k);
        if (r >= 0)
                r = hmac_sha256(k, sizeof(k), "aws4_request", k);
        if (r >= 0)
                memcpy(ret, k, sizeof(k));
        explicit_bzero(k, sizeof(k));
        return r;
}

int sigv4_signature(const uint8_t signing_key[static SIGV4_SIGNING_KEY_SIZE], const char *string_to_sign,
                    char **ret) {
        uint8_t mac[32];
        char *h;
        int r;

        if (!string_to_sign)
                return -EINVAL;
        r = hmac_sha256(signing_key, SIGV4_SIGNING_KEY_SIZE, string_to_sign, mac);
        if (r < 0)
                return r;
        h = hexmem(mac, sizeof(mac));
        if (!h)
                return -ENOMEM;
        *ret = h;
        return 0;
}

void sigv4_result_done(SigV4Result *r) {
        if (!r)
                return;
        free(r->amz_date);
        free(r->content_sha256);
        free(r->canonical_request);
        free(r->string_to_sign);
        free(r->signed_headers);
        free(r->signature);
        free(r->authorization);
        free(r->query);
        *r = (SigV4Result) {};
}

static bool strcaseeq_any(const char *s, const char *const *list) {
        for (; *list; list++)
                if (strcasecmp(s, *list) == 0)
                        return true;
        return false;
}

static int validate_request(const SigV4Request *req, const SigV4Credentials *creds) {
        if (!req || !http_token_is_valid(req->method) || !host_ok(req->host) ||
            !scope_part_ok(req->region) || !scope_part_ok(req->service) || !credentials_ok(creds))
                return -EINVAL;
        if ((req->n_headers > 0 && !req->headers) || (req->n_query > 0 && !req->query))
                return -EINVAL;
        if (req->payload_hash && !payload_hash_ok(req->payload_hash))
                return -EINVAL;
        return 0;
}

/* Canonical request, string to sign and signature for the given canonical query and header list. The
 * header list is complete (Host included). Fills amz_date, canonical_request, string_to_sign,
 * signed_headers and signature of *res. */
static int sign_common(const SigV4Request *req, const SigV4Credentials *creds, const char *amz_date,
                       const char *canonical_query, const SigV4Pair *headers, size_t n_headers,
                       const char *payload_hash, SigV4Result *res) {
        _cleanup_free_ char *uri = NULL, *canonical_headers = NULL;
        uint8_t key[SIGV4_SIGNING_KEY_SIZE];
        char yyyymmdd[9];
        int r;

        r = sigv4_canonical_uri(req->path, req->flags & SIGV4_NORMALIZE_PATH, &uri);
        if (r < 0)
                return r;
        r = sigv4_canonical_headers(headers, n_headers, &canonical_headers, &res->signed_headers);
        if (r < 0)
                return r;
        if (asprintf(&res->canonical_request, "%s\n%s\n%s\n%s\n%s\n%s", req->method, uri, canonical_query,
                     canonical_headers, res->signed_headers, payload_hash) < 0) {
                res->canonical_request = NULL;
                return -ENOMEM;
        }
        r = sigv4_string_to_sign(amz_date, req->region, req->service, res->canonical_request,
                                 &res->string_to_sign);
        if (r < 0)
                return r;

        memcpy(yyyymmdd, amz_date, 8);
        yyyymmdd[8] = 0;
        r = sigv4_signing_key(creds->secret, yyyymmdd, req->region, req->service, key);
        if (r < 0)
                return r;
        r = sigv4_signature(key, res->string_to_sign, &res->signature);
        explicit_bzero(key, sizeof(key));
        if (r < 0)
                return r;

        res->amz_date = strdup(amz_date);
        if (!res->amz_date)
                return -ENOMEM;
        return 0;
}

/* The caller's headers plus the ones the signer adds. */
static int build_header_list(const SigV4Request *req, const SigV4Pair *extra, size_t n_extra,
                             const char *const *reserved, SigV4Pair **ret, size_t *ret_n) {
        SigV4Pair *h;
        size_t n = 0;

        for (size_t i = 0; i < req->n_headers; i++)
                if (!req->headers[i].name || strcaseeq_any(req->headers[i].name, reserved))
                        return -EINVAL;

        h = calloc(req->n_headers + n_extra, sizeof(SigV4Pair));
        if (!h)
                return -ENOMEM;
        for (size_t i = 0; i < req->n_headers; i++)
                h[n++] = req->headers[i];
        for (size_t i = 0; i < n_extra; i++)
                h[n++] = extra[i];
        *ret = h;
        *ret_n = n;
        return 0;
}

int sigv4_sign_headers(const SigV4Request *req, const SigV4Credentials *creds, time_t now,
                       SigV4Result *ret) {
        static const char *const reserved[] = {
                "host", "x-amz-date", "authorization", "x-amz-content-sha256", NULL
        };
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_free_ char *canonical_query = NULL;
        _cleanup_free_ SigV4Pair *headers = NULL;
        char amz_date[SIGV4_AMZ_DATE_LEN + 1];
        const char *payload_hash;
        size_t n_headers, n_extra = 0;
        SigV4Pair extra[3];
        int r;

        r = validate_request(req, creds);
        if (r < 0)
                return r;
        r = sigv4_format_amz_date(now, amz_date);
        if (r < 0)
                return r;
        payload_hash = req->payload_hash ?: SIGV4_EMPTY_SHA256;

        extra[n_extra++] = (SigV4Pair) { "host", req->host };
        extra[n_extra++] = (SigV4Pair) { "x-amz-date", amz_date };
        if (req->flags & SIGV4_CONTENT_SHA256_HEADER)
                extra[n_extra++] = (SigV4Pair) { "x-amz-content-sha256", payload_hash };
        r = build_header_list(req, extra, n_extra, reserved, &headers, &n_headers);
        if (r < 0)
                return r;

        r = sigv4_canonical_query(req->query, req->n_query, &canonical_query);
        if (r < 0)
                return r;
        r = sign_common(req, creds, amz_date, canonical_query, headers, n_headers, payload_hash, &res);
        if (r < 0)
                return r;

        if (asprintf(&res.authorization, SIGV4_ALGORITHM " Credential=%s/%.8s/%s/%s/aws4_request, "
                     "SignedHeaders=%s, Signature=%s", creds->access_key_id, amz_date, req->region,
                     req->service, res.signed_headers, res.signature) < 0) {
                res.authorization = NULL;
                return -ENOMEM;
        }
        if (req->flags & SIGV4_CONTENT_SHA256_HEADER) {
                res.content_sha256 = strdup(payload_hash);
                if (!res.content_sha256)
                        return -ENOMEM;
        }

        *ret = res;
        res = (SigV4Result) {};
        return 0;
}

int sigv4_presign(const SigV4Request *req, const SigV4Credentials *creds, time_t now, unsigned expires,
                  SigV4Result *ret) {
        static const char *const reserved_headers[] = { "host", "authorization", NULL };
        static const char *const reserved_params[] = {
                "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Content-Sha256", NULL
        };
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_free_ char *credential = NULL, *canonical_query = NULL, *signed_headers = NULL,
                *canonical_headers = NULL;
        _cleanup_free_ SigV4Pair *headers = NULL, *params = NULL;
        char amz_date[SIGV4_AMZ_DATE_LEN + 1], expires_str[16];
        _cleanup_(strbuf_done) StrBuf q = {};
        SignEntry *encoded = NULL;
        size_t n_headers, n_params = 0;
        SigV4Pair host = { "host", req ? req->host : NULL };
        int r;

        r = validate_request(req, creds);
        if (r < 0)
                return r;
        if (expires < 1 || expires > SIGV4_PRESIGN_EXPIRES_MAX)
                return -EINVAL;
        for (size_t i = 0; i < req->n_query; i++)
                if (!req->query[i].name || strcaseeq_any(req->query[i].name, reserved_params))
                        return -EINVAL;

        r = sigv4_format_amz_date(now, amz_date);
        if (r < 0)
                return r;
        r = build_header_list(req, &host, 1, reserved_headers, &headers, &n_headers);
        if (r < 0)
                return r;
        /* SignedHeaders goes into the query, so it is needed before the canonical request. */
        r = sigv4_canonical_headers(headers, n_headers, &canonical_headers, &signed_headers);
        if (r < 0)
                return r;
        if (asprintf(&credential, "%s/%.8s/%s/%s/aws4_request", creds->access_key_id, amz_date,
                     req->region, req->service) < 0) {
                credential = NULL;
                return -ENOMEM;
        }
        (void) snprintf(expires_str, sizeof(expires_str), "%u", expires);

        params = calloc(req->n_query + 7, sizeof(SigV4Pair));
        if (!params)
                return -ENOMEM;
        for (size_t i = 0; i < req->n_query; i++)
                params[n_params++] = req->query[i];
        params[n_params++] = (SigV4Pair) { "X-Amz-Algorithm", SIGV4_ALGORITHM };
        if (req->flags & SIGV4_PRESIGN_CONTENT_SHA256_PARAM)
                params[n_params++] = (SigV4Pair) { "X-Amz-Content-Sha256", SIGV4_UNSIGNED_PAYLOAD };
        params[n_params++] = (SigV4Pair) { "X-Amz-Credential", credential };
        params[n_params++] = (SigV4Pair) { "X-Amz-Date", amz_date };
        params[n_params++] = (SigV4Pair) { "X-Amz-Expires", expires_str };
        params[n_params++] = (SigV4Pair) { "X-Amz-SignedHeaders", signed_headers };

        r = sigv4_canonical_query(params, n_params, &canonical_query);
        if (r < 0)
                return r;
        r = sign_common(req, creds, amz_date, canonical_query, headers, n_headers,
                        req->payload_hash ?: SIGV4_UNSIGNED_PAYLOAD, &res);
        if (r < 0)
                return r;

        /* The URL's query: the canonical one with the signature in its sorted place, which is what
         * the AWS SDKs produce. */
        params[n_params++] = (SigV4Pair) { "X-Amz-Signature", res.signature };
        r = encode_query(params, n_params, &encoded);
        if (r < 0)
                return r;
        str_append_query(&q, encoded, n_params);
        sign_entries_free(encoded, n_params);
        r = strbuf_steal(&q, &res.query);
        if (r < 0)
                return r;

        *ret = res;
        res = (SigV4Result) {};
        return 0;
}

void s3_target_done(S3Target *t) {
        if (!t)
                return;
        free(t->origin);
        free(t->host);
        free(t->path);
        free(t->scheme);
        free(t->hostname);
        free(t->port);
        *t = (S3Target) {};
}

/* isVirtualHostableS3Bucket() of the AWS SDKs, subdomains not allowed. */
static bool bucket_is_dns_label(const char *b) {
        size_t l = strlen(b);

        if (l < 3 || l > 63 || b[0] == '-' || b[l - 1] == '-')
                return false;
        for (; *b; b++)
                if (!((*b >= 'a' && *b <= 'z') || (*b >= '0' && *b <= '9') || *b == '-'))
                        return false;
        return true;
}

int s3_location_resolve(const S3Location *loc, S3Target *ret) {
        _cleanup_(storage_endpoint_done) StorageEndpoint ep = {};
        _cleanup_(s3_target_done) S3Target t = {};
        _cleanup_free_ char *endpoint = NULL;
        bool virtual_host;
        const char *bucket, *key;
        int r;

        if (!loc || !scope_part_ok(loc->region))
                return -EINVAL;
        bucket = strempty(loc->bucket);
        key = strempty(loc->key);
        if (strchr(bucket, '/') || !utf8_is_valid_n(bucket, strlen(bucket)) ||
            !utf8_is_valid_n(key, strlen(key)) || (isempty(bucket) && !isempty(key)))
                return -EINVAL;

        if (!loc->endpoint) {
                const char *suffix = startswith(loc->region, "cn-") ? "amazonaws.com.cn" : "amazonaws.com";
                if (asprintf(&endpoint, "https://s3.%s.%s", loc->region, suffix) < 0) {
                        endpoint = NULL;
                        return -ENOMEM;
                }
        }
        r = storage_endpoint_parse(loc->endpoint ?: endpoint, &ep);
        if (r < 0)
                return r;

        virtual_host = !isempty(bucket) && !loc->path_style && !ep.ip && bucket_is_dns_label(bucket);
        if (virtual_host) {
                if (asprintf(&t.hostname, "%s.%s", bucket, ep.host) < 0) {
                        t.hostname = NULL;
                        return -ENOMEM;
                }
                r = asprintf(&t.path, "%s/%s", ep.base_path, key);
        } else {
                t.hostname = TAKE_PTR(ep.host);
                if (isempty(bucket))
                        r = asprintf(&t.path, "%s/", ep.base_path);
                else
                        r = asprintf(&t.path, "%s/%s/%s", ep.base_path, bucket, key);
        }
        if (r < 0) {
                t.path = NULL;
                return -ENOMEM;
        }
        /* The Host header is the host and port the URL names: what libcurl sends and connects to. */
        r = ep.port ? asprintf(&t.host, "%s:%s", t.hostname, ep.port) : asprintf(&t.host, "%s", t.hostname);
        if (r < 0) {
                t.host = NULL;
                return -ENOMEM;
        }
        if (asprintf(&t.origin, "%s://%s", ep.scheme, t.host) < 0) {
                t.origin = NULL;
                return -ENOMEM;
        }
        t.scheme = TAKE_PTR(ep.scheme);
        t.port = TAKE_PTR(ep.port);

        *ret = t;
        t = (S3Target) {};
        return 0;
}

int s3_target_url(const S3Target *t, const char *query, char **ret) {
        _cleanup_free_ char *path = NULL;
        int r;

        r = sigv4_uri_encode(t->path, true, &path);
        if (r < 0)
                return r;
        return storage_url(t->scheme, t->hostname, t->port, path, query, ret);
}

/* The request to sign for an S3 location: the location resolved into *ret_target, which the request's
 * host and path point into, and the path signed as is (S3 does not normalize it). */
static int s3_request_prepare(const S3Location *loc, const char *method, const SigV4Pair *query,
                              size_t n_query, const SigV4Pair *headers, size_t n_headers,
                              const char *payload_hash, unsigned flags, S3Target *ret_target,
                              SigV4Request *ret_req) {
        int r;

        r = s3_location_resolve(loc, ret_target);
        if (r < 0)
                return r;
        *ret_req = (SigV4Request) {
                .method = method,
                .host = ret_target->host,
                .path = ret_target->path,
                .query = query,
                .n_query = n_query,
                .headers = headers,
                .n_headers = n_headers,
                .payload_hash = payload_hash,
                .region = loc->region,
                .service = "s3",
                .flags = flags,
        };
        return 0;
}

int s3_sign_request(const S3Location *loc, const char *method, const SigV4Pair *query, size_t n_query,
                    const SigV4Pair *headers, size_t n_headers, const char *payload_hash,
                    const SigV4Credentials *creds, time_t now, SigV4Result *ret, char **ret_url) {
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_(s3_target_done) S3Target t = {};
        _cleanup_free_ char *canonical_query = NULL, *url = NULL;
        SigV4Request req;
        int r;

        if (!ret)
                return -EINVAL;
        r = s3_request_prepare(loc, method, query, n_query, headers, n_headers, payload_hash,
                               SIGV4_CONTENT_SHA256_HEADER, &t, &req);
        if (r < 0)
                return r;
        r = sigv4_sign_headers(&req, creds, now, &res);
        if (r < 0)
                return r;

        if (ret_url) {
                r = sigv4_canonical_query(query, n_query, &canonical_query);
                if (r < 0)
                        return r;
                r = s3_target_url(&t, canonical_query, &url);
                if (r < 0)
                        return r;
                *ret_url = TAKE_PTR(url);
        }
        *ret = res;
        res = (SigV4Result) {};
        return 0;
}

int s3_presign_url(const S3Location *loc, const char *method, const SigV4Pair *query, size_t n_query,
                   const SigV4Pair *headers, size_t n_headers, const SigV4Credentials *creds, time_t now,
                   unsigned expires, unsigned flags, char **ret_url) {
        _cleanup_(sigv4_result_done) SigV4Result res = {};
        _cleanup_(s3_target_done) S3Target t = {};
        SigV4Request req;
        int r;

        if (!ret_url || (flags & ~(unsigned) SIGV4_PRESIGN_CONTENT_SHA256_PARAM))
                return -EINVAL;
        r = s3_request_prepare(loc, method, query, n_query, headers, n_headers, NULL, flags, &t, &req);
        if (r < 0)
                return r;
        r = sigv4_presign(&req, creds, now, expires, &res);
        if (r < 0)
                return r;
        return s3_target_url(&t, res.query, ret_url);
}
