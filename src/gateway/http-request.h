/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A request of either API as the gateway holds it from its header to its answer: its body and
 * reservation against the server's budget, its answer (http_request_reply*()), the bus call it
 * waits for and its client's hang-up (http-request.c). The router (http-router.h) creates it and
 * hands it to a resource. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <json-c/json.h>
#include <microhttpd.h>

#include "gateway-server.h"
#include "http-util.h"
#include "id.h"
#include "list.h"

/* Called with the bus service's reply (or error) to a http_request_call(). Same contract. */
typedef int (*HttpReplyHandler)(HttpRequest *req, sd_bus_message *reply);
/* Answers a request whose daemon does not respond (http-health.h); 'reason' is e.g. "session manager
 * not responding". */
typedef int (*HttpUnavailableHandler)(HttpRequest *req, const char *reason);

/* Initial allocation for bodies of unknown length (chunked transfer). */
#define HTTP_BODY_CHUNK_MIN (16U * 1024U)
/* A body's reservation grows in steps of this, ahead of the bytes received. Bodies up to it
 * (code, JSON of most calls) are not kept out by queued responses (server_budget_has_room()). */
#define HTTP_BODY_RESERVE_STEP (1ULL << 20)
#define HTTP_BODY_SMALL_MAX    HTTP_BODY_RESERVE_STEP
/* The part of the budget only small bodies may use. */
#define HTTP_BODY_SMALL_RESERVE (64ULL << 20)

/* The answer when the body budget has no room: a temporary condition. */
#define HTTP_ERROR_BUSY       "server busy, retry later"
#define HTTP_BUSY_RETRY_AFTER "1"

typedef enum HttpRequestState {
        HTTP_REQUEST_NEW,        /* headers not checked yet, or refused */
        HTTP_REQUEST_RECEIVING,  /* headers checked, body arriving */
        HTTP_REQUEST_HANDLING,   /* handed to the resource, possibly waiting for the bus */
        HTTP_REQUEST_ANSWERED,   /* response queued on the connection */
} HttpRequestState;

#define HTTP_METHOD_LOG_MAX 16U
#define HTTP_PATH_LOG_MAX   256U
/* How much of a refused field's name a 400 quotes. */
#define HTTP_FIELD_NAME_LOG_MAX 64U
/* Extra journal fields a resource may add to its request's access-log entry. */
#define HTTP_LOG_FIELDS_MAX 8U

/* What the router looks at in a request's header, collected in one pass over the fields. The
 * strings belong to libmicrohttpd and stay valid until the request completes. */
typedef struct HttpRequestHeaders {
        unsigned n;                         /* header fields */
        size_t bytes;                       /* their names and values */
        size_t target_bytes;                /* path and query arguments */
        unsigned n_invalid;                 /* fields with a name that is no token or a control
                                             * character in the value */
        unsigned n_authorization;
        const char *authorization;          /* the last one, 'authorization_size' bytes (NULs possible) */
        size_t authorization_size;
        unsigned n_api_key;
        const char *api_key;                /* X-Api-Key, the last one, 'api_key_size' bytes */
        size_t api_key_size;
        /* The E2B sandbox traffic's (the last of each, with its size; http-e2b.h). */
        unsigned n_e2b_sandbox_id;
        const char *e2b_sandbox_id;         /* E2b-Sandbox-Id */
        size_t e2b_sandbox_id_size;
        unsigned n_e2b_sandbox_port;
        const char *e2b_sandbox_port;       /* E2b-Sandbox-Port */
        unsigned n_access_token;
        const char *access_token;           /* X-Access-Token */
        size_t access_token_size;
        unsigned n_traffic_token;
        const char *traffic_token;          /* E2B-Traffic-Access-Token */
        size_t traffic_token_size;
        unsigned n_content_length;
        const char *content_length;         /* the first one */
        unsigned n_transfer_encoding;
        const char *transfer_encoding;      /* the first one */
        /* For the resources that read them (the first of each). */
        const char *content_type;
        unsigned n_traceparent;
        const char *traceparent;
        const char *user_id;                /* X-User-ID */
        const char *user_type;              /* X-User-Type */
        const char *language;               /* the query argument "language", 'language_size' bytes */
        size_t language_size;
        /* The first field whose value no string of ours can carry: "path", a query parameter or a
         * header field named in 'refused', 'refused_reason' says what is wrong with it (static). */
        char refused[4 * HTTP_FIELD_NAME_LOG_MAX + 32];
        const char *refused_reason;
} HttpRequestHeaders;

