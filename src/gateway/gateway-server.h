/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The gateway's server: sd-event loop, system bus, one sd-event-driven MHD daemon per inherited socket. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "http-health.h"
#include "http-util.h"
#include "macro.h"
#include "mime.h"

/* Limits of the HTTP front end. Connection limits apply per listening socket.
 *
 * HTTP_CONNECTIONS_MAX connections in all, HTTP_CONNECTIONS_PER_IP_MAX of them per peer, so that one
 * client cannot take every connection. A peer is an IPv4 address, an IPv6 /64 (what one IPv6 host
 * commonly holds), or the whole loopback range (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) together
 * with local sockets: any local process may bind any loopback address. So every client of the
 * default loopback deployment (and everything behind one proxy) shares one peer's connections.
 *
 * Of both, the _RESERVED slots are kept for connections that authenticated, which a client
 * without the key can only get by reaching the limit first: a connection counts as authenticated
 * from its first request that carried the API key (or the scrape key, where it opens) on.
 * Connections that have not may hold at most MAX - RESERVED in all and PER_IP_MAX -
 * PER_IP_RESERVED of one peer's (192 and 48). A new connection past either bound, or past MAX or
 * PER_IP_MAX, closes the oldest connection that has not authenticated and has waited for its
 * request (its header or body) for HTTP_EVICT_GRACE_USEC at least, with no byte of it unread in
 * the socket (of the same peer for a peer's bound), after answering it 503 with Retry-After. A
 * keyless client flooding the gateway thus churns through its own connections, while a key
 * holder's new one authenticates with its first request, long before it is the oldest; the
 * connections of a burst from one client are not closed for each other, unless those without a
 * key reach PER_IP_MAX of the peer's (or MAX in all): then the oldest of them that waits with
 * nothing unread makes room even in its grace. When none may be closed
 * (authenticated connections are never closed to make room), the new connection is admitted
 * over the bounds all the same (nothing is ever accepted and closed unanswered), up to
 * HTTP_CONNECTIONS_HARD_MAX, libmicrohttpd's own limit: at it, libmicrohttpd stops accepting and
 * new connections wait in the listen backlog (Backlog= of scopebox-gateway.socket) until one
 * closes. */
#define HTTP_CONNECTIONS_MAX        256U
#define HTTP_CONNECTIONS_RESERVED   (HTTP_CONNECTIONS_MAX / 4)
#define HTTP_CONNECTIONS_PER_IP_MAX 64U
#define HTTP_CONNECTIONS_PER_IP_RESERVED (HTTP_CONNECTIONS_PER_IP_MAX / 4)
/* libmicrohttpd's own connection limit is higher by this much: a connection closed to make room
 * stays in its table until its next round reads the end of the stream, and must not keep out
 * the connection that took its place. Connections admitted over the bounds use it too. */
#define HTTP_CONNECTIONS_CLOSING_MAX 64U
#define HTTP_CONNECTIONS_HARD_MAX   (HTTP_CONNECTIONS_MAX + HTTP_CONNECTIONS_CLOSING_MAX)
/* How long a connection may wait for its request before it can be closed to make room. */
#define HTTP_EVICT_GRACE_USEC       (1U * USEC_PER_SEC)
/* Retry-After of the 503 that a connection closed to make room gets. */
#define HTTP_CONNECTIONS_RETRY_AFTER "1"
#define HTTP_ERROR_TOO_MANY_CONNECTIONS "too many connections, retry later"
#define HTTP_IDLE_TIMEOUT_SEC       30U             /* no byte in either direction for this long */
#define HTTP_CONNECTION_MEMORY_MAX  (64U * 1024U)   /* MHD's per-connection pool: request line,
                                                     * headers and read buffer must fit in it */
