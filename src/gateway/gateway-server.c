/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The gateway's server: sd-event loop, system bus, one sd-event-driven MHD daemon per inherited socket. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include <systemd/sd-daemon.h>
#include <microhttpd.h>

#include "agent-check.h"
#include "bus-util.h"
#include "gateway-auth.h"
#include "e2b-token.h"
#include "e2b-process.h"
#include "gateway-server.h"
#include "http-connection.h"
#include "http-header-check.h"
#include "http-router.h"
#include "io-util.h"
#include "log.h"
#include "time-util.h"

#define MHD_LOG_LINE_MAX 1024U

const uint64_t loop_stall_bounds_usec[LOOP_STALL_BUCKETS] = {
        100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000, 10000000,
};

void loop_stats_add(LoopStats *l, uint64_t usec) {
        assert(l);

        l->max_usec = MAX(l->max_usec, usec);
        l->sum_usec += usec;
        l->count++;
        for (size_t i = 0; i < LOOP_STALL_BUCKETS; i++)
                if (usec <= loop_stall_bounds_usec[i]) {
                        l->buckets[i]++;
                        break;
                }
}

uint64_t server_now(Server *s) {
        /* Not sd_event_now(): that is the start of the loop iteration, too coarse for durations. */
        return now_usec(CLOCK_MONOTONIC);
}

/* MHD's diagnostics are mostly about what clients did (bad requests, resets, limits); they must not
 * reach LOG_ERR or flood the journal at a client's will. */
_printf_(2, 0)
static void http_daemon_log(void *cls, const char *format, va_list ap) {
        char buf[MHD_LOG_LINE_MAX];
        size_t l;

        (void) vsnprintf(buf, sizeof(buf), format, ap);
        l = strlen(buf);
        while (l > 0 && (buf[l - 1] == '\n' || buf[l - 1] == '\r'))
                buf[--l] = 0;
        /* Some messages quote what the client sent. */
        for (size_t i = 0; i < l; i++)
                if ((unsigned char) buf[i] < 0x20 || buf[i] == 0x7f)
                        buf[i] = ' ';
        log_debug("libmicrohttpd: %s", buf);
}

static int http_daemon_arm_timer(HttpDaemon *d) {
        MHD_UNSIGNED_LONG_LONG timeout_ms = 0;
        uint64_t now, until;
        int r;

        if (MHD_get_timeout(d->mhd, &timeout_ms) != MHD_YES)
                /* No connection with a deadline and nothing pending. */
                return sd_event_source_set_enabled(d->timer_event_source, SD_EVENT_OFF);

        r = sd_event_now(d->server->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return r;
        /* MHD speaks relative milliseconds, sd-event absolute microseconds. */
        if (timeout_ms >= (UINT64_MAX - now) / USEC_PER_MSEC)
                until = UINT64_MAX - 1;
        else
                until = now + (uint64_t) timeout_ms * USEC_PER_MSEC;

        r = sd_event_source_set_time(d->timer_event_source, until);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(d->timer_event_source, SD_EVENT_ONESHOT);
}

static int http_daemon_process(HttpDaemon *d) {
        int r;

        if (MHD_run(d->mhd) != MHD_YES)
                /* Only happens when the daemon was started in another mode: a bug, but keep going. */
                log_debug("MHD_run() failed on socket \"%s\".", d->name);

        r = http_daemon_arm_timer(d);
        if (r < 0) {
                /* Returning the error would only disable this source and leave connections hanging:
                 * better exit and let socket activation start over. */
                log_error_errno(r, "Failed to arm HTTP timer, exiting: %m");
                return sd_event_exit(d->server->event, r);
        }
        return 0;
}

static int http_daemon_on_io(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        return http_daemon_process(userdata);
}

static int http_daemon_on_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        return http_daemon_process(userdata);
}

void http_daemon_kick(HttpDaemon *d) {
        uint64_t now;
        int r;

        assert(d);

        if (!d->timer_event_source) /* shutting down: the caller runs MHD itself */
                return;

        /* A resumed connection is handled by the next MHD_run(); MHD's ITC also wakes its epoll fd,
         * but the documentation asks for MHD_run() + MHD_get_timeout() after every resume. */
        r = sd_event_now(d->server->event, CLOCK_MONOTONIC, &now);
        if (r >= 0)
                r = sd_event_source_set_time(d->timer_event_source, now);
        if (r >= 0)
                r = sd_event_source_set_enabled(d->timer_event_source, SD_EVENT_ONESHOT);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule HTTP processing, relying on MHD's wakeup: %m");
}

