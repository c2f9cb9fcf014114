/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A request from its creation to its end: replies, the bus call it waits for (suspending and
 * resuming its connection), its client's hang-up, its reservation against the body budget. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "bus-util.h"
#include "gateway-auth.h"
#include "http-connection.h"
#include "http-header-check.h"
#include "http-router.h"
#include "http-stream.h"
#include "json-util.h"
#include "log.h"
#include "string-util.h"
#include "http-request.h"

void http_request_log_ids(const HttpRequest *req, char method[static 4 * HTTP_METHOD_LOG_MAX + 4],
                                 char path[static 4 * HTTP_PATH_LOG_MAX + 4]) {
        http_sanitize_for_log(req->method, HTTP_METHOD_LOG_MAX, method, 4 * HTTP_METHOD_LOG_MAX + 4);
        http_sanitize_for_log(req->path, HTTP_PATH_LOG_MAX, path, 4 * HTTP_PATH_LOG_MAX + 4);
}

int http_request_new(Server *s, HttpDaemon *d, struct MHD_Connection *c, const char *method,
                     const char *path, HttpRequest **ret) {
        _cleanup_(http_request_freep) HttpRequest *req = NULL;

        assert(s);
        assert(ret);

        req = calloc(1, sizeof(HttpRequest));
        if (!req)
                return -ENOMEM;
        req->server = s;
        req->daemon = d;
        req->connection = c;
        req->start_usec = server_now(s);
        req->hangup_fd = -EBADF;

        /* Link first, so that free() always has something to unlink. */
        LIST_PREPEND(requests, s->requests, req);
        s->n_requests++;

        req->method = strdup(strempty(method));
        req->path = strdup(strempty(path));
        if (!req->method || !req->path)
                return -ENOMEM;

        server_status_changed(s);
        *ret = TAKE_PTR(req);
        return 0;
}

int http_request_set_line(HttpRequest *req, const char *method, const char *path) {
        char *m, *p;

        m = strdup(strempty(method));
        p = strdup(strempty(path));
        if (!m || !p) {
                free(m);
                free(p);
                return -ENOMEM;
        }
        free(req->method);
        req->method = m;
        free(req->path);
        req->path = p;
        return 0;
}

void *http_router_uri_log(void *cls, const char *uri, struct MHD_Connection *connection) {
        _cleanup_(http_request_freep) HttpRequest *req = NULL;
        HttpDaemon *d = cls;
        int r;

        assert(d);

        /* Method and decoded path follow with the access handler's first call. */
        r = http_request_new(d->server, d, connection, NULL, NULL, &req);
        if (r >= 0)
                r = http_request_set_raw_target(req, uri);
        if (r < 0) {
                /* The access handler creates the request then, without the target as received. */
                log_warning_errno(r, "Failed to allocate request: %m");
                return NULL;
        }
        return TAKE_PTR(req);
}

/* Frees the raw body. Its reservation stays until the request completes: what was parsed or
 * decoded from it (the JSON document, an upload's memfd) lives as long. */
void http_request_release_body(HttpRequest *req) {
        free(req->body);
        req->body = NULL;
        req->body_size = req->body_allocated = 0;
}

static void http_request_unreserve(HttpRequest *req) {
        assert(req->server->body_bytes >= req->body_reserved);
        req->server->body_bytes -= req->body_reserved;
        req->body_reserved = 0;
}

/* Lets go of the request's call, cancelling it if it is still out: no longer counted for its
 * daemon's liveness either. */
void http_request_drop_call(HttpRequest *req) {
        req->slot = sd_bus_slot_unref(req->slot);
        peer_watch_call_end(TAKE_PTR(req->peer));
}

