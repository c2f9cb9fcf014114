/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Request routing and the per-request context: auth, body limits, JSON parsing, async bus calls. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <json-c/json.h>
#include <microhttpd.h>

#include "gateway-server.h"
#include "http-request.h"
#include "http-util.h"
#include "id.h"
#include "list.h"

/* A resource handler. Either prepares a response (http_request_reply*()) or starts a bus call
 * (http_request_call()); a negative return becomes a 500. */
typedef int (*HttpHandler)(HttpRequest *req);
typedef enum HttpRouteFlags {
        HTTP_ROUTE_PUBLIC   = 1 << 0, /* served without Authorization */
        HTTP_ROUTE_PATH_ARG = 1 << 1, /* 'path' is a prefix followed by one non-empty segment */
        HTTP_ROUTE_JSON     = 1 << 2, /* a non-empty body is parsed as JSON */
        HTTP_ROUTE_API_KEY  = 1 << 3, /* "X-Api-Key: <key>" instead of Authorization, 401 with an
                                       * empty body; failures in its API's shape (HttpApi.failure,
                                       * .too_large) */
        HTTP_ROUTE_RAW_BODY = 1 << 4, /* the body is kept as received, for the resource to bind */
        HTTP_ROUTE_SCRAPE_KEY = 1 << 5, /* the scrape key opens it too (server_set_scrape_key()) */
        HTTP_ROUTE_E2B_KEY  = 1 << 6, /* the E2B control plane: "X-API-Key: <key>" or "e2b_<hex of the
                                       * key>" (e2b-token.h) */
        HTTP_ROUTE_E2B_TOKEN = 1 << 7, /* traffic of the E2B sandbox named by E2b-Sandbox-Id: its
                                        * access token (X-Access-Token or E2B-Traffic-Access-Token) */
} HttpRouteFlags;

/* Routes whose body is buffered (and counted against the server-wide budget). */
#define HTTP_ROUTE_BUFFERED (HTTP_ROUTE_JSON | HTTP_ROUTE_RAW_BODY)

struct HttpRoute {
        const char *method;
        const char *path;
        unsigned flags;
        HttpHandler handler;
        /* The route's body limit from the configuration; NULL: SANDBOX_MAX_BODY_BYTES. The server's
         * body budget holds two of the largest (server_add_api()). */
        uint64_t (*body_max)(const Config *config);
};

/* An API the server serves (server_add_api()): its routes, and the shape of the answers the router
 * gives in the name of its HTTP_ROUTE_API_KEY routes. The paths of all APIs a server serves are
 * disjoint. */
struct HttpApi {
        const char *name;              /* "Serving the <name> and <name> APIs" */
        const HttpRoute *routes;       /* terminated by an entry with method NULL */
        /* An answer of ours that is no resource's (refused request, internal error, shutdown, a
         * daemon not responding); NULL: {"detail": message}. */
        int (*failure)(unsigned status, const char *message, HttpResponse **ret);
        /* A body over its route's limit; NULL: 413 {"error": "request body exceeds N bytes"}. */
        int (*too_large)(const HttpRequest *req, HttpResponse **ret);
        /* What the API counts on the server (server_api_count()) until the results come, as the
         * STATUS= line names it ("run": "2 runs"); NULL: nothing. */
        const char *counted;
        /* The FileDescriptorName= of the sockets that serve this API and nothing else; NULL: the
         * API is served on every other socket. */
        const char *socket;
        /* Routes of requests that name a sandbox (E2b-Sandbox-Id), instead of 'routes', and the
         * route of such a request whose path none of them has (the sandbox is asked for first). */
        const HttpRoute *sandbox_routes;
        const HttpRoute *sandbox_other;
        /* Every answer of the router on its socket takes the API's shape (HttpApi.failure), not
         * only those of HTTP_ROUTE_API_KEY routes. */
        bool shapes_all;
};

/* The body limit of a route: Content-Length above it is refused, a chunked body cut off there. */
uint64_t http_route_body_max(const HttpRoute *route, const Config *config);

/* Finds the route for a request. -ENOENT: no route has this path (404). -EOPNOTSUPP: the path exists
 * with other methods (405), listed in 'allow' if given. HEAD is served by GET routes. */
int http_route_lookup(const HttpRoute *routes, const char *method, const char *path,
                      const HttpRoute **ret_route, const char **ret_arg, char *allow, size_t allow_size);

/* Records the request target as received (before percent-decoding), so that a %00 in the path is
 * refused rather than ending it. */
int http_request_set_raw_target(HttpRequest *req, const char *uri);
/* Checks a string from the request line or header: NUL bytes and invalid UTF-8 are refused. Returns
 * the reason (static) or NULL if 'value' is acceptable. */
const char *http_text_check(const char *value, size_t size);
/* Checks done once the headers are in: size caps (431, 414), message framing (400, 501; a request
 * whose end is ambiguous never reaches a resource), auth (401), route (404, 405), Content-Length
 * (413). Prepares an error response when the request is refused. Exposed for tests. */
int http_request_begin(HttpRequest *req, const HttpRequestHeaders *h);
/* Adds upload data. -EFBIG when the body outgrows its limit, -ENOBUFS when the server-wide budget
 * is exhausted. */
int http_request_append_body(HttpRequest *req, const char *data, size_t size);
/* Parses the body, reserves what the parsed document holds beyond the body's bytes (503 with
 * Retry-After when the budget has no room for it), and runs the resource. */
int http_request_dispatch(HttpRequest *req);
/* Lets go of the parsed body once the call holds everything it needs from it: a request waiting
 * for its call then holds no more than its body's reservation counts. */
void http_request_drop_json(HttpRequest *req);

/* What json-c allocates per value beside the strings' bytes, as json_structure_footprint() counts
 * it: upper bounds of what json-c 0.16 takes on x86-64 (see there). */
#define JSON_VALUE_FOOTPRINT   96U
#define JSON_OBJECT_FOOTPRINT  1024U
#define JSON_MEMBER_FOOTPRINT  64U
#define JSON_ARRAY_FOOTPRINT   128U
#define JSON_ELEMENT_FOOTPRINT 16U
uint64_t json_structure_footprint(json_object *o);


/* libmicrohttpd callbacks; the closure is the HttpDaemon. */
enum MHD_Result http_router_access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                           const char *method, const char *version,
                                           const char *upload_data, size_t *upload_data_size,
                                           void **con_cls);
/* MHD_OPTION_URI_LOG_CALLBACK: called with the request target before libmicrohttpd decodes it;
 * creates the request (the access handler's first call finds it). */
void *http_router_uri_log(void *cls, const char *uri, struct MHD_Connection *connection);
void http_router_request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                                   enum MHD_RequestTerminationCode toe);
/* At shutdown: answers every request still waiting for the bus with 503 and resumes it. */
void http_router_abort_pending(Server *s, HttpDaemon *d);
/* The daemon watched by 'w' does not respond: every request waiting for it is answered 503 (its
 * unavailable handler, or "<daemon> not responding" with Retry-After) and resumed. Each call stays
 * out, its hang-up pipe closed, so that the daemon ends it once it runs again and whatever it left
 * behind is undone (gone_handler). */
void http_router_abandon_calls(Server *s, PeerWatch *w);