#define HTTP_HEADERS_MAX            64U             /* header fields per request */
#define HTTP_HEADER_BYTES_MAX       (16U * 1024U)   /* names + values of all header fields */
#define HTTP_REQUEST_TARGET_MAX     (8U * 1024U)    /* path and query arguments */
/* Deadlines that bytes trickling in do not extend (see http-connection.h). The header deadline
 * counts from the connection's start, or from the end of the previous request on a kept-alive
 * connection. The body gets an allowance that grows with every byte received, up to a maximum:
 * 300 MiB must arrive at 512 KiB/s on average. */
#define HTTP_HEADER_TIMEOUT_USEC    (10U * USEC_PER_SEC)
#define HTTP_BODY_TIMEOUT_USEC      (10U * USEC_PER_SEC)
#define HTTP_BODY_RATE_MIN          (16U * 1024U)   /* bytes per second that extend it */
#define HTTP_BODY_TIMEOUT_MAX_USEC  (600U * USEC_PER_SEC)
#define HTTP_DEADLINE_ACCURACY_USEC (250U * USEC_PER_MSEC)
#define HTTP_BODY_BUDGET_MIN        (1ULL << 30)    /* bytes of request bodies buffered at once,
                                                     * over all connections (at least 2 max bodies) */
#define HTTP_SHUTDOWN_RUNS_MAX      16U             /* MHD_run() rounds to flush answers at exit */

/* Rate of "Serving on …" status updates sent to the service manager. */
#define SERVER_STATUS_INTERVAL_USEC (1U * USEC_PER_SEC)
/* APIs one server serves (server_add_api()). */
#define SERVER_APIS_MAX 4U

/* How long each dispatch of the gateway's event loop took: one event source's callback (an MHD
 * round, a bus message with its reply handler, a timer), during which no other client is served.
 * Buckets from 100 µs to 10 s (loop_stall_bounds_usec). */
#define LOOP_STALL_BUCKETS 13U
typedef struct LoopStats {
        uint64_t max_usec;            /* the longest, since the gateway started */
        uint64_t sum_usec;
        uint64_t count;
        uint64_t buckets[LOOP_STALL_BUCKETS]; /* each: above the previous bound, up to its own */
} LoopStats;
/* The upper bound of each bucket. */
extern const uint64_t loop_stall_bounds_usec[LOOP_STALL_BUCKETS];

/* Counts one dispatch of 'usec'. */
void loop_stats_add(LoopStats *l, uint64_t usec);

typedef struct Server Server;
typedef struct HttpDaemon HttpDaemon;
typedef struct HttpConnection HttpConnection;
typedef struct HttpRequest HttpRequest;
typedef struct HttpRoute HttpRoute;
typedef struct HttpApi HttpApi;
typedef struct AgentListener AgentListener;
typedef struct AgentConnection AgentConnection;

struct HttpDaemon {
        Server *server;
        struct MHD_Daemon *mhd;
        int fd;                        /* inherited listening socket; MHD gets a duplicate */
        char *name;                    /* FileDescriptorName= of the socket */
        sd_event_source *io_event_source;
        sd_event_source *timer_event_source;
};

struct Server {
        sd_event *event;
        sd_bus *bus;
        Config config;
        MimeTypes *mime_types;         /* artifacts' types; NULL: Python's builtin table alone */

        char *auth_header;             /* "Bearer <key>"; NULL when authentication is off */
        size_t auth_header_size;
        const char *api_key;           /* the key itself, inside auth_header (X-Api-Key) */
        size_t api_key_size;
        char *e2b_api_key;             /* "e2b_<hex of the key>" (e2b-token.h); NULL without a key */
        size_t e2b_api_key_size;
        char *scrape_auth_header;      /* "Bearer <scrape key>": HTTP_ROUTE_SCRAPE_KEY routes only;
                                        * NULL if none */
        size_t scrape_auth_header_size;

        HttpDaemon **daemons;
        size_t n_daemons;

        /* What every socket serves (server_add_api()), each API with its count (HttpApi.counted). */
        struct {
                const HttpApi *api;
                unsigned count;
        } apis[SERVER_APIS_MAX];
        size_t n_apis;

        /* The last healthy /healthz answer and what it says (http-health.h): probes and agent
         * checks within HEALTH_CACHE_USEC of it are answered without asking the session manager. */
        struct json_object *health_cache;
        HealthSnapshot health;

