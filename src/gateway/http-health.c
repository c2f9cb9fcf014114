/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /healthz: whether new sessions can be started, and what a balancer weighs nodes by. Public,
 * so it tells nothing sensitive: counts, never sessions. And the liveness watch of the daemons
 * behind it, which bounds every request's wait for them (http-health.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "bus-client.h"
#include "bus-contract.h"
#include "http-apis.h"
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

/* A ping that only an instance already running answers: none starts one. */
static int peer_watch_new_ping(const PeerWatch *w, sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!w->server->bus)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(w->server->bus, &m, w->name, "/", "org.freedesktop.DBus.Peer",
                                           "Ping");
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(m, false);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

/* Whether the last healthy answer may stand in for a late one. */
static bool server_health_recent(Server *s) {
        uint64_t now;

        return s->health_cache && s->health.usec > 0 && sd_event_now(s->event, CLOCK_MONOTONIC, &now) >= 0 &&
               now < s->health.usec + HEALTH_STALE_MAX_USEC;
}

static int health_reply_healthy(HttpRequest *req) {
        return http_request_reply_json(req, HTTP_OK, req->server->health_cache);
}

/* The storage agent's ping, which this request waited for: had it gone unanswered, the watch would
 * have answered the request (its unavailable handler) before this. */
static int health_on_agent_pong(HttpRequest *req, sd_bus_message *reply) {
        PeerWatch *agent = server_peer_watch(req->server, STORAGE_AGENT_BUS_NAME);

        if (!peer_watch_responding(agent))
                return health_reply_unavailable(req, agent->unavailable);
        return health_reply_healthy(req);
}

/* The manager is healthy: so is the node, unless the storage agent runs and does not answer. Its
 * ping went out with the request; if it is still on its way, the request waits for it. */
static int health_check_agent(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        PeerWatch *agent = server_peer_watch(req->server, STORAGE_AGENT_BUS_NAME);
        uint64_t now = server_now(req->server), until;
        int r;

        if (!peer_watch_responding(agent))
                return health_reply_unavailable(req, agent->unavailable);
        if (!agent->ping_slot)
                return health_reply_healthy(req);

        /* A little past the probe's own deadline: the watch's verdict comes first. */
        until = agent->ping_usec + PEER_PING_TIMEOUT_USEC + 100 * USEC_PER_MSEC;
        r = peer_watch_new_ping(agent, &m);
        if (r >= 0)
                r = http_request_call(req, m, until > now ? until - now : 1, health_on_agent_pong);
        if (r < 0) {
                log_debug_errno(r, "Failed to ping the storage agent, not waiting for it: %m");
                return health_reply_healthy(req);
        }
        return 0;
}

static int health_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        Server *s = req->server;
        const char *reason;
        int r;

        /* The operator wants to know why the probe fails; the client only that it does. */
        if (e)
                http_request_log_bus_error(req, e, true);

        /* Timed out while the manager itself answered pings: what its health answer waits for is
         * systemd. A recent healthy answer stands in; a longer silence is reported. */
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) &&
            server_now(s) >= req->start_usec + HEALTH_CALL_TIMEOUT_USEC &&
            peer_watch_answered_since(server_peer_watch(s, SESSION_MANAGER_BUS_NAME), req->start_usec)) {
                if (server_health_recent(s))
                        return health_check_agent(req);
                return health_reply_unavailable(req, "systemd is not responding");
        }

        r = server_health_update(s, reply, &reason);
        if (r < 0)
                return r;
        if (r == 0)
                return health_reply_unavailable(req, reason);
        return health_check_agent(req);
}

int http_health_get(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        Server *s = req->server;
        PeerWatch *manager = server_peer_watch(s, SESSION_MANAGER_BUS_NAME),
                  *agent = server_peer_watch(s, STORAGE_AGENT_BUS_NAME);
        int r;

        /* A daemon that does not respond is named at once: not even a fresh answer hides that. */
        if (!peer_watch_responding(manager))
                return health_reply_unavailable(req, manager->unavailable);
        if (!peer_watch_responding(agent))
                return health_reply_unavailable(req, agent->unavailable);
        if (server_health_fresh(s))
                return health_reply_healthy(req);

        /* Both asked at once: an answer within PEER_PING_TIMEOUT_USEC, or the name of the one that
         * gave none (the watch answers this request then, through its unavailable handler). */
        server_probe_daemons(s);
        req->unavailable_handler = health_reply_unavailable;

        r = server_health_new_call(s, &m);
        if (r >= 0)
                r = http_request_call(req, m, HEALTH_CALL_TIMEOUT_USEC, health_on_reply);
        if (r < 0) {
                /* Not even sent (bus gone): still an answer about health, not an internal error. */
                log_debug_errno(r, "Failed to call GetHealth(): %m");
                return health_reply_unavailable(req, "session manager unavailable");
        }
        return 0;
}

