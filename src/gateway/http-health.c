/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /healthz: whether new sessions can be started. Public, so it tells nothing sensitive. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "bus-client.h"
#include "http-router.h"
#include "log.h"
#include "string-util.h"

/* The reason the manager gives is meant to be short; never echo more than this. */
#define HEALTH_REASON_MAX 200U

/* How long a healthy answer is reused. Load balancers and wrk alike probe far more often than
 * health changes; each fresh answer costs two bus round trips (the manager asks systemd). An
 * unhealthy answer is never reused: a failure shows at once, a recovery within this. */
#define HEALTH_CACHE_USEC (1 * USEC_PER_SEC)

typedef struct HealthInfo {
        const char *systemd_version;
        const char *runner;
        const char *python;
        const char *reason;
        uint32_t sessions;
} HealthInfo;

static const BusDictField health_info_fields[] = {
        { "systemd_version", 's', offsetof(HealthInfo, systemd_version) },
        { "runner",          's', offsetof(HealthInfo, runner)          },
        { "python",          's', offsetof(HealthInfo, python)          },
        { "reason",          's', offsetof(HealthInfo, reason)          },
        { "sessions",        'u', offsetof(HealthInfo, sessions)        },
        {}
};

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
        _cleanup_json_ json_object *o = NULL;
        const sd_bus_error *e;
        HealthInfo info = {};
        int ok, r;

        e = sd_bus_message_get_error(reply);
        if (e) {
                /* The operator wants to know why the probe fails; the client only that it does. */
                http_request_log_bus_error(req, e, true);
                return health_reply_unavailable(req, "session manager unavailable");
        }

        r = sd_bus_message_read_basic(reply, 'b', &ok);
        if (r < 0)
                return r;
        r = bus_message_read_dict(reply, health_info_fields, &info);
        if (r < 0)
                return r;

        if (!ok)
                return health_reply_unavailable(req, isempty(info.reason) ? "sandbox backend not ready"
                                                                          : info.reason);

        /* Upstream reports its Docker version and runner image; these are our equivalents. */
        o = json_object_new_object();
        if (!o ||
            json_add_bool(o, "ok", true) < 0 ||
            json_add_bool(o, "image_ready", true) < 0 ||
            json_add_string(o, "backend", "systemd") < 0 ||
            json_add_string(o, "systemd", strempty(info.systemd_version)) < 0 ||
            json_add_string(o, "runner", "scopebox-runner " PROJECT_VERSION) < 0)
                return -ENOMEM;
        json_object_put(req->server->health_cache);
        req->server->health_cache = json_object_get(o);
        (void) sd_event_now(req->server->event, CLOCK_MONOTONIC, &req->server->health_cache_usec);
        return http_request_reply_json(req, HTTP_OK, o);
}

int http_health_get(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        Server *s = req->server;
        uint64_t now;
        int r;

        if (s->health_cache && sd_event_now(s->event, CLOCK_MONOTONIC, &now) >= 0 &&
            now < s->health_cache_usec + HEALTH_CACHE_USEC)
                return http_request_reply_json(req, HTTP_OK, s->health_cache);

        r = session_manager_new_call(req->server->bus, "GetHealth", &m);
        if (r >= 0)
                r = http_request_call(req, m, BUS_TIMEOUT_HEALTH_USEC, health_on_reply);
        if (r < 0) {
                /* Not even sent (bus gone): still an answer about health, not an internal error. */
                log_debug_errno(r, "Failed to call GetHealth(): %m");
                return health_reply_unavailable(req, "session manager unavailable");
        }
        return 0;
}
