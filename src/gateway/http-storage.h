/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The /storage resources: request validation and response building, free of MHD and D-Bus for unit tests. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <json-c/json.h>

#include "config.h"
#include "http-util.h"

/* The texts clients see; the storage agent answers with the same ones. */
#define STORAGE_DETAIL_NOT_CONFIGURED HTTP_DETAIL_STORAGE_NOT_CONFIGURED
#define STORAGE_DETAIL_INVALID_KEY "invalid storage key"
#define STORAGE_DETAIL_INVALID_BASE64 "invalid base64"
#define STORAGE_DETAIL_INVALID_CONTENT_TYPE "invalid content_type"

#define STORAGE_CONTENT_TYPE_DEFAULT "application/octet-stream"
/* Longest content type forwarded (a media type with parameters; RFC 6838 allows 127 + 1 + 127). */
#define STORAGE_CONTENT_TYPE_MAX 255U
/* Base64 text decoded per step into the upload's memfd: a multiple of 4, so every step but the
 * last is whole quanta. Keeps the decoded object from being held twice. */
#define STORAGE_DECODE_CHUNK (4U * 1024U * 1024U)

typedef enum StorageRequestKind {
        STORAGE_REQUEST_PUT,    /* POST /storage/put: key, data_base64, content_type, expires_in, storage */
        STORAGE_REQUEST_DELETE, /* POST /storage/delete: key, storage */
        STORAGE_REQUEST_GC,     /* POST /storage/gc: max_age_seconds, storage */
        _STORAGE_REQUEST_KIND_MAX,
} StorageRequestKind;

typedef struct StorageRequest {
        const char *storage;      /* the block as JSON text, owned by the body; never logged */
        const char *key;          /* borrowed from the body; put and delete */
        const char *content_type; /* borrowed or the default; put */
        const char *data_base64;  /* borrowed, 'data_base64_size' bytes (may hold NULs); put */
        size_t data_base64_size;
        uint64_t expires_in;      /* put: 0 lets the agent pick its default */
        int64_t max_age_sec;      /* gc: > 0 */
} StorageRequest;

/* Validates a body: schema (422), the storage block's size (400 "storage is too large"), a missing
 * block (put and delete: 400 "storage backend not configured"; gc: 200 with zeros, as for
 * max_age_seconds ≤ 0), then what the bus cannot carry or the agent would refuse anyway: a key
 * with a NUL or longer than STORAGE_KEY_MAX (400 "invalid storage key"), a content type with
 * control characters or over STORAGE_CONTENT_TYPE_MAX bytes (400 "invalid content_type"). The
 * agent judges everything else (the block itself, the key's rules, the provider).
 * Returns 1 when the call may go ahead, 0 with the answer in *ret_answer, a negative errno on an
 * internal error (*ret_answer stays NULL). The base64 is decoded later, by storage_data_memfd(). */
int storage_request_parse(StorageRequestKind kind, json_object *body, StorageRequest *ret,
                          HttpResponse **ret_answer);

/* Decodes base64 into a new sealed memfd, 'chunk' bytes of text (a multiple of 4) at a time.
 * -EINVAL if base64_decode() would refuse the whole text. */
int storage_data_memfd(const char *text, size_t n, size_t chunk, int *ret_fd);

/* 200 {"provider":"s3","key":"<full key>","url":"...","expires_in":3600}. -EBADMSG for strings
 * that are not UTF-8. */
int storage_put_response_new(const char *provider, const char *key, const char *url, uint64_t expires_in,
                             HttpResponse **ret);
/* 200 {"ok":true,"key":"<full key>"} */
int storage_delete_response_new(const char *key, HttpResponse **ret);
/* 200 {"deleted":N,"scanned":N,"freed_bytes":N} */
int storage_gc_response_new(uint64_t deleted, uint64_t scanned, uint64_t freed_bytes, HttpResponse **ret);

/* Answers a failed storage agent call by the error's name, as the table of http-util.c does:
 * InvalidArgs and StorageRefused → 400 and StorageFailed → 502 with the agent's message,
 * StorageNotConfigured → 400 "storage backend not configured" (for gc both: 200 with zeros),
 * PolicyUnavailable → 503 with Retry-After; an agent that cannot be reached or does not answer →
 * 500 "storage agent unavailable" / "storage agent did not answer"; anything else → 500 "internal
 * error". Sets *ret_internal when the cause is on our side (500, 503). */
int storage_response_new_bus_error(StorageRequestKind kind, const sd_bus_error *e, HttpResponse **ret,
                                   bool *ret_internal);

/* The body limit of POST /storage/put (HttpRoute.body_max): SANDBOX_MAX_STORAGE_BODY_BYTES. */
uint64_t http_storage_put_body_max(const Config *config);
