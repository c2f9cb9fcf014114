/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Request routing: the route tables, the checks once the header is in (auth, framing, body limits),
 * the body as it arrives, JSON parsing, dispatch to the resource, libmicrohttpd's callbacks. */
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
#include "e2b-token.h"
#include "gateway-auth.h"
#include "http-connection.h"
#include "http-header-check.h"
#include "http-router.h"
#include "http-stream.h"
#include "json-util.h"
#include "log.h"
#include "string-util.h"

uint64_t http_route_body_max(const HttpRoute *route, const Config *config) {
        assert(route);
        assert(config);

        return route->body_max ? route->body_max(config) : config->max_body_bytes;
}

static void allow_append(char *allow, size_t allow_size, const char *method) {
        size_t l;

        if (!allow || allow_size == 0)
                return;
        l = strlen(allow);
        (void) snprintf(allow + l, allow_size - l, "%s%s", l > 0 ? ", " : "", method);
}

int http_route_lookup(const HttpRoute *routes, const char *method, const char *path,
                      const HttpRoute **ret_route, const char **ret_arg, char *allow, size_t allow_size) {
        bool path_known = false;

        assert(routes);
        assert(method);
        assert(path);

        if (allow && allow_size > 0)
                allow[0] = 0;

        for (const HttpRoute *r = routes; r->method; r++) {
                const char *arg = NULL;

                if (r->flags & HTTP_ROUTE_PATH_ARG) {
                        /* A route ending in a slash takes one segment after it; one with a star takes one
                         * segment in the star's place (handed over with the rest of the path). */
                        const char *star = strchr(r->path, '*'), *slash;

                        arg = star ? (strneq(path, r->path, (size_t) (star - r->path))
                                              ? path + (star - r->path)
                                              : NULL)
                                   : startswith(path, r->path);
                        slash = arg ? strchr(arg, '/') : NULL;
                        if (isempty(arg) || slash == arg ||
                            (star ? !slash || !streq(slash, star + 1) : slash != NULL))
                                continue;
                } else if (!streq(path, r->path))
                        continue;

                path_known = true;
                if (streq(method, r->method) || (streq(method, "HEAD") && streq(r->method, "GET"))) {
                        if (ret_route)
                                *ret_route = r;
                        if (ret_arg)
                                *ret_arg = arg;
                        return 0;
                }
                allow_append(allow, allow_size, r->method);
                if (streq(r->method, "GET"))
                        allow_append(allow, allow_size, "HEAD");
        }

        return path_known ? -EOPNOTSUPP : -ENOENT;
}

/* Whether the socket of 'req' serves 'api': an API with a socket of its own is served there and
 * nowhere else; the others on every other socket, where their paths are disjoint. */
static bool http_request_serves(const HttpRequest *req, const HttpApi *api) {
        const char *name = req->daemon ? req->daemon->name : NULL;
        const Server *s = req->server;

        if (api->socket)
                return name && streq(name, api->socket);
        for (size_t i = 0; name && i < s->n_apis; i++)
                if (s->apis[i].api->socket && streq(name, s->apis[i].api->socket))
                        return false;
        return true;
}

static int http_request_lookup(HttpRequest *req, const HttpRequestHeaders *h) {
        const Server *s = req->server;

        for (size_t i = 0; i < s->n_apis; i++) {
                const HttpApi *api = s->apis[i].api;
                const HttpRoute *routes = api->routes;
                int r;

                if (!http_request_serves(req, api))
                        continue;
                /* The API whose shape the refusals of this socket take, whatever the path. */
                if (api->shapes_all)
                        req->api = api;
                if (api->sandbox_routes && h->n_e2b_sandbox_id > 0)
                        routes = api->sandbox_routes;
                r = http_route_lookup(routes, req->method, req->path, &req->route, &req->path_arg,
                                      req->allow, sizeof(req->allow));
                if (r == -ENOENT && routes == api->sandbox_routes && api->sandbox_other) {
                        req->route = api->sandbox_other;
                        r = 0;
                }
                if (r >= 0)
                        req->api = api;
                if (r != -ENOENT)
                        return r;
        }
        return -ENOENT;
}

/* Whether the request carries the key the way its route wants it. Authorization: Bearer opens most
 * routes, X-Api-Key those flagged HTTP_ROUTE_API_KEY; a request that matches no route may show either,
 * so that both kinds of clients learn of a wrong path or method. A repeated header is no key. */
