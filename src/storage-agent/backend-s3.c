/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* S3 requests: SigV4-signed, path-style for custom endpoints, virtual-hosted for AWS, with the
 * timeouts and retries of COMPAT.md (connect 10 s, total 120 s, 3 attempts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend-s3.h"
#include "macro.h"
#include "agent.h"
#include "oss-sign.h"
#include "sigv4.h"
#include "string-util.h"

#define S3_DEFAULT_REGION "us-east-1"

struct S3Call {
        CurlDriver *driver;
        StorageConfig config;             /* our copy (secrets wiped on free) */
        char *method, *key;
        char *query[S3_PAIRS_MAX][2];
        char *headers[S3_PAIRS_MAX][2];
        int upload_fd, download_fd;
        bool has_upload_size;
        uint64_t upload_size;
        char *payload_hash;
        uint64_t download_max;
        const AddressPolicy *policy;
        unsigned attempt;
        Transfer *transfer;
        sd_event_source *retry_timer;
        S3Callback callback;
        void *userdata;
};

static char *strdup_or_null(const char *s, bool *oom) {
        char *r;
        if (!s)
                return NULL;
        r = strdup(s);
        if (!r)
                *oom = true;
        return r;
}

static S3Call *s3_call_free(S3Call *c) {
        if (!c)
                return NULL;
        c->transfer = transfer_free(c->transfer);
        c->retry_timer = sd_event_source_disable_unref(c->retry_timer);
        storage_config_done(&c->config);
        free(c->method);
        free(c->key);
        free(c->payload_hash);
        for (size_t i = 0; i < S3_PAIRS_MAX; i++) {
                free(c->query[i][0]);
                free(c->query[i][1]);
                free(c->headers[i][0]);
                free(c->headers[i][1]);
        }
        free(c);
        return NULL;
}

static void location_of(const StorageConfig *c, const char *key, S3Location *ret) {
        *ret = (S3Location) {
                .endpoint = c->s3_endpoint,
                .region = c->s3_region ?: S3_DEFAULT_REGION,
                .bucket = c->s3_bucket,
                .key = key,
                /* A custom endpoint (MinIO and friends) gets the bucket in the path. */
                .path_style = c->s3_endpoint != NULL,
        };
}

static int s3_attempt(S3Call *c);

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        S3Call *c = userdata;
        int r;

        c->retry_timer = sd_event_source_disable_unref(c->retry_timer);
        r = s3_attempt(c);
        if (r < 0) {
                c->callback(c, r, 0, "", c->userdata);
                s3_call_free(c);
        }
        return 0;
}

static void on_transfer_done(Transfer *t, int error, long status, void *userdata) {
        S3Call *c = userdata;

        /* Transport failures and server errors are retried (with a short backoff), a failed route
         * lookup too; a 4xx is an answer, and so are a refused address and a body over the bound
         * (another attempt would only fetch as much again). */
        if ((error < 0 || status >= 500) && error != TRANSFER_REFUSED && error != -EFBIG &&
            c->attempt < S3_ATTEMPTS &&
            sd_event_add_time_relative(curl_driver_event(c->driver), &c->retry_timer, CLOCK_MONOTONIC,
                                       (uint64_t) c->attempt * 250 * USEC_PER_MSEC, 0, on_retry, c) >= 0) {
                c->transfer = transfer_free(c->transfer);
                return;
        }
        c->callback(c, error, status, t->body ?: "", c->userdata);
        s3_call_free(c);
}

/* Where the response body goes, its bound, and which addresses the transfer may connect to. */
static void s3_call_set_target(S3Call *c) {
        c->transfer->download_fd = c->download_fd;
        if (c->download_fd >= 0)
                c->transfer->download_max = c->download_max;
        c->transfer->policy = c->policy;
}

static void oss_location_of(const StorageConfig *c, const char *key, OssLocation *ret) {
        *ret = (OssLocation) {
                .endpoint = c->oss_endpoint,
                .bucket = c->oss_bucket,
                .key = key,
                .path_style = oss_endpoint_wants_path_style(c->oss_endpoint),
        };
}

