/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* HTTP responses independent of libmicrohttpd (JSON bodies, FastAPI error shapes), and the one mapping of
 * bus errors to HTTP answers. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "bus-util.h"
#include "http-router.h"
#include "http-stream.h"
#include "http-util.h"
#include "parse-util.h"
#include "string-util.h"

#define JSON_OUTPUT_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

HttpResponse *http_response_free(HttpResponse *r) {
        if (!r)
                return NULL;
        free(r->body);
        free(r->next_token);
        http_stream_free(r->stream);
        if (r->source.free)
                r->source.free(r->source.userdata);
        free(r);
        return NULL;
}

int http_response_new_source(unsigned status, const char *content_type, const HttpBodySource *source,
                             HttpResponse **ret) {
        HttpResponse *r;

        assert(source && source->read);
        assert(ret);

        r = calloc(1, sizeof(HttpResponse));
        if (!r) {
                if (source->free)
                        source->free(source->userdata);
                return -ENOMEM;
        }
        r->status = status;
        r->content_type = content_type;
        r->source = *source;
        *ret = r;
        return 0;
}

int http_response_new_stream(unsigned status, HttpStream *stream, HttpResponse **ret) {
        HttpResponse *r;

        assert(stream);
        assert(ret);

        r = calloc(1, sizeof(HttpResponse));
        if (!r) {
                http_stream_free(stream);
                return -ENOMEM;
        }
        r->status = status;
        r->stream = stream;
        *ret = r;
        return 0;
}

int http_response_flatten(HttpResponse *r) {
        char *body;
        size_t n;
        int k;

        assert(r);

        if (!r->stream)
                return 0;
        k = http_stream_read_all(r->stream, HTTP_STREAM_BLOCK, &body, &n);
        if (k < 0)
                return k;
        free(r->body);
        r->body = body;
        r->size = n;
        r->stream = http_stream_free(r->stream);
        return 0;
}

int http_response_new_take(unsigned status, char *body, size_t size, HttpResponse **ret) {
        HttpResponse *r;

        assert(body);
        assert(ret);

        r = malloc(sizeof(HttpResponse));
        if (!r) {
                free(body);
                return -ENOMEM;
        }
        *r = (HttpResponse) {
                .status = status,
                .body = body,
                .size = size,
        };
        *ret = r;
        return 0;
}

int http_response_new_json(unsigned status, json_object *o, HttpResponse **ret) {
        const char *text;
        size_t len = 0;
        char *copy;

        assert(o);
        assert(ret);

        text = json_object_to_json_string_length(o, JSON_OUTPUT_FLAGS, &len);
        if (!text)
                return -ENOMEM;
        copy = strndup(text, len);
        if (!copy)
                return -ENOMEM;
        return http_response_new_take(status, copy, len, ret);
}

/* {"<key>":"<value>"} */
static int http_response_new_member(unsigned status, const char *key, const char *value,
                                    HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        _cleanup_free_ char *fixed = NULL;
        size_t n = strlen(value);
        int r;

        if (!utf8_is_valid_n(value, n)) {
                fixed = utf8_sanitize(value, n, &n);
                if (!fixed)
                        return -ENOMEM;
                value = fixed;
        }

        if ((r = json_writer_append_str(&w, "{")) < 0 ||
            (r = json_writer_append_string(&w, key, strlen(key))) < 0 ||
            (r = json_writer_append_str(&w, ":")) < 0 ||
            (r = json_writer_append_string(&w, value, n)) < 0 ||
            (r = json_writer_append_str(&w, "}")) < 0)
                return r;

        return http_response_new_writer(status, &w, ret);
}

int http_response_new_writer(unsigned status, JsonWriter *w, HttpResponse **ret) {
        size_t n;
        char *body;

        body = json_writer_steal(w, &n);
        if (!body)
                return -ENOMEM;
        return http_response_new_take(status, body, n, ret);
}

int http_response_new_detail(unsigned status, const char *detail, HttpResponse **ret) {
        return http_response_new_member(status, "detail", detail, ret);
}

int http_response_new_error(unsigned status, const char *error, HttpResponse **ret) {
        return http_response_new_member(status, "error", error, ret);
}