HttpRequest *http_request_free(HttpRequest *req) {
        Server *s;

        if (!req)
                return NULL;
        s = req->server;

        /* Cancels a pending call: its reply handler can no longer run for a freed request. Closing
         * the hang-up pipe has the manager end what it runs for us. */
        http_request_drop_call(req);
        req->client_source = sd_event_source_disable_unref(req->client_source);
        req->hangup_fd = safe_close(req->hangup_fd);
        if (req->suspended)
                s->n_suspended--;
        if (req->orphaned)
                s->n_orphaned--;

        http_request_release_body(req);
        http_request_unreserve(req);
        json_object_put(req->json);
        http_response_free(req->response);
        if (req->userdata_free)
                req->userdata_free(req->userdata);
        free(req->method);
        free(req->path);
        free(req->raw_target);
        for (unsigned i = 0; i < req->n_log_fields; i++)
                free(req->log_fields[i]);

        LIST_REMOVE(requests, s->requests, req);
        s->n_requests--;
        server_status_changed(s);

        free(req);
        return NULL;
}

int http_request_reply(HttpRequest *req, HttpResponse *response) {
        assert(req);
        assert(response);

        http_response_free(req->response);
        req->response = response;
        return 0;
}

int http_request_reply_made(HttpRequest *req, int made, HttpResponse *response) {
        return made < 0 ? made : http_request_reply(req, response);
}

/* On a socket whose API shapes every answer (HttpApi.shapes_all), the plain answers below take
 * that shape. */
static const HttpApi *http_request_socket_api(const HttpRequest *req) {
        return req->api && req->api->shapes_all && req->api->failure ? req->api : NULL;
}

int http_request_reply_detail(HttpRequest *req, unsigned status, const char *detail) {
        const HttpApi *api = http_request_socket_api(req);
        HttpResponse *r = NULL;
        int k = api ? api->failure(status, detail, &r) : http_response_new_detail(status, detail, &r);

        return http_request_reply_made(req, k, r);
}

int http_request_reply_error(HttpRequest *req, unsigned status, const char *error) {
        const HttpApi *api = http_request_socket_api(req);
        HttpResponse *r = NULL;
        int k = api ? api->failure(status, error, &r) : http_response_new_error(status, error, &r);

        return http_request_reply_made(req, k, r);
}

int http_request_reply_json(HttpRequest *req, unsigned status, json_object *o) {
        HttpResponse *r = NULL;
        int k = http_response_new_json(status, o, &r);

        return http_request_reply_made(req, k, r);
}

int http_request_reply_literal(HttpRequest *req, unsigned status, const char *json) {
        HttpResponse *r = NULL;
        char *copy;
        int k;

        copy = strdup(json);
        if (!copy)
                return -ENOMEM;
        k = http_response_new_take(status, copy, strlen(copy), &r);
        return http_request_reply_made(req, k, r);
}

int http_request_reply_ok_or_bus_error(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                return http_request_reply_bus_error(req, e);
        return http_request_reply_literal(req, HTTP_OK, "{\"ok\":true}");
}

void http_request_log_bus_error(HttpRequest *req, const sd_bus_error *e, bool ours) {
        Server *s = req->server;
        const char *name = e && e->name ? e->name : "(unknown)";
        const char *message = e && e->message ? e->message : "";

        if (ours && ratelimit_below(&s->warning_ratelimit, server_now(s))) {
                char method[4 * HTTP_METHOD_LOG_MAX + 4], path[4 * HTTP_PATH_LOG_MAX + 4];

                http_request_log_ids(req, method, path);
                log_warning_errno(sd_bus_error_get_errno(e),
                                  "Bus call for %s \"%s\" failed: %s: %s",
                                  method, path, name, message);
        } else
                log_debug("Bus call answered %s: %s", name, message);
}

int http_request_reply_bus_error_as(HttpRequest *req, const sd_bus_error *e, HttpBusErrorAnswer answer) {
        bool internal = false;
        HttpResponse *r;
        int k;

        k = answer(e, &r, &internal);
        if (k < 0)
                return k;
        if (e)
                http_request_log_bus_error(req, e, internal);
        return http_request_reply(req, r);
}

