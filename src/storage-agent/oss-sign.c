/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Aliyun OSS version 1 signatures (HMAC-SHA1) for request headers and signed URLs. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base64.h"
#include "endpoint.h"
#include "macro.h"
#include "oss-sign.h"
#include "strbuf.h"
#include "string-util.h"

/* The characters ali-oss leaves alone in signed URLs: those of encodeURIComponent() but the
 * apostrophe, which Node's URL formatting escapes as well. */
static bool is_uri_component_char(unsigned char c, bool keep_slash) {
        if (keep_slash && c == '/')
                return true;
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                (c && strchr("-_.!~*()", c));
}

static void str_append_encoded(StrBuf *b, const char *s, bool keep_slash) {
        strbuf_append_percent_encoded(b, s, is_uri_component_char, keep_slash);
}

/* The AccessKeyId ends up in "OSS <id>:<signature>". */
static bool credentials_ok(const OssCredentials *c) {
        return sign_credentials_ok(c, ":");
}

/* Bucket names are 3…63 of a-z 0-9 '-'; accept what can at least not break the resource or host. */
static bool bucket_ok(const char *b) {
        return name_is_valid(b); /* NAME_CHARS stand unquoted in the resource and the host */
}

/* Object names are UTF-8 and do not start with '/'. */
static bool key_ok(const char *k) {
        return k[0] != '/' && utf8_is_valid_n(k, strlen(k));
}

/* A copy of the value without leading and trailing blanks. */
static char *strdup_trimmed(const char *v) {
        size_t l;

        while (char_is_blank(*v))
                v++;
        l = strlen(v);
        while (l > 0 && char_is_blank(v[l - 1]))
                l--;
        return strndup(v, l);
}

int oss_http_date(time_t t, char ret[static OSS_HTTP_DATE_LEN + 1]) {
        static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
        static const char months[12][4] = {
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"
        };
        struct tm tm;

        if (!gmtime_r(&t, &tm) || tm.tm_year < 70 || tm.tm_year > 9999 - 1900)
                return -ERANGE;
        if (snprintf(ret, OSS_HTTP_DATE_LEN + 1, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                     tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                     tm.tm_sec) != OSS_HTTP_DATE_LEN)
                return -ERANGE;
        return 0;
}

int oss_v1_canonicalized_headers(const OssPair *headers, size_t n, char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};
        SignEntry *e;
        size_t m = 0;
        int r = 0;

        if (n > 0 && !headers)
                return -EINVAL;

        e = sign_entries_new(n);
        if (!e)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (!headers[i].name || !headers[i].value || !http_token_is_valid(headers[i].name) ||
                    !http_field_value_is_valid(headers[i].value)) {
                        r = -EINVAL;
                        goto finish;
                }
                if (strncasecmp(headers[i].name, "x-oss-", 6) != 0)
                        continue;

                e[m].name = strdup(headers[i].name);
                e[m].value = strdup_trimmed(headers[i].value);
                e[m].index = i;
                m++;
                if (!e[m - 1].name || !e[m - 1].value) {
                        r = -ENOMEM;
                        goto finish;
                }
                ascii_strlower(e[m - 1].name);
        }
        qsort(e, m, sizeof(SignEntry), sign_entry_cmp_name_index);

        for (size_t i = 0; i < m; i++) {
                if (i > 0 && streq(e[i].name, e[i - 1].name)) {
                        /* Repeated headers are joined with ',' (RFC 9110 §5.3): drop the "\n". */
                        if (!b.oom)
                                b.len--;
                        strbuf_append_c(&b, ',');
                } else {
                        strbuf_append(&b, e[i].name);
                        strbuf_append_c(&b, ':');
                }
                strbuf_append(&b, e[i].value);
                strbuf_append_c(&b, '\n');
        }
        r = strbuf_steal(&b, ret);
finish:
        sign_entries_free(e, n);
        return r;
}

