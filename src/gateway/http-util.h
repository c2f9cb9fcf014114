/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* HTTP responses independent of libmicrohttpd (JSON bodies, FastAPI error shapes), and the one mapping of
 * bus errors to HTTP answers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <json-c/json.h>

#include "bus-contract.h"
#include "json-util.h"
#include "json-writer.h"
#include "macro.h"

/* Status codes we send. Plain numbers so this header does not need microhttpd.h. */
enum {
        HTTP_OK = 200,
        HTTP_CREATED = 201,
        HTTP_NO_CONTENT = 204,
        HTTP_BAD_REQUEST = 400,
        HTTP_UNAUTHORIZED = 401,
        HTTP_NOT_FOUND = 404,
        HTTP_METHOD_NOT_ALLOWED = 405,
        HTTP_REQUEST_TIMEOUT = 408,
        HTTP_CONFLICT = 409,
        HTTP_PAYLOAD_TOO_LARGE = 413,
        HTTP_URI_TOO_LONG = 414,
        HTTP_UNPROCESSABLE_ENTITY = 422,
        HTTP_TOO_MANY_REQUESTS = 429,
        HTTP_HEADER_FIELDS_TOO_LARGE = 431,
        HTTP_INTERNAL_SERVER_ERROR = 500,
        HTTP_NOT_IMPLEMENTED = 501,
        HTTP_BAD_GATEWAY = 502,
        HTTP_SERVICE_UNAVAILABLE = 503,
};

/* The exact text clients match to recognise a gone session (COMPAT.md A). */
#define HTTP_DETAIL_NO_SUCH_SESSION BUS_MESSAGE_NO_SUCH_SESSION
/* dbus-daemon refused a call: too many of the gateway's calls wait for their replies. */
#define HTTP_ERROR_CALLS_EXCEEDED "too many requests in flight, retry later"
/* On every response when SANDBOX_NODE_ID is set: the node that answered. */
#define HTTP_HEADER_NODE "X-Scopebox-Node"
/* A call that died with the session manager: 503 with Retry-After, safe to retry. */
#define HTTP_DETAIL_MANAGER_RESTARTED "session manager restarted, retry"

#define HTTP_DETAIL_STORAGE_TOO_LARGE BUS_MESSAGE_STORAGE_TOO_LARGE
/* A storage block that is not in effect (io.scopebox.Error.StorageNotConfigured, or none at all). */
#define HTTP_DETAIL_STORAGE_NOT_CONFIGURED "storage backend not configured"

/* A prepared response: status and a JSON body (application/json). The body is owned and handed
 * to libmicrohttpd without copying. */
typedef struct HttpStream HttpStream;

/* A body of unknown size produced by its owner as it goes (an event stream): libmicrohttpd's
 * content reader and what frees its closure once libmicrohttpd lets go of it. */
typedef struct HttpBodySource {
        ssize_t (*read)(void *userdata, uint64_t pos, char *buf, size_t max);
        void (*free)(void *userdata);
        void *userdata;
        uint64_t footprint;        /* the most its owner holds for it at a time, counted against
                                    * the body budget while libmicrohttpd holds the response */
} HttpBodySource;

typedef struct HttpResponse {
        unsigned status;
        char *body;
        size_t size;
        HttpStream *stream;       /* instead of 'body': produced as it is sent (http-stream.h) */
        HttpBodySource source;    /* instead of both, when 'read' is set */
        const char *cache_control; /* static "Cache-Control:" header value, or NULL */
        const char *allow; /* static "Allow:" header value for 405, or NULL */
        const char *content_type; /* static; NULL: application/json */
        const char *retry_after;  /* static "Retry-After:" header value, or NULL */
        char *next_token;         /* "X-Next-Token:" header value (a page's successor), owned, or NULL */
} HttpResponse;

HttpResponse *http_response_free(HttpResponse *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpResponse *, http_response_free);

/* Takes ownership of 'body' (malloc'ed, 'size' bytes) in all cases. */
int http_response_new_take(unsigned status, char *body, size_t size, HttpResponse **ret);
/* Takes ownership of 'stream' in all cases. */
int http_response_new_stream(unsigned status, HttpStream *stream, HttpResponse **ret);
/* Takes 'source' (its free() runs on failure too). */
int http_response_new_source(unsigned status, const char *content_type, const HttpBodySource *source,
                             HttpResponse **ret);