struct HttpRequest {
        Server *server;
        HttpDaemon *daemon;                 /* NULL in unit tests */
        struct MHD_Connection *connection;  /* NULL in unit tests */
        LIST_FIELDS(HttpRequest, requests);  /* Server.requests */

        HttpRequestState state;
        bool begun;                         /* the access handler saw the request's header */
        const HttpRoute *route;
        const HttpApi *api;                 /* the one 'route' is of */
        char *method;
        char *path;                         /* as libmicrohttpd decoded it: cut at a %00 */
        char *raw_target;                   /* the request target as received, if known */
        const char *path_arg;               /* into 'path', for HTTP_ROUTE_PATH_ARG routes */
        char allow[48];                     /* for a 405 */
        uint64_t start_usec;

        /* Body, bounded by 'body_max' while it streams in. */
        char *body;
        size_t body_size;
        size_t body_allocated;
        uint64_t body_max;
        uint64_t body_reserved;             /* counted in server->body_bytes */
        uint64_t content_length;
        bool has_content_length;
        json_object *json;                  /* NULL for an empty body or a JSON null */

        HttpRequestHeaders headers;         /* as seen by http_request_begin() */
        char session_id[SESSION_ID_LEN + 1];  /* for the access log, "" if unknown */
        bool foreign_session;               /* 'session_id' lacks our SANDBOX_NODE_ID tag: its
                                             * calls are answered as for an unknown session,
                                             * never sent (http_request_call()) */
        char *log_fields[HTTP_LOG_FIELDS_MAX]; /* "NAME=value", for the access log */
        unsigned n_log_fields;

        /* A pending bus call; unref'd (which cancels it) when the request goes away. */
        sd_bus_slot *slot;
        HttpReplyHandler reply_handler;
        HttpReplyHandler gone_handler;      /* instead, if the client is gone: undoes what the call
                                             * left behind (a created session) */
        PeerWatch *peer;                    /* the liveness watch of the daemon the call went to,
                                             * while the call counts there */
        bool abandoned;                     /* answered 503 because that daemon stopped responding;
                                             * the call stays out, and its answer only goes to
                                             * gone_handler, as if the client had hung up */
        HttpUnavailableHandler unavailable_handler; /* that 503 in the route's shape; NULL: {"detail"} */
        bool suspended;

        /* Hang-ups. The write end of the pipe whose read end went with the call (CreateSession,
         * Exec, Run: its "hangup" option); closed once the client is gone, which has the manager
         * cancel the call. */
        int hangup_fd;
        sd_event_source *client_source;     /* the client's socket, watched while suspended */
        bool client_gone;                   /* nobody to answer any more */
        bool orphaned;                      /* MHD completed it while its call was out: it waits
                                             * for the answer without a connection, and keeps
                                             * counting (MAX_REQUESTS) until then */

        /* State a resource keeps between its handler and its reply handler. */
        void *userdata;
        void (*userdata_free)(void *p);

        HttpResponse *response;             /* prepared, not yet queued */
        unsigned status;                    /* of the queued response, for the access log */
        const char *close_reason;           /* why we closed the connection, for the access log */
};

int http_request_new(Server *s, HttpDaemon *d, struct MHD_Connection *c, const char *method,
                     const char *path, HttpRequest **ret);
HttpRequest *http_request_free(HttpRequest *req);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpRequest *, http_request_free);

/* Stores the response to send (takes ownership, also on failure). */
int http_request_reply(HttpRequest *req, HttpResponse *response);
/* Stores the response its maker just made, 'made' being what the maker returned: a failure to make
 * it (the makers leave no response then) is returned as it is. */
