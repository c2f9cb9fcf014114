/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HTTP front end's connections: which phase each is in, its deadline, and cutting it off after that. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <systemd/sd-event.h>
#include <microhttpd.h>

#include "http-connection.h"
#include "http-router.h"
#include "log.h"
#include "string-table.h"
#include "string-util.h"

#define PEER_MAX (INET6_ADDRSTRLEN + 16)

static const char *const http_connection_phase_table[_HTTP_CONNECTION_PHASE_MAX] = {
        [HTTP_CONNECTION_HEADERS] = "headers",
        [HTTP_CONNECTION_BODY]    = "body",
        [HTTP_CONNECTION_BUSY]    = "busy",
        [HTTP_CONNECTION_CLOSING] = "closing",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(http_connection_phase, HttpConnectionPhase)

uint64_t http_connection_deadline(HttpConnectionPhase phase, uint64_t start_usec, uint64_t body_bytes) {
        uint64_t allowance;

        switch (phase) {
        case HTTP_CONNECTION_HEADERS:
                allowance = HTTP_HEADER_TIMEOUT_USEC;
                break;
        case HTTP_CONNECTION_BODY:
                /* The check keeps the product below from overflowing. */
                if (body_bytes / HTTP_BODY_RATE_MIN >= HTTP_BODY_TIMEOUT_MAX_USEC / USEC_PER_SEC)
                        allowance = HTTP_BODY_TIMEOUT_MAX_USEC;
                else
                        allowance =
                                MIN(HTTP_BODY_TIMEOUT_USEC + body_bytes * USEC_PER_SEC / HTTP_BODY_RATE_MIN,
                                    HTTP_BODY_TIMEOUT_MAX_USEC);
                break;
        default:
                return UINT64_MAX;
        }

        if (start_usec >= UINT64_MAX - allowance)
                return UINT64_MAX - 1;
        return start_usec + allowance;
}

/* "address:port" of the peer, for log messages. */
static void http_connection_peer(struct MHD_Connection *connection, char buf[static PEER_MAX]) {
        const union MHD_ConnectionInfo *info;
        char addr[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;

        info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (info && info->client_addr) {
                const struct sockaddr *sa = info->client_addr;

                if (sa->sa_family == AF_INET) {
                        const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

                        (void) inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
                        port = ntohs(in->sin_port);
                } else if (sa->sa_family == AF_INET6) {
                        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;

                        (void) inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
                        port = ntohs(in6->sin6_port);
                }
        }
        (void) snprintf(buf, PEER_MAX, "%s:%u", addr, port);
}

static int http_connection_fd(struct MHD_Connection *connection) {
        const union MHD_ConnectionInfo *info;

        if (!connection)
                return -EBADF;
        info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info || info->connect_fd == MHD_INVALID_SOCKET)
                return -EBADF;
        return info->connect_fd;
}

/* Makes sure the timer fires no later than 'deadline'. Firing early is harmless: the timer looks at
 * every connection and re-arms itself for the earliest deadline left. */
static void server_deadline_schedule(Server *s, uint64_t deadline) {
        int enabled = SD_EVENT_OFF, r;
        uint64_t current;

        if (deadline == UINT64_MAX || !s->deadline_event_source)
                return;

        if (sd_event_source_get_enabled(s->deadline_event_source, &enabled) >= 0 &&
            enabled != SD_EVENT_OFF && sd_event_source_get_time(s->deadline_event_source, &current) >= 0 &&
            current <= deadline)
                return;

        r = sd_event_source_set_time(s->deadline_event_source, deadline);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->deadline_event_source, SD_EVENT_ONESHOT);
        if (r < 0)
                /* Only the idle timeout protects us then; not something a client can cause. */
                log_warning_errno(r, "Failed to arm the HTTP deadline timer, ignoring: %m");
}

void http_connection_enter(HttpConnection *hc, HttpConnectionPhase phase, HttpRequest *req) {
        Server *s;

        if (!hc || hc->phase == HTTP_CONNECTION_CLOSING)
                return;
        s = hc->daemon->server;

        hc->phase = phase;
        hc->phase_start_usec = server_now(s);
        hc->body_bytes = 0;
        hc->request = phase == HTTP_CONNECTION_BODY ? req : NULL;
        server_deadline_schedule(s, http_connection_deadline(phase, hc->phase_start_usec, 0));
}

void http_connection_body_received(HttpConnection *hc, size_t n) {
        /* Only moves the deadline later: the timer armed for the earlier one re-arms itself. */
        if (hc && hc->phase == HTTP_CONNECTION_BODY)
                hc->body_bytes += n;
}