/* ---- the liveness watch ---- */

/* A NoReply this close to the ping's deadline is sd-bus's own timeout. */
#define PEER_PING_SLACK_USEC (50U * USEC_PER_MSEC)

static const struct {
        const char *name, *label, *unavailable;
} peer_watches[] = {
        { SESSION_MANAGER_BUS_NAME, "session manager", "session manager not responding" },
        { STORAGE_AGENT_BUS_NAME,   "storage agent",   "storage agent not responding"   },
};

PeerWatch *server_peer_watch(Server *s, const char *destination) {
        PeerWatch *w;
        size_t i;

        assert(s);

        for (i = 0; i < ELEMENTSOF(peer_watches); i++)
                if (streq_ptr(destination, peer_watches[i].name))
                        break;
        if (i >= ELEMENTSOF(peer_watches))
                return NULL;
        w = i == 0 ? &s->manager_watch : &s->agent_watch;
        /* Set up on first use: a Server is also made by hand (the unit tests). */
        if (!w->server)
                *w = (PeerWatch) {
                        .server = s,
                        .name = peer_watches[i].name,
                        .label = peer_watches[i].label,
                        .unavailable = peer_watches[i].unavailable,
                };
        return w;
}

bool peer_watch_responding(const PeerWatch *w) {
        return !w || !w->not_responding;
}

bool server_daemons_responding(Server *s) {
        return peer_watch_responding(server_peer_watch(s, SESSION_MANAGER_BUS_NAME)) &&
               peer_watch_responding(server_peer_watch(s, STORAGE_AGENT_BUS_NAME));
}

void server_probe_daemons(Server *s) {
        for (size_t i = 0; i < ELEMENTSOF(peer_watches); i++) {
                PeerWatch *w = server_peer_watch(s, peer_watches[i].name);
                int r = peer_watch_probe(w);

                if (r < 0)
                        log_debug_errno(r, "Failed to ping the %s: %m", w->label);
        }
}

bool peer_watch_answered_since(const PeerWatch *w, uint64_t since) {
        return w && w->answered_usec > 0 && w->answered_usec >= since;
}

static void peer_watch_update(PeerWatch *w);

static void peer_watch_silent(PeerWatch *w) {
        char f_daemon[64];
        unsigned n = w->n_calls;

        if (w->not_responding)
                return;
        w->not_responding = true;
        w->silent_usec = w->ping_usec;
        (void) snprintf(f_daemon, sizeof(f_daemon), "SCOPEBOX_DAEMON=%s", w->name);
        log_struct(LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=daemon-not-responding", f_daemon),
                   "The %s did not answer a ping within %" PRIu64 " ms; answering the %u request%s "
                   "waiting for it, and new ones, with 503 until it does.",
                   w->label, (uint64_t) (PEER_PING_TIMEOUT_USEC / USEC_PER_MSEC), n, n == 1 ? "" : "s");
        http_router_abandon_calls(w->server, w);
        server_status_changed(w->server);
}

/* It answered, or it has no instance any more (which the next call starts afresh). */
static void peer_watch_heard(PeerWatch *w, bool answered, uint64_t now) {
        char f_daemon[64];

        if (answered)
                w->answered_usec = now;
        if (!w->not_responding)
                return;
        w->not_responding = false;
        (void) snprintf(f_daemon, sizeof(f_daemon), "SCOPEBOX_DAEMON=%s", w->name);
        log_struct(LOG_NOTICE, 0, LOG_FIELDS("SCOPEBOX_EVENT=daemon-responding", f_daemon),
                   "The %s %s after %" PRIu64 " ms without an answer; calls go to it again.", w->label,
                   answered ? "answers again" : "is gone", (now - w->silent_usec) / USEC_PER_MSEC);
        server_status_changed(w->server);
}

