/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the gateway's connections: the deadline of each phase, the timer, final answers, peers and
 * slots. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "gateway-server.h"
#include "http-connection.h"
#include "http-util.h"
#include "io-util.h"
#include "list.h"
#include "tests.h"

#define MIB (1024ULL * 1024ULL)

static void test_phase_strings(void) {
        for (HttpConnectionPhase p = 0; p < _HTTP_CONNECTION_PHASE_MAX; p++)
                ASSERT_TRUE(http_connection_phase_to_string(p));
        ASSERT_STREQ(http_connection_phase_to_string(HTTP_CONNECTION_HEADERS), "headers");
        ASSERT_TRUE(!http_connection_phase_to_string(_HTTP_CONNECTION_PHASE_MAX));
        ASSERT_TRUE(!http_connection_phase_to_string(_HTTP_CONNECTION_PHASE_INVALID));
}

static void test_deadlines(void) {
        const uint64_t t = 1000 * USEC_PER_SEC;

        /* The header deadline is absolute: bytes received do not move it. */
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_HEADERS, t, 0), t + HTTP_HEADER_TIMEOUT_USEC);
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_HEADERS, t, 12345), t + HTTP_HEADER_TIMEOUT_USEC);
        ASSERT_EQ(HTTP_HEADER_TIMEOUT_USEC, 10 * USEC_PER_SEC);

        /* A body starts with its allowance and earns one second per HTTP_BODY_RATE_MIN bytes. */
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BODY, t, 0), t + HTTP_BODY_TIMEOUT_USEC);
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BODY, t, HTTP_BODY_RATE_MIN),
                  t + HTTP_BODY_TIMEOUT_USEC + USEC_PER_SEC);
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BODY, t, HTTP_BODY_RATE_MIN / 2),
                  t + HTTP_BODY_TIMEOUT_USEC + USEC_PER_SEC / 2);
        /* ... up to the maximum, however much arrives. */
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BODY, t, 300 * MIB),
                  t + HTTP_BODY_TIMEOUT_MAX_USEC);
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BODY, t, UINT64_MAX),
                  t + HTTP_BODY_TIMEOUT_MAX_USEC);

        /* A dribbling client (one byte a second) runs out of time right after the allowance. */
        for (uint64_t s = 1; s < 60; s++) {
                uint64_t d = http_connection_deadline(HTTP_CONNECTION_BODY, t, s);
                if (t + s * USEC_PER_SEC >= d) {
                        ASSERT_TRUE(s * USEC_PER_SEC >= HTTP_BODY_TIMEOUT_USEC);
                        ASSERT_TRUE(s * USEC_PER_SEC <= HTTP_BODY_TIMEOUT_USEC + USEC_PER_SEC);
                        break;
                }
                ASSERT_TRUE(s < 20);
        }

        /* A client at the minimum rate or faster never runs out, up to 300 MiB (the /storage/put
         * limit) within the maximum. */
        for (uint64_t bytes = 0; bytes <= 300 * MIB; bytes += 7 * MIB) {
                uint64_t at_min_rate = t + bytes * USEC_PER_SEC / HTTP_BODY_RATE_MIN;
                uint64_t at_1mib = t + bytes * USEC_PER_SEC / MIB;

                ASSERT_TRUE(at_1mib < http_connection_deadline(HTTP_CONNECTION_BODY, t, bytes));
                if (at_min_rate < t + HTTP_BODY_TIMEOUT_MAX_USEC - HTTP_BODY_TIMEOUT_USEC)
                        ASSERT_TRUE(at_min_rate < http_connection_deadline(HTTP_CONNECTION_BODY, t, bytes));
        }

        /* No deadline of ours while a request is handled, nor once cut off. */
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_BUSY, t, 0), UINT64_MAX);
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_CLOSING, t, 0), UINT64_MAX);
        /* Never wraps. */
        ASSERT_EQ(http_connection_deadline(HTTP_CONNECTION_HEADERS, UINT64_MAX - 5, 0), UINT64_MAX - 1);
}