        /* The agent check (agent-check.h): its listening sockets, the connections waiting for a
         * fresh health answer, and the call that fetches it. */
        AgentListener **agents;
        size_t n_agents;
        AgentConnection *agent_waiting;
        unsigned n_agent_waiting;
        sd_bus_slot *agent_health_slot;
        uint64_t n_agent_refused;      /* connections closed unanswered: too many waiting */

        HttpRequest *requests;         /* every request between its headers and its completion, or
                                        * the answer to its call if that comes later (orphans) */
        unsigned n_requests;
        unsigned n_suspended;          /* of which waiting for the session manager */
        unsigned n_orphaned;           /* of which completed (their clients went away), waiting
                                        * for the manager to end their calls */
        uint64_t n_completed;
        uint64_t n_responses[6];       /* of them, by status class: [2] 2xx ... [5] 5xx, [0] none sent */
        uint64_t start_realtime_usec;  /* when this process started (CLOCK_REALTIME) */
        LoopStats loop;                /* how long each dispatch of the event loop took */
        uint64_t body_bytes;           /* request body bytes reserved by all requests */
        uint64_t response_bytes;       /* bytes of responses handed to libmicrohttpd, not yet let go */
        uint64_t body_budget;          /* two of the largest body any route takes, at least
                                        * HTTP_BODY_BUDGET_MIN */

        HttpConnection *connections;   /* every open connection of every daemon, the newest first */
        unsigned n_connections;
        uint64_t n_connections_evicted; /* answered 503, closed to make room (HTTP_CONNECTIONS_RESERVED) */
        uint64_t n_connections_over;   /* admitted over the bounds: no slot and none to free */
        sd_event_source *deadline_event_source;

        /* Whether the session manager and the storage agent answer (http-health.h). */
        PeerWatch manager_watch;
        PeerWatch agent_watch;

        RateLimit warning_ratelimit;   /* for warnings clients can provoke (bus failures) */
        RateLimit cut_ratelimit;       /* for the notices of connections cut off */

        /* The E2B API's processes (e2b-process.h), the newest first, and the last pid given. */
        struct E2bProcess *e2b_processes;
        unsigned n_e2b_processes;
        uint32_t e2b_last_pid;

        sd_event_source *status_event_source;
        uint64_t status_sent_usec;
        bool ready;
        bool shutting_down;
};

/* Takes over the contents of *config. */
int server_new(Config *config, Server **ret);
Server *server_free(Server *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);

/* Serves the routes of 'api' on every socket, and grows the body budget to two bodies of its largest
 * limit. -E2BIG past SERVER_APIS_MAX. */
int server_add_api(Server *s, const HttpApi *api);
/* What 'api' counts (HttpApi.counted); NULL when the server does not serve it. */
unsigned *server_api_count(Server *s, const HttpApi *api);
/* Requires "Authorization: Bearer <key>" on every path but the public ones, "X-Api-Key: <key>" on the
 * routes flagged HTTP_ROUTE_API_KEY; NULL turns it off. */
int server_set_api_key(Server *s, const char *key);
/* An additional key that opens only routes flagged HTTP_ROUTE_SCRAPE_KEY (NULL: none). -EEXIST when
 * it equals the API key, which would make it pointless. */
int server_set_scrape_key(Server *s, const char *key);
int server_connect_bus(Server *s);
/* Serves both APIs on an inherited listening socket; takes the fd, also on failure. */
int server_add_listen_fd(Server *s, int fd, const char *name);
/* Runs until SIGTERM/SIGINT or a fatal error; returns the loop's exit code. */
int server_run(Server *s);

/* Something the STATUS= line shows changed; sends it soon, at most once per interval. */
void server_status_changed(Server *s);
/* Monotonic time, for request durations. */
uint64_t server_now(Server *s);

/* Makes sure MHD_run() is called soon (after a connection was resumed). */
void http_daemon_kick(HttpDaemon *d);
