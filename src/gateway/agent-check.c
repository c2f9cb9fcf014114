/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HAProxy agent check: "ready up <P>%", "drain" or "down", one line per connection, from the same
 * health answer /healthz gives (http-health.c). Nothing here blocks: sockets are non-blocking,
 * a line of at most 16 bytes goes into an empty send buffer, and a fresh answer is an async call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "agent-check.h"
#include "bus-client.h"
#include "http-health.h"
#include "io-util.h"
#include "list.h"
#include "log.h"

struct AgentListener {
        Server *server;
        int fd;
        sd_event_source *io_source;
        sd_event_source *pause_source;  /* re-enables io_source after running out of fds */
};

struct AgentConnection {
        int fd;
        LIST_FIELDS(AgentConnection, waiting); /* Server.agent_waiting */
};

static void agent_send_line(int fd, const char *line) {
        /* Best effort: a peer that went away gets nothing, and never a SIGPIPE. */
        (void) send(fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* 'line' NULL: closed without one. */
static void agent_answer_waiting(Server *s, const char *line) {
        LIST_FOREACH_SAFE(waiting, c, n, s->agent_waiting) {
                LIST_REMOVE(waiting, s->agent_waiting, c);
                if (line)
                        agent_send_line(c->fd, line);
                safe_close(c->fd);
                free(c);
        }
        s->n_agent_waiting = 0;
}

static int agent_on_health(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Server *s = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *reason = NULL;
        char line[16];
        int r;

        s->agent_health_slot = sd_bus_slot_unref(s->agent_health_slot);

        r = server_health_update(s, reply, &reason);
        if (r < 0)
                log_debug_errno(r, "Malformed GetHealth() reply, the agent check says down: %m");
        else if (r == 0)
                log_debug("Unhealthy (%s%s%s), the agent check says down.", reason,
                          e ? ": " : "", e ? strna(e->message) : "");
        if (r > 0 && !server_daemons_responding(s))
                r = 0;
        if (r > 0)
                health_agent_line(&s->health, line);
        else
                strcpy(line, HEALTH_AGENT_LINE_DOWN);
        agent_answer_waiting(s, line);
        return 0;
}

static int agent_fetch_health(Server *s) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (s->agent_health_slot)
                return 0; /* on its way */
        if (!s->bus)
                return -ENOTCONN;
        server_probe_daemons(s);
        r = server_health_new_call(s, &m);
        if (r < 0)
                return r;
        return sd_bus_call_async(s->bus, &s->agent_health_slot, m, agent_on_health, s,
                                 AGENT_HEALTH_TIMEOUT_USEC);
}

/* Takes 'fd'. */
static void agent_serve(Server *s, int fd) {
        AgentConnection *c;
        char line[16];
        int r;

        /* A daemon that does not respond (http-health.h): down, without asking. */
        if (!server_daemons_responding(s)) {
                agent_send_line(fd, HEALTH_AGENT_LINE_DOWN);
                safe_close(fd);
                return;
        }
        if (server_health_fresh(s)) {
                health_agent_line(&s->health, line);
                agent_send_line(fd, line);
                safe_close(fd);
                return;
        }

        if (s->n_agent_waiting >= AGENT_WAITING_MAX || !(c = calloc(1, sizeof(AgentConnection)))) {
                s->n_agent_refused++;
                safe_close(fd);
                return;
        }
        c->fd = fd;
        LIST_PREPEND(waiting, s->agent_waiting, c);
        s->n_agent_waiting++;

        r = agent_fetch_health(s);
        if (r < 0) {
                /* As /healthz: a call that can't even be sent means the manager is unavailable. */
                log_debug_errno(r, "Failed to call GetHealth() for the agent check: %m");
                agent_answer_waiting(s, HEALTH_AGENT_LINE_DOWN);
        }
}

static int agent_on_pause_over(sd_event_source *source, uint64_t usec, void *userdata) {
        AgentListener *l = userdata;

        (void) sd_event_source_set_enabled(l->io_source, SD_EVENT_ON);
        return 0;
}

static void agent_pause(AgentListener *l) {
        uint64_t now;
        int r;

        /* The listening socket stays readable: without a pause the loop would spin on it. */
        r = sd_event_now(l->server->event, CLOCK_MONOTONIC, &now);
        if (r >= 0)
                r = sd_event_source_set_time(l->pause_source, now + AGENT_ACCEPT_PAUSE_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(l->pause_source, SD_EVENT_ONESHOT);
        if (r >= 0)
                (void) sd_event_source_set_enabled(l->io_source, SD_EVENT_OFF);
}

static int agent_on_accept(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        AgentListener *l = userdata;

        for (unsigned i = 0; i < AGENT_ACCEPT_BURST; i++) {
                int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (c >= 0) {
                        agent_serve(l->server, c);
                        continue;
                }
                switch (errno) {
                case EAGAIN:
                case EINTR:
                        return 0;
                case EMFILE:
                case ENFILE:
                case ENOBUFS:
                case ENOMEM:
                        if (ratelimit_below(&l->server->warning_ratelimit, server_now(l->server)))
                                log_warning_errno(-errno, "Failed to accept an agent check connection, "
                                                  "pausing: %m");
                        agent_pause(l);
                        return 0;
                default:
                        /* The connection was aborted before we took it, and the like: the next. */
                        log_debug_errno(-errno, "accept() on the agent socket failed, ignoring: %m");
                        continue;
                }
        }
        return 0;
}

static AgentListener *agent_listener_free(AgentListener *l) {
        if (!l)
                return NULL;
        l->io_source = sd_event_source_disable_unref(l->io_source);
        l->pause_source = sd_event_source_disable_unref(l->pause_source);
        /* Our reference only: systemd keeps the socket for the next activation. */
        safe_close(l->fd);
        free(l);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(AgentListener *, agent_listener_free);

int server_add_agent_fd(Server *s, int fd) {
        _cleanup_(agent_listener_freep) AgentListener *l = NULL;
        _cleanup_close_ int owned = fd;
        AgentListener **a;
        int r;

        l = calloc(1, sizeof(AgentListener));
        if (!l)
                return log_oom();
        l->server = s;
        l->fd = TAKE_FD(owned);

        /* accept4() gives non-blocking connections; the listener itself must not block either. */
        r = fd_nonblock(l->fd, true);
        if (r < 0)
                return log_error_errno(r, "Failed to make the agent socket non-blocking: %m");

        r = sd_event_add_io(s->event, &l->io_source, l->fd, EPOLLIN, agent_on_accept, l);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the agent socket: %m");
        (void) sd_event_source_set_description(l->io_source, "agent-accept");

        r = sd_event_add_time(s->event, &l->pause_source, CLOCK_MONOTONIC, UINT64_MAX - 1, 0,
                              agent_on_pause_over, l);
        if (r < 0)
                return log_error_errno(r, "Failed to add the agent socket's timer: %m");
        (void) sd_event_source_set_enabled(l->pause_source, SD_EVENT_OFF);

        a = realloc(s->agents, (s->n_agents + 1) * sizeof(AgentListener *));
        if (!a)
                return log_oom();
        s->agents = a;
        s->agents[s->n_agents++] = TAKE_PTR(l);
        return 0;
}

void server_free_agents(Server *s) {
        for (size_t i = 0; i < s->n_agents; i++)
                agent_listener_free(s->agents[i]);
        s->agents = mfree(s->agents);
        s->n_agents = 0;
        s->agent_health_slot = sd_bus_slot_unref(s->agent_health_slot);
        /* Shutting down: no line rather than a guess. */
        agent_answer_waiting(s, NULL);
}
