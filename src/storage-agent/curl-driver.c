/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libcurl's multi interface driven from sd-event: transfers never block the agent's loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "curl-driver.h"
#include "io-util.h"
#include "macro.h"

struct CurlDriver {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
};

static void check_done(CurlDriver *d) {
        CURLMsg *msg;
        int left;

        while ((msg = curl_multi_info_read(d->multi, &left))) {
                Transfer *t = NULL;
                long status = 0;
                int error = 0;

                if (msg->msg != CURLMSG_DONE)
                        continue;
                (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
                (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
                switch (msg->data.result) {
                case CURLE_OK:
                        break;
                case CURLE_OPERATION_TIMEDOUT:
                        error = -ETIMEDOUT;
                        break;
                case CURLE_COULDNT_CONNECT:
                        error = -ECONNREFUSED;
                        break;
                case CURLE_COULDNT_RESOLVE_HOST:
                        error = -EHOSTUNREACH;
                        break;
                case CURLE_SEND_ERROR:
                case CURLE_RECV_ERROR:
                case CURLE_GOT_NOTHING:
                        error = -ECONNRESET;
                        break;
                case CURLE_PARTIAL_FILE: /* the connection ended before the Content-Length */
                        error = -EPIPE;
                        break;
                case CURLE_FILESIZE_EXCEEDED: /* Content-Length over CURLOPT_MAXFILESIZE: no body read */
                        error = -EFBIG;
                        break;
                default:
                        error = -EIO;
                }
                if (t->download_failed)
                        error = -EIO;
                if (t->too_large)
                        error = -EFBIG;
                /* Nothing connected because of us: say so rather than "couldn't connect". */
                if (msg->data.result != CURLE_OK && t->n_connected == 0) {
                        if (t->n_unavailable > 0)
                                error = TRANSFER_POLICY_UNAVAILABLE;
                        else if (t->n_refused > 0)
                                error = TRANSFER_REFUSED;
                }
                curl_multi_remove_handle(d->multi, msg->easy_handle);
                t->callback(t, error, status, t->userdata);
        }
}

static int on_socket_event(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        CurlDriver *d = userdata;
        int action = 0, running;

        if (revents & EPOLLIN)
                action |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                action |= CURL_CSELECT_OUT;
        if (revents & (EPOLLERR | EPOLLHUP))
                action |= CURL_CSELECT_ERR;
        (void) curl_multi_socket_action(d->multi, fd, action, &running);
        check_done(d);
        return 0;
}

static int socket_callback(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        CurlDriver *d = userp;
        sd_event_source *s = socketp;
        uint32_t events = 0;

        if (what == CURL_POLL_REMOVE) {
                if (s) {
                        sd_event_source_disable_unref(s);
                        curl_multi_assign(d->multi, fd, NULL);
                }
                return 0;
        }
        if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
                events |= EPOLLIN;
        if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
                events |= EPOLLOUT;
        if (s) {
                if (sd_event_source_set_io_events(s, events) < 0)
                        return -1;
                return 0;
        }
        if (sd_event_add_io(d->event, &s, fd, events, on_socket_event, d) < 0)
                return -1;
        curl_multi_assign(d->multi, fd, s);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        CurlDriver *d = userdata;
        int running;

        (void) curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(d);
        return 0;
}

static int timer_callback(CURLM *multi, long timeout_ms, void *userp) {
        CurlDriver *d = userp;
        uint64_t usec = timeout_ms <= 0 ? 1 : (uint64_t) timeout_ms * USEC_PER_MSEC;

        if (timeout_ms < 0)
                return d->timer ? (sd_event_source_set_enabled(d->timer, SD_EVENT_OFF) < 0 ? -1 : 0) : 0;
        if (d->timer) {
                if (sd_event_source_set_time_relative(d->timer, usec) < 0 ||
                    sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT) < 0)
                        return -1;
                return 0;
        }
        /* Accuracy 1 µs: 0 would mean sd-event's default of 250 ms, a stall on every transfer. */
        return sd_event_add_time_relative(d->event, &d->timer, CLOCK_MONOTONIC, usec, 1, on_timer, d) < 0
                       ? -1
                       : 0;
}

int curl_driver_new(sd_event *event, CurlDriver **ret) {
        CurlDriver *d;

        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return -EIO;
        d = calloc(1, sizeof(CurlDriver));
        if (!d)
                return -ENOMEM;
        d->event = sd_event_ref(event);
        d->multi = curl_multi_init();
        if (!d->multi) {
                curl_driver_free(d);
                return -ENOMEM;
        }
        curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, socket_callback);
        curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, d);
        curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, timer_callback);
        curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, d);
        *ret = d;
        return 0;
}

