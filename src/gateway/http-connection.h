/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The HTTP front end's connections: which phase each is in, its deadline, and cutting it off after that. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <systemd/sd-event.h>
#include <microhttpd.h>

#include "gateway-server.h"
#include "http-util.h"
#include "list.h"

/* What a connection is waiting for. libmicrohttpd only knows an idle timeout, which every byte
 * resets: a client dribbling its header or body could hold a connection for ever. The phases give
 * each connection an absolute deadline on top of that. */
typedef enum HttpConnectionPhase {
        HTTP_CONNECTION_HEADERS,  /* request line and header fields (first request or keep-alive) */
        HTTP_CONNECTION_BODY,     /* header accepted, body arriving */
        HTTP_CONNECTION_BUSY,     /* request handled or answered: only MHD's idle timeout applies */
        HTTP_CONNECTION_CLOSING,  /* cut off, waiting for libmicrohttpd to notice */
        _HTTP_CONNECTION_PHASE_MAX,
        _HTTP_CONNECTION_PHASE_INVALID = -EINVAL,
} HttpConnectionPhase;

struct HttpConnection {
        HttpDaemon *daemon;
        struct MHD_Connection *connection;
        LIST_FIELDS(HttpConnection, connections); /* Server.connections */

        HttpConnectionPhase phase;
        uint64_t phase_start_usec;
        uint64_t body_bytes;               /* received in this BODY phase */
        HttpRequest *request;              /* the request whose body arrives, in the BODY phase */
        struct in6_addr peer;              /* whose connection it is (http_peer_from_sockaddr()) */
        bool authenticated;                /* a request on it carried the key */
};

const char *http_connection_phase_to_string(HttpConnectionPhase p) _pure_;

/* The monotonic time by which a connection in 'phase' since 'start_usec' must have moved on, having
 * received 'body_bytes' of a body; UINT64_MAX for none. Headers get HTTP_HEADER_TIMEOUT_USEC. A body
 * gets HTTP_BODY_TIMEOUT_USEC plus one second per HTTP_BODY_RATE_MIN bytes received, at most
 * HTTP_BODY_TIMEOUT_MAX_USEC: a body slower than the minimum rate, or stalled, runs out of time. */
uint64_t http_connection_deadline(HttpConnectionPhase phase, uint64_t start_usec,
                                  uint64_t body_bytes) _pure_;

/* Whether 'sa' is in 127.0.0.0/8, is ::1 or an IPv4-mapped address of 127.0.0.0/8: one peer for
 * HTTP_CONNECTIONS_PER_IP_MAX, since any local process can bind any of them. */
bool sockaddr_is_loopback(const struct sockaddr *sa, socklen_t len) _pure_;

/* The peer a client address counts as for HTTP_CONNECTIONS_PER_IP_MAX: an IPv4 address as its
 * IPv4-mapped IPv6 address, an IPv6 address as its /64 (the rest zero), and ::1 for the whole
 * loopback range and whatever is no IP address (a local socket). */
void http_peer_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct in6_addr *ret);

/* The open connections of one listening socket (cut ones not counted), as a new connection from
 * 'peer' finds them. 'oldest' is the oldest that has not authenticated and has waited for its
 * request's header or body for HTTP_EVICT_GRACE_USEC at least, with nothing unread in its socket,
 * 'peer_oldest' the same among the peer's own; 'oldest_new' and 'peer_oldest_new' the same among
 * those that have waited less long. NULL when there is none. */
typedef struct HttpSlots {
        unsigned total, unauthenticated;
        unsigned peer_total, peer_unauthenticated;
        HttpConnection *oldest, *peer_oldest;
        HttpConnection *oldest_new, *peer_oldest_new;
} HttpSlots;

typedef enum HttpAdmission {
        HTTP_ADMIT,                /* a slot is free */
        HTTP_ADMIT_AFTER_PEER,     /* once 'peer_oldest' is closed */
        HTTP_ADMIT_AFTER_OLDEST,   /* once 'oldest' is closed */
        HTTP_ADMIT_AFTER_PEER_NEW, /* once 'peer_oldest_new' is closed */
        HTTP_ADMIT_AFTER_OLDEST_NEW, /* once 'oldest_new' is closed */
        HTTP_ADMIT_OVER,           /* over a bound, nothing may be closed for it: admitted all the
                                    * same, up to HTTP_CONNECTIONS_HARD_MAX (never closed unanswered) */
} HttpAdmission;

