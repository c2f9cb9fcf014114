/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of Aliyun OSS version 1 signatures against the examples in Alibaba Cloud's documentation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "oss-sign.h"
#include "tests.h"

/* The credentials of the examples in "Add signatures to headers" / "Add signatures to URLs" (OSS API
 * reference, access control). */
#define DOC_URL_NOW ((time_t) 1141889060) /* "now" of the signed-URL example: Expires 60 s later */

static bool has_prefix(const char *s, const char *prefix) {
        return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static const OssCredentials doc_creds = {
        .access_key_id = "44CF9590006BF252F707",
        .secret = "OtxrzxIsfpFjA7SwPzILwy8Bw21TLhquhboDYROV",
};

static void test_http_date(void) {
        char d[OSS_HTTP_DATE_LEN + 1];

        ASSERT_EQ(oss_http_date((time_t) 1132253398, d), 0);
        ASSERT_STREQ(d, "Thu, 17 Nov 2005 18:49:58 GMT");
        ASSERT_EQ(oss_http_date((time_t) 1709296496, d), 0);
        ASSERT_STREQ(d, "Fri, 01 Mar 2024 12:34:56 GMT");
        ASSERT_EQ(oss_http_date(0, d), 0);
        ASSERT_STREQ(d, "Thu, 01 Jan 1970 00:00:00 GMT");
        ASSERT_EQ(oss_http_date(-1, d), -ERANGE);
}

/* "Add signatures to headers", the example request:
 *   PUT /nelson HTTP/1.0
 *   Content-MD5: ODBGOERFMDMzQTczRUY3NUE3NzA5QzdFNUYzMDQxNEM=
 *   Content-Type: text/html
 *   Date: Thu, 17 Nov 2005 18:49:58 GMT
 *   Host: oss-example.oss-cn-hangzhou.aliyuncs.com
 *   X-OSS-Meta-Author: foo@bar.com
 *   X-OSS-Magic: abracadabra
 * The signature the documentation gives (26NBxoKdsyly4EDv6inkoDft/yA=) is the one of the string to
 * sign in its Python sample, with the Content-MD5 above; the request table of the same page shows
 * another Content-MD5 (eB5eJF1ptWaXm4bijSPyxw==) that does not produce it. */
static void test_doc_header_signature(void) {
        _cleanup_free_ char *authorization = NULL, *sts = NULL, *headers = NULL, *resource = NULL;

        const OssPair h[] = {
                { "Content-Md5", "ODBGOERFMDMzQTczRUY3NUE3NzA5QzdFNUYzMDQxNEM=" },
                { "Content-Type", "text/html" },
                { "Date", "Thu, 17 Nov 2005 18:49:58 GMT" },
                { "Host", "oss-example.oss-cn-hangzhou.aliyuncs.com" },
                { "X-OSS-Meta-Author", "foo@bar.com" },
                { "X-OSS-Magic", "abracadabra" },
        };
        const OssRequest req = {
                .method = "PUT",
                .bucket = "oss-example",
                .key = "nelson",
                .headers = h,
                .n_headers = ELEMENTSOF(h),
        };

        ASSERT_EQ(oss_v1_canonicalized_headers(h, ELEMENTSOF(h), &headers), 0);
        ASSERT_STREQ(headers, "x-oss-magic:abracadabra\nx-oss-meta-author:foo@bar.com\n");
        ASSERT_EQ(oss_v1_canonicalized_resource("oss-example", "nelson", NULL, 0, &resource), 0);
        ASSERT_STREQ(resource, "/oss-example/nelson");

        ASSERT_EQ(oss_v1_authorization(&req, &doc_creds, "Thu, 17 Nov 2005 18:49:58 GMT", &authorization,
                                       &sts), 0);
        ASSERT_STREQ(sts, "PUT\nODBGOERFMDMzQTczRUY3NUE3NzA5QzdFNUYzMDQxNEM=\ntext/html\n"
                          "Thu, 17 Nov 2005 18:49:58 GMT\nx-oss-magic:abracadabra\n"
                          "x-oss-meta-author:foo@bar.com\n/oss-example/nelson");
        ASSERT_STREQ(authorization, "OSS 44CF9590006BF252F707:26NBxoKdsyly4EDv6inkoDft/yA=");
}

/* "Add signatures to URLs": GET /oss-example/oss-api.pdf, valid for 60 s from 1141889060, so
 * Expires=1141889120; the documentation's Python sample signs "GET\n\n\n1141889120\n/oss-example/
 * oss-api.pdf". The URL printed next to it uses a redacted AccessKeyId ("nz2pc56s936**9l") and its
 * signature cannot be reproduced; the sample's string gives EwaNTn1erJGkimiJ9WmXgwnANLc=. */
static void test_doc_signed_url(void) {
        _cleanup_free_ char *sts = NULL, *signature = NULL, *url = NULL, *url_path = NULL;

        const OssRequest req = { .method = "GET", .bucket = "oss-example", .key = "oss-api.pdf" };
        ASSERT_EQ(oss_v1_string_to_sign(&req, "1141889120", &sts), 0);
        ASSERT_STREQ(sts, "GET\n\n\n1141889120\n/oss-example/oss-api.pdf");
        ASSERT_EQ(oss_v1_signature(doc_creds.secret, sts, &signature), 0);
        ASSERT_STREQ(signature, "EwaNTn1erJGkimiJ9WmXgwnANLc=");

        const OssLocation loc = {
                .endpoint = "http://oss-cn-hangzhou.aliyuncs.com",
                .bucket = "oss-example",
                .key = "oss-api.pdf",
        };
        ASSERT_EQ(oss_v1_signed_url(&loc, "GET", NULL, 0, NULL, 0, &doc_creds, DOC_URL_NOW, 60, &url), 0);
        ASSERT_STREQ(url, "http://oss-example.oss-cn-hangzhou.aliyuncs.com/oss-api.pdf?"
                          "OSSAccessKeyId=44CF9590006BF252F707&Expires=1141889120&"
                          "Signature=EwaNTn1erJGkimiJ9WmXgwnANLc%3D");

        const OssLocation path_style = {
                .endpoint = "https://10.0.0.1:8080", .bucket = "oss-example", .key = "oss-api.pdf",
                .path_style = true,
        };
        ASSERT_EQ(oss_v1_signed_url(&path_style, "GET", NULL, 0, NULL, 0, &doc_creds, DOC_URL_NOW, 60,
                                    &url_path), 0);
        ASSERT_STREQ(url_path, "https://10.0.0.1:8080/oss-example/oss-api.pdf?"
                               "OSSAccessKeyId=44CF9590006BF252F707&Expires=1141889120&"
                               "Signature=EwaNTn1erJGkimiJ9WmXgwnANLc%3D");
}

static void test_canonicalized_headers(void) {
        _cleanup_free_ char *a = NULL, *b = NULL;

        const OssPair h[] = {
                { "X-Oss-Meta-B", "  two  spaces  " }, { "x-oss-date", "Fri, 01 Mar 2024 12:34:56 GMT" },
                { "Content-Type", "text/plain" }, { "X-OSS-META-A", "1" }, { "x-oss-meta-b", "again" },
                { "User-Agent", "ignored" }, { "x-ossfoo", "not an x-oss- header" },
        };
        ASSERT_EQ(oss_v1_canonicalized_headers(h, ELEMENTSOF(h), &a), 0);
        ASSERT_STREQ(a, "x-oss-date:Fri, 01 Mar 2024 12:34:56 GMT\nx-oss-meta-a:1\n"
                        "x-oss-meta-b:two  spaces,again\n");

        ASSERT_EQ(oss_v1_canonicalized_headers(NULL, 0, &b), 0);
        ASSERT_STREQ(b, "");

        static const OssPair bad[][1] = {
                { { "x-oss-meta-a", "a\r\nx: y" } }, { { "x oss", "a" } }, { { "x-oss-a", NULL } },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char *c = NULL;
                ASSERT_EQ(oss_v1_canonicalized_headers(bad[i], 1, &c), -EINVAL);
                ASSERT_TRUE(!c);
        }
}

static void test_canonicalized_resource(void) {
        static const struct {
                const char *bucket, *key;
                OssPair sub[4];
                const char *expected;
        } v[] = {
                { NULL, NULL, {}, "/" },
                { "bkt", NULL, {}, "/bkt/" },
                { "bkt", NULL, { { "acl", NULL } }, "/bkt/?acl" },
                { "bkt", "dir/a b+c~ü.txt", {}, "/bkt/dir/a b+c~ü.txt" }, /* not URL-encoded */
                { "bkt", "k", { { "uploadId", "0004B9894A22E5B1888A1E29F823****" }, { "partNumber", "1" } },
                  "/bkt/k?partNumber=1&uploadId=0004B9894A22E5B1888A1E29F823****" },
                { "bkt", "k",
                  { { "response-content-type", "text/plain" }, { "acl", "" }, { "uploads", NULL },
                    { "response-content-disposition", "attachment; filename=\"a b.txt\"" } },
                  "/bkt/k?acl&response-content-disposition=attachment; filename=\"a b.txt\"&"
                  "response-content-type=text/plain&uploads" },
                { "bkt", "img.png", { { "x-oss-process", "image/resize,w_100" } },
                  "/bkt/img.png?x-oss-process=image/resize,w_100" },
        };
        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                _cleanup_free_ char *r = NULL;
                size_t n = 0;
                while (n < ELEMENTSOF(v[i].sub) && v[i].sub[n].name)
                        n++;
                ASSERT_EQ(oss_v1_canonicalized_resource(v[i].bucket, v[i].key, v[i].sub, n, &r), 0);
                ASSERT_STREQ(r, v[i].expected);
        }

        char *r = NULL;
        ASSERT_EQ(oss_v1_canonicalized_resource(NULL, "k", NULL, 0, &r), -EINVAL);
        ASSERT_EQ(oss_v1_canonicalized_resource("bkt", "/abs", NULL, 0, &r), -EINVAL);
        ASSERT_EQ(oss_v1_canonicalized_resource("bkt", "bad\xc3", NULL, 0, &r), -EINVAL);
        ASSERT_EQ(oss_v1_canonicalized_resource("b/kt", "k", NULL, 0, &r), -EINVAL);
        const OssPair amp[] = { { "a&b", NULL } };
        ASSERT_EQ(oss_v1_canonicalized_resource("bkt", "k", amp, 1, &r), -EINVAL);
        ASSERT_TRUE(!r);
}