static void test_format_final(void) {
        HttpResponse *resp = NULL;
        char *text = NULL;
        size_t size = 0;
        const char *expected =
                "HTTP/1.1 413 Payload Too Large\r\n"
                "Connection: close\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: 41\r\n"
                "\r\n"
                "{\"error\":\"request body exceeds 10 bytes\"}";

        ASSERT_TRUE(http_response_new_error(413, "request body exceeds 10 bytes", &resp) == 0);
        ASSERT_TRUE(http_response_format_final(resp, &text, &size) == 0);
        if (!streq(text, expected) && !strstr(text, "413 Content Too Large"))
                fprintf(stderr, "got: %s\n", text);
        /* Newer libmicrohttpd calls 413 "Content Too Large" (RFC 9110). */
        ASSERT_TRUE(streq(text, expected) || strstr(text, "HTTP/1.1 413 Content Too Large\r\n"));
        ASSERT_EQ(size, strlen(text));
        ASSERT_TRUE(strstr(text, "\r\n\r\n{\"error\":\"request body exceeds 10 bytes\"}"));
        free(text);
        http_response_free(resp);

        /* A 503 says when to retry, on the socket too. */
        ASSERT_TRUE(http_response_new_error(503, "server busy, retry later", &resp) == 0);
        resp->retry_after = "1";
        ASSERT_TRUE(http_response_format_final(resp, &text, &size) == 0);
        ASSERT_STREQ(text, "HTTP/1.1 503 Service Unavailable\r\n"
                           "Connection: close\r\n"
                           "Retry-After: 1\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: 36\r\n"
                           "\r\n"
                           "{\"error\":\"server busy, retry later\"}");
        free(text);
        http_response_free(resp);

        ASSERT_TRUE(http_response_new_error(408, "request body too slow", &resp) == 0);
        ASSERT_TRUE(http_response_format_final(resp, &text, &size) == 0);
        ASSERT_TRUE(strncmp(text, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0);
        free(text);
        http_response_free(resp);
}

/* The timer against connections that libmicrohttpd does not know (no socket to shut down): it arms
 * for the earliest deadline, cuts whoever is past theirs, and is off when nobody has one. */
static void test_timer(void) {
        HttpConnection a = {}, b = {};
        HttpDaemon d = {};
        Server s = {};
        uint64_t when;
        int enabled;

        ASSERT_TRUE(sd_event_new(&s.event) >= 0);
        ASSERT_TRUE(server_deadline_timer_new(&s) >= 0);
        s.cut_ratelimit = (RateLimit) { .interval_usec = USEC_PER_SEC, .burst = 1 };
        d.server = &s;
        a.daemon = b.daemon = &d;
        LIST_PREPEND(connections, s.connections, &b);
        LIST_PREPEND(connections, s.connections, &a);
        s.n_connections = 2;

        ASSERT_TRUE(sd_event_source_get_enabled(s.deadline_event_source, &enabled) >= 0);
        ASSERT_EQ(enabled, SD_EVENT_OFF);

        http_connection_enter(&a, HTTP_CONNECTION_BUSY, NULL);
        ASSERT_TRUE(sd_event_source_get_enabled(s.deadline_event_source, &enabled) >= 0);
        ASSERT_EQ(enabled, SD_EVENT_OFF);

        http_connection_enter(&b, HTTP_CONNECTION_BODY, NULL);
        ASSERT_TRUE(sd_event_source_get_time(s.deadline_event_source, &when) >= 0);
        ASSERT_EQ(when, b.phase_start_usec + HTTP_BODY_TIMEOUT_USEC);
        /* A later deadline leaves the earlier one armed; received bytes do not re-arm. */
        http_connection_enter(&a, HTTP_CONNECTION_HEADERS, NULL);
        http_connection_body_received(&b, 1000000);
        ASSERT_TRUE(sd_event_source_get_time(s.deadline_event_source, &when) >= 0);
        ASSERT_EQ(when, b.phase_start_usec + HTTP_BODY_TIMEOUT_USEC);
        ASSERT_EQ(b.body_bytes, 1000000);

        /* Time passes: 'a' is past its header deadline, 'b' earned more time with its bytes. */
        a.phase_start_usec -= HTTP_HEADER_TIMEOUT_USEC + USEC_PER_SEC;
        b.phase_start_usec -= HTTP_BODY_TIMEOUT_USEC + USEC_PER_SEC;
        ASSERT_TRUE(sd_event_source_set_time(s.deadline_event_source, 1) >= 0);
        ASSERT_TRUE(sd_event_run(s.event, 0) > 0);
        ASSERT_EQ(a.phase, HTTP_CONNECTION_CLOSING);
        ASSERT_EQ(b.phase, HTTP_CONNECTION_BODY);
        ASSERT_TRUE(sd_event_source_get_enabled(s.deadline_event_source, &enabled) >= 0);
        ASSERT_EQ(enabled, SD_EVENT_ONESHOT);
        ASSERT_TRUE(sd_event_source_get_time(s.deadline_event_source, &when) >= 0);
        ASSERT_EQ(when, http_connection_deadline(HTTP_CONNECTION_BODY, b.phase_start_usec, b.body_bytes));

        /* A cut connection stays cut, whatever MHD reports about its request afterwards. */
        http_connection_enter(&a, HTTP_CONNECTION_HEADERS, NULL);
        ASSERT_EQ(a.phase, HTTP_CONNECTION_CLOSING);

        /* Nobody with a deadline: the timer turns itself off. */
        http_connection_enter(&b, HTTP_CONNECTION_BUSY, NULL);
        ASSERT_TRUE(sd_event_source_set_time(s.deadline_event_source, 1) >= 0);
        ASSERT_TRUE(sd_event_run(s.event, 0) > 0);
        ASSERT_TRUE(sd_event_source_get_enabled(s.deadline_event_source, &enabled) >= 0);
        ASSERT_EQ(enabled, SD_EVENT_OFF);

        s.deadline_event_source = sd_event_source_disable_unref(s.deadline_event_source);
        s.event = sd_event_unref(s.event);
}

static struct in6_addr peer_of(const char *address) {
        struct sockaddr_in in = { .sin_family = AF_INET };
        struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
        struct in6_addr peer;

        if (inet_pton(AF_INET, address, &in.sin_addr) == 1)
                http_peer_from_sockaddr((struct sockaddr *) &in, sizeof(in), &peer);
        else {
                ASSERT_TRUE(inet_pton(AF_INET6, address, &in6.sin6_addr) == 1);
                http_peer_from_sockaddr((struct sockaddr *) &in6, sizeof(in6), &peer);
        }
        return peer;
}

static bool same_peer(const char *a, const char *b) {
        struct in6_addr x = peer_of(a), y = peer_of(b);

        return memcmp(&x, &y, sizeof(x)) == 0;
}

static void test_peers(void) {
        struct sockaddr_un un = { .sun_family = AF_UNIX };
        struct in6_addr peer;
        char text[INET6_ADDRSTRLEN];

        /* The whole loopback range, in every spelling, is one peer, and so are local sockets. */
        ASSERT_TRUE(same_peer("127.0.0.1", "127.255.0.9"));
        ASSERT_TRUE(same_peer("127.0.0.1", "::1"));
        ASSERT_TRUE(same_peer("127.0.0.1", "::ffff:127.3.2.1"));
        http_peer_from_sockaddr((struct sockaddr *) &un, sizeof(un), &peer);
        ASSERT_TRUE(IN6_IS_ADDR_LOOPBACK(&peer));
        http_peer_from_sockaddr(NULL, 0, &peer);
        ASSERT_TRUE(IN6_IS_ADDR_LOOPBACK(&peer));

        /* IPv4 addresses count one by one, the same as their IPv4-mapped form. */
        ASSERT_TRUE(!same_peer("192.0.2.1", "192.0.2.2"));
        ASSERT_TRUE(same_peer("192.0.2.1", "::ffff:192.0.2.1"));
        ASSERT_TRUE(!same_peer("192.0.2.1", "127.0.0.1"));
        peer = peer_of("192.0.2.1");
        ASSERT_STREQ(inet_ntop(AF_INET6, &peer, text, sizeof(text)), "::ffff:192.0.2.1");

        /* IPv6 by /64: one host may hold all of it. */
        ASSERT_TRUE(same_peer("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"));
        ASSERT_TRUE(!same_peer("2001:db8:1:2::1", "2001:db8:1:3::1"));
        ASSERT_TRUE(!same_peer("2001:db8:1:2::1", "::1"));
        peer = peer_of("2001:db8:1:2:3:4:5:6");
        ASSERT_STREQ(inet_ntop(AF_INET6, &peer, text, sizeof(text)), "2001:db8:1:2::");

        /* A length too short for the family is no address: a local client. */
        http_peer_from_sockaddr((struct sockaddr *) &(struct sockaddr_in) { .sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(0xc0000201) }, 4, &peer);
        ASSERT_TRUE(IN6_IS_ADDR_LOOPBACK(&peer));
}

static void test_slots(void) {
        const unsigned peer_open = HTTP_CONNECTIONS_PER_IP_MAX - HTTP_CONNECTIONS_PER_IP_RESERVED;
        const unsigned all_open = HTTP_CONNECTIONS_MAX - HTTP_CONNECTIONS_RESERVED;
        HttpConnection mine = {}, other = {};
        HttpSlots s;

        /* The numbers the documentation gives. */
        ASSERT_EQ(peer_open, 48);
        ASSERT_EQ(all_open, 192);

        ASSERT_EQ(http_slots_admission(&(HttpSlots) {}), HTTP_ADMIT);

        /* A peer's unauthenticated connections stop at 48: the 49th replaces the oldest. */
        s = (HttpSlots) { .total = peer_open - 1, .unauthenticated = peer_open - 1,
                          .peer_total = peer_open - 1, .peer_unauthenticated = peer_open - 1,
                          .oldest = &mine, .peer_oldest = &mine };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT);
        s.total = s.unauthenticated = s.peer_total = s.peer_unauthenticated = peer_open;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_PEER);
        /* ... never one of another peer's; when none of its own waits for a request (they are
         * being answered), it comes in over the bound rather than be closed unanswered. */
        s.peer_oldest = NULL;
        s.oldest = &other;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);

        /* With authenticated connections of its own beside them, the peer's 64 bound the rest. */
        s = (HttpSlots) { .total = 60, .unauthenticated = 40, .peer_total = 60, .peer_unauthenticated = 40,
                          .oldest = &mine, .peer_oldest = &mine };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT);
        s.total = s.peer_total = HTTP_CONNECTIONS_PER_IP_MAX;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_PEER);
        /* All 64 authenticated: nothing is closed for a newcomer, which comes in over the bound
         * (libmicrohttpd's own limit, HTTP_CONNECTIONS_HARD_MAX, bounds them all). */
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_PER_IP_MAX, .peer_total = HTTP_CONNECTIONS_PER_IP_MAX };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        /* ... and another peer's waiting connection is not closed for it either. */
        s.oldest = &other;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        /* The reserve is what authenticated connections may use beyond the 48. */
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_PER_IP_MAX - 1,
                          .unauthenticated = peer_open - 1,
                          .peer_total = HTTP_CONNECTIONS_PER_IP_MAX - 1,
                          .peer_unauthenticated = peer_open - 1 };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT);

        /* Over all peers: 192 unauthenticated, 256 in all; room is made from any peer. */
        s = (HttpSlots) { .total = all_open, .unauthenticated = all_open, .peer_total = 3,
                          .peer_unauthenticated = 3, .oldest = &other };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_OLDEST);
        s.oldest = NULL;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_MAX, .unauthenticated = 10, .oldest = &other };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_OLDEST);
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_MAX - 1, .unauthenticated = all_open - 1 };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT);

        /* Connections in their grace (a burst of one client's) are not closed for each other ... */
        s = (HttpSlots) { .total = peer_open, .unauthenticated = peer_open, .peer_total = peer_open,
                          .peer_unauthenticated = peer_open, .oldest_new = &mine, .peer_oldest_new = &mine };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        s.total = s.unauthenticated = HTTP_CONNECTIONS_PER_IP_MAX - 1;
        s.peer_total = s.peer_unauthenticated = HTTP_CONNECTIONS_PER_IP_MAX - 1;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        /* ... one past its grace goes first ... */
        s.peer_oldest = s.oldest = &other;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_PEER);
        /* ... and once those without a key fill all of the peer's slots, they make room too. */
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_PER_IP_MAX,
                          .unauthenticated = HTTP_CONNECTIONS_PER_IP_MAX,
                          .peer_total = HTTP_CONNECTIONS_PER_IP_MAX,
                          .peer_unauthenticated = HTTP_CONNECTIONS_PER_IP_MAX, .oldest_new = &mine,
                          .peer_oldest_new = &mine };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_PEER_NEW);
        ASSERT_TRUE(http_slots_to_close(&s, HTTP_ADMIT_AFTER_PEER_NEW) == &mine);
        ASSERT_TRUE(!http_slots_to_close(&s, HTTP_ADMIT_OVER));
        /* Over all peers the same, at all slots. */
        s = (HttpSlots) { .total = HTTP_CONNECTIONS_MAX - 1, .unauthenticated = HTTP_CONNECTIONS_MAX - 1,
                          .peer_total = 1, .peer_unauthenticated = 1, .oldest_new = &other };
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_OVER);
        s.total = s.unauthenticated = HTTP_CONNECTIONS_MAX;
        ASSERT_EQ(http_slots_admission(&s), HTTP_ADMIT_AFTER_OLDEST_NEW);
}