/* {"detail":[{"type":T,"loc":["body"(,F|,0)],"msg":M}]}: loc_field NULL → ["body"], "" → ["body",0] */
static int http_response_new_pydantic(const char *type, const char *loc_field, const char *msg,
                                      HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        assert(type);
        assert(msg);

        if ((r = json_writer_append_str(&w, "{\"detail\":[{\"type\":")) < 0 ||
            (r = json_writer_append_string(&w, type, strlen(type))) < 0 ||
            (r = json_writer_append_str(&w, ",\"loc\":[\"body\"")) < 0)
                return r;
        if (loc_field) {
                r = isempty(loc_field) ? json_writer_append_str(&w, ",0")
                                       : json_writer_append_str(&w, ",");
                if (r < 0)
                        return r;
                if (!isempty(loc_field)) {
                        r = json_writer_append_string(&w, loc_field, strlen(loc_field));
                        if (r < 0)
                                return r;
                }
        }
        if ((r = json_writer_append_str(&w, "],\"msg\":")) < 0 ||
            (r = json_writer_append_string(&w, msg, strlen(msg))) < 0 ||
            (r = json_writer_append_str(&w, "}]}")) < 0)
                return r;

        return http_response_new_writer(HTTP_UNPROCESSABLE_ENTITY, &w, ret);
}

int http_response_new_validation(const JsonDispatchError *e, HttpResponse **ret) {
        assert(e);
        /* A NULL field means the body as a whole is wrong; never produce ["body",0] for that. */
        return http_response_new_pydantic(e->type ?: "value_error", isempty(e->field) ? NULL : e->field,
                                          e->msg ?: "Invalid value", ret);
}

int http_response_new_json_invalid(HttpResponse **ret) {
        return http_response_new_pydantic("json_invalid", "", "JSON decode error", ret);
}

int http_response_new_body_missing(HttpResponse **ret) {
        return http_response_new_pydantic("missing", NULL, "Field required", ret);
}

typedef struct BusErrorMapping {
        const char *name;
        unsigned status;
        const char *fallback;    /* when the error carries no message */
        bool fixed;              /* always send 'fallback', never the bus message */
        const char *retry_after; /* a 429's or 503's Retry-After: when a retry may succeed */
} BusErrorMapping;

/* Every error name a decision depends on, mapped once (docs/api.md, docs/dbus-api.md). */
static const BusErrorMapping bus_error_mappings[] = {
        { BUS_ERROR_NO_SUCH_SESSION, HTTP_NOT_FOUND, HTTP_DETAIL_NO_SUCH_SESSION, true },
        /* A queue's timeout, or a limit of sessions: a retry may find room. */
        { BUS_ERROR_LIMIT_EXCEEDED, HTTP_TOO_MANY_REQUESTS, "too many requests", false, "1" },
        { BUS_ERROR_BUSY, HTTP_TOO_MANY_REQUESTS, BUS_MESSAGE_SESSION_BUSY, false, "1" },
        /* POST /exec/cancel of a session whose exec is over (or never began). */
        { BUS_ERROR_NOT_RUNNING, HTTP_CONFLICT, "no exec is running", true },
        /* A paused session (the E2B API's pause) takes no call until it is resumed. */
        { BUS_ERROR_PAUSED, HTTP_CONFLICT, BUS_MESSAGE_SESSION_PAUSED, true },
        { SD_BUS_ERROR_INVALID_ARGS, HTTP_BAD_REQUEST, "invalid argument", false },
        { BUS_ERROR_INVALID_PATH, HTTP_BAD_REQUEST, "invalid path", false },
        { BUS_ERROR_TOO_LARGE, HTTP_PAYLOAD_TOO_LARGE, "payload too large", false },
        { BUS_ERROR_NOT_FOUND, HTTP_NOT_FOUND, "not found", false },
        { BUS_ERROR_STORAGE_FAILED, HTTP_BAD_GATEWAY, "storage operation failed", false },
        /* The storage block is not in effect: the contract's one text, whatever the daemon says. */
        { BUS_ERROR_STORAGE_NOT_CONFIGURED, HTTP_BAD_REQUEST, HTTP_DETAIL_STORAGE_NOT_CONFIGURED, true },
        /* The endpoint policy refuses the block's endpoint: the same block never succeeds, and the
         * message says why (it names only what the client sent). */
        { BUS_ERROR_STORAGE_REFUSED, HTTP_BAD_REQUEST, "storage endpoint refused", false },
        /* The storage agent could not tell whether the endpoint is this host's own, so it did not
         * connect: nothing was done, a retry may succeed. */
        { BUS_ERROR_POLICY_UNAVAILABLE, HTTP_SERVICE_UNAVAILABLE,
          "storage endpoint could not be checked, retry later", false, "5" },
        /* The stored archive is kept; a retry once storage is back succeeds. */
        { BUS_ERROR_RESTORE_FAILED, HTTP_SERVICE_UNAVAILABLE,
          "failed to restore the workspace from its archive", false, "5" },
        /* scopeboxctl drain: the balancer sends new sessions elsewhere; a retry may reach another node. */
        { BUS_ERROR_DRAINING, HTTP_SERVICE_UNAVAILABLE, "node is draining", true, "1" },
        /* The bus refused the call: the gateway has as many calls waiting for their replies as
         * dbus-daemon allows one connection (max_replies_per_connection, 128 on the system bus).
         * Nothing was done; a retry finds room once some are answered. */
        { SD_BUS_ERROR_LIMITS_EXCEEDED, HTTP_SERVICE_UNAVAILABLE, HTTP_ERROR_CALLS_EXCEEDED, true, "1" },
        /* Internal failures: the bus message may name units, paths or peers; keep it in the log. */
        { BUS_ERROR_BACKEND_FAILED, HTTP_INTERNAL_SERVER_ERROR, "sandbox backend failure", true },
        /* Between the session manager and the storage agent only (the manager stages anew, or
         * quarantines the archive): one that reaches us is a bug. */
        { BUS_ERROR_UNKNOWN_TOKEN, HTTP_INTERNAL_SERVER_ERROR, "internal error", true },
        { BUS_ERROR_ARCHIVE_DAMAGED, HTTP_INTERNAL_SERVER_ERROR, "internal error", true },
        /* sd-bus answers both a call timeout and a lost connection with NoReply; one whose recipient
         * went away is told apart by its timing (http_call_recipient_gone()). */
        { SD_BUS_ERROR_NO_REPLY, HTTP_INTERNAL_SERVER_ERROR, "session manager did not answer", true },
        { SD_BUS_ERROR_TIMEOUT, HTTP_INTERNAL_SERVER_ERROR, "session manager did not answer", true },
        { SD_BUS_ERROR_SERVICE_UNKNOWN, HTTP_INTERNAL_SERVER_ERROR, "session manager unavailable", true },
        { SD_BUS_ERROR_NAME_HAS_NO_OWNER, HTTP_INTERNAL_SERVER_ERROR, "session manager unavailable", true },
        { SD_BUS_ERROR_DISCONNECTED, HTTP_INTERNAL_SERVER_ERROR, "session manager unavailable", true },
};

