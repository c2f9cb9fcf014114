/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /healthz: whether new sessions can be started, and what a balancer weighs nodes by. Public,
 * so it tells nothing sensitive: counts, never sessions. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "bus-client.h"
#include "http-health.h"
#include "http-router.h"
#include "log.h"
#include "string-util.h"

/* The reason the manager gives is meant to be short; never echo more than this. */
#define HEALTH_REASON_MAX 200U

typedef struct HealthInfo {
        const char *systemd_version;
        const char *runner;
        const char *python;
        const char *reason;
        uint32_t sessions;
        uint32_t counted_sessions;
        int64_t max_sessions;
        bool draining;
} HealthInfo;

static const BusDictField health_info_fields[] = {
        { "systemd_version",  's', offsetof(HealthInfo, systemd_version)  },
        { "runner",           's', offsetof(HealthInfo, runner)           },
        { "python",           's', offsetof(HealthInfo, python)           },
        { "reason",           's', offsetof(HealthInfo, reason)           },
        { "sessions",         'u', offsetof(HealthInfo, sessions)         },
        { "counted_sessions", 'u', offsetof(HealthInfo, counted_sessions) },
        { "max_sessions",     'x', offsetof(HealthInfo, max_sessions)     },
        { "draining",         'b', offsetof(HealthInfo, draining)         },
        {}
};

bool server_health_fresh(Server *s) {
        uint64_t now;

        return s->health_cache && s->health.usec > 0 && sd_event_now(s->event, CLOCK_MONOTONIC, &now) >= 0 &&
               now < s->health.usec + HEALTH_CACHE_USEC;
}

int server_health_new_call(Server *s, sd_bus_message **ret) {
        return session_manager_new_call(s->bus, "GetHealth", ret);
}

void health_agent_line(const HealthSnapshot *h, char buf[static 16]) {
        uint64_t percent = 100;

        if (h->draining) {
                strcpy(buf, "drain\n");
                return;
        }
        if (h->capacity > 0)
                percent = h->sessions >= h->capacity
                                  ? 0
                                  : 100U * (uint64_t) (h->capacity - h->sessions) / h->capacity;
        /* "ready" ends a drain HAProxy was told of before; "up" alone would not. */
        (void) snprintf(buf, 16, "ready up %u%%\n", (unsigned) percent);
}

/* The healthy body: upstream reports its Docker version and runner image, these are our
 * equivalents; then this node's tag and load. */
static int health_compose(Server *s, const HealthInfo *info, const HealthSnapshot *h, json_object **ret) {
        _cleanup_json_ json_object *o = NULL;

        o = json_object_new_object();
        if (!o ||
            json_add_bool(o, "ok", true) < 0 ||
            json_add_bool(o, "image_ready", true) < 0 ||
            json_add_string(o, "backend", "systemd") < 0 ||
            json_add_string(o, "systemd", strempty(info->systemd_version)) < 0 ||
            json_add_string(o, "runner", "scopebox-runner " PROJECT_VERSION) < 0 ||
            json_add_string(o, "node", strempty(s->config.node_id)) < 0 ||
            json_add_uint(o, "sessions", h->sessions) < 0 ||
            json_add_uint(o, "capacity", h->capacity) < 0 ||
            json_add_bool(o, "draining", h->draining) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

int server_health_update(Server *s, sd_bus_message *reply, const char **ret_reason) {
        const sd_bus_error *e;
        json_object *o = NULL;
        HealthSnapshot h = {};
        HealthInfo info = {};
        int ok, r;

        e = sd_bus_message_get_error(reply);
        if (e) {
                *ret_reason = "session manager unavailable";
                return 0;
        }

        r = sd_bus_message_read_basic(reply, 'b', &ok);
        if (r < 0)
                return r;
        r = bus_message_read_dict(reply, health_info_fields, &info);
        if (r < 0)
                return r;
        if (!ok) {
                *ret_reason = isempty(info.reason) ? "sandbox backend not ready" : info.reason;
                return 0;
        }

        h = (HealthSnapshot) {
                .sessions = info.counted_sessions,
                .capacity =
                        info.max_sessions > 0 ? (uint32_t) MIN(info.max_sessions, (int64_t) UINT32_MAX) : 0,
                .draining = info.draining,
        };
        r = health_compose(s, &info, &h, &o);
        if (r < 0)
                return r;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &h.usec);
        json_object_put(s->health_cache);
        s->health_cache = o;
        s->health = h;
        *ret_reason = NULL;
        return 1;
}

/* 503 {"ok":false,"image_ready":false,"error":"<reason>"} */
static int health_reply_unavailable(HttpRequest *req, const char *reason) {
        _cleanup_json_ json_object *o = NULL;
        _cleanup_free_ char *cut = NULL;
        size_t n = strlen(reason);

        if (n > HEALTH_REASON_MAX) {
                /* Cutting may split a character: sanitizing turns the stub into U+FFFD. */
                cut = utf8_sanitize(reason, HEALTH_REASON_MAX, NULL);
                if (!cut)
                        return -ENOMEM;
                reason = cut;
        }

        o = json_object_new_object();
        if (!o ||
            json_add_bool(o, "ok", false) < 0 ||
            json_add_bool(o, "image_ready", false) < 0 ||
            json_add_string(o, "error", reason) < 0)
                return -ENOMEM;
        return http_request_reply_json(req, HTTP_SERVICE_UNAVAILABLE, o);
}

static int health_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *reason;
        int r;

        /* The operator wants to know why the probe fails; the client only that it does. */
        if (e)
                http_request_log_bus_error(req, e, true);

        r = server_health_update(req->server, reply, &reason);
        if (r < 0)
                return r;
        if (r == 0)
                return health_reply_unavailable(req, reason);
        return http_request_reply_json(req, HTTP_OK, req->server->health_cache);
}

int http_health_get(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        Server *s = req->server;
        int r;

        if (server_health_fresh(s))
                return http_request_reply_json(req, HTTP_OK, s->health_cache);

        r = server_health_new_call(s, &m);
        if (r >= 0)
                r = http_request_call(req, m, BUS_TIMEOUT_HEALTH_USEC, health_on_reply);
        if (r < 0) {
                /* Not even sent (bus gone): still an answer about health, not an internal error. */
                log_debug_errno(r, "Failed to call GetHealth(): %m");
                return health_reply_unavailable(req, "session manager unavailable");
        }
        return 0;
}
