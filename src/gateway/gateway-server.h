/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The gateway's server: sd-event loop, system bus, one sd-event-driven MHD daemon per inherited socket. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "http-util.h"
#include "macro.h"

/* Limits of the HTTP front end. Connection limits apply per listening socket. */
#define HTTP_CONNECTIONS_MAX        256U
/* Every client of the default loopback deployment shares 127.0.0.1, so the per-peer cap equals the
 * total for now; per-peer limits that tell proxies apart come with the HTTP hardening. */
#define HTTP_CONNECTIONS_PER_IP_MAX HTTP_CONNECTIONS_MAX
#define HTTP_IDLE_TIMEOUT_SEC       30U             /* no byte in either direction for this long */
#define HTTP_CONNECTION_MEMORY_MAX  (64U * 1024U)   /* MHD's per-connection pool: request line,
                                                     * headers and read buffer must fit in it */
#define HTTP_HEADERS_MAX            64U             /* header fields per request */
#define HTTP_HEADER_BYTES_MAX       (16U * 1024U)   /* names + values of all header fields */
#define HTTP_BODY_BUDGET_MIN        (1ULL << 30)    /* bytes of request bodies buffered at once,
                                                     * over all connections (at least 2 max bodies) */
#define HTTP_SHUTDOWN_RUNS_MAX      16U             /* MHD_run() rounds to flush answers at exit */

/* Rate of "Serving on …" status updates sent to the service manager. */
#define SERVER_STATUS_INTERVAL_USEC (1U * USEC_PER_SEC)

typedef struct Server Server;
typedef struct HttpDaemon HttpDaemon;
typedef struct HttpRequest HttpRequest;
typedef struct HttpRoute HttpRoute;

struct HttpDaemon {
        Server *server;
        struct MHD_Daemon *mhd;
        int fd;                        /* inherited listening socket; MHD gets a duplicate */
        char *name;                    /* FileDescriptorName= of the socket */
        const HttpRoute *routes;       /* which API this socket serves */
        sd_event_source *io_event_source;
        sd_event_source *timer_event_source;
};

struct Server {
        sd_event *event;
        sd_bus *bus;
        Config config;

        char *auth_header;             /* "Bearer <key>"; NULL when authentication is off */
        size_t auth_header_size;

        HttpDaemon **daemons;
        size_t n_daemons;

        HttpRequest *requests;         /* every request between its headers and its completion */
        unsigned n_requests;
        unsigned n_suspended;          /* of which waiting for the session manager */
        uint64_t n_completed;
        uint64_t body_bytes;           /* request body bytes reserved by all requests */
        uint64_t body_budget;

        RateLimit warning_ratelimit;   /* for warnings clients can provoke (bus failures) */

        sd_event_source *status_event_source;
        uint64_t status_sent_usec;
        bool ready;
        bool shutting_down;
};

/* Takes over the contents of *config. */
int server_new(Config *config, Server **ret);
Server *server_free(Server *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);

/* Requires "Authorization: Bearer <key>" on every path but the public ones; NULL turns it off. */
int server_set_api_key(Server *s, const char *key);
int server_connect_bus(Server *s);
/* Serves the sidecar API on an inherited listening socket; takes the fd, also on failure. */
int server_add_listen_fd(Server *s, int fd, const char *name);
/* Runs until SIGTERM/SIGINT or a fatal error; returns the loop's exit code. */
int server_run(Server *s);

/* Something the STATUS= line shows changed; sends it soon, at most once per interval. */
void server_status_changed(Server *s);
/* Monotonic time, for request durations. */
uint64_t server_now(Server *s);

/* Makes sure MHD_run() is called soon (after a connection was resumed). */
void http_daemon_kick(HttpDaemon *d);