/* The session manager died with the call: a restarted one is back after its RestartSec=, and takes
 * a retry. */
static const BusErrorMapping bus_error_recipient_gone = {
        NULL, HTTP_SERVICE_UNAVAILABLE, HTTP_DETAIL_MANAGER_RESTARTED, true, "1",
};

/* Activation failures (org.freedesktop.DBus.Error.Spawn.*), access denied, unknown methods after a
 * version skew, Cancelled (only ever for a client that is gone), …: all our fault, none of the
 * client's business. */
static const BusErrorMapping bus_error_unknown = {
        NULL, HTTP_INTERNAL_SERVER_ERROR, "internal error", true,
};

bool http_call_recipient_gone(const sd_bus_error *e, const HttpCallEnd *c) {
        /* sd-bus answers a call with NoReply in three cases: its own timeout fired, our connection
         * to the bus broke, or the bus said the recipient disconnected without replying. The
         * timeout never fires before 'timeout_usec' has passed since the call was sent, and
         * 'elapsed_usec' counts from before that; a broken connection is closed by the time its
         * calls are answered. What is left is the recipient's going away. Decided on the error's
         * name and the call's own clock, never on the message, which is the bus daemon's wording. */
        return e && c && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) && c->connected &&
               c->elapsed_usec < c->timeout_usec;
}

static const BusErrorMapping *bus_error_lookup(const sd_bus_error *e, bool recipient_gone) {
        if (recipient_gone)
                return &bus_error_recipient_gone;
        if (e && e->name)
                for (size_t i = 0; i < ELEMENTSOF(bus_error_mappings); i++)
                        if (streq(e->name, bus_error_mappings[i].name))
                                return &bus_error_mappings[i];
        return &bus_error_unknown;
}

void http_bus_error_describe(const sd_bus_error *e, bool recipient_gone, unsigned *ret_status,
                             const char **ret_detail, bool *ret_internal) {
        const BusErrorMapping *m = bus_error_lookup(e, recipient_gone);

        assert(ret_status);
        assert(ret_detail);

        *ret_status = m->status;
        *ret_detail = m->fixed || !e || isempty(e->message) ? m->fallback : e->message;
        if (ret_internal)
                *ret_internal = m->status >= HTTP_INTERNAL_SERVER_ERROR && m->status != HTTP_BAD_GATEWAY;
}

int http_response_new_call_error(const sd_bus_error *e, bool recipient_gone, HttpResponse **ret,
                                 bool *ret_internal) {
        const BusErrorMapping *m = bus_error_lookup(e, recipient_gone);
        const char *detail;
        unsigned status;
        int r;

        assert(ret);

        http_bus_error_describe(e, recipient_gone, &status, &detail, ret_internal);
        r = http_response_new_detail(status, detail, ret);
        if (r >= 0)
                (*ret)->retry_after = m->retry_after;
        return r;
}