static bool http_request_authenticated(const HttpRequest *req, const HttpRequestHeaders *h, int lookup) {
        const Server *s = req->server;
        bool api_key_only = lookup >= 0 && (req->route->flags & HTTP_ROUTE_API_KEY);

        if (!s->auth_header)
                return true;
        /* The E2B socket: the key (the control plane), or a sandbox's token (its traffic); a request
         * that matches no route may show either. */
        if (lookup >= 0 && (req->route->flags & HTTP_ROUTE_E2B_TOKEN))
                return e2b_token_matches(s, h) || e2b_signature_matches(req, h);
        if (lookup >= 0 && (req->route->flags & HTTP_ROUTE_E2B_KEY))
                return e2b_key_matches(s, h);
        if (lookup < 0 && req->api && req->api->shapes_all)
                return e2b_key_matches(s, h) || e2b_token_matches(s, h);
        if (api_key_only || lookup < 0)
                if (auth_header_matches(h->n_api_key == 1 ? h->api_key : NULL, h->api_key_size,
                                        s->api_key, s->api_key_size))
                        return true;
        if (api_key_only)
                return false;
        if (lookup >= 0 && (req->route->flags & HTTP_ROUTE_SCRAPE_KEY) && s->scrape_auth_header &&
            auth_header_matches(h->n_authorization == 1 ? h->authorization : NULL, h->authorization_size,
                                s->scrape_auth_header, s->scrape_auth_header_size))
                return true;
        return auth_header_matches(h->n_authorization == 1 ? h->authorization : NULL, h->authorization_size,
                                   s->auth_header, s->auth_header_size);
}

/* Where the body ends must be unambiguous (RFC 9112 §6.3), or a request could be read one way here
 * and another way by a proxy in front of us ("request smuggling"). libmicrohttpd frames by the first
 * Transfer-Encoding, else by the first Content-Length: refuse whatever it would have to guess at.
 * An early answer makes it close the connection after the response, so nothing that follows on
 * the connection is read as a request. */
static int http_request_check_framing(HttpRequest *req, const HttpRequestHeaders *h) {
        /* "Transfer-Encoding : chunked" is no Transfer-Encoding to libmicrohttpd, but may be one to
         * a proxy; a bare CR may end a line for another parser (RFC 9112 §2.2, §5.1). */
        if (h->n_invalid > 0)
                return http_request_reply_error(req, HTTP_BAD_REQUEST, "invalid header field");
        if (h->n_transfer_encoding > 0) {
                if (h->n_transfer_encoding > 1 || h->n_content_length > 0)
                        return http_request_reply_error(req, HTTP_BAD_REQUEST, "invalid transfer-encoding");
                /* The same comparison libmicrohttpd makes to decide on chunked framing. */
                if (strcasecmp(strempty(h->transfer_encoding), "chunked") != 0)
                        return http_request_reply_error(req, HTTP_NOT_IMPLEMENTED,
                                                        "unsupported transfer-encoding");
        }
        if (h->n_content_length > 1)
                return http_request_reply_error(req, HTTP_BAD_REQUEST, "invalid content-length");
        return 0;
}

const char *http_text_check(const char *value, size_t size) {
        if (!value)
                return NULL;
        if (memchr(value, 0, size))
                return "contains a NUL byte";
        if (!utf8_is_valid_n(value, size))
                return "is not valid UTF-8";
        return NULL;
}

int http_request_set_raw_target(HttpRequest *req, const char *uri) {
        char *copy;

        assert(req);

        copy = strdup(strempty(uri));
        if (!copy)
                return -ENOMEM;
        free(req->raw_target);
        req->raw_target = copy;
        return 0;
}

/* libmicrohttpd decodes the path into a C string, so "%00" ends it early: look at the path as
 * received, where "%00" is the only way to write a NUL (a raw NUL ends the request target). */
static const char *http_request_check_path(const HttpRequest *req) {
        if (req->raw_target)
                for (const char *p = req->raw_target; *p && *p != '?'; p++)
                        if (startswith(p, "%00"))
                                return "contains a NUL byte";
        return http_text_check(req->path, strlen(req->path));
}

static int http_request_check_fields(HttpRequest *req, const HttpRequestHeaders *h) {
        const char *field = h->refused, *reason = h->refused_reason, *path_reason;
        char message[sizeof(h->refused) + 64];

        path_reason = http_request_check_path(req);
        if (path_reason) {
                field = "path";
                reason = path_reason;
        }
        if (!reason)
                return 0;

        (void) snprintf(message, sizeof(message), "%s %s", field, reason);
        return http_request_reply_failure(req, HTTP_BAD_REQUEST, message);
}

