/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Object-store requests (S3 and Aliyun OSS). S3: SigV4-signed, path-style for custom endpoints,
 * virtual-hosted for AWS, with the timeouts and retries of COMPAT.md (connect 10 s, total 120 s, 3
 * attempts). */
#pragma once

#include <stdint.h>

#include "curl-driver.h"
#include "storage-config.h"

#define S3_CONNECT_TIMEOUT_SEC 10
#define OSS_CONNECT_TIMEOUT_SEC 30
#define S3_TOTAL_TIMEOUT_SEC 120
#define S3_ATTEMPTS 3
#define S3_PAIRS_MAX 6

typedef struct S3Call S3Call;

/* error < 0: transport failure after all attempts (TRANSFER_REFUSED: the address policy refused every
 * address, -EFBIG: the download was larger than allowed, neither is retried; TRANSFER_POLICY_UNAVAILABLE:
 * an address could not be judged, after every attempt); else status is the final HTTP status and body the
 * (bounded) response body, for downloads too when the status is not 2xx. */
typedef void (*S3Callback)(S3Call *call, int error, long status, const char *body, void *userdata);

typedef struct S3CallParams {
        const char *method;
        const char *key;                  /* full object key; NULL: bucket-level */
        const char *query[S3_PAIRS_MAX][2];
        const char *headers[S3_PAIRS_MAX][2];
        int upload_fd;                    /* -1: no body */
        bool has_upload_size;             /* send upload_size bytes of upload_fd (else: its size now) */
        uint64_t upload_size;
        const char *payload_hash;         /* S3: hex SHA-256 of the body, signed; NULL: UNSIGNED-PAYLOAD */
        int download_fd;                  /* -1: body into memory */
        uint64_t download_max;            /* with download_fd: the largest body accepted (else -EFBIG) */
        const AddressPolicy *policy;      /* borrowed, outlives the call; NULL: any address */
} S3CallParams;

int s3_call(CurlDriver *d, const StorageConfig *c, const S3CallParams *p, S3Callback cb, void *userdata);
/* In the callback: the last attempt's transfer (its response headers, bytes moved); NULL when the last
 * attempt could not even be started. */
const Transfer *s3_call_transfer(const S3Call *call);

/* A presigned GET URL for 'key' (X-Amz-Content-Sha256 in the query, as the AWS SDK makes them). */
int s3_presigned_get(const StorageConfig *c, const char *key, unsigned expires, char **ret_url);