/* A connected TCP pair on the loopback: *ret_ours as the gateway has it, *ret_peer the client. */
static void tcp_pair(int *ret_ours, int *ret_peer) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        int l, peer, ours;

        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(l >= 0);
        ASSERT_TRUE(bind(l, (struct sockaddr *) &a, sizeof(a)) == 0 && listen(l, 1) == 0);
        ASSERT_TRUE(getsockname(l, (struct sockaddr *) &a, &len) == 0);
        peer = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(peer >= 0 && connect(peer, (struct sockaddr *) &a, sizeof(a)) == 0);
        ours = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        ASSERT_TRUE(ours >= 0);
        safe_close(l);
        *ret_ours = ours;
        *ret_peer = peer;
}

/* What arrives on the loopback is in before the send returns; a reset the peer sends back in
 * answer too, but give it a moment on a busy machine. */
static void settle(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLRDHUP };
        (void) poll(&p, 1, 100);
}

static void reads_all(int fd, size_t n) {
        char buf[64];
        ASSERT_TRUE(n <= sizeof(buf) && read(fd, buf, sizeof(buf)) == (ssize_t) n);
}

/* socket_peer_has_all(): the peer has everything unless it reset the connection, or shut down its
 * side before it had taken all (acknowledged it: TCP; read it: AF_UNIX). */