CurlDriver *curl_driver_free(CurlDriver *d) {
        if (!d)
                return NULL;
        if (d->multi)
                curl_multi_cleanup(d->multi);
        d->timer = sd_event_source_disable_unref(d->timer);
        sd_event_unref(d->event);
        free(d);
        return NULL;
}

sd_event *curl_driver_event(CurlDriver *d) {
        return d->event;
}

static size_t write_callback(char *ptr, size_t size, size_t nmemb, void *userdata) {
        Transfer *t = userdata;
        size_t n = size * nmemb;

        /* Only a success's body is the object; an error's (S3's XML) is kept to be read. */
        if (t->download_fd >= 0 && t->response.status >= 200 && t->response.status < 300) {
                /* Without (or despite) a Content-Length: cut the transfer at the bound. */
                if (n > t->download_max - t->downloaded) {
                        t->too_large = true;
                        return 0;
                }
                t->downloaded += n;
                if (write_all(t->download_fd, ptr, n) < 0) {
                        t->download_failed = true;
                        return 0;
                }
                return n;
        }
        if (t->body_size + n > TRANSFER_BODY_MAX)
                return 0; /* aborts the transfer: a listing or error that big is not ours */
        char *nb = realloc(t->body, t->body_size + n + 1);
        if (!nb)
                return 0;
        t->body = nb;
        memcpy(t->body + t->body_size, ptr, n);
        t->body_size += n;
        t->body[t->body_size] = 0;
        return n;
}

/* Every connection goes through here, with the address actually connected to (after DNS, for each
 * address tried): the one place where the address policy can't be side-stepped. Its route lookup is a
 * synchronous netlink round trip inside the event loop, on purpose: the kernel answers it before our
 * request's sendmsg() returns (microseconds), its wait is bounded by ADDRESS_ROUTE_TIMEOUT_USEC, and
 * doing it here, just before socket(), leaves no gap between the check and the connect. An address
 * that cannot be judged is not connected to, and the transfer then fails as "policy unavailable",
 * never as refused. */