static int oss_attempt(S3Call *c, const SigV4Pair *query, size_t nq, const SigV4Pair *headers, size_t nh,
                       uint64_t upload_size) {
        _cleanup_free_ char *url = NULL, *authorization = NULL, *sts = NULL;
        OssPair h[S3_PAIRS_MAX + 1]; /* the request's headers and Date */
        char date[OSS_HTTP_DATE_LEN + 1];
        OssCredentials creds = { c->config.oss_access_key_id, c->config.oss_access_key_secret };
        OssLocation loc;
        int r;

        memcpy(h, headers, sizeof(OssPair) * nh);
        r = oss_http_date(time(NULL), date);
        if (r < 0)
                return r;
        h[nh] = (OssPair) { "Date", date };

        oss_location_of(&c->config, c->key, &loc);
        r = oss_request_url(&loc, query, nq, &url);
        if (r < 0)
                return r;
        /* Version 1 signs only OSS's sub-resources among the query parameters (for listings, the
         * continuation token, raw); list-type, prefix and max-keys are not signed. */
        OssPair sub[S3_PAIRS_MAX];
        size_t nsub = 0;
        for (size_t i = 0; i < nq; i++)
                if (streq(query[i].name, "continuation-token") || streq(query[i].name, "delete") ||
                    streq(query[i].name, "acl") || startswith(query[i].name, "response-"))
                        sub[nsub++] = query[i];
        OssRequest req = { .method = c->method, .bucket = c->config.oss_bucket, .key = c->key, .headers = h,
                           .n_headers = nh + 1, .subresources = sub, .n_subresources = nsub };
        r = oss_v1_authorization(&req, &creds, date, &authorization, &sts);
        if (r < 0)
                return r;

        r = transfer_new(c->driver, c->method, url, OSS_CONNECT_TIMEOUT_SEC, S3_TOTAL_TIMEOUT_SEC,
                         &c->transfer);
        for (size_t i = 0; r >= 0 && i <= nh; i++)
                r = transfer_add_header(c->transfer, h[i].name, h[i].value);
        if (r >= 0)
                r = transfer_add_header(c->transfer, "Authorization", authorization);
        if (r < 0)
                return r;
        if (c->upload_fd >= 0) {
                c->transfer->upload_fd = c->upload_fd;
                c->transfer->upload_size = upload_size;
        } else if (streq(c->method, "PUT"))
                c->transfer->upload_size = 0;
        s3_call_set_target(c);
        return transfer_start(c->transfer, on_transfer_done, c);
}

static int s3_attempt(S3Call *c) {
        _cleanup_free_ char *url = NULL;
        SigV4Pair query[S3_PAIRS_MAX], headers[S3_PAIRS_MAX + 1];
        size_t nq = 0, nh = 0;
        SigV4Result res = {};
        S3Location loc;
        struct stat st;
        int r;

        c->attempt++;
        for (size_t i = 0; i < S3_PAIRS_MAX && c->query[i][0]; i++)
                query[nq++] = (SigV4Pair) { c->query[i][0], c->query[i][1] };
        for (size_t i = 0; i < S3_PAIRS_MAX && c->headers[i][0]; i++)
                headers[nh++] = (SigV4Pair) { c->headers[i][0], c->headers[i][1] };

        /* Every attempt starts the body over. */
        if (c->upload_fd >= 0 && (lseek(c->upload_fd, 0, SEEK_SET) < 0 || fstat(c->upload_fd, &st) < 0))
                return -errno;
        if (c->upload_fd >= 0 && c->has_upload_size) {
                if ((uint64_t) st.st_size < c->upload_size)
                        return -ENODATA; /* shorter than what was hashed and declared */
                st.st_size = (off_t) c->upload_size;
        }
        if (c->download_fd >= 0 &&
            (ftruncate(c->download_fd, 0) < 0 || lseek(c->download_fd, 0, SEEK_SET) < 0))
                return -errno;

        if (c->config.provider == STORAGE_ALIYUN_OSS)
                return oss_attempt(c, query, nq, headers, nh, c->upload_fd >= 0 ? (uint64_t) st.st_size : 0);

        location_of(&c->config, c->key, &loc);
        if (c->config.s3_access_key && c->config.s3_secret_key) {
                SigV4Credentials creds = { c->config.s3_access_key, c->config.s3_secret_key };
                r = s3_sign_request(&loc, c->method, query, nq, headers, nh,
                                    c->payload_hash ?: SIGV4_UNSIGNED_PAYLOAD, &creds, time(NULL), &res,
                                    &url);
        } else {
                /* No credentials: an anonymous request (public buckets). */
                S3Target t = {};
                r = s3_location_resolve(&loc, &t);
                if (r >= 0)
                        r = s3_target_url(&t, NULL, &url);
                s3_target_done(&t);
        }
        if (r < 0) {
                sigv4_result_done(&res);
                return r;
        }

        r = transfer_new(c->driver, c->method, url, S3_CONNECT_TIMEOUT_SEC, S3_TOTAL_TIMEOUT_SEC,
                         &c->transfer);
        for (size_t i = 0; r >= 0 && i < nh; i++)
                r = transfer_add_header(c->transfer, headers[i].name, headers[i].value);
        if (r >= 0 && res.authorization) {
                r = transfer_add_header(c->transfer, "Authorization", res.authorization);
                if (r >= 0)
                        r = transfer_add_header(c->transfer, "x-amz-date", res.amz_date);
                if (r >= 0)
                        r = transfer_add_header(c->transfer, "x-amz-content-sha256", res.content_sha256);
        }
        sigv4_result_done(&res);
        if (r < 0)
                return r;
        if (c->upload_fd >= 0) {
                c->transfer->upload_fd = c->upload_fd;
                c->transfer->upload_size = (uint64_t) st.st_size;
        }
        s3_call_set_target(c);
        return transfer_start(c->transfer, on_transfer_done, c);
}