/* Produces a streamed body whole, into 'body' (for tests and small bodies). */
int http_response_flatten(HttpResponse *r);
/* Takes the text of 'w' (leaving it empty) as the body. */
int http_response_new_writer(unsigned status, JsonWriter *w, HttpResponse **ret);
int http_response_new_json(unsigned status, json_object *o, HttpResponse **ret);
/* Handler error: {"detail":"<detail>"} */
int http_response_new_detail(unsigned status, const char *detail, HttpResponse **ret);
/* Middleware error: {"error":"<error>"} */
int http_response_new_error(unsigned status, const char *error, HttpResponse **ret);
/* 422 in pydantic v2 shape from a json_dispatch() failure. */
int http_response_new_validation(const JsonDispatchError *e, HttpResponse **ret);
/* 422 {"detail":[{"type":"json_invalid","loc":["body",0],"msg":"JSON decode error"}]} */
int http_response_new_json_invalid(HttpResponse **ret);
/* 422 for a request that needs a body but has none. */
int http_response_new_body_missing(HttpResponse **ret);
struct HttpRequest;

/* What the answer to a failed call knows of the call besides its error: enough to tell a recipient
 * that went away (the session manager died with the call) from the call's own timeout, which sd-bus
 * both reports as NoReply. */
typedef struct HttpCallEnd {
        uint64_t elapsed_usec;  /* from before the call was sent to its answer: at least its time out */
        uint64_t timeout_usec;  /* the call's own timeout */
        bool connected;         /* our connection to the bus is still open */
} HttpCallEnd;

/* Whether 'e' says the call's recipient disconnected without answering: NoReply on an open
 * connection, before the call's own timeout could have fired. Never decided on the message. */
bool http_call_recipient_gone(const sd_bus_error *e, const HttpCallEnd *c);

/* The answer for a failed call (the one table of docs/api.md): 'recipient_gone' (see above) is
 * 503 "session manager restarted, retry". Sets *ret_internal when the cause is on our side (500,
 * 503): the caller should log the real error, which the response does not show. A 503 carries
 * its Retry-After. */
int http_response_new_call_error(const sd_bus_error *e, bool recipient_gone, HttpResponse **ret,
                                 bool *ret_internal);
/* The same for an error whose call is not known (recipient_gone false), or known to be gone. */
int http_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);
int http_response_new_recipient_gone(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);
/* The status and the client-safe message of that answer (the message is owned by 'e' or static). */
void http_bus_error_describe(const sd_bus_error *e, bool recipient_gone, unsigned *ret_status,
                             const char **ret_detail, bool *ret_internal);

/* Makes the answer to a bus call's error (or, where it takes NULL, to its success); sets *ret_internal
 * when the failure is ours. (The same typedef as http-router.h's: C11 allows repeating it.) */
typedef int (*HttpBusErrorAnswer)(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);

/* The answers of a request's failed call, whose timeout was 'timeout_usec'. The request's age
 * stands for the time the call was out. */
bool http_request_call_recipient_gone(struct HttpRequest *req, const sd_bus_error *e,
                                      uint64_t timeout_usec);
/* Answers the error (NULL: a success, where 'answer' takes that) with 'answer', or as a recipient
 * that went away; logs the real cause when it is ours. */
int http_request_reply_call_error(struct HttpRequest *req, const sd_bus_error *e, uint64_t timeout_usec,
                                  HttpBusErrorAnswer answer);
/* An on_reply for a call whose success is {"ok":true}: that, or the error's answer. */
int http_request_reply_ok_or_call_error(struct HttpRequest *req, sd_bus_message *reply,
                                        uint64_t timeout_usec);

/* json-c's adders store a NULL value (from a failed allocation) as JSON null; these fail instead. */
int json_add_string(json_object *o, const char *key, const char *value);
int json_add_bool(json_object *o, const char *key, bool b);
int json_add_uint(json_object *o, const char *key, uint64_t u);
/* The storage block of a request as compact JSON text for the bus, owned by 'storage' (valid until
 * it is serialised again or freed). -E2BIG when it is longer than BUS_STORAGE_JSON_MAX. The text
 * holds credentials: never log it. */
int http_storage_json(json_object *storage, const char **ret);
/* Length of a string member as json-c stores it, which may include NULs that C strings hide; 0 if
 * the member is absent or not a string. */
size_t json_member_string_length(json_object *o, const char *name);

/* Parses a Content-Length value: -EINVAL if it is not a plain decimal integer (400), -EFBIG if it
 * exceeds 'max' (413). */
int http_parse_content_length(const char *value, uint64_t max, uint64_t *ret);

/* Copies a client-supplied string for logging: printable ASCII kept, everything else escaped as
 * \xNN, '"' and '\' escaped, cut at 'max' input bytes with "..." appended. Always NUL-terminates
 * 'buf' (which should hold 4 * max + 4 bytes to never cut an escape). */
void http_sanitize_for_log(const char *s, size_t max, char *buf, size_t bufsize);

/* A simple "at most 'burst' events per 'interval'" limiter for log messages clients can cause. */
typedef struct RateLimit {
        uint64_t interval_usec;
        unsigned burst;
        uint64_t begin_usec;
        unsigned num;
} RateLimit;

bool ratelimit_below(RateLimit *rl, uint64_t now_usec);