static curl_socket_t opensocket_callback(void *userdata, curlsocktype purpose,
                                         struct curl_sockaddr *address) {
        Transfer *t = userdata;
        curl_socket_t fd;
        int r = 1;

        if (purpose != CURLSOCKTYPE_IPCXN) {
                t->refused_route = _ADDRESS_ROUTE_INVALID;
                t->n_refused++;
                return CURL_SOCKET_BAD;
        }
        if (t->policy)
                r = address_policy_check(t->policy, &address->addr, address->addrlen, &t->refused_route);
        if (r < 0) {
                t->policy_error = r;
                t->n_unavailable++;
                return CURL_SOCKET_BAD;
        }
        if (r == 0) {
                t->n_refused++;
                return CURL_SOCKET_BAD;
        }
        fd = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
        if (fd >= 0)
                t->n_connected++;
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static size_t header_callback(char *buffer, size_t size, size_t nitems, void *userdata) {
        Transfer *t = userdata;

        response_headers_feed(&t->response, buffer, size * nitems);
        return size * nitems;
}

/* Exactly upload_size bytes: what was declared (and hashed), even if the file grew since. */
static size_t read_callback(char *buffer, size_t size, size_t nitems, void *userdata) {
        Transfer *t = userdata;
        size_t want = (size_t) MIN((uint64_t) (size * nitems), t->upload_size - t->uploaded);
        ssize_t k;

        if (want == 0)
                return 0;
        k = read(t->upload_fd, buffer, want);
        if (k < 0)
                return CURL_READFUNC_ABORT;
        t->uploaded += (uint64_t) k;
        return (size_t) k;
}

int transfer_new(CurlDriver *d, const char *method, const char *url, long connect_timeout_sec,
                 long total_timeout_sec, Transfer **ret) {
        Transfer *t;

        t = calloc(1, sizeof(Transfer));
        if (!t)
                return -ENOMEM;
        *t = (Transfer) { .driver = d, .upload_fd = -1, .download_fd = -1, .download_max = UINT64_MAX,
                          .refused_route = _ADDRESS_ROUTE_INVALID };
        t->easy = curl_easy_init();
        if (!t->easy) {
                free(t);
                return -ENOMEM;
        }
        curl_easy_setopt(t->easy, CURLOPT_URL, url);
        curl_easy_setopt(t->easy, CURLOPT_CUSTOMREQUEST, method);
        if (streq(method, "HEAD"))
                curl_easy_setopt(t->easy, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(t->easy, CURLOPT_PRIVATE, t);
        curl_easy_setopt(t->easy, CURLOPT_WRITEFUNCTION, write_callback);
        curl_easy_setopt(t->easy, CURLOPT_WRITEDATA, t);
        curl_easy_setopt(t->easy, CURLOPT_HEADERFUNCTION, header_callback);
        curl_easy_setopt(t->easy, CURLOPT_HEADERDATA, t);
        curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->error_buffer);
        curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT, connect_timeout_sec);
        curl_easy_setopt(t->easy, CURLOPT_TIMEOUT, total_timeout_sec);
        /* The path as signed: S3 signs it as sent, so no dot segments may be taken out of a key. */
        curl_easy_setopt(t->easy, CURLOPT_PATH_AS_IS, 1L);
        /* Only what the storage block names: no redirects, no other protocols. */
        curl_easy_setopt(t->easy, CURLOPT_FOLLOWLOCATION, 0L);
        /* No proxy from the environment either: the address policy judges the server itself. */
        curl_easy_setopt(t->easy, CURLOPT_PROXY, "");
        curl_easy_setopt(t->easy, CURLOPT_OPENSOCKETFUNCTION, opensocket_callback);
        curl_easy_setopt(t->easy, CURLOPT_OPENSOCKETDATA, t);
#if LIBCURL_VERSION_NUM >= 0x075500
        curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
        curl_easy_setopt(t->easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
        *ret = t;
        return 0;
}

int transfer_add_header(Transfer *t, const char *name, const char *value) {
        _cleanup_free_ char *line = NULL;
        struct curl_slist *n;

        /* "Name:" with nothing after it makes curl drop a header it would add itself. */
        if ((isempty(value) ? asprintf(&line, "%s:", name) : asprintf(&line, "%s: %s", name, value)) < 0)
                return -ENOMEM;
        n = curl_slist_append(t->headers, line);
        if (!n)
                return -ENOMEM;
        t->headers = n;
        return 0;
}

int transfer_start(Transfer *t, TransferCallback cb, void *userdata) {
        t->callback = cb;
        t->userdata = userdata;
        if (t->upload_fd >= 0) {
                curl_easy_setopt(t->easy, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(t->easy, CURLOPT_READFUNCTION, read_callback);
                curl_easy_setopt(t->easy, CURLOPT_READDATA, t);
                curl_easy_setopt(t->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t) t->upload_size);
        }
        /* A Content-Length over the bound is refused before any of the body is read. */
        if (t->download_fd >= 0 && t->download_max < (uint64_t) INT64_MAX)
                curl_easy_setopt(t->easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) t->download_max);
        /* No "Expect: 100-continue" round trip. */
        if (transfer_add_header(t, "Expect", "") < 0)
                return -ENOMEM;
        curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers);
        if (curl_multi_add_handle(t->driver->multi, t->easy) != CURLM_OK)
                return -EIO;
        return 0;
}

Transfer *transfer_free(Transfer *t) {
        if (!t)
                return NULL;
        if (t->easy)
                curl_easy_cleanup(t->easy);
        curl_slist_free_all(t->headers);
        free(t->body);
        free(t);
        return NULL;
}