int http_request_begin(HttpRequest *req, const HttpRequestHeaders *h) {
        const char *content_length;
        Server *s;
        bool public, authenticated;
        int lookup, r;

        assert(req);
        assert(h);
        s = req->server;

        /* Protocol errors first: they say nothing about us, and a request with ambiguous framing
         * must never be answered as if it had a body we understood. */
        if (h->n > HTTP_HEADERS_MAX || h->bytes > HTTP_HEADER_BYTES_MAX)
                return http_request_reply_error(req, HTTP_HEADER_FIELDS_TOO_LARGE,
                                                "request header fields too large");
        if (h->target_bytes > HTTP_REQUEST_TARGET_MAX)
                return http_request_reply_error(req, HTTP_URI_TOO_LONG, "request target too long");
        r = http_request_check_framing(req, h);
        if (r < 0 || req->response)
                return r;

        lookup = http_request_lookup(req, h);
        if (lookup < 0 && lookup != -ENOENT && lookup != -EOPNOTSUPP)
                return lookup;
        req->headers = *h;

        /* Authentication comes before everything else a client could learn from us, including
         * which paths exist, and before a single body byte is read. */
        public = lookup >= 0 && (req->route->flags & HTTP_ROUTE_PUBLIC);
        authenticated = http_request_authenticated(req, h, lookup);
        if (!public && !authenticated) {
                /* X-Api-Key routes answer with the bare status. */
                if (lookup >= 0 && (req->route->flags & HTTP_ROUTE_API_KEY))
                        return http_request_reply_literal(req, HTTP_UNAUTHORIZED, "");
                return http_request_reply_error(req, HTTP_UNAUTHORIZED, "unauthorized");
        }
        /* A key on a public route counts too: the connection may hold a reserved slot now. */
        if (authenticated)
                http_connection_authenticated(http_connection_get(req->connection));

        /* A path, query parameter or header that we would have to cut at a NUL, or that is no text,
         * reaches no resource, not even as a shorter value. */
        r = http_request_check_fields(req, h);
        if (r < 0 || req->response)
                return r;

        if (lookup == -ENOENT)
                return http_request_reply_detail(req, HTTP_NOT_FOUND, "Not Found");
        if (lookup == -EOPNOTSUPP) {
                r = http_request_reply_detail(req, HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed");
                if (r >= 0)
                        req->response->allow = req->allow;
                return r;
        }

        /* Per route (HttpRoute.body_max). */
        req->body_max = http_route_body_max(req->route, &s->config);
        content_length = h->n_content_length > 0 ? strempty(h->content_length) : NULL;
        if (content_length) {
                r = http_parse_content_length(content_length, req->body_max, &req->content_length);
                if (r == -EFBIG)
                        return http_request_reply_too_large(req);
                if (r < 0)
                        return http_request_reply_error(req, HTTP_BAD_REQUEST, "invalid content-length");
                req->has_content_length = true;

                /* Refused at once if it could not fit now; reserved only as its bytes arrive, so
                 * that heads announcing large bodies take nothing from other clients. */
                if ((req->route->flags & HTTP_ROUTE_BUFFERED) &&
                    !server_budget_has_room(req->server, req->content_length, req->content_length))
                        return http_request_reply_busy(req);
        }

        req->state = HTTP_REQUEST_RECEIVING;
        return 0;
}

int http_request_append_body(HttpRequest *req, const char *data, size_t size) {
        size_t need;
        int r;

        assert(req);
        assert(req->state == HTTP_REQUEST_RECEIVING);
        assert(req->body_size <= req->body_max);

        if (size == 0)
                return 0;
        /* Chunked bodies carry no Content-Length: the cap must hold while they stream in. */
        if (size > req->body_max - req->body_size)
                return -EFBIG;
        need = req->body_size + size;

        /* A resource that takes no body (the public GET /healthz among them) gets none: counted,
         * never buffered, so that nobody can park memory here without a key. */
        if (!(req->route->flags & HTTP_ROUTE_BUFFERED)) {
                req->body_size = need;
                return 0;
        }

        if (need >= req->body_allocated) {
                uint64_t n;
                char *b;

                if (req->has_content_length && req->content_length >= need)
                        n = req->content_length;
                else
                        n = MIN(MAX(MAX(need, (size_t) HTTP_BODY_CHUNK_MIN), req->body_allocated * 2),
                                req->body_max);
                n = MAX(n, (uint64_t) need);

                b = realloc(req->body, (size_t) n + 1);
                if (!b)
                        return -ENOMEM;
                req->body = b;
                req->body_allocated = (size_t) n + 1;
        }

        /* The allocation may cover a whole Content-Length, but its pages are only touched as the
         * bytes arrive: the reservation follows them, a step at a time. */
        if (need > req->body_reserved) {
                uint64_t total = MIN(((uint64_t) need + HTTP_BODY_RESERVE_STEP - 1) /
                                             HTTP_BODY_RESERVE_STEP * HTTP_BODY_RESERVE_STEP,
                                     (uint64_t) req->body_allocated);

                r = http_request_reserve(req, total, total);
                if (r < 0)
                        return r;
        }

        memcpy(req->body + req->body_size, data, size);
        req->body_size = need;
        req->body[need] = 0;
        return 0;
}

/* An upper bound of what json-c allocates for 'o' beside its strings' bytes (measured with
 * json-c 0.16: 72 bytes a number, 88 an empty string, 150 an empty array, 790 an empty object, 90
 * a member). Nesting is bounded by JSON_DEPTH_MAX. */
uint64_t json_structure_footprint(json_object *o) {
        uint64_t n = JSON_VALUE_FOOTPRINT;

        switch (json_object_get_type(o)) {
        case json_type_object: {
                n += JSON_OBJECT_FOOTPRINT;
                json_object_object_foreach(o, key, member) {
                        (void) key;
                        n += JSON_MEMBER_FOOTPRINT + (member ? json_structure_footprint(member) : 0);
                }
                break;
        }
        case json_type_array: {
                size_t l = json_object_array_length(o);

                n += JSON_ARRAY_FOOTPRINT;
                for (size_t i = 0; i < l; i++) {
                        json_object *e = json_object_array_get_idx(o, i);

                        n += JSON_ELEMENT_FOOTPRINT + (e ? json_structure_footprint(e) : 0);
                }
                break;
        }
        default:
                break;
        }
        return n;
}

/* What the body turns into while its request waits, held on top of the body's own reservation: the
 * structure of the parsed document, whose strings take the raw bytes' place (a few bytes of JSON
 * may parse into hundreds: "{}" is an object with its hash table). What is decoded from a body (an
 * exec's code, an upload, an object, in a memory file charged to the gateway) is at most as large
 * as the body, whose reservation covers it once the document that held it is let go
 * (http_request_drop_json()). Returns -ENOBUFS when the budget has no room for it. */
static int http_request_reserve_parsed(HttpRequest *req, uint64_t body_size) {
        if (!req->json)
                return 0;
        return http_request_reserve(req, req->body_reserved + json_structure_footprint(req->json),
                                    body_size);
}

void http_request_drop_json(HttpRequest *req) {
        assert(req);

        json_object_put(req->json);
        req->json = NULL;
}

int http_request_dispatch(HttpRequest *req) {
        uint64_t body_size;
        int r = 0;

        assert(req);
        assert(req->route);

        req->state = HTTP_REQUEST_HANDLING;
        body_size = req->body_size;

        if ((req->route->flags & HTTP_ROUTE_JSON) && req->body_size > 0)
                r = json_parse(req->body, req->body_size, JSON_DEPTH_MAX, &req->json);

        /* The parsed document holds what the resource needs: the raw bytes go (their reservation
         * stays, for the document and what is decoded from it). A resource that binds the body
         * itself gets it until its handler returns. */
        if (!(req->route->flags & HTTP_ROUTE_RAW_BODY))
                http_request_release_body(req);

        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                HttpResponse *resp;

                /* A NUL in a member name is no syntax error: say what it is (C strings would have cut
                 * the value short), as for a NUL anywhere else in a request. */
                if (r == -EILSEQ)
                        r = http_response_new_detail(
                                400, "the JSON body contains a NUL (\\u0000) in a member name", &resp);
                else
                        r = http_response_new_json_invalid(&resp);
                if (r < 0)
                        return r;
                return http_request_reply(req, resp);
        }

        /* Bodies and what they turn into count as long as the request waits, in any queue. */
        r = http_request_reserve_parsed(req, body_size);
        if (r == -ENOBUFS) {
                http_request_drop_json(req);
                return http_request_reply_busy(req);
        }
        if (r < 0)
                return r;

        r = req->route->handler(req);
        http_request_release_body(req);
        if (r < 0)
                return r;
        if (!req->response && !req->slot)
                return -EPROTO;
        return 0;
}

