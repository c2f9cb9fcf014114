/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HTTP front end's connections: which phase each is in, its deadline, and cutting it off after that. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-event.h>
#include <microhttpd.h>

#include "http-connection.h"
#include "http-router.h"
#include "log.h"
#include "string-util.h"

#define PEER_MAX (INET6_ADDRSTRLEN + 16)

static const char *const phase_table[_HTTP_CONNECTION_PHASE_MAX] = {
        [HTTP_CONNECTION_HEADERS] = "headers",
        [HTTP_CONNECTION_BODY]    = "body",
        [HTTP_CONNECTION_BUSY]    = "busy",
        [HTTP_CONNECTION_CLOSING] = "closing",
};

const char *http_connection_phase_to_string(HttpConnectionPhase p) {
        if (p < 0 || p >= _HTTP_CONNECTION_PHASE_MAX)
                return NULL;
        return phase_table[p];
}

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
                        allowance = MIN(HTTP_BODY_TIMEOUT_USEC + body_bytes * USEC_PER_SEC / HTTP_BODY_RATE_MIN,
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

        if (sd_event_source_get_enabled(s->deadline_event_source, &enabled) >= 0 && enabled != SD_EVENT_OFF &&
            sd_event_source_get_time(s->deadline_event_source, &current) >= 0 && current <= deadline)
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
                     "%s"
                     "Content-Length: %zu\r\n"
                     "\r\n"
                     "%.*s",
                     resp->status, isempty(reason) ? "Unknown" : reason,
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

/* Past the deadline: answer a body that is too slow, then shut the socket down so that
 * libmicrohttpd sees the end of the stream and closes the connection. */
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
        (void) shutdown(fd, SHUT_RDWR);

        http_connection_peer(hc->connection, peer);
        log_full(ratelimit_below(&s->cut_ratelimit, now) ? LOG_INFO : LOG_DEBUG,
                 "Closed connection from %s: request %s not complete after %" PRIu64 " s.",
                 peer, http_connection_phase_to_string(phase), seconds);

        /* The shutdown wakes MHD's epoll fd; make sure MHD runs even so. */
        http_daemon_kick(hc->daemon);
}

static int server_on_deadline(sd_event_source *source, uint64_t usec, void *userdata) {
        Server *s = userdata;
        uint64_t now, next = UINT64_MAX;

        now = server_now(s);
        for (HttpConnection *hc = s->connections; hc; hc = hc->next) {
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

enum MHD_Result http_connection_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
        HttpDaemon *d = cls;

        if (sockaddr_is_loopback(addr, addrlen) && d->n_loopback_connections >= HTTP_CONNECTIONS_PER_IP_MAX) {
                log_debug("Refused a connection from the loopback range: %u of its connections are open.",
                          d->n_loopback_connections);
                return MHD_NO;
        }
        return MHD_YES;
}

static bool http_connection_is_loopback(struct MHD_Connection *connection) {
        const union MHD_ConnectionInfo *info;
        const struct sockaddr *sa;

        info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!info || !info->client_addr)
                return false;
        sa = info->client_addr;
        /* MHD gives no length: the family says which structure it is. */
        return sockaddr_is_loopback(sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
                                                                    sizeof(struct sockaddr_in));
}

void http_connection_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe) {
        HttpDaemon *d = cls;
        Server *s = d->server;
        HttpConnection *hc;

        if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
                hc = calloc(1, sizeof(HttpConnection));
                if (!hc) {
                        /* The connection goes on with MHD's idle timeout only. */
                        log_oom();
                        return;
                }
                hc->daemon = d;
                hc->connection = connection;
                hc->next = s->connections;
                if (s->connections)
                        s->connections->prev = hc;
                s->connections = hc;
                s->n_connections++;
                *socket_context = hc;

                http_connection_enter(hc, HTTP_CONNECTION_HEADERS, NULL);

                if (http_connection_is_loopback(connection)) {
                        if (d->n_loopback_connections < HTTP_CONNECTIONS_PER_IP_MAX) {
                                hc->loopback = true;
                                d->n_loopback_connections++;
                        } else {
                                /* Past the accept policy together with others: closed at once. */
                                int fd = http_connection_fd(connection);

                                hc->phase = HTTP_CONNECTION_CLOSING;
                                if (fd >= 0)
                                        (void) shutdown(fd, SHUT_RDWR);
                                log_debug("Closed a connection from the loopback range: %u of its "
                                          "connections are open.", d->n_loopback_connections);
                                http_daemon_kick(d);
                        }
                }
                return;
        }

        hc = *socket_context;
        if (!hc)
                return;
        *socket_context = NULL;

        if (hc->prev)
                hc->prev->next = hc->next;
        else
                s->connections = hc->next;
        if (hc->next)
                hc->next->prev = hc->prev;
        assert(s->n_connections > 0);
        s->n_connections--;
        if (hc->loopback) {
                assert(d->n_loopback_connections > 0);
                d->n_loopback_connections--;
        }
        free(hc);

        if (s->n_connections == 0 && s->deadline_event_source)
                (void) sd_event_source_set_enabled(s->deadline_event_source, SD_EVENT_OFF);
}

int http_connection_watch_hangup(struct MHD_Connection *connection, sd_event *event, sd_event_io_handler_t callback,
                                 void *userdata, sd_event_source **ret) {
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