static HttpDaemon *http_daemon_free(HttpDaemon *d) {
        if (!d)
                return NULL;

        d->io_event_source = sd_event_source_disable_unref(d->io_event_source);
        d->timer_event_source = sd_event_source_disable_unref(d->timer_event_source);

        if (d->mhd) {
                MHD_socket mhd_fd;

                /* Stop accepting first: connections still in the backlog belong to the next instance
                 * socket activation starts, not to this one on its way out. Taking MHD's copy of the
                 * listening socket back also keeps MHD_stop_daemon() away from it. */
                mhd_fd = MHD_quiesce_daemon(d->mhd);

                /* MHD_stop_daemon() must not meet suspended connections: answer and resume them,
                 * and let MHD_run() move them back (it may even deliver the answers). */
                http_router_abort_pending(d->server, d);
                for (unsigned i = 0; i < HTTP_SHUTDOWN_RUNS_MAX; i++)
                        (void) MHD_run(d->mhd);

                MHD_stop_daemon(d->mhd);
                if (mhd_fd != MHD_INVALID_SOCKET)
                        (void) safe_close(mhd_fd);
        }

        /* Only our references go away, never shutdown(): systemd keeps the socket listening for the
         * next activation. */
        d->fd = safe_close(d->fd);
        free(d->name);
        free(d);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpDaemon *, http_daemon_free);

/* Takes 'fd' in all cases. */
static int http_daemon_new(Server *s, int fd, const char *name, HttpDaemon **ret) {
        _cleanup_(http_daemon_freep) HttpDaemon *d = NULL;
        const union MHD_DaemonInfo *info;
        int mhd_fd, r;

        d = calloc(1, sizeof(HttpDaemon));
        if (!d) {
                (void) safe_close(fd);
                return log_oom();
        }
        d->server = s;
        d->fd = fd;
        d->name = strdup(strempty(name));
        if (!d->name)
                return log_oom();

        /* MHD with an external epoll loop must never block on accept(). */
        r = fd_nonblock(fd, true);
        if (r < 0)
                return log_error_errno(r, "Failed to make socket \"%s\" non-blocking: %m", d->name);

        /* MHD gets its own descriptor of the socket, so that whatever it does with it at stop or on
         * failure, the one systemd handed us stays ours. MHD_USE_ITC means MHD never shutdown()s the
         * listening socket (which would stop it for systemd too), it wakes itself through a pipe. */
        mhd_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (mhd_fd < 0)
                return log_error_errno(-errno, "Failed to duplicate socket \"%s\": %m", d->name);

        d->mhd = MHD_start_daemon(
                        MHD_USE_ERROR_LOG | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC,
                        0, http_connection_accept_policy, d,
                        http_router_access_handler, d,
                        MHD_OPTION_EXTERNAL_LOGGER, http_daemon_log, d,
                        MHD_OPTION_LISTEN_SOCKET, mhd_fd,
                        MHD_OPTION_NOTIFY_COMPLETED, http_router_request_completed, d,
                        /* The request target as received, before MHD decodes %00 into a cut string. */
                        MHD_OPTION_URI_LOG_CALLBACK, http_router_uri_log, d,
                        MHD_OPTION_NOTIFY_CONNECTION, http_connection_notify, d,
                        /* The accept policy enforces HTTP_CONNECTIONS_MAX and the per-peer limit
                         * by closing connections waiting for a request (with an answer); at this
                         * one MHD stops accepting (its epoll set drops the listening socket). */
                        MHD_OPTION_CONNECTION_LIMIT, (unsigned) HTTP_CONNECTIONS_HARD_MAX,
                        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) HTTP_IDLE_TIMEOUT_SEC,
                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) HTTP_CONNECTION_MEMORY_MAX,
                        MHD_OPTION_END);
        if (!d->mhd)
                /* Whether MHD closed mhd_fd is not documented; leave it rather than risk closing a
                 * reused descriptor. We are about to exit anyway. */
                return log_error_errno(-EIO, "Failed to start HTTP server on socket \"%s\".", d->name);

        info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        if (!info)
                return log_error_errno(-EIO, "Failed to get MHD's epoll fd.");

        r = sd_event_add_io(s->event, &d->io_event_source, info->epoll_fd, EPOLLIN, http_daemon_on_io, d);
        if (r < 0)
                return log_error_errno(r, "Failed to watch MHD's epoll fd: %m");
        (void) sd_event_source_set_description(d->io_event_source, "http-io");

        /* Accuracy 1 µs: the timer also carries http_daemon_kick(), the answer of every resumed
         * request, which a coarser accuracy would delay by up to as much. */
        r = sd_event_add_time(s->event, &d->timer_event_source, CLOCK_MONOTONIC, UINT64_MAX - 1,
                              1, http_daemon_on_timer, d);
        if (r < 0)
                return log_error_errno(r, "Failed to add HTTP timer: %m");
        (void) sd_event_source_set_description(d->timer_event_source, "http-timer");

        r = http_daemon_arm_timer(d);
        if (r < 0)
                return log_error_errno(r, "Failed to arm HTTP timer: %m");

        *ret = TAKE_PTR(d);
        return 0;
}