int http_request_reply_bus_error(HttpRequest *req, const sd_bus_error *e) {
        return http_request_reply_bus_error_as(req, e, http_response_new_bus_error);
}

void http_request_set_session_id(HttpRequest *req, const char *id) {
        assert(req);

        if (!session_id_is_valid(id))
                return;
        memcpy(req->session_id, id, SESSION_ID_LEN + 1);
        req->foreign_session = !session_id_has_tag(id, req->server->config.node_id);
}

int http_request_add_log_field(HttpRequest *req, const char *name, const char *value) {
        char *f;

        assert(req);
        assert(name);

        if (req->n_log_fields >= HTTP_LOG_FIELDS_MAX)
                return -E2BIG;
        if (asprintf(&f, "%s=%s", name, strempty(value)) < 0)
                return -ENOMEM;
        req->log_fields[req->n_log_fields++] = f;
        return 0;
}

/* The API whose shape the router's answers to a request take: its route's, if flagged
 * HTTP_ROUTE_API_KEY. */
static const HttpApi *http_request_shaping_api(const HttpRequest *req) {
        if (req->api && req->api->shapes_all)
                return req->api;
        return req->route && (req->route->flags & HTTP_ROUTE_API_KEY) ? req->api : NULL;
}

/* An answer of ours that is no resource's (refused request, internal error, shutdown), in the shape
 * of the route's API. Failures leave no response (the caller closes the connection). */
int http_request_reply_failure(HttpRequest *req, unsigned status, const char *message) {
        const HttpApi *api = http_request_shaping_api(req);

        req->response = http_response_free(req->response);
        if (api && api->failure)
                return api->failure(status, message, &req->response);
        return http_response_new_detail(status, message, &req->response);
}

/* Replaces whatever was prepared by a 500; logs why (rate-limited: the cause may be a request). */
void http_request_fail(HttpRequest *req, int error) {
        Server *s = req->server;

        req->response = http_response_free(req->response);
        http_request_drop_call(req);
        req->reply_handler = NULL;

        if (ratelimit_below(&s->warning_ratelimit, server_now(s))) {
                char method[4 * HTTP_METHOD_LOG_MAX + 4], path[4 * HTTP_PATH_LOG_MAX + 4];

                http_request_log_ids(req, method, path);
                log_warning_errno(error, "Failed to handle %s \"%s\": %m", method, path);
        }

        /* If even this fails, the caller closes the connection. */
        (void) http_request_reply_failure(req, HTTP_INTERNAL_SERVER_ERROR, "internal error");
}

void http_request_resume(HttpRequest *req) {
        /* libmicrohttpd watches the socket again. */
        req->client_source = sd_event_source_disable_unref(req->client_source);
        if (!req->suspended)
                return;

        req->suspended = false;
        req->server->n_suspended--;
        if (req->connection)
                MHD_resume_connection(req->connection);
        if (req->daemon)
                http_daemon_kick(req->daemon);
        server_status_changed(req->server);
}


/* Whether the client of a request whose hang-up is watched is gone, dispatched or not yet. */
static bool http_request_client_hung_up(HttpRequest *req) {
        struct pollfd p = { .events = POLLRDHUP };

        if (!req->client_source)
                return false;
        p.fd = sd_event_source_get_io_fd(req->client_source);
        return p.fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static int http_request_on_client_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata);