static int peer_watch_on_pong(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        PeerWatch *w = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint64_t now = server_now(w->server);

        w->ping_slot = sd_bus_slot_unref(w->ping_slot);
        if (!e)
                peer_watch_heard(w, true, now);
        else if (sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER) ||
                 sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN))
                /* No instance: it exited (idle, or killed), or is being started. */
                peer_watch_heard(w, false, now);
        else if (sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) &&
                 now + PEER_PING_SLACK_USEC >= w->ping_usec + PEER_PING_TIMEOUT_USEC)
                /* sd-bus's own timeout: nobody answered. (A NoReply before it is the bus telling us
                 * that the instance went away, which says nothing about the next one.) */
                peer_watch_silent(w);
        else
                log_debug("Ping of the %s failed, no verdict: %s", w->label, strna(e->message));
        peer_watch_update(w);
        return 0;
}

int peer_watch_probe(PeerWatch *w) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!w)
                return -EINVAL;
        if (w->ping_slot)
                return 0;
        r = peer_watch_new_ping(w, &m);
        if (r >= 0)
                r = sd_bus_call_async(w->server->bus, &w->ping_slot, m, peer_watch_on_pong, w,
                                      PEER_PING_TIMEOUT_USEC);
        if (r < 0)
                return r;
        w->ping_usec = server_now(w->server);
        return 0;
}

static int peer_watch_on_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        PeerWatch *w = userdata;
        int r;

        r = peer_watch_probe(w);
        if (r < 0)
                log_debug_errno(r, "Failed to ping the %s: %m", w->label);
        peer_watch_update(w);
        return 0;
}

/* Pings go on while calls to it are out, or while it does not respond (to see it answer again). */
static void peer_watch_update(PeerWatch *w) {
        uint64_t now;
        int r;

        if (w->n_calls == 0 && !w->not_responding) {
                w->timer = sd_event_source_disable_unref(w->timer);
                return;
        }
        if (w->timer) {
                int enabled = SD_EVENT_OFF;

                if (sd_event_source_get_enabled(w->timer, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                        return; /* the next ping is due already */
        }

        r = sd_event_now(w->server->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                goto fail;
        if (!w->timer) {
                r = sd_event_add_time(w->server->event, &w->timer, CLOCK_MONOTONIC,
                                      now + PEER_PING_INTERVAL_USEC, 50 * USEC_PER_MSEC,
                                      peer_watch_on_timer, w);
                if (r < 0)
                        goto fail;
                (void) sd_event_source_set_description(w->timer, "peer-ping");
                return;
        }
        r = sd_event_source_set_time(w->timer, now + PEER_PING_INTERVAL_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(w->timer, SD_EVENT_ONESHOT);
        if (r >= 0)
                return;
fail:
        /* Calls then wait for their own timeouts, as they did before there was a watch. */
        log_warning_errno(r, "Failed to schedule the next ping of the %s: %m", w->label);
}

void peer_watch_call_begin(PeerWatch *w) {
        if (!w)
                return;
        w->n_calls++;
        /* The first call in a while: pinged at once, so that a daemon that stopped while nothing was
         * asked of it is found out within PEER_PING_TIMEOUT_USEC. */
        if (!w->ping_slot && server_now(w->server) >= w->ping_usec + PEER_PING_INTERVAL_USEC) {
                int r = peer_watch_probe(w);
                if (r < 0)
                        log_debug_errno(r, "Failed to ping the %s: %m", w->label);
        }
        peer_watch_update(w);
}

void peer_watch_call_end(PeerWatch *w) {
        if (!w)
                return;
        assert(w->n_calls > 0);
        w->n_calls--;
        /* The last call got its answer, which says more than a ping still on its way would. */
        if (w->n_calls == 0 && !w->not_responding)
                w->ping_slot = sd_bus_slot_unref(w->ping_slot);
        peer_watch_update(w);
}

void peer_watch_done(PeerWatch *w) {
        if (!w)
                return;
        w->ping_slot = sd_bus_slot_unref(w->ping_slot);
        w->timer = sd_event_source_disable_unref(w->timer);
}
