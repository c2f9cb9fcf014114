/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* AWS Signature Version 4: canonical requests, signing keys, Authorization headers, presigned S3 URLs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sign-util.h"

/* Pure functions: strings in, malloc()ed strings out, no I/O and no global state. Every function that
 * can fail returns a negative errno (-EINVAL for a malformed input, -ERANGE for a timestamp outside
 * 1970…9999, -ENOMEM) and writes its ret_ parameters only on success. */

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SIGV4_AMZ_DATE_LEN 16           /* "20150830T123600Z" */
#define SIGV4_SIGNING_KEY_SIZE 32
#define SIGV4_PRESIGN_EXPIRES_MAX 604800U /* seven days, the limit S3 and the AWS SDKs enforce */

/* A header or a query parameter. For query parameters a NULL value means the empty value ("?lifecycle"
 * is signed as "lifecycle="). */
typedef SignPair SigV4Pair;

/* The access key id and the secret access key. */
typedef SignCredentials SigV4Credentials;

typedef enum SigV4Flags {
        /* Remove "." and ".." segments and empty segments from the path before encoding it, as every
         * service but S3 expects. S3 signs the path exactly as sent. */
        SIGV4_NORMALIZE_PATH = 1 << 0,
        /* Header signing: add and sign "x-amz-content-sha256: <payload hash>" (S3 requires it). */
        SIGV4_CONTENT_SHA256_HEADER = 1 << 1,
        /* Presigning: add X-Amz-Content-Sha256=UNSIGNED-PAYLOAD to the query string, as
         * @aws-sdk/s3-request-presigner does. Without it the URL has the shape of the example in the
         * S3 documentation. */
        SIGV4_PRESIGN_CONTENT_SHA256_PARAM = 1 << 2,
} SigV4Flags;

typedef struct SigV4Request {
        const char *method;             /* "GET", "PUT", … */
        const char *host;               /* value of the Host header: "host" or "host:port" */
        const char *path;               /* unencoded absolute path; NULL or "" is "/" */
        const SigV4Pair *query;
        size_t n_query;
        /* Further headers to sign, in any case and order; repeated names are joined with ','. Host,
         * X-Amz-Date and Authorization come from the signer and are refused here. */
        const SigV4Pair *headers;
        size_t n_headers;
        /* Lowercase hex SHA-256 of the body, or SIGV4_UNSIGNED_PAYLOAD. NULL: the empty body when
         * signing headers, UNSIGNED-PAYLOAD when presigning (what S3 expects of presigned URLs). */
        const char *payload_hash;
        const char *region;             /* "us-east-1" */
        const char *service;            /* "s3" */
        unsigned flags;                 /* SigV4Flags */
} SigV4Request;

/* Everything a signature is made of, so tests and debug output can look at each step. */
typedef struct SigV4Result {
        char *amz_date;                 /* "20150830T123600Z": the X-Amz-Date header or parameter */
        char *content_sha256;           /* x-amz-content-sha256 value, with SIGV4_CONTENT_SHA256_HEADER */
        char *canonical_request;
        char *string_to_sign;
        char *signed_headers;           /* "host;x-amz-date" */
        char *signature;                /* 64 lowercase hex digits */
        char *authorization;            /* header signing: the Authorization header value */
        char *query;                    /* presigning: the complete query string, X-Amz-Signature included */
} SigV4Result;

void sigv4_result_done(SigV4Result *r);

/* AWS UriEncode(): every byte but A-Z a-z 0-9 - _ . ~ becomes %XX (uppercase hex); '/' is kept when
 * keep_slash is set (paths) and encoded otherwise (query names and values). curl_easy_escape(). */
int sigv4_uri_encode(const char *s, bool keep_slash, char **ret);

/* The CanonicalURI line for an unencoded path: segments encoded once, '/' kept; with normalize, dot
 * segments and empty segments are removed first (never for S3). */
int sigv4_canonical_uri(const char *path, bool normalize, char **ret);

/* The CanonicalQueryString: names and values encoded, sorted by name and then by value, joined with
 * '&'; "" when n is 0. */
int sigv4_canonical_query(const SigV4Pair *query, size_t n, char **ret);

/* CanonicalHeaders (each "name:value\n", names lowercased, values trimmed with inner runs of blanks
 * collapsed, repeated names joined with ',') and the SignedHeaders list ("a;b;c"). Names must be
 * HTTP tokens and values must not contain control characters other than tab. */
int sigv4_canonical_headers(const SigV4Pair *headers, size_t n, char **ret_canonical, char **ret_signed);

/* "20150830T123600Z" for t (UTC). */
int sigv4_format_amz_date(time_t t, char ret[static SIGV4_AMZ_DATE_LEN + 1]);