static int http_request_on_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        HttpRequest *req = userdata;
        HttpReplyHandler handler;
        int r;

        assert(req);

        /* sd-bus holds its own reference while we run; drop ours now so that the handler may start
         * another call. */
        http_request_drop_call(req);
        handler = req->reply_handler;
        req->reply_handler = NULL;

        /* A hang-up that arrived with the answer counts, where a call leaves something behind. */
        if (!req->client_gone && !req->abandoned && req->gone_handler && http_request_client_hung_up(req))
                (void) http_request_on_client_hangup(req->client_source, -EBADF, 0, req);

        /* Its client is gone, or was answered already (its daemon did not respond), the call is
         * over (most likely Cancelled): nothing to answer, but what the call left behind is undone.
         * An orphan goes now, giving back what it counted; one MHD has not completed yet goes when
         * it does. */
        if (req->client_gone || req->abandoned) {
                if (req->gone_handler)
                        (void) req->gone_handler(req, reply);
                if (req->orphaned)
                        http_request_free(req);
                return 0;
        }

        r = handler ? handler(req, reply) : -EPROTO;
        if (r < 0)
                http_request_fail(req, r);
        else if (!req->response && !req->slot && req->state != HTTP_REQUEST_ANSWERED)
                http_request_fail(req, -EPROTO);

        if (!req->slot)
                http_request_resume(req);
        return 0;
}

/* A pipe for a call that should end when the request's client goes away: the request keeps the
 * write end (closed when the client hangs up, or with the request), the caller gets the read end
 * (to close once it is in the message, as the call's "hangup" option). */
static int http_request_hangup_pipe(HttpRequest *req) {
        int fds[2];

        assert(req);
        assert(req->hangup_fd < 0);

        /* Non-blocking: nothing is ever written, but nothing may ever block on it either. */
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        req->hangup_fd = fds[1];
        return fds[0];
}

int http_request_call_until_hangup(HttpRequest *req, sd_bus_message *m, uint64_t timeout_usec,
                                   HttpReplyHandler handler) {
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = http_request_hangup_pipe(req);
        if (fd < 0)
                return fd;
        r = sd_bus_message_append(m, "{sv}", "hangup", "h", fd);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r < 0)
                return r;
        return http_request_call(req, m, timeout_usec, handler);
}

void *http_request_new_userdata(HttpRequest *req, size_t size, void (*free_fn)(void *p)) {
        assert(req);
        assert(!req->userdata);

        req->userdata = calloc(1, size);
        if (req->userdata)
                req->userdata_free = free_fn;
        return req->userdata;
}

void http_request_free_userdata(HttpRequest *req) {
        if (req->userdata && req->userdata_free)
                req->userdata_free(req->userdata);
        req->userdata = NULL;
        req->userdata_free = NULL;
}

/* The client of a suspended request with a hang-up pipe shut its socket down. The pipe's closing
 * tells the manager to cancel the call, and MHD gets the connection back to close it; the request
 * waits for the answer as an orphan (http_router_request_completed()). */
static int http_request_on_client_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        HttpRequest *req = userdata;

        req->hangup_fd = safe_close(req->hangup_fd);
        req->client_gone = true;
        req->close_reason = "client hung up";
        log_debug("The client of a request waiting for the session manager hung up; cancelling its call.");
        http_request_resume(req);
        return 0;
}

void http_request_suspend(HttpRequest *req) {
        assert(req);

        if (req->suspended || !req->connection)
                return;
        MHD_suspend_connection(req->connection);
        req->suspended = true;
        req->server->n_suspended++;
        server_status_changed(req->server);
        /* MHD won't see a hang-up meanwhile: we look for one, where it matters. */
        if (req->hangup_fd >= 0 &&
            http_connection_watch_hangup(req->connection, req->server->event, http_request_on_client_hangup,
                                         req, &req->client_source) < 0)
                log_debug("Failed to watch a client for hang-up; its call runs to its end.");
}

/* A call about a session of another node (SANDBOX_NODE_ID) is not made: 'handler' gets at once
 * what the session manager answers for a session it does not know, so that each route answers as
 * it does for an unknown session. */
static int http_request_answer_foreign(HttpRequest *req, sd_bus_message *m, HttpReplyHandler handler) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        log_debug("Session %s carries another node's tag, answering as for an unknown session.",
                  req->session_id);
        /* A reply needs a sealed call; the cookie is never seen by the bus. */
        r = sd_bus_message_seal(m, UINT32_MAX, 0);
        if (r < 0)
                return r;
        r = sd_bus_message_new_method_errorf(m, &reply, BUS_ERROR_NO_SUCH_SESSION, "%s",
                                             HTTP_DETAIL_NO_SUCH_SESSION);
        if (r < 0)
                return r;
        return handler(req, reply);
}

