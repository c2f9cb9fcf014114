/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libcurl's multi interface driven from sd-event: transfers never block the agent's loop. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <curl/curl.h>
#include <systemd/sd-event.h>

#include "address-policy.h"
#include "archive-verify.h"

typedef struct CurlDriver CurlDriver;
typedef struct Transfer Transfer;

/* What a transfer that connected to no address at all ends with when the address policy stopped it:
 * every address was refused (the errno of io.scopebox.Error.StorageRefused), or the policy could not
 * judge one (its route lookup failed: the errno of io.scopebox.Error.PolicyUnavailable), which wins,
 * since a retry may succeed. */
#define TRANSFER_REFUSED (-EADDRNOTAVAIL)
#define TRANSFER_POLICY_UNAVAILABLE (-ENETDOWN)

/* error: 0, or a negative errno for transport failures (-ETIMEDOUT, -ECONNREFUSED, -ECONNRESET when
 * the connection broke, -EIO...), -EPIPE when the response body ended before its Content-Length,
 * TRANSFER_REFUSED or TRANSFER_POLICY_UNAVAILABLE (above; nothing was connected to), -EFBIG when the
 * response body was larger than download_max; status: the HTTP status when a response arrived. */
typedef void (*TransferCallback)(Transfer *t, int error, long status, void *userdata);

#define TRANSFER_BODY_MAX (8U * 1024U * 1024U)   /* kept response bodies (XML listings, errors) */

struct Transfer {
        CurlDriver *driver;
        CURL *easy;
        struct curl_slist *headers;
        char *body;                 /* response body, NUL-terminated, bounded */
        size_t body_size;
        int upload_fd;              /* request body from this fd (borrowed), -1: none */
        uint64_t upload_size;       /* exactly this much of it is sent (Content-Length) */
        uint64_t uploaded;
        int download_fd;            /* a 2xx response's body into this fd (borrowed), -1: into 'body';
                                     * the body of any other status always goes into 'body' */
        uint64_t download_max;      /* bound of the body into download_fd (Content-Length and bytes) */
        uint64_t downloaded;
        bool download_failed;
        bool too_large;
        ResponseHeaders response;   /* what we keep of the final response's headers */
        const AddressPolicy *policy; /* borrowed; NULL: any address (an endpoint the operator listed) */
        unsigned n_refused, n_unavailable, n_connected;
        AddressRoute refused_route;   /* why the last refused address was refused (_INVALID: internal) */
        int policy_error;             /* the last failed route lookup's -errno */
        TransferCallback callback;
        void *userdata;
        char error_buffer[CURL_ERROR_SIZE];
};

int curl_driver_new(sd_event *event, CurlDriver **ret);
CurlDriver *curl_driver_free(CurlDriver *d);
sd_event *curl_driver_event(CurlDriver *d);

/* A transfer for 'method' on 'url' with the given headers ("Name: value"), connect/total
 * timeouts in seconds. Body source/sink are set on the returned object before start. */
int transfer_new(CurlDriver *d, const char *method, const char *url, long connect_timeout_sec,
                 long total_timeout_sec, Transfer **ret);
int transfer_add_header(Transfer *t, const char *name, const char *value);
int transfer_start(Transfer *t, TransferCallback cb, void *userdata);
Transfer *transfer_free(Transfer *t);