/* Lowercase hex SHA-256 of a buffer (the payload hash). */
int sigv4_sha256_hex(const void *data, size_t size, char **ret);

/* The credential scope "20150830/us-east-1/service/aws4_request" for an amz date. */
int sigv4_scope(const char *amz_date, const char *region, const char *service, char **ret);

/* AWS4-HMAC-SHA256 \n amz_date \n scope \n hex(SHA-256(canonical_request)). */
int sigv4_string_to_sign(const char *amz_date, const char *region, const char *service,
                         const char *canonical_request, char **ret);

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, yyyymmdd), region), service), "aws4_request"). */
int sigv4_signing_key(const char *secret_access_key, const char *yyyymmdd, const char *region,
                      const char *service, uint8_t ret[static SIGV4_SIGNING_KEY_SIZE]);

/* hex(HMAC-SHA256(signing_key, string_to_sign)). */
int sigv4_signature(const uint8_t signing_key[static SIGV4_SIGNING_KEY_SIZE], const char *string_to_sign,
                    char **ret);

/* Sign a request with the Authorization header. The caller sends the request with the headers it
 * passed, plus "Host: <host>", "X-Amz-Date: <amz_date>", "Authorization: <authorization>" and, with
 * SIGV4_CONTENT_SHA256_HEADER, "x-amz-content-sha256: <content_sha256>". ret is written on success
 * only; release it with sigv4_result_done(). */
int sigv4_sign_headers(const SigV4Request *req, const SigV4Credentials *creds, time_t now,
                       SigV4Result *ret);

/* Presign a request with query parameters (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date,
 * X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature), 1 ≤ expires ≤ SIGV4_PRESIGN_EXPIRES_MAX.
 * Host and any headers passed are signed; the caller's query parameters must not use those names.
 * ret->query is the whole query string, sorted like the canonical one, with X-Amz-Signature in its
 * sorted place (the layout of the AWS SDKs). */
int sigv4_presign(const SigV4Request *req, const SigV4Credentials *creds, time_t now, unsigned expires,
                  SigV4Result *ret);

/* Where an S3 request goes. The bucket is put into the host name ("virtual-hosted style") unless
 * path_style is set, the bucket name is not a valid DNS label (3…63 of a-z 0-9 '-', no dots) or the
 * endpoint host is an IP address; then it is the first path segment. This is the choice the endpoint
 * rules of @aws-sdk/client-s3 make. */
typedef struct S3Location {
        /* NULL: AWS, "https://s3.<region>.amazonaws.com" (".amazonaws.com.cn" for cn-* regions).
         * Otherwise "scheme://host[:port][/base-path]"; a missing scheme means https. */
        const char *endpoint;
        const char *region;
        const char *bucket;             /* NULL or "": a service-level request */
        const char *key;                /* NULL or "": a bucket-level request; unencoded UTF-8 */
        bool path_style;
} S3Location;

typedef struct S3Target {
        char *origin;                   /* "https://bucket.s3.eu-west-1.amazonaws.com" (no default port) */
        char *host;                     /* Host header: "bucket.s3.eu-west-1.amazonaws.com", "h:9000" */
        char *path;                     /* unencoded request path, "/key" or "/base/bucket/key" */
        /* The parts the request URL is assembled from (curl_url_set()), so that it names host. */
        char *scheme;
        char *hostname;                 /* host without the port */
        char *port;                     /* NULL: the scheme's default */
} S3Target;

void s3_target_done(S3Target *t);

int s3_location_resolve(const S3Location *loc, S3Target *ret);
/* The request URL of a target: its path encoded like the CanonicalURI, then "?" and the (encoded)
 * query unless NULL or "". Assembled and checked by libcurl's URL API: it names t->host. */
int s3_target_url(const S3Target *t, const char *query, char **ret);

/* Header-sign an S3 request: the location is resolved, SIGV4_CONTENT_SHA256_HEADER is implied, the
 * path is not normalized. ret_url (optional) receives origin + encoded path + "?" + canonical query. */
int s3_sign_request(const S3Location *loc, const char *method, const SigV4Pair *query, size_t n_query,
                    const SigV4Pair *headers, size_t n_headers, const char *payload_hash,
                    const SigV4Credentials *creds, time_t now, SigV4Result *ret, char **ret_url);

/* A presigned S3 URL: origin + encoded path + "?" + query. Headers passed are signed (the caller of the
 * URL must send them). flags: SIGV4_PRESIGN_CONTENT_SHA256_PARAM to match the AWS SDK's URLs. */
int s3_presign_url(const S3Location *loc, const char *method, const SigV4Pair *query, size_t n_query,
                   const SigV4Pair *headers, size_t n_headers, const SigV4Credentials *creds, time_t now,
                   unsigned expires, unsigned flags, char **ret_url);