/* A body handed to libmicrohttpd, counted against the server's budget until MHD lets it go (sent,
 * or the connection closed). */
typedef struct HttpQueued {
        Server *server;
        uint64_t bytes;
        char *body;
        HttpStream *stream;
        HttpBodySource source;
} HttpQueued;

static void http_queued_free(void *p) {
        HttpQueued *q = p;

        assert(q->server->response_bytes >= q->bytes);
        q->server->response_bytes -= q->bytes;
        free(q->body);
        http_stream_free(q->stream);
        if (q->source.free)
                q->source.free(q->source.userdata);
        free(q);
}

static ssize_t http_queued_read(void *cls, uint64_t pos, char *buf, size_t max) {
        HttpQueued *q = cls;
        if (q->source.read)
                return q->source.read(q->source.userdata, pos, buf, max);
        return http_stream_read(q->stream, pos, buf, max);
}

/* Makes the MHD response for 'resp', taking its body. */
static struct MHD_Response *http_response_to_mhd(Server *s, HttpResponse *resp) {
        struct MHD_Response *m;
        HttpQueued *q;
        uint64_t size;

        q = calloc(1, sizeof(HttpQueued));
        if (!q)
                return NULL;
        q->server = s;

        if (resp->source.read) {
                /* Its owner bounds what it holds, and says how much that is. */
                q->bytes = resp->source.footprint;
                q->source = resp->source;
                resp->source = (HttpBodySource) {};
                m = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK, http_queued_read,
                                                      q, http_queued_free);
        } else if (resp->stream) {
                q->bytes = http_stream_footprint(resp->stream);
                q->stream = TAKE_PTR(resp->stream);
                size = http_stream_size(q->stream);
                m = MHD_create_response_from_callback(
                        size == HTTP_STREAM_SIZE_UNKNOWN ? MHD_SIZE_UNKNOWN : size, HTTP_STREAM_BLOCK,
                        http_queued_read, q, http_queued_free);
        } else {
                q->bytes = resp->size;
                q->body = TAKE_PTR(resp->body);
                m = MHD_create_response_from_buffer_with_free_callback_cls(resp->size, q->body,
                                                                           http_queued_free, q);
        }
        s->response_bytes += q->bytes;
        if (!m)
                http_queued_free(q);
        return m;
}