HttpConnection *http_connection_get(struct MHD_Connection *connection) {
        const union MHD_ConnectionInfo *info;

        if (!connection)
                return NULL;
        info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return info ? info->socket_context : NULL;
}

int http_response_format_final(const HttpResponse *resp, char **ret, size_t *ret_size) {
        const char *reason;
        char *text;
        int n;

        assert(resp);
        assert(ret);

        reason = MHD_get_reason_phrase_for(resp->status);
        /* An empty body (the dify-sandbox API's 401) has no type. */
        n = asprintf(&text,
                     "HTTP/1.1 %u %s\r\n"
                     "Connection: close\r\n"
                     "%s%s%s"
                     "%s"
                     "Content-Length: %zu\r\n"
                     "\r\n"
                     "%.*s",
                     resp->status, isempty(reason) ? "Unknown" : reason,
                     resp->retry_after ? "Retry-After: " : "", strempty(resp->retry_after),
                     resp->retry_after ? "\r\n" : "",
                     resp->size > 0 ? "Content-Type: application/json\r\n" : "",
                     resp->size, (int) resp->size, resp->body);
        if (n < 0)
                return -ENOMEM;
        *ret = text;
        if (ret_size)
                *ret_size = (size_t) n;
        return 0;
}

int http_connection_send_final(struct MHD_Connection *connection, const HttpResponse *resp) {
        _cleanup_free_ char *text = NULL;
        size_t size;
        ssize_t n;
        int fd, r;

        fd = http_connection_fd(connection);
        if (fd < 0)
                return fd;
        r = http_response_format_final(resp, &text, &size);
        if (r < 0)
                return r;

        /* libmicrohttpd has written nothing on this connection but possibly "100 Continue": a request
         * body is arriving. A few hundred bytes always fit in the empty send buffer. */
        n = send(fd, text, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
                return -errno;
        (void) shutdown(fd, SHUT_WR);
        return (size_t) n == size ? 0 : -EAGAIN;
}

/* Shuts the socket down, so that libmicrohttpd sees the end of the stream and closes the
 * connection; from now on it counts against no limit of ours. */
static void http_connection_shut(HttpConnection *hc, int fd) {
        hc->phase = HTTP_CONNECTION_CLOSING;
        hc->request = NULL;
        (void) shutdown(fd, SHUT_RDWR);

        /* The shutdown wakes MHD's epoll fd; make sure MHD runs even so. */
        http_daemon_kick(hc->daemon);
}

/* Past the deadline: answer a body that is too slow, then shut the connection down. */
static void http_connection_cut(HttpConnection *hc, uint64_t now) {
        Server *s = hc->daemon->server;
        HttpConnectionPhase phase = hc->phase;
        HttpRequest *req = hc->request;
        uint64_t seconds;
        char peer[PEER_MAX];
        int fd;

        seconds = (now - hc->phase_start_usec) / USEC_PER_SEC;
        hc->phase = HTTP_CONNECTION_CLOSING;
        hc->request = NULL;

        fd = http_connection_fd(hc->connection);
        if (fd < 0)
                return;

        if (phase == HTTP_CONNECTION_BODY && req && req->state == HTTP_REQUEST_RECEIVING) {
                _cleanup_(http_response_freep) HttpResponse *resp = NULL;

                req->state = HTTP_REQUEST_ANSWERED;
                req->close_reason = "body deadline";
                if (http_response_new_error(HTTP_REQUEST_TIMEOUT, "request body too slow", &resp) >= 0 &&
                    http_connection_send_final(hc->connection, resp) >= 0)
                        req->status = HTTP_REQUEST_TIMEOUT;
        }
        http_connection_shut(hc, fd);

        http_connection_peer(hc->connection, peer);
        log_full(ratelimit_below(&s->cut_ratelimit, now) ? LOG_INFO : LOG_DEBUG,
                 "Closed connection from %s: request %s not complete after %" PRIu64 " s.",
                 peer, http_connection_phase_to_string(phase), seconds);
}

static int server_on_deadline(sd_event_source *source, uint64_t usec, void *userdata) {
        Server *s = userdata;
        uint64_t now, next = UINT64_MAX;

        now = server_now(s);
        LIST_FOREACH(connections, hc, s->connections) {
                uint64_t d = http_connection_deadline(hc->phase, hc->phase_start_usec, hc->body_bytes);

                if (d <= now)
                        http_connection_cut(hc, now);
                else
                        next = MIN(next, d);
        }

        /* Left disarmed when no connection has a deadline: an idle server has no timer. */
        server_deadline_schedule(s, next);
        return 0;
}

int server_deadline_timer_new(Server *s) {
        int r;

        assert(s);
        assert(s->event);

        r = sd_event_add_time(s->event, &s->deadline_event_source, CLOCK_MONOTONIC, UINT64_MAX - 1,
                              HTTP_DEADLINE_ACCURACY_USEC, server_on_deadline, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->deadline_event_source, "http-deadline");
        return sd_event_source_set_enabled(s->deadline_event_source, SD_EVENT_OFF);
}

bool sockaddr_is_loopback(const struct sockaddr *sa, socklen_t len) {
        if (!sa)
                return false;
        if (sa->sa_family == AF_INET && len >= (socklen_t) sizeof(struct sockaddr_in)) {
                const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

                return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        }
        if (sa->sa_family == AF_INET6 && len >= (socklen_t) sizeof(struct sockaddr_in6)) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *) sa)->sin6_addr;

                return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        }
        return false;
}