/* The answer for a request whose daemon does not respond: 503, in the route's shape. */
int http_request_reply_unavailable(HttpRequest *req, const PeerWatch *w) {
        int r;

        if (req->unavailable_handler)
                return req->unavailable_handler(req, w->unavailable);
        r = http_request_reply_failure(req, HTTP_SERVICE_UNAVAILABLE, w->unavailable);
        if (r < 0)
                return r;
        req->response->retry_after = PEER_RETRY_AFTER;
        return 0;
}

int http_request_call(HttpRequest *req, sd_bus_message *m, uint64_t timeout_usec, HttpReplyHandler handler) {
        PeerWatch *w;
        int r;

        assert(req);
        assert(m);
        assert(handler);
        assert(!req->slot);

        if (req->foreign_session)
                return http_request_answer_foreign(req, m, handler);

        if (!req->server->bus)
                return -ENOTCONN;

        /* A daemon that does not respond is not waited for: the answer comes at once. */
        w = server_peer_watch(req->server, sd_bus_message_get_destination(m));
        if (!peer_watch_responding(w))
                return http_request_reply_unavailable(req, w);

        r = sd_bus_call_async(req->server->bus, &req->slot, m, http_request_on_reply, req, timeout_usec);
        if (r < 0)
                return r;
        req->reply_handler = handler;
        req->peer = w;
        peer_watch_call_begin(w);
        return 0;
}

/* Whether a request body may grow by 'more' bytes to 'total'. Bodies and the responses
 * libmicrohttpd still holds share the server-wide budget, but not alike: a large body must leave
 * HTTP_BODY_SMALL_RESERVE of it free, a small one is measured against the bodies alone. So
 * neither large uploads nor responses clients are slow to read keep an ordinary request out. */
bool server_budget_has_room(const Server *s, uint64_t more, uint64_t total) {
        uint64_t used, limit = s->body_budget;

        if (total > HTTP_BODY_SMALL_MAX) {
                used = s->body_bytes + s->response_bytes;
                limit = limit > HTTP_BODY_SMALL_RESERVE ? limit - HTTP_BODY_SMALL_RESERVE : 0;
        } else
                used = s->body_bytes;
        return used <= limit && more <= limit - used;
}

/* Reserves body bytes against the server-wide budget, up to 'total' for this request; 'size' is
 * the body's own, which says whether it is a small one. */
int http_request_reserve(HttpRequest *req, uint64_t total, uint64_t size) {
        Server *s = req->server;
        uint64_t delta;

        if (total <= req->body_reserved)
                return 0;
        delta = total - req->body_reserved;
        if (!server_budget_has_room(s, delta, size))
                return -ENOBUFS;
        s->body_bytes += delta;
        req->body_reserved = total;
        return 0;
}

int http_request_reply_too_large(HttpRequest *req) {
        const HttpApi *api = http_request_shaping_api(req);
        HttpResponse *resp;
        char msg[128];
        int r;

        if (api && api->too_large) {
                r = api->too_large(req, &resp);
                return r < 0 ? r : http_request_reply(req, resp);
        }
        (void) snprintf(msg, sizeof(msg), "request body exceeds %" PRIu64 " bytes", req->body_max);
        return http_request_reply_error(req, HTTP_PAYLOAD_TOO_LARGE, msg);
}

/* The server-wide body budget is exhausted: a temporary condition. */
int http_request_reply_busy(HttpRequest *req) {
        int r;

        r = http_request_reply_error(req, HTTP_SERVICE_UNAVAILABLE, HTTP_ERROR_BUSY);
        if (r >= 0)
                req->response->retry_after = HTTP_BUSY_RETRY_AFTER;
        return r;
}