static enum MHD_Result http_request_queue(HttpRequest *req) {
        _cleanup_(http_response_freep) HttpResponse *resp = NULL;
        struct MHD_Response *m;
        enum MHD_Result ret;
        bool has_body;

        resp = TAKE_PTR(req->response);
        if (!resp)
                return MHD_NO;
        req->status = resp->status;
        has_body = resp->size > 0 || resp->stream || resp->source.read;

        m = http_response_to_mhd(req->server, resp);
        if (!m)
                return MHD_NO;

        if ((has_body &&
             MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE,
                                     resp->content_type ?: "application/json") != MHD_YES) ||
            (resp->allow && MHD_add_response_header(m, MHD_HTTP_HEADER_ALLOW, resp->allow) != MHD_YES) ||
            (resp->cache_control &&
             MHD_add_response_header(m, MHD_HTTP_HEADER_CACHE_CONTROL, resp->cache_control) != MHD_YES) ||
            (resp->retry_after &&
             MHD_add_response_header(m, MHD_HTTP_HEADER_RETRY_AFTER, resp->retry_after) != MHD_YES) ||
            (resp->next_token && MHD_add_response_header(m, "X-Next-Token", resp->next_token) != MHD_YES) ||
            (!isempty(req->server->config.node_id) &&
             MHD_add_response_header(m, HTTP_HEADER_NODE, req->server->config.node_id) != MHD_YES)) {
                MHD_destroy_response(m);
                return MHD_NO;
        }

        ret = MHD_queue_response(req->connection, resp->status, m);
        MHD_destroy_response(m);
        if (ret == MHD_YES)
                req->state = HTTP_REQUEST_ANSWERED;
        return ret;
}

/* Remembers the first field that must be refused, with its name for the answer. */
static void header_refuse(HttpRequestHeaders *h, const char *what, const char *name, const char *reason) {
        char n[4 * HTTP_FIELD_NAME_LOG_MAX + 4];

        if (h->refused_reason)
                return;
        h->refused_reason = reason;
        if (!name) {
                (void) snprintf(h->refused, sizeof(h->refused), "%s", what);
                return;
        }
        http_sanitize_for_log(name, HTTP_FIELD_NAME_LOG_MAX, n, sizeof(n));
        (void) snprintf(h->refused, sizeof(h->refused), "%s \"%s\"", what, n);
}