static void test_string_to_sign(void) {
        _cleanup_free_ char *sts = NULL;
        char *x = NULL;

        /* The Date line is what the caller passes; duplicated Content-Type is refused. */
        const OssPair h[] = {
                { "content-type", " application/octet-stream " },
                { "x-oss-date", "Fri, 01 Mar 2024 12:34:56 GMT" },
        };
        const OssRequest req = {
                .method = "post", .bucket = "bkt", .key = "k", .headers = h, .n_headers = ELEMENTSOF(h),
                .subresources = (const OssPair[]) { { "uploads", NULL } }, .n_subresources = 1,
        };
        ASSERT_EQ(oss_v1_string_to_sign(&req, "Fri, 01 Mar 2024 12:34:56 GMT", &sts), 0);
        ASSERT_STREQ(sts, "POST\n\napplication/octet-stream\nFri, 01 Mar 2024 12:34:56 GMT\n"
                          "x-oss-date:Fri, 01 Mar 2024 12:34:56 GMT\n/bkt/k?uploads");

        const OssPair dup[] = { { "Content-Type", "a/b" }, { "content-type", "c/d" } };
        const OssRequest bad = {
                .method = "PUT", .bucket = "bkt", .key = "k", .headers = dup, .n_headers = 2,
        };
        ASSERT_EQ(oss_v1_string_to_sign(&bad, "d", &x), -EINVAL);
        ASSERT_EQ(oss_v1_string_to_sign(&req, "", &x), -EINVAL);
        ASSERT_EQ(oss_v1_string_to_sign(&req, "a\nb", &x), -EINVAL);
        ASSERT_TRUE(!x);
}