static int server_send_status(Server *s) {
        char counts[SERVER_APIS_MAX * 64] = "";
        size_t l = 0;

        /* What the APIs count, each as ", <n> <noun>[s]". */
        for (size_t i = 0; i < s->n_apis; i++)
                if (s->apis[i].api->counted && l < sizeof(counts))
                        l += snprintf(counts + l, sizeof(counts) - l, ", %u %s%s", s->apis[i].count,
                                      s->apis[i].api->counted, s->apis[i].count == 1 ? "" : "s");

        s->status_sent_usec = server_now(s);
        return sd_notifyf(false,
                          "STATUS=Serving on %zu socket%s, %u request%s in flight (%u waiting for the "
                          "session manager, %u of clients that went away%s), %" PRIu64 " completed.",
                          s->n_daemons, s->n_daemons == 1 ? "" : "s", s->n_requests,
                          s->n_requests == 1 ? "" : "s", s->n_suspended, s->n_orphaned, counts,
                          s->n_completed);
}

static int server_on_status_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        (void) server_send_status(userdata);
        return 0;
}

void server_status_changed(Server *s) {
        uint64_t next;
        int enabled = SD_EVENT_OFF, r;

        if (!s->ready || s->shutting_down || !s->status_event_source)
                return;
        if (sd_event_source_get_enabled(s->status_event_source, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                return; /* already scheduled */

        /* sd_notify() is a datagram: coalesce bursts into one update per interval. */
        next = s->status_sent_usec + SERVER_STATUS_INTERVAL_USEC;
        r = sd_event_source_set_time(s->status_event_source, next);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->status_event_source, SD_EVENT_ONESHOT);
        if (r < 0)
                log_debug_errno(r, "Failed to schedule status update, ignoring: %m");
}

int server_new(Config *config, Server **ret) {
        _cleanup_(server_freep) Server *s = NULL;
        int r;

        assert(config);
        assert(ret);

        s = calloc(1, sizeof(Server));
        if (!s)
                return -ENOMEM;
        s->config = *config;
        *config = (Config) {};
        s->body_budget = HTTP_BODY_BUDGET_MIN; /* and two of each API's largest bodies */
        s->warning_ratelimit = (RateLimit) { .interval_usec = 10 * USEC_PER_SEC, .burst = 10 };
        s->cut_ratelimit = (RateLimit) { .interval_usec = 10 * USEC_PER_SEC, .burst = 10 };
        s->start_realtime_usec = now_usec(CLOCK_REALTIME);

        r = sd_event_default(&s->event);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate event loop: %m");

        r = sd_event_set_signal_exit(s->event, true);
        if (r < 0)
                return log_error_errno(r, "Failed to enable SIGTERM/SIGINT handling: %m");

        r = sd_event_set_watchdog(s->event, true);
        if (r < 0)
                return log_error_errno(r, "Failed to enable watchdog handling: %m");

        /* CLOCK_MONOTONIC like server_now(), which stamps the last update. */
        r = sd_event_add_time(s->event, &s->status_event_source, CLOCK_MONOTONIC, UINT64_MAX - 1, 0,
                              server_on_status_timer, s);
        if (r < 0)
                return log_error_errno(r, "Failed to add status timer: %m");
        (void) sd_event_source_set_enabled(s->status_event_source, SD_EVENT_OFF);

        r = server_deadline_timer_new(s);
        if (r < 0)
                return log_error_errno(r, "Failed to add HTTP deadline timer: %m");

        *ret = TAKE_PTR(s);
        return 0;
}

int server_add_api(Server *s, const HttpApi *api) {
        assert(s);
        assert(api);

        if (s->n_apis >= SERVER_APIS_MAX)
                return -E2BIG;
        for (const HttpRoute *r = api->routes; r->method; r++)
                s->body_budget = MAX(s->body_budget, 2 * http_route_body_max(r, &s->config));
        s->apis[s->n_apis].api = api;
        s->apis[s->n_apis++].count = 0;
        return 0;
}

unsigned *server_api_count(Server *s, const HttpApi *api) {
        assert(s);

        for (size_t i = 0; i < s->n_apis; i++)
                if (s->apis[i].api == api)
                        return &s->apis[i].count;
        return NULL;
}

/* The expected Authorization values hold keys: wipe them. */
static void auth_header_free(char *p, size_t size) {
        if (!p)
                return;
        explicit_bzero(p, size);
        free(p);
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;

        s->shutting_down = true;

        /* Stops MHD, which completes (and frees) every request, cancelling their bus calls. */
        for (size_t i = 0; i < s->n_daemons; i++)
                http_daemon_free(s->daemons[i]);
        free(s->daemons);
        /* Orphans (their clients went away) wait for nobody now: freeing cancels their calls, and
         * closes their hang-up pipes, so the manager ends what still runs for them. */
        while (s->requests) {
                assert(s->requests->orphaned);
                http_request_free(s->requests);
        }
        assert(!s->requests);
        assert(!s->connections);
        /* No client is connected to a process any more: their calls are cancelled. */
        e2b_process_free_all(s);

        server_free_agents(s);
        peer_watch_done(&s->manager_watch);
        peer_watch_done(&s->agent_watch);
        json_object_put(s->health_cache);
        s->deadline_event_source = sd_event_source_disable_unref(s->deadline_event_source);
        s->status_event_source = sd_event_source_disable_unref(s->status_event_source);
        s->bus = sd_bus_flush_close_unref(s->bus);
        s->event = sd_event_unref(s->event);

        auth_header_free(s->auth_header, s->auth_header_size);
        auth_header_free(s->scrape_auth_header, s->scrape_auth_header_size);
        erase_and_freep(&s->e2b_api_key);
        config_done(&s->config);
        mime_types_free(s->mime_types);
        free(s);
        return NULL;
}

/* Replaces *header with "Bearer <key>" (or nothing for a NULL key); the old value is wiped. */
static int auth_header_replace(char **header, size_t *size, const char *key) {
        char *h = NULL;
        size_t n = 0;
        int r;

        if (key) {
                r = auth_header_expected(key, &h, &n);
                if (r < 0)
                        return r;
        }
        auth_header_free(*header, *size);
        *header = h;
        *size = n;
        return 0;
}

int server_set_api_key(Server *s, const char *key) {
        int r;

        assert(s);

        r = auth_header_replace(&s->auth_header, &s->auth_header_size, key);
        if (r < 0)
                return r;
        s->api_key = s->auth_header ? s->auth_header + strlen(AUTH_BEARER_PREFIX) : NULL;
        s->api_key_size = s->auth_header ? s->auth_header_size - strlen(AUTH_BEARER_PREFIX) : 0;
        erase_and_freep(&s->e2b_api_key);
        s->e2b_api_key = NULL;
        s->e2b_api_key_size = 0;
        if (s->api_key)
                return e2b_key_from_api_key(s->api_key, s->api_key_size, &s->e2b_api_key,
                                            &s->e2b_api_key_size);
        return 0;
}

int server_set_scrape_key(Server *s, const char *key) {
        assert(s);

        if (key && s->api_key && strlen(key) == s->api_key_size &&
            memcmp(key, s->api_key, s->api_key_size) == 0)
                return -EEXIST;
        return auth_header_replace(&s->scrape_auth_header, &s->scrape_auth_header_size, key);
}

static int on_name_acquired(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                log_warning("Could not own the bus name %s (%s); systemctl service-log-level will not "
                            "reach the gateway.", GATEWAY_BUS_NAME, e->message ?: e->name);
        return 0;
}

int server_connect_bus(Server *s) {
        const char *unique;
        int r;

        assert(s);

        r = bus_errors_register();
        if (r < 0)
                return log_error_errno(r, "Failed to register bus error map: %m");

        r = sd_bus_open_system_with_description(&s->bus, "scopebox-gateway");
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");

        /* Wait for the handshake now, while blocking is harmless: sd-bus would otherwise block in
         * the first send of a message with fds (an exec) to learn whether fds can be passed. */
        r = sd_bus_get_unique_name(s->bus, &unique);
        if (r < 0)
                return log_error_errno(r, "Failed to complete the system bus handshake: %m");
        log_debug("Connected to the system bus as %s.", unique);

        r = sd_bus_attach_event(s->bus, s->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");

        /* systemctl service-log-level finds the gateway by its unit's BusName=. Not owning the name
         * (a development run without the policy installed) costs only that. */
        r = bus_add_log_control(s->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to register LogControl1: %m");
        r = sd_bus_request_name_async(s->bus, NULL, GATEWAY_BUS_NAME, 0, on_name_acquired, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to request the bus name %s: %m", GATEWAY_BUS_NAME);

        /* Without the bus every request would fail: exit, and let socket activation start a fresh
         * instance on the next connection. */
        r = sd_bus_set_exit_on_disconnect(s->bus, true);
        if (r < 0)
                return log_error_errno(r, "Failed to enable exit on bus disconnect: %m");

        return 0;
}

int server_add_listen_fd(Server *s, int fd, const char *name) {
        _cleanup_(http_daemon_freep) HttpDaemon *d = NULL;
        _cleanup_close_ int owned = fd;
        HttpDaemon **a;
        int r;

        assert(s);
        assert(fd >= 0);

        r = sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1);
        if (r < 0)
                return log_error_errno(r, "Failed to check socket \"%s\": %m", strempty(name));
        if (r == 0)
                return log_error_errno(-EINVAL,
                                       "Socket \"%s\" (fd %i) is not a listening stream socket; check "
                                       "ListenStream= in scopebox-gateway.socket.", strempty(name), fd);

        /* scopebox-gateway-agent.socket: the balancer's agent check, not HTTP. */
        if (name && streq(name, AGENT_SOCKET_NAME))
                return server_add_agent_fd(s, TAKE_FD(owned));

        a = realloc(s->daemons, (s->n_daemons + 1) * sizeof(HttpDaemon *));
        if (!a)
                return log_oom();
        s->daemons = a;

        r = http_daemon_new(s, TAKE_FD(owned), name, &d);
        if (r < 0)
                return r;

        s->daemons[s->n_daemons++] = TAKE_PTR(d);
        return 0;
}

/* sd_event_loop(), with each dispatch timed: one event source's callback per iteration, the time
 * during which no other client is served. Waiting is not counted, the loop's preparation is. */
static int server_loop(Server *s) {
        int code, r;

        for (;;) {
                uint64_t start;

                r = sd_event_get_state(s->event);
                if (r < 0)
                        return r;
                if (r == SD_EVENT_FINISHED)
                        break;

                start = server_now(s);
                r = sd_event_prepare(s->event);
                if (r == 0) {
                        r = sd_event_wait(s->event, UINT64_MAX);
                        start = server_now(s);
                }
                if (r > 0) {
                        r = sd_event_dispatch(s->event);
                        loop_stats_add(&s->loop, server_now(s) - start);
                }
                if (r < 0)
                        return r;
        }

        r = sd_event_get_exit_code(s->event, &code);
        return r < 0 ? r : code;
}

int server_run(Server *s) {
        char apis[SERVER_APIS_MAX * 64] = "";
        size_t l = 0;
        int r;

        assert(s);

        /* "a and b", "a, b and c" */
        for (size_t i = 0; i < s->n_apis && l < sizeof(apis); i++)
                l += snprintf(apis + l, sizeof(apis) - l, "%s%s",
                              i == 0 ? "" : i + 1 == s->n_apis ? " and " : ", ", s->apis[i].api->name);

        s->ready = true;
        (void) sd_notify(false, "READY=1");
        (void) server_send_status(s);
        log_info("Serving the %s APIs on %zu socket%s%s.", apis, s->n_daemons, s->n_daemons == 1 ? "" : "s",
                 s->auth_header ? "" : " WITHOUT authentication");
        if (!http_header_check_supported())
                log_warning("libmicrohttpd %s is not %s: a NUL byte in a header line is judged by the sizes "
                            "it reports only, and may cut a value short.", strempty(MHD_get_version()),
                            HTTP_HEADER_CHECK_MHD_VERSION);

        /* Exit codes: 0 after SIGTERM/SIGINT, EXIT_FAILURE from sd-bus when the bus goes away, a
         * negative errno (already logged) from our own fatal errors. */
        r = server_loop(s);
        (void) sd_notify(false, "STOPPING=1\nSTATUS=Shutting down.");
        if (r < 0)
                return r;
        if (r != 0)
                return log_error_errno(-ECONNRESET, "Lost the connection to the system bus, exiting.");
        return 0;
}