int http_request_reply_made(HttpRequest *req, int made, HttpResponse *response);
int http_request_reply_detail(HttpRequest *req, unsigned status, const char *detail);
int http_request_reply_error(HttpRequest *req, unsigned status, const char *error);
int http_request_reply_json(HttpRequest *req, unsigned status, json_object *o);
/* A constant JSON text, copied. */
int http_request_reply_literal(HttpRequest *req, unsigned status, const char *json);
/* Answers a failed bus call; logs the real cause when it is ours (500) and hidden from the client. */
int http_request_reply_bus_error(HttpRequest *req, const sd_bus_error *e);
/* Makes the answer to a bus call's error (or, where it takes NULL, to its success); sets *ret_internal
 * when the failure is ours. http_response_new_bus_error() is the one of most routes. */
typedef int (*HttpBusErrorAnswer)(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);
/* The same with the route's own answer: logs 'e' (if any) as http_request_reply_bus_error() does. */
int http_request_reply_bus_error_as(HttpRequest *req, const sd_bus_error *e, HttpBusErrorAnswer answer);
/* An on_reply for a call whose success is {"ok":true}: that, or the bus error's answer. */
int http_request_reply_ok_or_bus_error(HttpRequest *req, sd_bus_message *reply);
/* Suspends the request's connection until http_request_resume(), watching the client for a hang-up
 * (which closes the request's hang-up pipe) if the request has a hang-up pipe: while its call is
 * out, or, for a body produced as it goes (HttpBodySource), when the reader has nothing to give
 * yet. No-op if suspended already. */
void http_request_suspend(HttpRequest *req);
/* Has libmicrohttpd handle a suspended request again (no-op if it is not suspended). */
void http_request_resume(HttpRequest *req);
/* Logs a failed bus call: rate-limited warning if 'ours', debug otherwise. */
void http_request_log_bus_error(HttpRequest *req, const sd_bus_error *e, bool ours);
/* Sends 'm' (to the session manager or the storage agent); 'handler' runs with the reply. The
 * connection stays suspended in the meantime. For a foreign session (see above) nothing is sent
 * and 'handler' runs before this returns, with a NoSuchSession error. */
int http_request_call(HttpRequest *req, sd_bus_message *m, uint64_t timeout_usec, HttpReplyHandler handler);
/* The same for a call that ends when the request's client goes away: its options (the a{sv} the
 * caller left open) end with {"hangup": h}, the read end of a new hang-up pipe, and are closed. */
int http_request_call_until_hangup(HttpRequest *req, sd_bus_message *m, uint64_t timeout_usec,
                                   HttpReplyHandler handler);
/* Allocates the state the resource keeps between its handler and its reply handler (zeroed, for the
 * caller to fill at once), freed with 'free_fn' along with the request. NULL when out of memory. */
void *http_request_new_userdata(HttpRequest *req, size_t size, void (*free_fn)(void *p));
/* Lets go of the userdata (a continuation done with it, before the next takes its place). */
void http_request_free_userdata(HttpRequest *req);
/* Records the session a request is about, for the access log, right after the id's syntax check.
 * An id without this node's tag (SANDBOX_NODE_ID) marks the request foreign: http_request_call()
 * then answers NoSuchSession itself. Ignores invalid ids. */
void http_request_set_session_id(HttpRequest *req, const char *id);
/* Adds the journal field NAME=value to the request's access-log entry; 'value' must already be
 * bounded and sanitized. Beyond HTTP_LOG_FIELDS_MAX fields, -E2BIG. */
int http_request_add_log_field(HttpRequest *req, const char *name, const char *value);

/* Between the request and the router (http-router.c); no resource calls these. */
void http_request_drop_call(HttpRequest *req);
void http_request_fail(HttpRequest *req, int error);
void http_request_log_ids(const HttpRequest *req, char method[static 4 * HTTP_METHOD_LOG_MAX + 4],
                          char path[static 4 * HTTP_PATH_LOG_MAX + 4]);
void http_request_release_body(HttpRequest *req);
int http_request_reply_busy(HttpRequest *req);
int http_request_reply_failure(HttpRequest *req, unsigned status, const char *message);
int http_request_reply_too_large(HttpRequest *req);
int http_request_reply_unavailable(HttpRequest *req, const PeerWatch *w);
int http_request_reserve(HttpRequest *req, uint64_t total, uint64_t size);
int http_request_set_line(HttpRequest *req, const char *method, const char *path);
bool server_budget_has_room(const Server *s, uint64_t more, uint64_t total);