static void test_request_url(void) {
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL;

        const OssLocation loc = {
                .endpoint = "https://oss-cn-hangzhou.aliyuncs.com", .bucket = "bkt",
                .key = "dir/a b+c~ü!*'()&=?#.txt",
        };
        const OssPair q[] = { { "uploadId", "id/+=" }, { "partNumber", "1" }, { "acl", NULL } };
        ASSERT_EQ(oss_request_url(&loc, q, ELEMENTSOF(q), &a), 0);
        ASSERT_STREQ(a, "https://bkt.oss-cn-hangzhou.aliyuncs.com/"
                        "dir/a%20b%2Bc~%C3%BC!*%27()%26%3D%3F%23.txt"
                        "?uploadId=id%2F%2B%3D&partNumber=1&acl=");

        const OssLocation bucket_only = { .endpoint = "OSS-CN-Beijing.aliyuncs.com", .bucket = "bkt" };
        ASSERT_EQ(oss_request_url(&bucket_only, NULL, 0, &b), 0);
        ASSERT_STREQ(b, "https://bkt.oss-cn-beijing.aliyuncs.com/");

        const OssLocation service = { .endpoint = "http://oss-cn-beijing.aliyuncs.com/" };
        ASSERT_EQ(oss_request_url(&service, NULL, 0, &c), 0);
        ASSERT_STREQ(c, "http://oss-cn-beijing.aliyuncs.com/");

        const OssLocation v6 = {
                .endpoint = "http://[::1]:9000", .bucket = "bkt", .key = "k", .path_style = true,
        };
        ASSERT_EQ(oss_request_url(&v6, NULL, 0, &d), 0);
        ASSERT_STREQ(d, "http://[::1]:9000/bkt/k");

        ASSERT_TRUE(oss_endpoint_wants_path_style("http://127.0.0.1:9000"));
        ASSERT_TRUE(oss_endpoint_wants_path_style("http://[::1]:9000"));
        ASSERT_TRUE(oss_endpoint_wants_path_style("http://localhost:9000"));
        ASSERT_TRUE(!oss_endpoint_wants_path_style("https://oss-cn-hangzhou.aliyuncs.com"));
        ASSERT_TRUE(!oss_endpoint_wants_path_style("http://127.0.0.1.example.com"));
        ASSERT_TRUE(!oss_endpoint_wants_path_style("ftp://127.0.0.1"));

        static const OssLocation bad[] = {
                { .endpoint = "https://10.0.0.1", .bucket = "bkt", .key = "k" }, /* IP needs path style */
                { .endpoint = "ftp://h", .bucket = "bkt" },
                { .endpoint = "https://h/base", .bucket = "bkt" },
                { .endpoint = "https://h", .key = "k" },
                { .endpoint = NULL, .bucket = "bkt" },
                { .endpoint = "https://user@h", .bucket = "bkt" },
                { .endpoint = "https://h:port", .bucket = "bkt" },
                { .endpoint = "https://h:99999", .bucket = "bkt" },
                { .endpoint = "https://[::1", .bucket = "bkt", .path_style = true },
                { .endpoint = "https://", .bucket = "bkt" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char *u = NULL;
                ASSERT_EQ(oss_request_url(bad + i, NULL, 0, &u), -EINVAL);
                ASSERT_TRUE(!u);
        }
}

static void test_signed_url_subresources(void) {
        _cleanup_free_ char *url = NULL;
        char *x = NULL;

        /* What ali-oss's signatureUrl() writes for the same input: the three parameters first, then
         * the sub-resources; Content-Type and x-oss-* headers go into the signature only. */
        const OssLocation loc = {
                .endpoint = "https://oss-cn-hangzhou.aliyuncs.com",
                .bucket = "oss-example",
                .key = "a b.png",
        };
        const OssPair h[] = { { "Content-Type", "image/png" }, { "x-oss-meta-owner", "me" } };
        const OssPair sub[] = {
                { "x-oss-process", "image/resize,w_100" }, { "response-content-disposition", "inline" },
        };
        ASSERT_EQ(oss_v1_signed_url(&loc, "PUT", h, ELEMENTSOF(h), sub, ELEMENTSOF(sub), &doc_creds,
                                    DOC_URL_NOW, 3600, &url), 0);
        ASSERT_TRUE(has_prefix(url, "https://oss-example.oss-cn-hangzhou.aliyuncs.com/a%20b.png?"
                                    "OSSAccessKeyId=44CF9590006BF252F707&Expires=1141892660&Signature="));
        ASSERT_TRUE(strstr(url, "&x-oss-process=image%2Fresize%2Cw_100"
                                "&response-content-disposition=inline"));

        const OssPair forged[] = { { "Signature", "x" } };
        ASSERT_EQ(oss_v1_signed_url(&loc, "GET", NULL, 0, forged, 1, &doc_creds, 0, 60, &x), -EINVAL);
        ASSERT_EQ(oss_v1_signed_url(&loc, "GET", NULL, 0, NULL, 0, &doc_creds, 0, 0, &x), -EINVAL);
        const OssCredentials bad_id = { "a:b", "s" };
        ASSERT_EQ(oss_v1_signed_url(&loc, "GET", NULL, 0, NULL, 0, &bad_id, 0, 60, &x), -EINVAL);
        ASSERT_TRUE(!x);
}

int main(void) {
        RUN(test_http_date);
        RUN(test_doc_header_signature);
        RUN(test_doc_signed_url);
        RUN(test_canonicalized_headers);
        RUN(test_canonicalized_resource);
        RUN(test_string_to_sign);
        RUN(test_request_url);
        RUN(test_signed_url_subresources);
        return EXIT_SUCCESS;
}