void http_peer_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct in6_addr *ret) {
        assert(ret);

        *ret = (struct in6_addr) IN6ADDR_LOOPBACK_INIT;
        if (!sa || sockaddr_is_loopback(sa, len))
                return;

        if (sa->sa_family == AF_INET && len >= (socklen_t) sizeof(struct sockaddr_in)) {
                *ret = (struct in6_addr) {};
                ret->s6_addr[10] = ret->s6_addr[11] = 0xff;
                memcpy(ret->s6_addr + 12, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6 && len >= (socklen_t) sizeof(struct sockaddr_in6)) {
                *ret = ((const struct sockaddr_in6 *) sa)->sin6_addr;
                if (!IN6_IS_ADDR_V4MAPPED(ret))
                        memset(ret->s6_addr + 8, 0, 8);
        }
}

/* Past a bound: room is made by closing 'old' (past its grace), else 'young' once those without
 * the key take all the slots ('all_keyless'), else the connection comes in over the bound. */
static HttpAdmission admission_past_bound(const HttpConnection *old, const HttpConnection *young,
                                          bool all_keyless, HttpAdmission after_old,
                                          HttpAdmission after_young) {
        if (old)
                return after_old;
        if (young && all_keyless)
                return after_young;
        return HTTP_ADMIT_OVER;
}

HttpAdmission http_slots_admission(const HttpSlots *slots) {
        bool peer_full, all_full;

        assert(slots);

        /* Before the new connection comes in, no bound is passed: closing one connection makes
         * room under every bound it counts for. */
        peer_full = slots->peer_total >= HTTP_CONNECTIONS_PER_IP_MAX ||
                    slots->peer_unauthenticated >=
                            HTTP_CONNECTIONS_PER_IP_MAX - HTTP_CONNECTIONS_PER_IP_RESERVED;
        all_full = slots->total >= HTTP_CONNECTIONS_MAX ||
                   slots->unauthenticated >= HTTP_CONNECTIONS_MAX - HTTP_CONNECTIONS_RESERVED;

        /* A peer over its own bound makes room among its own connections only: never at another
         * peer's expense. Connections still in their grace are left their chance while those
         * without a key are fewer than all the peer's (or all) slots: past that they make room
         * too, or a keyless flood could hold every slot up to libmicrohttpd's limit. */
        if (peer_full)
                return admission_past_bound(slots->peer_oldest, slots->peer_oldest_new,
                                            slots->peer_unauthenticated >= HTTP_CONNECTIONS_PER_IP_MAX,
                                            HTTP_ADMIT_AFTER_PEER, HTTP_ADMIT_AFTER_PEER_NEW);
        if (all_full)
                return admission_past_bound(slots->oldest, slots->oldest_new,
                                            slots->unauthenticated >= HTTP_CONNECTIONS_MAX,
                                            HTTP_ADMIT_AFTER_OLDEST, HTTP_ADMIT_AFTER_OLDEST_NEW);
        return HTTP_ADMIT;
}

HttpConnection *http_slots_to_close(const HttpSlots *slots, HttpAdmission admission) {
        assert(slots);

        switch (admission) {
        case HTTP_ADMIT_AFTER_PEER:
                return slots->peer_oldest;
        case HTTP_ADMIT_AFTER_OLDEST:
                return slots->oldest;
        case HTTP_ADMIT_AFTER_PEER_NEW:
                return slots->peer_oldest_new;
        case HTTP_ADMIT_AFTER_OLDEST_NEW:
                return slots->oldest_new;
        default:
                return NULL;
        }
}

/* Whether bytes wait in the connection's socket that libmicrohttpd has not read yet: most likely a
 * request (with the key) that arrived in the same burst as the new connection. */
static bool http_connection_has_unread(HttpConnection *hc) {
        int fd = http_connection_fd(hc->connection), queued = 0;

        return fd >= 0 && ioctl(fd, SIOCINQ, &queued) >= 0 && queued > 0;
}

static void http_daemon_count_slots(HttpDaemon *d, const struct in6_addr *peer, HttpSlots *ret) {
        uint64_t now = server_now(d->server);

        *ret = (HttpSlots) {};

        LIST_FOREACH(connections, hc, d->server->connections) {
                bool same_peer;

                if (hc->daemon != d || hc->phase == HTTP_CONNECTION_CLOSING)
                        continue;
                same_peer = memcmp(&hc->peer, peer, sizeof(*peer)) == 0;
                ret->total++;
                ret->peer_total += same_peer;
                if (hc->authenticated)
                        continue;
                ret->unauthenticated++;
                ret->peer_unauthenticated += same_peer;
                /* A request being handled is left to finish (the public ones are short); a
                 * connection that came in with the same burst has its chance to send its request
                 * (with the key), and so has one whose bytes libmicrohttpd has not read yet. The
                 * list runs from the newest connection: the last one seen is the oldest. */
                if (hc->phase != HTTP_CONNECTION_HEADERS && hc->phase != HTTP_CONNECTION_BODY)
                        continue;
                if (http_connection_has_unread(hc))
                        continue;
                if (now - hc->phase_start_usec < HTTP_EVICT_GRACE_USEC) {
                        ret->oldest_new = hc;
                        if (same_peer)
                                ret->peer_oldest_new = hc;
                        continue;
                }
                ret->oldest = hc;
                if (same_peer)
                        ret->peer_oldest = hc;
        }
}

/* Makes room for a new connection: answers 'hc', which has not authenticated and waits for its
 * request, with 503 and Retry-After, and closes it. Its request, if one arrives or was read in
 * part, reaches no resource (http_connection_closed()): the 503 is its answer. */
static void http_connection_evict(HttpConnection *hc) {
        _cleanup_(http_response_freep) HttpResponse *resp = NULL;
        Server *s = hc->daemon->server;
        HttpConnectionPhase phase = hc->phase;
        uint64_t now = server_now(s);
        char peer[PEER_MAX];
        int fd;

        s->n_connections_evicted++;
        if (hc->request) {
                hc->request->close_reason = "closed to make room";
                if (hc->request->state == HTTP_REQUEST_RECEIVING)
                        hc->request->state = HTTP_REQUEST_ANSWERED;
        }
        fd = http_connection_fd(hc->connection);
        if (fd < 0) {
                hc->phase = HTTP_CONNECTION_CLOSING;
                hc->request = NULL;
                return;
        }
        if (http_response_new_error(HTTP_SERVICE_UNAVAILABLE, HTTP_ERROR_TOO_MANY_CONNECTIONS, &resp) >= 0) {
                resp->retry_after = HTTP_CONNECTIONS_RETRY_AFTER;
                if (http_connection_send_final(hc->connection, resp) >= 0 && hc->request)
                        hc->request->status = HTTP_SERVICE_UNAVAILABLE;
        }
        http_connection_shut(hc, fd);

        http_connection_peer(hc->connection, peer);
        log_full(ratelimit_below(&s->cut_ratelimit, now) ? LOG_INFO : LOG_DEBUG,
                 "Answered 503 and closed connection from %s to make room for a new one: not "
                 "authenticated, waiting for its request %s for %" PRIu64 " ms.", peer,
                 http_connection_phase_to_string(phase), (now - hc->phase_start_usec) / USEC_PER_MSEC);
}

enum MHD_Result http_connection_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
        HttpDaemon *d = cls;
        HttpAdmission admission;
        HttpConnection *victim;
        struct in6_addr peer;
        HttpSlots slots;

        http_peer_from_sockaddr(addr, addrlen, &peer);
        http_daemon_count_slots(d, &peer, &slots);

        admission = http_slots_admission(&slots);
        victim = http_slots_to_close(&slots, admission);
        if (victim)
                http_connection_evict(victim);
        else if (admission == HTTP_ADMIT_OVER) {
                /* Never accepted and closed unanswered: the connection is served like any other.
                 * libmicrohttpd's own limit (HTTP_CONNECTIONS_HARD_MAX) bounds them all; at it,
                 * it stops accepting and new connections wait in the listen backlog. */
                d->server->n_connections_over++;
                log_debug("Admitted a connection over the bounds: its peer has %u connections open (%u not "
                          "authenticated), %u are open in all (%u not authenticated), and none may be "
                          "closed for it.", slots.peer_total, slots.peer_unauthenticated, slots.total,
                          slots.unauthenticated);
        }
        return MHD_YES;
}

