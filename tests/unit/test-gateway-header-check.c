/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the header-section NUL check, against the libmicrohttpd the gateway links. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "gateway-server.h"
#include "http-header-check.h"
#include "macro.h"
#include "tests.h"

#define S(lit) lit, sizeof(lit) - 1

/* What the check says about a request, as the test server answers it. */
static void check_verdict(const HttpHeaderCheck *c, char *buf, size_t size) {
        if (c->folded)
                (void) snprintf(buf, size, "folded");
        else if (c->reason && c->name)
                (void) snprintf(buf, size, "%s \"%s\" %s", c->what, c->name, c->reason);
        else if (c->reason)
                (void) snprintf(buf, size, "%s %s", c->what, c->reason);
        else if (c->unknown)
                (void) snprintf(buf, size, "unknown");
        else
                (void) snprintf(buf, size, "ok");
}

/* Per request of the test server: the target as the URI log callback saw it, then the verdict. */
typedef struct Probe {
        char *raw_target;
        char verdict[256];
        bool begun;
} Probe;

static void *probe_uri_log(void *cls, const char *uri, struct MHD_Connection *connection) {
        Probe *p = calloc(1, sizeof(Probe));

        ASSERT_TRUE(p);
        p->raw_target = strdup(uri);
        ASSERT_TRUE(p->raw_target);
        return p;
}

static enum MHD_Result probe_access(void *cls, struct MHD_Connection *connection, const char *url,
                                    const char *method, const char *version, const char *upload_data,
                                    size_t *upload_data_size, void **con_cls) {
        Probe *p = *con_cls;
        struct MHD_Response *r;
        enum MHD_Result ret;

        ASSERT_TRUE(p);
        if (!p->begun) {
                HttpHeaderCheck c;

                p->begun = true;
                http_header_check_connection(&c, connection, method, url, version, p->raw_target);
                check_verdict(&c, p->verdict, sizeof(p->verdict));
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                *upload_data_size = 0;
                return MHD_YES;
        }
        r = MHD_create_response_from_buffer(strlen(p->verdict), p->verdict, MHD_RESPMEM_MUST_COPY);
        ASSERT_TRUE(r);
        ret = MHD_queue_response(connection, 200, r);
        MHD_destroy_response(r);
        return ret;
}

static void probe_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                            enum MHD_RequestTerminationCode toe) {
        Probe *p = *con_cls;

        if (p) {
                free(p->raw_target);
                free(p);
        }
        *con_cls = NULL;
}

static void probe_log(void *cls, const char *fmt, va_list ap) {
        /* libmicrohttpd's own 400s are expected here. */
}

static struct MHD_Daemon *probe;
static uint16_t probe_port;

static void probe_start(void) {
        const union MHD_DaemonInfo *info;

        /* The gateway's per-connection memory: the same buffer sizes, the same reallocations. */
        probe = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                 probe_access, NULL,
                                 MHD_OPTION_SOCK_ADDR, &(struct sockaddr_in) {
                                         .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
                                 MHD_OPTION_EXTERNAL_LOGGER, probe_log, NULL,
                                 MHD_OPTION_URI_LOG_CALLBACK, probe_uri_log, NULL,
                                 MHD_OPTION_NOTIFY_COMPLETED, probe_completed, NULL,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) HTTP_CONNECTION_MEMORY_MAX,
                                 MHD_OPTION_END);
        ASSERT_TRUE(probe);
        info = MHD_get_daemon_info(probe, MHD_DAEMON_INFO_BIND_PORT);
        ASSERT_TRUE(info && info->port > 0);
        probe_port = info->port;
}