static void test_peer_has_all(void) {
        static const char answer[] = "HTTP/1.1 200 OK\r\n\r\n{}";
        const size_t n = sizeof(answer) - 1;
        int ours, peer, pair[2];

        /* Open, with or without an answer: it has it (or will: not our business). */
        tcp_pair(&ours, &peer);
        ASSERT_EQ(socket_peer_has_all(ours), 1);
        ASSERT_TRUE(write(ours, answer, n) == (ssize_t) n);
        settle(ours);
        ASSERT_EQ(socket_peer_has_all(ours), 1);
        /* Read and closed: its FIN acknowledged the answer. */
        reads_all(peer, n);
        safe_close(peer);
        settle(ours);
        ASSERT_EQ(socket_peer_has_all(ours), 1);
        safe_close(ours);

        /* Closed before the answer was written: the answer meets a reset. */
        tcp_pair(&ours, &peer);
        safe_close(peer);
        settle(ours);
        ASSERT_TRUE(write(ours, answer, n) == (ssize_t) n);
        settle(ours);
        ASSERT_EQ(socket_peer_has_all(ours), 0);
        safe_close(ours);

        /* Closed with the answer unread, or aborted after reading it (HAProxy's SO_LINGER 0): a reset
         * after its TCP acknowledged the answer. Its host has it; what it does with it is its own. */
        for (unsigned pass = 0; pass < 2; pass++) {
                tcp_pair(&ours, &peer);
                ASSERT_TRUE(write(ours, answer, n) == (ssize_t) n);
                settle(peer);
                if (pass == 1) {
                        reads_all(peer, n);
                        ASSERT_TRUE(setsockopt(peer, SOL_SOCKET, SO_LINGER,
                                               &(struct linger) { .l_onoff = 1, .l_linger = 0 },
                                               sizeof(struct linger)) == 0);
                }
                safe_close(peer);
                settle(ours);
                ASSERT_EQ(socket_peer_has_all(ours), 1);
                safe_close(ours);
        }

        /* Half-closed first, the answer acknowledged after: it is in its socket, to read. */
        tcp_pair(&ours, &peer);
        ASSERT_TRUE(shutdown(peer, SHUT_WR) == 0);
        settle(ours);
        ASSERT_TRUE(write(ours, answer, n) == (ssize_t) n);
        for (unsigned i = 0; i < 100 && socket_peer_has_all(ours) != 1; i++)
                (void) usleep(10 * 1000); /* its delayed ACK: tens of ms at most */
        ASSERT_EQ(socket_peer_has_all(ours), 1);
        reads_all(peer, n);
        safe_close(peer);
        safe_close(ours);

        /* AF_UNIX: what the peer has not read is not its yet. */
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
        ASSERT_EQ(socket_peer_has_all(pair[0]), 1);
        ASSERT_TRUE(write(pair[0], answer, n) == (ssize_t) n);
        ASSERT_EQ(socket_peer_has_all(pair[0]), 1);
        ASSERT_TRUE(shutdown(pair[1], SHUT_WR) == 0);
        ASSERT_EQ(socket_peer_has_all(pair[0]), 0);
        reads_all(pair[1], n);
        ASSERT_EQ(socket_peer_has_all(pair[0]), 1);
        ASSERT_TRUE(write(pair[0], answer, n) == (ssize_t) n);
        safe_close(pair[1]);
        ASSERT_EQ(socket_peer_has_all(pair[0]), 0);
        safe_close(pair[0]);

        /* Nothing to look at. */
        ASSERT_EQ(socket_peer_has_all(pair[0]), -EBADF);
}

int main(void) {
        RUN(test_phase_strings);
        RUN(test_deadlines);
        RUN(test_format_final);
        RUN(test_timer);
        RUN(test_peers);
        RUN(test_slots);
        RUN(test_peer_has_all);
        return 0;
}