int http_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        return http_response_new_call_error(e, false, ret, ret_internal);
}

int http_response_new_recipient_gone(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        return http_response_new_call_error(e, true, ret, ret_internal);
}

/* ---- the answers of a request's failed call (these need the request: http-router.h) ---- */

bool http_request_call_recipient_gone(HttpRequest *req, const sd_bus_error *e, uint64_t timeout_usec) {
        HttpCallEnd c;

        assert(req);

        /* The request began before its call was sent: its age is at least the call's. (A request
         * that made an earlier call first only ever looks older, never younger.) */
        c = (HttpCallEnd) {
                .elapsed_usec = server_now(req->server) - req->start_usec,
                .timeout_usec = timeout_usec,
                .connected = req->server->bus && sd_bus_is_open(req->server->bus) > 0,
        };
        return http_call_recipient_gone(e, &c);
}

int http_request_reply_call_error(HttpRequest *req, const sd_bus_error *e, uint64_t timeout_usec,
                                  HttpBusErrorAnswer answer) {
        assert(req);
        assert(answer);

        if (http_request_call_recipient_gone(req, e, timeout_usec))
                answer = http_response_new_recipient_gone;
        return http_request_reply_bus_error_as(req, e, answer);
}

int http_request_reply_ok_or_call_error(HttpRequest *req, sd_bus_message *reply,
                                        uint64_t timeout_usec) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                return http_request_reply_call_error(req, e, timeout_usec, http_response_new_bus_error);
        return http_request_reply_literal(req, HTTP_OK, "{\"ok\":true}");
}

int json_add_string(json_object *o, const char *key, const char *value) {
        return json_add(o, key, json_object_new_string(value));
}

int json_add_bool(json_object *o, const char *key, bool b) {
        return json_add(o, key, json_object_new_boolean(b));
}

int json_add_uint(json_object *o, const char *key, uint64_t u) {
        return json_add(o, key, json_object_new_uint64(u));
}

int http_storage_json(json_object *storage, const char **ret) {
        const char *text;
        size_t n = 0;

        assert(storage);
        assert(ret);

        text = json_object_to_json_string_length(storage, JSON_OUTPUT_FLAGS, &n);
        if (!text)
                return -ENOMEM;
        if (n > BUS_STORAGE_JSON_MAX)
                return -E2BIG;
        *ret = text;
        return 0;
}

size_t json_member_string_length(json_object *o, const char *name) {
        json_object *v;

        if (!json_object_object_get_ex(o, name, &v) || !json_object_is_type(v, json_type_string))
                return 0;
        return (size_t) json_object_get_string_len(v);
}

int http_parse_content_length(const char *value, uint64_t max, uint64_t *ret) {
        uint64_t v;
        int r;

        assert(ret);

        /* Only "1*DIGIT" (RFC 9110 §8.6). No sign, no spaces, no list of values. */
        if (isempty(value))
                return -EINVAL;
        for (const char *p = value; *p; p++)
                if (*p < '0' || *p > '9')
                        return -EINVAL;
        r = safe_atou64(value, &v);
        if (r == -ERANGE)
                return -EFBIG; /* a well-formed number, only far too large */
        if (r < 0)
                return -EINVAL;
        if (v > max)
                return -EFBIG;
        *ret = v;
        return 0;
}

void http_sanitize_for_log(const char *s, size_t max, char *buf, size_t bufsize) {
        static const char hex[] = "0123456789abcdef";
        size_t o = 0, i;

        assert(buf);
        assert(bufsize >= 4);

        s = strempty(s);
        for (i = 0; s[i] && i < max; i++) {
                unsigned char c = (unsigned char) s[i];

                if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                        if (o + 1 >= bufsize)
                                break;
                        buf[o++] = (char) c;
                } else if (c == '"' || c == '\\') {
                        if (o + 2 >= bufsize)
                                break;
                        buf[o++] = '\\';
                        buf[o++] = (char) c;
                } else {
                        if (o + 4 >= bufsize)
                                break;
                        buf[o++] = '\\';
                        buf[o++] = 'x';
                        buf[o++] = hex[c >> 4];
                        buf[o++] = hex[c & 15];
                }
        }
        if (s[i]) {
                /* Cut: make room for the marker. */
                o = MIN(o, bufsize - 4);
                memcpy(buf + o, "...", 3);
                o += 3;
        }
        buf[o] = 0;
}


bool ratelimit_below(RateLimit *rl, uint64_t now_usec) {
        assert(rl);

        if (rl->begin_usec == 0 || now_usec < rl->begin_usec ||
            now_usec - rl->begin_usec >= rl->interval_usec) {
                rl->begin_usec = now_usec;
                rl->num = 0;
        }
        if (rl->num >= rl->burst)
                return false;
        rl->num++;
        return true;
}
