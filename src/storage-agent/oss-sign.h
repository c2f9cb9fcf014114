/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Aliyun OSS signatures, version 1: the Authorization header and signed (presigned) URLs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "sign-util.h"

/* Version 1 is what the official SDKs sign with by default (ali-oss 6.x: authorizationV4 defaults to
 * false). Pure functions: strings in, malloc()ed strings out; errors are negative errno values
 * (-EINVAL for malformed input, -ERANGE for an unrepresentable time, -ENOMEM) and ret_ parameters
 * are written on success only.
 *
 *   Signature = base64(HMAC-SHA1(AccessKeySecret, VERB "\n" Content-MD5 "\n" Content-Type "\n"
 *                                Date "\n" CanonicalizedOSSHeaders CanonicalizedResource))
 *   Authorization: OSS <AccessKeyId>:<Signature>
 */

#define OSS_HTTP_DATE_LEN 29            /* "Thu, 17 Nov 2005 18:49:58 GMT" */

/* A header or a query parameter / sub-resource. A sub-resource with a NULL or empty value is signed as
 * the bare name ("?acl"). */
typedef SignPair OssPair;

/* The AccessKeyId and the AccessKeySecret. */
typedef SignCredentials OssCredentials;

typedef struct OssRequest {
        const char *method;
        const char *bucket;             /* NULL or "": service level ("/") */
        const char *key;                /* NULL or "": bucket level ("/bucket/"); unencoded UTF-8 */
        /* The request's headers, any case. Content-MD5 and Content-Type fill their lines, every
         * x-oss-* header is signed; the others are ignored. */
        const OssPair *headers;
        size_t n_headers;
        /* Sub-resources to sign (acl, uploads, uploadId, partNumber, versionId, response-*,
         * x-oss-process, …), in any order. Other query parameters are not signed in version 1. */
        const OssPair *subresources;
        size_t n_subresources;
} OssRequest;

/* "Thu, 17 Nov 2005 18:49:58 GMT" (RFC 9110 IMF-fixdate, English names whatever the locale). */
int oss_http_date(time_t t, char ret[static OSS_HTTP_DATE_LEN + 1]);

/* CanonicalizedOSSHeaders: x-oss-* names lowercased, values trimmed, sorted by name, repeated names
 * joined with ',', each line ending in "\n"; "" when there are none. */
int oss_v1_canonicalized_headers(const OssPair *headers, size_t n, char **ret);

/* CanonicalizedResource: "/bucket/key" with the key as is (not URL-encoded), then "?" and the
 * sub-resources sorted by name, "name=value" or the bare name, joined with '&'. */
int oss_v1_canonicalized_resource(const char *bucket, const char *key, const OssPair *subresources, size_t n,
                                  char **ret);

/* The string to sign. date is the Date line: the Date (or x-oss-date) header value when signing a
 * header, the Expires value (decimal Unix time) when signing a URL. */
int oss_v1_string_to_sign(const OssRequest *req, const char *date, char **ret);

/* base64(HMAC-SHA1(secret, string_to_sign)). */
int oss_v1_signature(const char *access_key_secret, const char *string_to_sign, char **ret);

/* "OSS <AccessKeyId>:<Signature>". date as for oss_v1_string_to_sign(); the request must carry that
 * same value in its Date header (or x-oss-date header, as ali-oss does). ret_string_to_sign is
 * optional. */
int oss_v1_authorization(const OssRequest *req, const OssCredentials *creds, const char *date,
                         char **ret_authorization, char **ret_string_to_sign);

/* Where an OSS request goes: "scheme://bucket.endpoint-host/key" (virtual-hosted, the default of
 * the SDKs) or, with path_style, "scheme://endpoint-host/bucket/key" (second-level-domain and IP
 * endpoints). A missing scheme means https. */
typedef struct OssLocation {
        const char *endpoint;           /* "https://oss-cn-hangzhou.aliyuncs.com" */
        const char *bucket;
        const char *key;
        bool path_style;
} OssLocation;

/* Whether the endpoint can't take the bucket as a subdomain (an IP address or localhost: test
 * servers, private gateways), so requests must be path-style. */
bool oss_endpoint_wants_path_style(const char *endpoint);

/* The URL of a request: the key encoded like encodeURIComponent() (and "'" too) with '/' kept, then
 * "?" and the query parameters in the given order, "name=value" (NULL value: "name="). */
int oss_request_url(const OssLocation *loc, const OssPair *query, size_t n_query, char **ret);

/* A signed URL valid until now + expires: the request URL followed by OSSAccessKeyId, Expires and
 * Signature and then the sub-resources, as ali-oss's signatureUrl() writes it. headers are the
 * Content-MD5, Content-Type and x-oss-* headers the user of the URL must send (usually none). */
int oss_v1_signed_url(const OssLocation *loc, const char *method, const OssPair *headers, size_t n_headers,
                      const OssPair *subresources, size_t n_subresources, const OssCredentials *creds,
                      time_t now, unsigned expires, char **ret_url);