static int probe_connect(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(probe_port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct timeval tv = { .tv_sec = 10 };
        int fd;

        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
        ASSERT_TRUE(connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0);
        return fd;
}

/* 'dribble': in pieces of that many bytes, with a pause after each; 0: at once. */
static void send_all(int fd, const char *data, size_t size, size_t dribble) {
        while (size > 0) {
                ssize_t n = send(fd, data, dribble > 0 ? MIN(dribble, size) : size, MSG_NOSIGNAL);

                ASSERT_TRUE(n > 0);
                data += n;
                size -= (size_t) n;
                if (dribble)
                        (void) nanosleep(&(struct timespec) { .tv_nsec = 1000 * 1000 }, NULL);
        }
}

typedef struct Reader {
        int fd;
        char buf[64 * 1024];
        size_t size;
} Reader;

/* The next final response: "<verdict>" for a 200 of the probe, "HTTP <status>" for anything else,
 * NULL at the end of the connection. Returned in a static buffer. */
static const char *read_response(Reader *rd) {
        static char out[512];
        char *end, *cl;
        size_t head, length = 0;
        unsigned status;

again:
        for (;;) {
                end = memmem(rd->buf, rd->size, "\r\n\r\n", 4);
                if (end)
                        break;
                ssize_t n = recv(rd->fd, rd->buf + rd->size, sizeof(rd->buf) - rd->size, 0);
                if (n <= 0)
                        return NULL;
                rd->size += (size_t) n;
        }
        head = (size_t) (end - rd->buf) + 4;
        ASSERT_TRUE(sscanf(rd->buf, "HTTP/1.%*c %u", &status) == 1);
        *end = 0;
        cl = strcasestr(rd->buf, "\r\nContent-Length:");
        if (cl)
                length = strtoul(cl + 17, NULL, 10);
        while (rd->size < head + length) {
                ssize_t n = recv(rd->fd, rd->buf + rd->size, sizeof(rd->buf) - rd->size, 0);
                ASSERT_TRUE(n > 0);
                rd->size += (size_t) n;
        }
        if (status < 200) { /* 100 Continue */
                memmove(rd->buf, rd->buf + head, rd->size - head);
                rd->size -= head;
                goto again;
        }
        if (status == 200)
                (void) snprintf(out, sizeof(out), "%.*s", (int) length, rd->buf + head);
        else
                (void) snprintf(out, sizeof(out), "HTTP %u", status);
        memmove(rd->buf, rd->buf + head + length, rd->size - head - length);
        rd->size -= head + length;
        return out;
}

/* Sends 'data' on a new connection; the answers must be 'expected' (NULL-terminated), in order. */
static void expect_full(const char *data, size_t size, size_t dribble, const char *const *expected) {
        static Reader rd;
        const char *got;

        rd = (Reader) { .fd = probe_connect() };
        send_all(rd.fd, data, size, dribble);
        for (const char *const *e = expected; *e; e++) {
                got = read_response(&rd);
                if (!got || strcmp(got, *e) != 0) {
                        fprintf(stderr, "request: ");
                        for (size_t i = 0; i < size; i++)
                                fprintf(stderr, data[i] >= 0x20 && data[i] < 0x7f ? "%c" : "\\x%02x",
                                        (unsigned char) data[i]);
                        fprintf(stderr, "\n  got:      %s\n  expected: %s\n", got ?: "(closed)", *e);
                        abort();
                }
        }
        (void) close(rd.fd);
}

#define expect(data, ...) expect_full(S(data), 0, (const char *const[]) { __VA_ARGS__, NULL })
#define expect_dribbled(data, ...) expect_full(S(data), 1, (const char *const[]) { __VA_ARGS__, NULL })

#define NUL_IN(name) "header field \"" name "\" contains a NUL byte"

/* Every shape of a valid request is accepted as it is. */
static void test_valid_shapes(void) {
        static char big[40 * 1024];
        size_t n = 0;

        expect("GET /a?x=1&y=%41%00&z HTTP/1.1\r\nHost: h\r\nA: v1\r\n\r\n", "ok");
        expect("GET /a HTTP/1.1\nHost: h\nA: v1\n\n", "ok");
        expect("GET /a HTTP/1.0\r\n\r\n", "ok");
        expect("GET /a HTTP/1.0\n\n", "ok");
        expect("GET /a HTTP/1.0\r\n\n", "ok");
        expect("GET /a HTTP/1.0\n\r\n", "ok");
        /* Line endings mixed, in every position. */
        expect("GET /a HTTP/1.1\nHost: h\r\nA: 1\nB: 2\r\n\n", "ok");
        expect("GET /a HTTP/1.1\r\nHost: h\nA: 1\r\nB: 2\n\r\n", "ok");
        /* Empty lines before the request line, spaces around the target, spaces in it. */
        expect("\r\n\nGET    /a%20b HTTP/1.1\r\nHost: h\r\n\r\n", "ok");
        expect("GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", "ok");
        /* Values: trailing and leading whitespace, empty, only whitespace, obs-text, quotes. */
        expect("GET / HTTP/1.1\r\nHost: h\r\nA: v  \t\r\nB:\r\nC:   \r\nD:\t\t\r\nE: \xc3\xa4\xff\r\n"
               "Cookie: a=b; c=\"d\"\r\nF:x\r\n\r\n", "ok");
        expect("GET / HTTP/1.1\nHost: h\nA: v  \t\nB:\nC:   \n\n", "ok");
        /* Bodies with NULs, by Content-Length and chunked, with and without 100-continue. */
        expect("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n\0\1\0\2\0", "ok");
        expect("POST /a HTTP/1.1\nHost: h\nContent-Length: 3\n\n\0\0\0", "ok");
        expect("POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
               "3\r\n\0\0\0\r\n0\r\n\r\n", "ok");
        expect("POST /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n\0\0", "ok");

        /* Many fields and long values, near the gateway's limits, in one buffer that grows. */
        n += (size_t) snprintf(big + n, sizeof(big) - n, "POST /big HTTP/1.1\r\nHost: h\r\n");
        for (unsigned i = 0; i < 60; i++)
                n += (size_t) snprintf(big + n, sizeof(big) - n, "X-Field-%u: %0250u  \r\n", i, i);
        n += (size_t) snprintf(big + n, sizeof(big) - n, "Content-Length: 0\r\n\r\n");
        expect_full(big, n, 0, (const char *const[]) { "ok", NULL });
        /* In pieces, so that libmicrohttpd grows its read buffer under the lines it has cut. */
        expect_full(big, n, 97, (const char *const[]) { "ok", NULL });
        /* Past the gateway's limits, as far as libmicrohttpd's memory allows (the gateway answers
         * 431 after the check). */
        n = (size_t) snprintf(big, sizeof(big), "GET /bigger HTTP/1.1\nHost: h\n");
        for (unsigned i = 0; i < 120; i++)
                n += (size_t) snprintf(big + n, sizeof(big) - n, "X-%u:%0300u\n", i, i);
        n += (size_t) snprintf(big + n, sizeof(big) - n, "\n");
        expect_full(big, n, 0, (const char *const[]) { "ok", NULL });
        expect_full(big, n, 331, (const char *const[]) { "ok", NULL });
        /* The same, arriving a byte at a time. */
        expect_dribbled("GET /slow?q=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\nA: b \r\n\r\n",
                        "ok");
        expect_dribbled("GET /slow HTTP/1.1\nHost: h\nAuthorization: Bearer k\nA: b\n\n", "ok");

        /* One value of 15 KiB. */
        n = (size_t) snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: h\r\nX-Long: ");
        memset(big + n, 'v', 15 * 1024);
        n += 15 * 1024;
        n += (size_t) snprintf(big + n, sizeof(big) - n, "\r\n\r\n");
        expect_full(big, n, 0, (const char *const[]) { "ok", NULL });
}

/* On one connection: requests one after the other, and all at once (pipelined), bodies with NULs
 * between them; a refused one in the middle must not disturb those after it. */
static void test_connection_reuse(void) {
        static const char one[] = "GET /1 HTTP/1.1\r\nHost: h\r\nA: 1\r\n\r\n";
        static const char two[] = "POST /2 HTTP/1.1\nHost: h\nContent-Length: 4\n\n\0\0\0\0";
        static const char bad[] = "GET /3 HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0junk\r\n\r\n";
        static const char last[] = "GET /4 HTTP/1.1\r\nHost: h\r\nB: 4  \r\nConnection: close\r\n\r\n";
        Reader *rd = calloc(1, sizeof(Reader));

        ASSERT_TRUE(rd);
        rd->fd = probe_connect();
        send_all(rd->fd, S(one), 0);
        ASSERT_STREQ(read_response(rd), "ok");
        send_all(rd->fd, S(two), 0);
        ASSERT_STREQ(read_response(rd), "ok");
        send_all(rd->fd, S(bad), 0);
        ASSERT_STREQ(read_response(rd), NUL_IN("X-Api-Key"));
        send_all(rd->fd, S(last), 0);
        ASSERT_STREQ(read_response(rd), "ok");
        (void) close(rd->fd);
        free(rd);

        expect("GET /1 HTTP/1.1\r\nHost: h\r\nA: 1\r\n\r\n"
               "POST /2 HTTP/1.1\nHost: h\nContent-Length: 4\n\n\0\0\0\0"
               "POST /3 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n\0\0\r\n0\r\n\r\n"
               "GET /4 HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0junk\r\n\r\n"
               "GET /5 HTTP/1.1\r\nHost: h\r\nB: 4  \r\n\r\n"
               "GET /6 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\0\r\nConnection: close\r\n\r\n",
               "ok", "ok", "ok", NUL_IN("X-Api-Key"), "ok", NUL_IN("Authorization"));
}

/* A NUL anywhere in the request line or a header line is seen, and named. */
static void test_nul_refused(void) {
        /* In a value: followed by more, at its end before CRLF, at its start, several. */
        expect("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\0junk\r\nA: b\r\n\r\n",
               NUL_IN("Authorization"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\0\r\nA: b\r\n\r\n",
               NUL_IN("Authorization"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: \0Bearer k\r\n\r\n", NUL_IN("Authorization"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0junk\r\n\r\n", NUL_IN("X-Api-Key"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0\r\n\r\n", NUL_IN("X-Api-Key"));
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0junk\n\n", NUL_IN("X-Api-Key"));
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0\0\nA: b\n\n", NUL_IN("X-Api-Key"));
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0 \nA: b\n\n", NUL_IN("X-Api-Key"));
        expect("POST / HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\0; x\r\n"
               "Content-Length: 0\r\n\r\n",
               NUL_IN("Content-Type"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Custom: a\0\0\0\0\0b\r\n\r\n", NUL_IN("X-Custom"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Custom:\0\r\n\r\n", NUL_IN("X-Custom"));
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Custom: \0\r\nA: b\r\n\r\n", NUL_IN("X-Custom"));
        expect("GET / HTTP/1.1\r\nHost: h\0.example\r\n\r\n", NUL_IN("Host"));
        /* The last field before the empty line, more NULs than any terminators could be. */
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0\r\n\r\n", NUL_IN("X-Api-Key"));
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0\0\0\n\n", NUL_IN("X-Api-Key"));
        /* A line that begins with a NUL ends the section for libmicrohttpd: what follows is no
         * header of this request, and the NUL is seen all the same. */
        expect("GET / HTTP/1.1\r\nHost: h\r\n\0junk\r\nAuthorization: Bearer k\r\n\r\n",
               NUL_IN("Host"), "HTTP 400");
        expect("GET / HTTP/1.1\r\nHost: h\r\n\0\r\nA: b\r\n\r\n", NUL_IN("Host"), "HTTP 400");
        expect("GET / HTTP/1.1\r\n\0junk\r\nHost: h\r\n\r\n",
               "header section contains a NUL byte", "HTTP 400");

        /* The request line: method, raw target (path and query), after the version. */
        expect("GE\0T / HTTP/1.1\r\nHost: h\r\n\r\n", "method contains a NUL byte");
        expect("GET\0 / HTTP/1.1\r\nHost: h\r\n\r\n", "method contains a NUL byte");
        expect("GET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n", "request target contains a NUL byte");
        expect("GET /a\0 HTTP/1.1\r\nHost: h\r\n\r\n", "request target contains a NUL byte");
        expect("GET \0/a HTTP/1.1\r\nHost: h\r\n\r\n", "request target contains a NUL byte");
        expect("GET /a?x=1\0&y=2 HTTP/1.1\r\nHost: h\r\n\r\n", "request target contains a NUL byte");
        expect("GET /a\0 b HTTP/1.1\nHost: h\n\n", "request target contains a NUL byte");
        /* The same arriving a byte at a time, or pipelined behind a valid request. */
        expect_dribbled("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\0junk\r\n\r\n",
                        NUL_IN("Authorization"));
        expect("GET /ok HTTP/1.1\r\nHost: h\r\n\r\nGET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n",
               "ok", "request target contains a NUL byte");
}

/* What libmicrohttpd refuses itself (400 before the handler), and what it rewrites. */
static void test_library_answers(void) {
        /* A NUL in a field name leaves no colon to find; in the version, no "HTTP/d.d". */
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api\0-Key: k\r\n\r\n", "HTTP 400");
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key\0: k\r\n\r\n", "HTTP 400");
        expect("GET / HTTP/1.1\0\r\nHost: h\r\n\r\n", "HTTP 400");
        expect("GET / HTTP/1.\0\r\nHost: h\r\n\r\n", "HTTP 400");
        expect("GET / HTTP/1.1\0junk\r\nHost: h\r\n\r\n", "HTTP 400");
        /* A continuation line: libmicrohttpd 0.9.75 appends it to the field's name. */
        expect("GET / HTTP/1.1\r\nHost: h\r\nA: v1\r\n  cont\r\n\r\n", "folded");
        expect("GET / HTTP/1.1\r\nHost: h\r\nA: v1\r\n\tcont\r\n more\r\nB: c\r\n\r\n", "folded");
        expect("GET / HTTP/1.1\nHost: h\nTransfer-Encoding: x\n chunked\n\n", "folded");
}

/* The one shape no check of libmicrohttpd's copy can see: NULs right before a bare LF, as many as
 * a CR could stand for. Pinned here so that a change shows. */
static void test_blind_spot(void) {
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0\nA: b\n\n", "ok");
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0\n\n", "ok");
        expect("GET / HTTP/1.1\nHost: h\nX-Api-Key: k\0\0\n\n", "ok");
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0\n\r\n", "ok");
        expect("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\0\r\n\n", "ok");
        expect("GET / HTTP/1.1\r\nHost: h\n\0\r\n", "ok");
        /* Before the request line, libmicrohttpd skips a line that begins with a NUL as an empty
         * one: outside the section, part of no request. */
        expect("\0junk\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", "ok");
        expect("\0GET / HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP 400");
}

/* A small deterministic generator, so that a failure can be replayed. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static unsigned rnd(unsigned n) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (unsigned) (rng_state % n);
}

static size_t append(char *buf, size_t n, const char *s, size_t size) {
        ASSERT_TRUE(n + size < 8192);
        memcpy(buf + n, s, size);
        return n + size;
}

static size_t append_from(char *buf, size_t n, const char *set, unsigned min, unsigned max) {
        unsigned k = min + rnd(max - min + 1);

        for (unsigned i = 0; i < k; i++)
                n = append(buf, n, &set[rnd((unsigned) strlen(set))], 1);
        return n;
}

static size_t append_eol(char *buf, size_t n) {
        return rnd(2) ? append(buf, n, S("\r\n")) : append(buf, n, S("\n"));
}

/* A valid request header section of a random shape: line endings, whitespace, target, values. */
static size_t random_request(char *buf) {
        static const char *const methods[] = { "GET", "POST", "DELETE", "OPTIONS", "X-ANY" };
        static const char token[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789!#$%&'*+-.^_`|~";
        static const char target[] = "abcxyz0189/%?&=._-~+:@!$()*,;AF";
        static const char value[] = "abcXYZ019 \t!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\x80\x9f\xc3\xa4\xff";
        unsigned fields = rnd(10);
        const char *m = methods[rnd(ELEMENTSOF(methods))];

        size_t n = append(buf, 0, m, strlen(m));

        n = append_from(buf, n, " ", 1, 3);
        n = append(buf, n, S("/"));
        n = append_from(buf, n, target, 0, 30);
        if (rnd(8) == 0) {
                n = append(buf, n, S(" "));
                n = append_from(buf, n, target, 1, 5);
        }
        n = append(buf, n, S(" "));
        n = rnd(4) ? append(buf, n, S("HTTP/1.1")) : append(buf, n, S("HTTP/1.0"));
        n = append_eol(buf, n);
        for (unsigned i = 0; i < fields; i++) {
                n = append(buf, n, S("X-"));
                n = append_from(buf, n, token, 1, 12);
                n = append(buf, n, S(":"));
                n = append_from(buf, n, " \t", 0, 3);
                n = append_from(buf, n, "abc", rnd(3) == 0 ? 0 : 1, 1);
                n = append_from(buf, n, value, 0, 40);
                n = append_eol(buf, n);
        }
        return append_eol(buf, n);
}

/* No valid shape is refused; a NUL put anywhere in the section is seen, unless it stands right
 * before a line's end, where a CR could be (test_blind_spot). */
static void test_random(void) {
        char buf[8192], with_nul[8192];

        for (unsigned i = 0; i < 1500; i++) {
                size_t n = random_request(buf);

                expect_full(buf, n, rnd(50) == 0 ? 7 : 0, (const char *const[]) { "ok", NULL });
        }

        for (unsigned i = 0; i < 3000; i++) {
                size_t n = random_request(buf), p = 1 + rnd((unsigned) n - 1);
                Reader *rd;
                const char *got;
                bool blind;

                /* p > 0: a line that begins with a NUL before the request line is skipped. */
                memcpy(with_nul, buf, p);
                with_nul[p] = 0;
                memcpy(with_nul + p + 1, buf + p, n - p);
                /* Right before an LF, or before the section's end with at most three CR and LF
                 * (the NUL and those become four NULs, as "\r\n\r\n" does). */
                blind = buf[p] == '\n' || n - p <= 3;
                for (size_t j = p; blind && buf[p] != '\n' && j < n; j++)
                        blind = buf[j] == '\r' || buf[j] == '\n';

                rd = calloc(1, sizeof(Reader));
                ASSERT_TRUE(rd);
                rd->fd = probe_connect();
                send_all(rd->fd, with_nul, n + 1, 0);
                got = read_response(rd);
                if (!got || streq(got, "unknown") || (!blind && streq(got, "ok"))) {
                        fprintf(stderr, "NUL at %zu of: ", p);
                        for (size_t j = 0; j <= n; j++)
                                fprintf(stderr, with_nul[j] >= 0x20 && with_nul[j] < 0x7f ? "%c" : "\\x%02x",
                                        (unsigned char) with_nul[j]);
                        fprintf(stderr, "\n  got: %s\n", got ?: "(closed)");
                        abort();
                }
                (void) close(rd->fd);
                free(rd);
        }
}

/* The check on sections built by hand: shapes libmicrohttpd never leaves are "unknown", refusing
 * nothing. */
static void test_synthetic(void) {
        /* "GET\0/\0HTTP/1.1\0\0A\0 b\0\0\0\0" */
        static const char sec[] = "GET\0/\0HTTP/1.1\0\0A\0 b\0\0\0\0";
        const char *url = sec + 4, *version = sec + 6, *key = sec + 16, *value = sec + 19;
        HttpHeaderCheck c;

        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 1, 1);
        http_header_check_field(&c, key, 1, value, 1);
        http_header_check_end(&c);
        ASSERT_TRUE(!c.reason && !c.unknown && !c.folded);

        /* The target as received longer than the section has room for; no section at all. */
        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 1, 2);
        ASSERT_TRUE(c.unknown && !c.reason);
        http_header_check_begin(&c, sec, url, version, 0, 1);
        ASSERT_TRUE(c.unknown && !c.reason);
        http_header_check_begin(&c, NULL, url, version, sizeof(sec) - 1, 1);
        ASSERT_TRUE(c.unknown && !c.reason);
        /* A version that does not fit, a url outside. */
        http_header_check_begin(&c, sec, url, version, 12, 1);
        ASSERT_TRUE(c.unknown && !c.reason);
        http_header_check_begin(&c, sec, sec + sizeof(sec) - 1, version, sizeof(sec) - 1, 1);
        ASSERT_TRUE(c.unknown && !c.reason);

        /* A field before the end of the line before it, one with a value outside its line. */
        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 1, 1);
        http_header_check_field(&c, sec + 8, 1, value, 1);
        ASSERT_TRUE(c.unknown && !c.reason);
        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 1, 1);
        http_header_check_field(&c, key, 1, value, 5);
        ASSERT_TRUE(c.unknown && !c.reason);
        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 1, 1);
        http_header_check_field(&c, key, 2, value, 1);
        ASSERT_TRUE(c.unknown && !c.reason);
        /* Too few NULs at the end for two terminators. */
        http_header_check_begin(&c, sec, url, version, sizeof(sec) - 4, 1);
        http_header_check_field(&c, key, 1, value, 1);
        http_header_check_end(&c);
        ASSERT_TRUE(c.unknown && !c.reason);
}

int main(void) {
        if (!http_header_check_supported()) {
                /* The check is off with another libmicrohttpd (the gateway says so at start). */
                printf("1..0 # SKIP libmicrohttpd %s is not %s\n", MHD_get_version(),
                       HTTP_HEADER_CHECK_MHD_VERSION);
                return 77;
        }

        probe_start();
        RUN(test_synthetic);
        RUN(test_valid_shapes);
        RUN(test_connection_reuse);
        RUN(test_nul_refused);
        RUN(test_library_answers);
        RUN(test_blind_spot);
        RUN(test_random);
        MHD_stop_daemon(probe);
        return 0;
}