int s3_call(CurlDriver *d, const StorageConfig *conf, const S3CallParams *p, S3Callback cb, void *userdata) {
        S3Call *c;
        bool oom = false;
        int r;

        c = calloc(1, sizeof(S3Call));
        if (!c)
                return -ENOMEM;
        *c = (S3Call) { .driver = d,
                        .upload_fd = p->upload_fd,
                        .download_fd = p->download_fd,
                        .has_upload_size = p->has_upload_size,
                        .upload_size = p->upload_size,
                        .download_max = p->download_max,
                        .policy = p->policy,
                        .callback = cb,
                        .userdata = userdata };
        c->config = (StorageConfig) { .provider = _STORAGE_PROVIDER_INVALID };
        if (storage_config_copy(conf, &c->config) < 0)
                oom = true;
        c->method = strdup_or_null(p->method, &oom);
        c->key = strdup_or_null(p->key, &oom);
        c->payload_hash = strdup_or_null(p->payload_hash, &oom);
        for (size_t i = 0; i < S3_PAIRS_MAX; i++) {
                c->query[i][0] = strdup_or_null(p->query[i][0], &oom);
                c->query[i][1] = strdup_or_null(p->query[i][1], &oom);
                c->headers[i][0] = strdup_or_null(p->headers[i][0], &oom);
                c->headers[i][1] = strdup_or_null(p->headers[i][1], &oom);
        }
        if (oom) {
                s3_call_free(c);
                return -ENOMEM;
        }
        r = s3_attempt(c);
        if (r < 0) {
                s3_call_free(c);
                return r;
        }
        return 0;
}

const Transfer *s3_call_transfer(const S3Call *call) {
        return call ? call->transfer : NULL;
}

int s3_presigned_get(const StorageConfig *c, const char *key, unsigned expires, char **ret_url) {
        SigV4Credentials creds = { c->s3_access_key, c->s3_secret_key };
        S3Location loc;

        if (c->provider == STORAGE_ALIYUN_OSS) {
                OssCredentials oc = { c->oss_access_key_id, c->oss_access_key_secret };
                OssLocation ol;

                oss_location_of(c, key, &ol);
                return oss_v1_signed_url(&ol, "GET", NULL, 0, NULL, 0, &oc, time(NULL), expires, ret_url);
        }

        if (!c->s3_access_key || !c->s3_secret_key)
                return -ENOKEY;
        location_of(c, key, &loc);
        return s3_presign_url(&loc, "GET", NULL, 0, NULL, 0, &creds, time(NULL), expires,
                              SIGV4_PRESIGN_CONTENT_SHA256_PARAM, ret_url);
}