int oss_v1_canonicalized_resource(const char *bucket, const char *key, const OssPair *subresources, size_t n,
                                  char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};
        SignEntry *e;
        int r;

        if ((n > 0 && !subresources) || (!isempty(key) && isempty(bucket)) ||
            (!isempty(bucket) && !bucket_ok(bucket)) || (!isempty(key) && !key_ok(key)))
                return -EINVAL;

        strbuf_append_c(&b, '/');
        if (!isempty(bucket)) {
                strbuf_append(&b, bucket);
                strbuf_append_c(&b, '/');
                strbuf_append(&b, strempty(key));
        }

        e = sign_entries_new(n);
        if (!e)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (isempty(subresources[i].name) || !http_field_value_is_valid(subresources[i].name) ||
                    strpbrk(subresources[i].name, "&=") ||
                    (subresources[i].value && !http_field_value_is_valid(subresources[i].value))) {
                        sign_entries_free(e, n);
                        return -EINVAL;
                }
                e[i].name = strdup(subresources[i].name);
                e[i].value = isempty(subresources[i].value) ? NULL : strdup(subresources[i].value);
                e[i].index = i;
                if (!e[i].name || (!isempty(subresources[i].value) && !e[i].value)) {
                        sign_entries_free(e, n);
                        return -ENOMEM;
                }
        }
        qsort(e, n, sizeof(SignEntry), sign_entry_cmp_name_index);

        for (size_t i = 0; i < n; i++) {
                strbuf_append_c(&b, i == 0 ? '?' : '&');
                strbuf_append(&b, e[i].name);
                if (e[i].value) {
                        strbuf_append_c(&b, '=');
                        strbuf_append(&b, e[i].value);
                }
        }
        sign_entries_free(e, n);

        r = strbuf_steal(&b, ret);
        return r;
}