/* Every name and value is judged by the length libmicrohttpd reports, never by strlen(). */
static enum MHD_Result header_scan_one(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                       const char *value, size_t value_size) {
        HttpRequestHeaders *h = cls;
        const char *reason;

        if (kind == MHD_GET_ARGUMENT_KIND) {
                /* "key=value&": roughly what it took in the request line. */
                h->target_bytes += key_size + value_size + 2;
                /* Query parameters are text after percent-decoding. */
                reason = http_text_check(key, key_size);
                if (reason)
                        header_refuse(h, "query parameter name", NULL, reason);
                else if ((reason = http_text_check(value, value_size)))
                        header_refuse(h, "query parameter", key, reason);
                if (key && streq(key, "language") && !h->language) {
                        h->language = strempty(value);
                        h->language_size = value ? value_size : 0;
                }
                return MHD_YES;
        }

        h->n++;
        h->bytes += key_size + value_size;
        /* Header values need not be UTF-8 (obs-text), but none of them may hide bytes behind a NUL. */
        if (key && memchr(key, 0, key_size))
                header_refuse(h, "header field name", NULL, "contains a NUL byte");
        else if (value && memchr(value, 0, value_size))
                header_refuse(h, "header field", key, "contains a NUL byte");
        if (!http_token_is_valid(key) || (value && !http_field_value_is_valid(value)))
                h->n_invalid++;
        if (!key)
                return MHD_YES;
        if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0) {
                h->n_authorization++;
                h->authorization = value;
                h->authorization_size = value_size;
        } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
                if (h->n_content_length++ == 0)
                        h->content_length = value;
        } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
                if (h->n_transfer_encoding++ == 0)
                        h->transfer_encoding = value;
        } else if (strcasecmp(key, "E2b-Sandbox-Id") == 0) {
                h->n_e2b_sandbox_id++;
                h->e2b_sandbox_id = value;
                h->e2b_sandbox_id_size = value_size;
        } else if (strcasecmp(key, "E2b-Sandbox-Port") == 0) {
                h->n_e2b_sandbox_port++;
                h->e2b_sandbox_port = value;
        } else if (strcasecmp(key, "X-Access-Token") == 0) {
                h->n_access_token++;
                h->access_token = value;
                h->access_token_size = value_size;
        } else if (strcasecmp(key, "E2B-Traffic-Access-Token") == 0) {
                h->n_traffic_token++;
                h->traffic_token = value;
                h->traffic_token_size = value_size;
        } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
                h->n_host++;
                h->host = value;
                h->host_size = value_size;
        } else if (strcasecmp(key, "X-Api-Key") == 0) {
                h->n_api_key++;
                h->api_key = value;
                h->api_key_size = value_size;
        } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE) == 0) {
                if (!h->content_type)
                        h->content_type = value;
        } else if (strcasecmp(key, "traceparent") == 0) {
                if (h->n_traceparent++ == 0)
                        h->traceparent = value;
        } else if (strcasecmp(key, "X-User-ID") == 0) {
                if (!h->user_id)
                        h->user_id = value;
        } else if (strcasecmp(key, "X-User-Type") == 0) {
                if (!h->user_type)
                        h->user_type = value;
        }
        return MHD_YES;
}

/* What the sizes libmicrohttpd reports cannot show: a NUL in the request line or in a header line,
 * seen in its copy of the header section (http-header-check.c). */
static void header_check_section(HttpRequest *req, struct MHD_Connection *connection, const char *method,
                                 const char *url, const char *version, HttpRequestHeaders *h) {
        Server *s = req->server;
        HttpHeaderCheck c;

        http_header_check_connection(&c, connection, method, url, version, req->raw_target);
        if (c.folded)
                h->n_invalid++; /* framing: another parser would read the field otherwise */
        else if (c.reason)
                header_refuse(h, c.what, c.name, c.reason);
        else if (c.unknown && http_header_check_supported() &&
                 ratelimit_below(&s->warning_ratelimit, server_now(s)))
                log_warning("Header section of a request not laid out as libmicrohttpd %s lays it out, "
                            "judged by the reported sizes only.", HTTP_HEADER_CHECK_MHD_VERSION);
}

/* Sends a response prepared while the body was arriving, which MHD cannot queue any more. */
static void http_request_answer_in_body(HttpRequest *req) {
        req->state = HTTP_REQUEST_ANSWERED;
        req->status = req->response->status;
        req->close_reason = "answered before the end of the body";
        http_request_release_body(req);
        if (http_connection_send_final(req->connection, req->response) < 0)
                req->status = 0; /* the access log shows that nothing was sent */
        req->response = http_response_free(req->response);
}

