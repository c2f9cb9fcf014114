/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Node health as the session manager's GetHealth() reports it: GET /healthz and the agent check; and
 * whether the session manager and the storage agent answer at all, which bounds every wait for them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

typedef struct Server Server;

/* How long a healthy answer is reused. Load balancers and wrk alike probe far more often than
 * health changes; each fresh answer costs two bus round trips (the manager asks systemd). An
 * unhealthy answer is never reused: a failure shows at once, a recovery within this. */
#define HEALTH_CACHE_USEC (1 * USEC_PER_SEC)

/* The last healthy answer: what /healthz and the agent check report within HEALTH_CACHE_USEC. */
typedef struct HealthSnapshot {
        uint64_t usec;                 /* CLOCK_MONOTONIC when composed; 0: none yet */
        uint32_t sessions;             /* counted against SANDBOX_MAX_SESSIONS */
        uint32_t capacity;             /* SANDBOX_MAX_SESSIONS; 0: unlimited */
        bool draining;
} HealthSnapshot;

/* Whether the snapshot is recent enough to answer from. */
bool server_health_fresh(Server *s);
/* Reads a GetHealth() reply (or error): 1 healthy (the snapshot and /healthz's cached body are
 * updated), 0 unhealthy with *ret_reason (static or owned by 'reply'), negative on a malformed
 * reply. */
int server_health_update(Server *s, sd_bus_message *reply, const char **ret_reason);
/* A new GetHealth() call (it starts the bus-activated manager, as /healthz always has). */
int server_health_new_call(Server *s, sd_bus_message **ret);

/* The agent check's line for a healthy snapshot: "drain\n" or "ready up <P>%\n", P the free share of
 * the capacity, floor(100 * (capacity - sessions) / capacity) clamped to 0..100 (100 when
 * unlimited). */
void health_agent_line(const HealthSnapshot *h, char buf[static 16]);
#define HEALTH_AGENT_LINE_DOWN "down\n"

/* ---- whether the daemons answer ----
 *
 * A daemon that is alive answers org.freedesktop.DBus.Peer.Ping from its event loop, whatever its
 * calls are doing (a 30 s exec runs in its runner, not in the manager's loop). One that is stopped
 * (SIGSTOP), or stuck in a loop, answers nothing, and would keep every request waiting for it until
 * its call's own timeout (minutes). So while calls to a daemon are out, it is pinged every
 * PEER_PING_INTERVAL_USEC; one ping unanswered for PEER_PING_TIMEOUT_USEC makes it "not responding":
 * the requests waiting for it are answered 503 "<daemon> not responding" (Retry-After) at once, their
 * hang-up pipes closed so that the daemon ends what it ran for them once it runs again, and new calls
 * to it are answered so at once, until a ping is answered again. Pings never start a daemon (no
 * auto-start): one that has no instance (idle exit, being started, its old instance still answering
 * the calls queued before its idle exit) is no sign of a wedge, and calls to it wait for bus
 * activation as always. /healthz pings both daemons at once (the storage agent only if it runs) and
 * names one that does not answer. docs/operations.md has the bounds. */
#define PEER_PING_TIMEOUT_USEC  (1500U * USEC_PER_MSEC)
#define PEER_PING_INTERVAL_USEC (1U * USEC_PER_SEC)
/* Retry-After of the 503 for a daemon that does not respond. */
#define PEER_RETRY_AFTER "5"
/* GetHealth's own bound, so that /healthz answers within 2 s even when the manager answers pings
 * but its health answer is late (it asks systemd). */
#define HEALTH_CALL_TIMEOUT_USEC (1800U * USEC_PER_MSEC)
/* Then the last healthy answer stands in, if it is at most this old; otherwise 503 "systemd is not
 * responding". */
#define HEALTH_STALE_MAX_USEC (10U * USEC_PER_SEC)

typedef struct PeerWatch {
        Server *server;
        const char *name;             /* its bus name */
        const char *label;            /* "session manager": for the journal */
        const char *unavailable;      /* "session manager not responding": for clients */
        unsigned n_calls;             /* requests' calls to it that are out */
        sd_bus_slot *ping_slot;       /* a ping on its way */
        uint64_t ping_usec;           /* CLOCK_MONOTONIC when the last ping was sent */
        uint64_t answered_usec;       /* when a ping was last answered; 0: never */
        uint64_t silent_usec;         /* when the ping went out that it did not answer */
        sd_event_source *timer;       /* the next ping, while calls are out or it does not respond */
        bool not_responding;
} PeerWatch;

/* The watch of the daemon 'destination' names (the manager's or the agent's bus name), NULL for
 * anything else. */
PeerWatch *server_peer_watch(Server *s, const char *destination);
/* False while the daemon does not respond; true for NULL. */
bool peer_watch_responding(const PeerWatch *w);
/* A request's call to it went out, or ended. */
void peer_watch_call_begin(PeerWatch *w);
void peer_watch_call_end(PeerWatch *w);
/* Pings now, unless a ping is on its way already. */
int peer_watch_probe(PeerWatch *w);
/* Whether both the session manager and the storage agent respond (as far as anyone knows). */
bool server_daemons_responding(Server *s);
/* Pings both now (those whose ping is not on its way already). */
void server_probe_daemons(Server *s);
/* Whether it answered a ping at 'since' (CLOCK_MONOTONIC, server_now()) or later. */
bool peer_watch_answered_since(const PeerWatch *w, uint64_t since);
void peer_watch_done(PeerWatch *w);