/* Whether a new connection, which has not authenticated yet, may have a slot (the rules are at
 * HTTP_CONNECTIONS_MAX in gateway-server.h). */
HttpAdmission http_slots_admission(const HttpSlots *slots) _pure_;
/* The connection 'admission' closes to make room, NULL for none. */
HttpConnection *http_slots_to_close(const HttpSlots *slots, HttpAdmission admission) _pure_;

/* libmicrohttpd's accept policy callback, called before libmicrohttpd sets a connection up (and,
 * in our mode, right before its MHD_CONNECTION_NOTIFY_STARTED: no other connection comes in
 * between). Applies http_slots_admission(), answering a connection with 503 and closing it to make
 * room where it says so. Always admits the new connection: libmicrohttpd would close it unanswered
 * otherwise. The closure is the HttpDaemon. */
enum MHD_Result http_connection_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback; the closure is the HttpDaemon. */
void http_connection_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe);

/* Whether we cut the connection off (past a deadline, or to make room) and wait for libmicrohttpd
 * to close it. Its socket may still hold a request that libmicrohttpd reads: it must reach no
 * resource, since its answer could not be sent. NULL: no. */
bool http_connection_closed(const HttpConnection *hc) _pure_;

/* A request on the connection carried the key: from now on it may hold a reserved slot and is
 * never closed to make room. NULL is ignored. */
void http_connection_authenticated(HttpConnection *hc);

/* Our state of an MHD connection, NULL if it is not tracked. */
HttpConnection *http_connection_get(struct MHD_Connection *connection);

/* Moves to 'phase' now ('req' is the request whose body arrives in the BODY phase) and makes sure
 * the deadline timer fires in time. */
void http_connection_enter(HttpConnection *hc, HttpConnectionPhase phase, HttpRequest *req);
/* Body bytes arrived: they extend the body deadline. */
void http_connection_body_received(HttpConnection *hc, size_t n);

/* Formats a complete "Connection: close" HTTP/1.1 response for writing to the socket directly. */
int http_response_format_final(const HttpResponse *resp, char **ret, size_t *ret_size);
/* Answers on the socket itself and shuts down the sending side. For the one case libmicrohttpd
 * cannot answer: in the middle of a request body (a chunked body over the limit, a body too slow).
 * The caller then has libmicrohttpd close the connection. */
int http_connection_send_final(struct MHD_Connection *connection, const HttpResponse *resp);

/* The deadline timer (one per server, armed only while connections have a deadline). */
int server_deadline_timer_new(Server *s);

/* Calls 'callback' once the client of 'connection' has shut down its side of the socket or the
 * socket failed (EPOLLRDHUP, EPOLLHUP, EPOLLERR), never for data. For a request that waits
 * suspended, when libmicrohttpd does not look at the socket; the source must go before the
 * connection is resumed. */
int http_connection_watch_hangup(struct MHD_Connection *connection, sd_event *event,
                                 sd_event_io_handler_t callback, void *userdata, sd_event_source **ret);

/* Whether the peer of the connected stream socket 'fd' has everything sent on it so far: 1 unless
 * it shut down its side or reset the connection without having acknowledged (TCP) or read
 * (AF_UNIX) every byte; 0 if so; -errno if that can't be told. */
int socket_peer_has_all(int fd);

/* For a request whose answer libmicrohttpd is done with (from its completion on, before the
 * request is freed): whether the answer reached its client. That is: libmicrohttpd completed the
 * request (MHD_REQUEST_TERMINATED_COMPLETED_OK, every byte written to the socket), and the client
 * had not reset the connection nor shut down its side without its TCP taking the answer
 * (socket_peer_has_all()). What a client does with an answer it has is its own business. */
bool http_connection_answer_delivered(struct MHD_Connection *connection);