enum MHD_Result http_router_access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                           const char *method, const char *version,
                                           const char *upload_data, size_t *upload_data_size,
                                           void **con_cls) {
        HttpDaemon *d = cls;
        HttpRequest *req = *con_cls;
        int r;

        assert(d);

        if (!req || !req->begun) {
                HttpRequestHeaders h = {};

                /* Read from a connection we cut off: never handled, its answer could not be sent. */
                if (http_connection_closed(http_connection_get(connection)))
                        return MHD_NO;

                /* First call: the headers are in, no body byte has been read yet. The request
                 * exists already if http_router_uri_log() saw its target. */
                r = req ? http_request_set_line(req, method, url)
                        : http_request_new(d->server, d, connection, method, url, &req);
                if (r < 0) {
                        log_warning_errno(r, "Failed to allocate request: %m");
                        return MHD_NO;
                }
                *con_cls = req;
                req->begun = true;

                h.target_bytes = strlen(strempty(url));
                (void) MHD_get_connection_values_n(connection, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND,
                                                   header_scan_one, &h);
                e2b_route_by_host(d->server, &h);
                /* Without the target as received (no memory in the URI log callback) a NUL in it
                 * could not be seen: no answer but 500. */
                r = req->raw_target ? 0 : -ENOMEM;
                if (r >= 0) {
                        header_check_section(req, connection, method, url, version, &h);
                        r = http_request_begin(req, &h);
                }
                if (r < 0)
                        http_request_fail(req, r);
                if (req->response) {
                        /* An early answer makes MHD skip the body (and "100 Continue"), and close the
                         * connection after the answer. */
                        http_connection_enter(http_connection_get(connection), HTTP_CONNECTION_BUSY, NULL);
                        return http_request_queue(req);
                }
                http_connection_enter(http_connection_get(connection), HTTP_CONNECTION_BODY, req);
                return MHD_YES;
        }

        if (*upload_data_size > 0) {
                size_t n = *upload_data_size;

                *upload_data_size = 0;
                if (req->state != HTTP_REQUEST_RECEIVING)
                        return MHD_YES;

                http_connection_body_received(http_connection_get(connection), n);
                r = http_request_append_body(req, upload_data, n);
                if (r == -EFBIG)
                        r = http_request_reply_too_large(req);
                else if (r == -ENOBUFS)
                        r = http_request_reply_busy(req);
                if (r < 0)
                        return MHD_NO;
                if (req->response) {
                        /* A chunked body over the limit, or no room left for it: answer on the socket
                         * and have MHD close the connection instead of reading on. */
                        http_connection_enter(http_connection_get(connection), HTTP_CONNECTION_BUSY, NULL);
                        http_request_answer_in_body(req);
                        return MHD_NO;
                }
                return MHD_YES;
        }

        if (req->state == HTTP_REQUEST_RECEIVING) {
                http_connection_enter(http_connection_get(connection), HTTP_CONNECTION_BUSY, NULL);
                r = http_request_dispatch(req);
                if (r < 0)
                        http_request_fail(req, r);
        }
        /* Otherwise we are called again after a resume: the reply handler prepared the answer. */

        if (req->client_gone)
                return MHD_NO; /* nobody to answer: MHD closes the connection */
        if (req->response)
                return http_request_queue(req);
        if (req->slot) {
                http_request_suspend(req);
                return MHD_YES;
        }
        return MHD_NO;
}

static const char *termination_to_string(enum MHD_RequestTerminationCode toe) {
        switch (toe) {
        case MHD_REQUEST_TERMINATED_COMPLETED_OK:
                return NULL;
        case MHD_REQUEST_TERMINATED_WITH_ERROR:
                return "aborted";
        case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
                return "idle timeout";
        case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
                return "shutdown";
        case MHD_REQUEST_TERMINATED_READ_ERROR:
                return "read error";
        case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
                return "client closed the connection";
        default:
                return "closed";
        }
}