bool http_connection_closed(const HttpConnection *hc) {
        return hc && hc->phase == HTTP_CONNECTION_CLOSING;
}

void http_connection_authenticated(HttpConnection *hc) {
        if (hc)
                hc->authenticated = true;
}

void http_connection_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe) {
        HttpDaemon *d = cls;
        Server *s = d->server;
        HttpConnection *hc;

        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *info;
                const struct sockaddr *sa = NULL;

                hc = calloc(1, sizeof(HttpConnection));
                if (!hc) {
                        /* The connection goes on with MHD's idle timeout only. */
                        log_oom();
                        return;
                }
                hc->daemon = d;
                hc->connection = connection;
                info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                if (info)
                        sa = info->client_addr;
                /* MHD gives no length: the family says which structure it is. */
                http_peer_from_sockaddr(sa, sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                            : sizeof(struct sockaddr_in),
                                        &hc->peer);

                LIST_PREPEND(connections, s->connections, hc);
                s->n_connections++;
                *socket_context = hc;

                http_connection_enter(hc, HTTP_CONNECTION_HEADERS, NULL);
                return;
        }

        hc = *socket_context;
        if (!hc)
                return;
        *socket_context = NULL;

        LIST_REMOVE(connections, s->connections, hc);
        assert(s->n_connections > 0);
        s->n_connections--;
        free(hc);

        if (s->n_connections == 0 && s->deadline_event_source)
                (void) sd_event_source_set_enabled(s->deadline_event_source, SD_EVENT_OFF);
}