/* The trimmed value of a header that may appear at most once; NULL if absent. */
static int find_single_header(const OssPair *headers, size_t n, const char *name, char **ret) {
        _cleanup_free_ char *v = NULL;

        for (size_t i = 0; i < n; i++) {
                if (!headers[i].name || strcasecmp(headers[i].name, name) != 0)
                        continue;
                if (v || !headers[i].value || !http_field_value_is_valid(headers[i].value))
                        return -EINVAL;
                v = strdup_trimmed(headers[i].value);
                if (!v)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

int oss_v1_string_to_sign(const OssRequest *req, const char *date, char **ret) {
        _cleanup_free_ char *method = NULL, *md5 = NULL, *type = NULL, *headers = NULL, *resource = NULL;
        int r;

        if (!req || !http_token_is_valid(req->method) || isempty(date) || !http_field_value_is_valid(date) ||
            (req->n_headers > 0 && !req->headers))
                return -EINVAL;

        method = strdup(req->method);
        if (!method)
                return -ENOMEM;
        for (char *c = method; *c; c++)
                if (*c >= 'a' && *c <= 'z')
                        *c = (char) (*c - 'a' + 'A');

        r = find_single_header(req->headers, req->n_headers, "Content-MD5", &md5);
        if (r < 0)
                return r;
        r = find_single_header(req->headers, req->n_headers, "Content-Type", &type);
        if (r < 0)
                return r;
        r = oss_v1_canonicalized_headers(req->headers, req->n_headers, &headers);
        if (r < 0)
                return r;
        r = oss_v1_canonicalized_resource(req->bucket, req->key, req->subresources, req->n_subresources,
                                          &resource);
        if (r < 0)
                return r;

        if (asprintf(ret, "%s\n%s\n%s\n%s\n%s%s", method, strempty(md5), strempty(type), date, headers,
                     resource) < 0)
                return -ENOMEM;
        return 0;
}

int oss_v1_signature(const char *access_key_secret, const char *string_to_sign, char **ret) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned mac_len = 0;
        char *s;

        if (isempty(access_key_secret) || !string_to_sign)
                return -EINVAL;
        if (!HMAC(EVP_sha1(), access_key_secret, (int) strlen(access_key_secret),
                  (const unsigned char *) string_to_sign, strlen(string_to_sign), mac, &mac_len))
                return -EIO;
        s = base64_encode(mac, mac_len);
        explicit_bzero(mac, sizeof(mac));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int oss_v1_authorization(const OssRequest *req, const OssCredentials *creds, const char *date,
                         char **ret_authorization, char **ret_string_to_sign) {
        _cleanup_free_ char *sts = NULL, *signature = NULL, *authorization = NULL;
        int r;

        if (!credentials_ok(creds) || !ret_authorization)
                return -EINVAL;
        r = oss_v1_string_to_sign(req, date, &sts);
        if (r < 0)
                return r;
        r = oss_v1_signature(creds->secret, sts, &signature);
        if (r < 0)
                return r;
        if (asprintf(&authorization, "OSS %s:%s", creds->access_key_id, signature) < 0) {
                authorization = NULL;
                return -ENOMEM;
        }

        *ret_authorization = TAKE_PTR(authorization);
        if (ret_string_to_sign)
                *ret_string_to_sign = TAKE_PTR(sts);
        return 0;
}

/* "name=value", after a '&' unless it is the first. */
static void str_append_query_pair(StrBuf *b, const char *name, const char *value) {
        if (b->len > 0)
                strbuf_append_c(b, '&');
        str_append_encoded(b, name, false);
        strbuf_append_c(b, '=');
        str_append_encoded(b, strempty(value), false);
}

bool oss_endpoint_wants_path_style(const char *endpoint) {
        _cleanup_(storage_endpoint_done) StorageEndpoint ep = {};

        if (storage_endpoint_parse(endpoint, &ep) < 0)
                return false;
        return ep.ip || streq(ep.host, "localhost");
}

/* The URL of a location with an encoded query (empty: none), assembled by endpoint.c from the endpoint
 * libcurl parsed: the bucket's subdomain is of the host libcurl connects to. */
static int location_url(const OssLocation *loc, StrBuf *query_buf, char **ret) {
        _cleanup_(storage_endpoint_done) StorageEndpoint ep = {};
        _cleanup_free_ char *host = NULL, *path = NULL, *query = NULL;
        _cleanup_(strbuf_done) StrBuf b = {};
        const char *bucket, *key;
        bool path_style;
        int r;

        r = strbuf_steal(query_buf, &query);
        if (r < 0)
                return r;
        if (!loc)
                return -EINVAL;
        bucket = strempty(loc->bucket);
        key = strempty(loc->key);
        if ((!isempty(bucket) && !bucket_ok(bucket)) || (!isempty(key) && (isempty(bucket) || !key_ok(key))))
                return -EINVAL;
        r = storage_endpoint_parse(loc->endpoint, &ep);
        if (r < 0)
                return r;
        if (!isempty(ep.base_path))
                return -EINVAL; /* no base paths on OSS endpoints */
        path_style = loc->path_style;
        if (!isempty(bucket) && !path_style && ep.ip)
                return -EINVAL; /* an IP address cannot have the bucket as subdomain */

        if (!isempty(bucket) && !path_style) {
                if (asprintf(&host, "%s.%s", bucket, ep.host) < 0) {
                        host = NULL;
                        return -ENOMEM;
                }
        } else
                host = TAKE_PTR(ep.host);
        /* ali-oss's encoding (encodeURIComponent's set), which no libcurl function writes. */
        strbuf_append_c(&b, '/');
        if (!isempty(bucket) && path_style) {
                strbuf_append(&b, bucket);
                strbuf_append_c(&b, '/');
        }
        str_append_encoded(&b, key, true);
        r = strbuf_steal(&b, &path);
        if (r < 0)
                return r;
        return storage_url(ep.scheme, host, ep.port, path, query, ret);
}

int oss_request_url(const OssLocation *loc, const OssPair *query, size_t n_query, char **ret) {
        _cleanup_(strbuf_done) StrBuf b = {};

        if (n_query > 0 && !query)
                return -EINVAL;
        for (size_t i = 0; i < n_query; i++) {
                if (isempty(query[i].name))
                        return -EINVAL;
                str_append_query_pair(&b, query[i].name, query[i].value);
        }
        return location_url(loc, &b, ret);
}

int oss_v1_signed_url(const OssLocation *loc, const char *method, const OssPair *headers, size_t n_headers,
                      const OssPair *subresources, size_t n_subresources, const OssCredentials *creds,
                      time_t now, unsigned expires, char **ret_url) {
        _cleanup_free_ char *authorization = NULL;
        _cleanup_(strbuf_done) StrBuf b = {};
        char expires_str[24];
        int r;

        if (!loc || !credentials_ok(creds) || !ret_url || expires == 0 || now < 0 ||
            (n_subresources > 0 && !subresources))
                return -EINVAL;
        for (size_t i = 0; i < n_subresources; i++)
                if (subresources[i].name && (strcasecmp(subresources[i].name, "OSSAccessKeyId") == 0 ||
                                             strcasecmp(subresources[i].name, "Expires") == 0 ||
                                             strcasecmp(subresources[i].name, "Signature") == 0))
                        return -EINVAL;
        (void) snprintf(expires_str, sizeof(expires_str), "%lld", (long long) now + (long long) expires);

        OssRequest req = {
                .method = method,
                .bucket = loc->bucket,
                .key = loc->key,
                .headers = headers,
                .n_headers = n_headers,
                .subresources = subresources,
                .n_subresources = n_subresources,
        };
        r = oss_v1_authorization(&req, creds, expires_str, &authorization, NULL);
        if (r < 0)
                return r;

        str_append_query_pair(&b, "OSSAccessKeyId", creds->access_key_id);
        str_append_query_pair(&b, "Expires", expires_str);
        /* authorization is "OSS <id>:<signature>"; the signature follows the last ':'. */
        str_append_query_pair(&b, "Signature", strrchr(authorization, ':') + 1);
        for (size_t i = 0; i < n_subresources; i++)
                str_append_query_pair(&b, subresources[i].name, subresources[i].value);
        return location_url(loc, &b, ret_url);
}