static void http_request_log_access(HttpRequest *req, enum MHD_RequestTerminationCode toe) {
        char method[4 * HTTP_METHOD_LOG_MAX + 4], path[4 * HTTP_PATH_LOG_MAX + 4];
        char f_method[sizeof(method) + 32], f_path[sizeof(path) + 32], f_status[48], f_duration[64],
                f_session[64], status[16];
        const char *fields[6 + HTTP_LOG_FIELDS_MAX] = {}, *why;
        uint64_t duration;
        size_t n = 0;

        http_request_log_ids(req, method, path);
        duration = server_now(req->server) - req->start_usec;
        why = req->close_reason ?: termination_to_string(toe);

        (void) snprintf(f_method, sizeof(f_method), "SCOPEBOX_HTTP_METHOD=%s", method);
        (void) snprintf(f_path, sizeof(f_path), "SCOPEBOX_HTTP_PATH=%s", path);
        (void) snprintf(f_status, sizeof(f_status), "SCOPEBOX_HTTP_STATUS=%u", req->status);
        (void) snprintf(f_duration, sizeof(f_duration), "SCOPEBOX_DURATION_USEC=%" PRIu64, duration);
        fields[n++] = f_method;
        fields[n++] = f_path;
        fields[n++] = f_status;
        fields[n++] = f_duration;
        if (!isempty(req->session_id)) {
                (void) snprintf(f_session, sizeof(f_session), "SCOPEBOX_SESSION_ID=%s", req->session_id);
                fields[n++] = f_session;
        }
        for (unsigned i = 0; i < req->n_log_fields; i++)
                fields[n++] = req->log_fields[i];
        fields[n] = NULL;

        if (req->status > 0)
                (void) snprintf(status, sizeof(status), "%u", req->status);
        else
                strcpy(status, "-"); /* closed before we answered */

        log_struct(LOG_INFO, 0, fields, "%s \"%s\" %s in %" PRIu64 ".%03" PRIu64 " ms%s%s%s", method, path,
                   status, duration / USEC_PER_MSEC, duration % USEC_PER_MSEC,
                   why ? " (" : "", strempty(why), why ? ")" : "");
}

/* MHD is done with a request whose call is still out: its client went away. The request lets go of
 * the connection (about to be freed) and stays until the answer comes, so that what it counts
 * (a run its API counts against a limit) counts until the manager has really ended the call, which the
 * hang-up pipe's closing asks it to do. */
static void http_request_orphan(HttpRequest *req) {
        req->client_source = sd_event_source_disable_unref(req->client_source);
        req->hangup_fd = safe_close(req->hangup_fd);
        if (req->suspended) {
                req->suspended = false;
                req->server->n_suspended--;
        }
        req->connection = NULL;
        req->daemon = NULL;
        req->response = http_response_free(req->response);
        req->client_gone = req->orphaned = true;
        req->server->n_orphaned++;
        server_status_changed(req->server);
}

void http_router_request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                                   enum MHD_RequestTerminationCode toe) {
        HttpRequest *req = *con_cls;

        /* A kept-alive connection waits for the next request header from now on. */
        http_connection_enter(http_connection_get(connection),
                              toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? HTTP_CONNECTION_HEADERS
                                                                         : HTTP_CONNECTION_CLOSING, NULL);
        if (!req)
                return;

        http_request_log_access(req, toe);
        req->server->n_completed++;
        req->server->n_responses[req->status >= 100 && req->status < 600 ? req->status / 100 : 0]++;
        *con_cls = NULL;
        if (req->slot)
                http_request_orphan(req);
        else
                http_request_free(req);
}

void http_router_abort_pending(Server *s, HttpDaemon *d) {
        assert(s);

        LIST_FOREACH(requests, req, s->requests) {
                if (req->daemon != d || !req->slot || req->abandoned)
                        continue;

                http_request_drop_call(req);
                req->reply_handler = NULL;
                (void) http_request_reply_failure(req, HTTP_SERVICE_UNAVAILABLE, "service is shutting down");
                if (!req->response)
                        log_oom();
                http_request_resume(req);
        }
}

void http_router_abandon_calls(Server *s, PeerWatch *w) {
        assert(s);
        assert(w);

        LIST_FOREACH(requests, req, s->requests) {
                int r;

                if (req->peer != w || !req->slot || req->client_gone || req->abandoned)
                        continue;

                /* The call stays out (its answer goes to gone_handler); it no longer counts as one
                 * that a client waits for. */
                peer_watch_call_end(TAKE_PTR(req->peer));
                req->abandoned = true;
                req->reply_handler = NULL;
                req->hangup_fd = safe_close(req->hangup_fd);

                req->response = http_response_free(req->response);
                r = http_request_reply_unavailable(req, w);
                if (r < 0 || !req->response) {
                        /* Out of memory: the connection is closed instead (a client sees that too). */
                        req->response = http_response_free(req->response);
                        req->client_gone = true;
                        req->close_reason = "daemon not responding";
                }
                http_request_resume(req);
        }
}