int http_connection_watch_hangup(struct MHD_Connection *connection, sd_event *event,
                                 sd_event_io_handler_t callback, void *userdata, sd_event_source **ret) {
        int fd, r;

        assert(event);
        assert(callback);
        assert(ret);

        fd = http_connection_fd(connection);
        if (fd < 0)
                return fd;
        /* Data (a pipelined request) is libmicrohttpd's to read: only the end of the stream wakes us. */
        r = sd_event_add_io(event, ret, fd, EPOLLRDHUP, callback, userdata);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(*ret, "http-client-hangup");
        return 0;
}

int socket_peer_has_all(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLRDHUP };
        int queued;

        /* It does not wait: no signal can interrupt it. */
        if (poll(&p, 1, 0) < 0)
                return -errno;
        if (p.revents & POLLNVAL)
                return -EBADF;
        if (!(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                return 1;
        /* AF_UNIX has no acknowledgement: its error is a peer that closed with our data unread. */
        if (p.revents & POLLERR) {
                int domain = 0;
                socklen_t l = sizeof(domain);

                if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) < 0)
                        return -errno;
                if (domain == AF_UNIX)
                        return 0;
        }
        /* The peer is done sending, or reset the connection: did it take everything before?
         * Acknowledged by its TCP (the FIN of a client that read the answer and closed acknowledges
         * it), read (AF_UNIX). A reset alone says nothing: HAProxy aborts its server connections
         * with one (SO_LINGER 0) right after it read a complete answer, and the data it
         * acknowledged before is counted out of the queue all the same; data that met a socket
         * closed before it came is never acknowledged, and stays counted. */
        if (ioctl(fd, SIOCOUTQ, &queued) < 0)
                return -errno;
        return queued == 0;
}

bool http_connection_answer_delivered(struct MHD_Connection *connection) {
        HttpConnection *hc = http_connection_get(connection);
        int fd = http_connection_fd(connection);

        /* http_router_request_completed() puts a connection back to HEADERS only for a request that
         * libmicrohttpd completed (MHD_REQUEST_TERMINATED_COMPLETED_OK: all of the answer written);
         * any other end, or one we cut off, is CLOSING. */
        if (hc && hc->phase != HTTP_CONNECTION_HEADERS)
                return false;
        return fd >= 0 && socket_peer_has_all(fd) > 0;
}
