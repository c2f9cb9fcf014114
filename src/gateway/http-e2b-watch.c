/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's WatchDir on an E2B sandbox (docs/e2b.md "Files"): a Connect server stream of the changes
 * below a directory of the workspace. The sandbox may not use inotify (its filter refuses it) and
 * no privileged process watches its files: the gateway, unprivileged, looks at the directory
 * every E2B_WATCH_INTERVAL_MSEC with the session manager's ListDirectory (bounded like any
 * listing) and sends what changed between two looks as envd's events (e2b_fs_watch_diff()):
 * create, write, remove, chmod; a rename shows as a removal and a creation. The stream ends when
 * the client leaves, at its Connect-Timeout-Ms, or with an error when the directory or the
 * sandbox is gone. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "connect-rpc.h"
#include "e2b-fs.h"
#include "http-e2b-fs.h"
#include "http-e2b.h"
#include "http-request.h"
#include "http-util.h"
#include "id.h"
#include "json-util.h"
#include "path-util.h"
#include "string-util.h"

#define E2B_WATCH_INTERVAL_MSEC 500U
/* Watches a gateway keeps at once: each looks at its directory twice a second. */
#define E2B_WATCHES_MAX 32U
/* Events waiting for a client that does not read: past half of it, no look is taken. */
#define E2B_WATCH_BUFFER_MAX (512U * 1024U)
/* Looks in a row that failed for a passing reason (busy, the manager restarting) before giving up. */
#define E2B_WATCH_FAILURES_MAX 20U
#define E2B_WATCH_KEEPALIVE_DEFAULT_SEC 50U

typedef struct E2bWatch {
        unsigned n_ref;
        HttpRequest *req; /* NULL once the request went away */
        Server *server;
        char id[SESSION_ID_LEN + 1];
        char *ws; /* the directory, as the manager takes it */
        char *prefix; /* relative to the workspace */
        char *shown; /* as the client named it */
        uint32_t depth;
        E2bFsSnapshot seen;
        sd_event_source *timer;
        sd_bus_slot *slot; /* the look in flight */
        JsonWriter out;
        size_t out_sent;
        bool started, finished;
        uint64_t deadline_usec, keepalive_usec, quiet_since_usec; /* CLOCK_MONOTONIC */
        unsigned failures;
} E2bWatch;

/* The depth of a recursive watch: as deep as ListDirectory walks (docs/dbus-api.md). */
#define E2B_WATCH_RECURSIVE_DEPTH 32U

static unsigned e2b_watches;

static uint64_t e2b_watch_now(const E2bWatch *w) {
        uint64_t t = 0;

        (void) sd_event_now(w->server->event, CLOCK_MONOTONIC, &t);
        return t;
}

static E2bWatch *e2b_watch_unref(E2bWatch *w) {
        if (!w || --w->n_ref > 0)
                return NULL;
        w->timer = sd_event_source_disable_unref(w->timer);
        w->slot = sd_bus_slot_unref(w->slot);
        e2b_fs_snapshot_done(&w->seen);
        json_writer_done(&w->out);
        free(w->ws);
        free(w->prefix);
        free(w->shown);
        free(w);
        e2b_watches--;
        return NULL;
}

/* The request goes away: no more looks; the body (if libmicrohttpd still has it) ends. */
static void e2b_watch_detach(void *p) {
        E2bWatch *w = p;

        w->req = NULL;
        w->timer = sd_event_source_disable_unref(w->timer);
        w->slot = sd_bus_slot_unref(w->slot);
        e2b_watch_unref(w);
}

static size_t e2b_watch_unsent(const E2bWatch *w) {
        return w->out.buf.len - w->out_sent;
}

static void e2b_watch_wake(E2bWatch *w) {
        w->quiet_since_usec = e2b_watch_now(w);
        if (w->started && w->req && w->req->state == HTTP_REQUEST_ANSWERED)
                http_request_resume(w->req);
}

/* The stream's last message: its end, with an error if 'code'. */
static void e2b_watch_finish(E2bWatch *w, const char *code, const char *message) {
        if (w->finished)
                return;
        w->finished = true;
        w->timer = sd_event_source_disable_unref(w->timer);
        w->slot = sd_bus_slot_unref(w->slot);
        (void) connect_end_stream_append(&w->out, code, message);
        e2b_watch_wake(w);
}

static ssize_t e2b_watch_read(void *userdata, uint64_t pos, char *buf, size_t max) {
        E2bWatch *w = userdata;
        size_t n;

        if (json_writer_error(&w->out) < 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        if (e2b_watch_unsent(w) > 0) {
                n = MIN(max, e2b_watch_unsent(w));
                memcpy(buf, w->out.buf.s + w->out_sent, n);
                w->out_sent += n;
                if (w->out_sent == w->out.buf.len)
                        w->out.buf.len = w->out_sent = 0;
                else if (w->out_sent >= E2B_WATCH_BUFFER_MAX / 4) {
                        /* What was sent goes: the buffer holds what waits, not what went. */
                        memmove(w->out.buf.s, w->out.buf.s + w->out_sent, e2b_watch_unsent(w));
                        w->out.buf.len -= w->out_sent;
                        w->out_sent = 0;
                }
                return (ssize_t) n;
        }
        if (w->finished)
                return MHD_CONTENT_READER_END_OF_STREAM;
        if (!w->req || w->req->client_gone)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        /* Nothing yet: libmicrohttpd would call again at once. */
        http_request_suspend(w->req);
        return 0;
}

static void e2b_watch_release(void *userdata) {
        e2b_watch_unref(userdata);
}

/* ---- looking ---- */

/* A ListDirectory answer as a snapshot. */
static int e2b_watch_read_listing(sd_bus_message *reply, E2bFsSnapshot *ret) {
        _cleanup_(e2b_fs_snapshot_done) E2bFsSnapshot s = {};
        int truncated = 0, r;

        r = sd_bus_message_enter_container(reply, 'a', "(sstussxs)");
        while (r > 0) {
                E2bFsEntry e;

                r = sd_bus_message_read(reply, "(sstussxs)", &e.path, &e.type, &e.size, &e.mode, &e.owner,
                                        &e.group, &e.mtime_nsec, &e.target);
                if (r > 0 && e2b_fs_snapshot_add(&s, &e) < 0)
                        return -ENOMEM;
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "b", &truncated);
        if (r < 0)
                return r;
        s.truncated = truncated;
        e2b_fs_snapshot_sort(&s);
        *ret = s;
        s = (E2bFsSnapshot) {};
        return 0;
}

/* What ends a watch: the directory gone or no longer one, the sandbox gone. NULL: look again. */
static const char *e2b_watch_error_code(const sd_bus_error *e, const char **ret_message) {
        if (sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED)) {
                *ret_message = "the sandbox is not running";
                return "unavailable";
        }
        if (sd_bus_error_has_name(e, BUS_ERROR_NOT_FOUND)) {
                *ret_message = "the watched directory does not exist";
                return "not_found";
        }
        if (sd_bus_error_has_name(e, BUS_ERROR_INVALID_PATH)) {
                *ret_message = "the watched directory leads outside the workspace";
                return "permission_denied";
        }
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_INVALID_ARGS)) {
                *ret_message = "the watched path is not a directory";
                return "invalid_argument";
        }
        return NULL;
}

static int e2b_watch_arm(E2bWatch *w);

static int e2b_watch_on_look(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        _cleanup_(e2b_fs_snapshot_done) E2bFsSnapshot now_seen = {};
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bWatch *w = userdata;
        const char *code, *message = NULL;
        int r;

        w->slot = sd_bus_slot_unref(w->slot);
        if (e) {
                code = e2b_watch_error_code(e, &message);
                if (code)
                        e2b_watch_finish(w, code, message);
                else if (++w->failures >= E2B_WATCH_FAILURES_MAX)
                        e2b_watch_finish(w, "unavailable", "the sandbox's files could not be looked at");
                return 0;
        }
        w->failures = 0;
        r = e2b_watch_read_listing(reply, &now_seen);
        if (r >= 0)
                r = e2b_fs_watch_diff(&w->seen, &now_seen, w->prefix, &w->out);
        if (r < 0) {
                e2b_watch_finish(w, "internal", "the watch failed");
                return 0;
        }
        e2b_fs_snapshot_done(&w->seen);
        w->seen = now_seen;
        now_seen = (E2bFsSnapshot) {};
        if (r > 0)
                e2b_watch_wake(w);
        return 0;
}

static int e2b_watch_call(E2bWatch *w, sd_bus_message_handler_t handler) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(w->server->bus, "ListDirectory", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "ssu", w->id, w->ws, w->depth);
        if (r < 0)
                return r;
        return sd_bus_call_async(w->server->bus, &w->slot, m, handler, w,
                                 bus_timeout_files_usec(&w->server->config));
}

static int e2b_watch_on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        E2bWatch *w = userdata;
        uint64_t t = e2b_watch_now(w);

        if (w->deadline_usec > 0 && t >= w->deadline_usec) {
                e2b_watch_finish(w, "deadline_exceeded", "the watch reached its timeout");
                return 0;
        }
        if (t >= w->quiet_since_usec + w->keepalive_usec) {
                (void) connect_envelope_append(&w->out, 0, "{\"keepalive\":{}}",
                                               strlen("{\"keepalive\":{}}"));
                e2b_watch_wake(w);
        }
        /* A client that does not read gets no new looks until it does. */
        if (!w->slot && e2b_watch_unsent(w) < E2B_WATCH_BUFFER_MAX / 2 &&
            e2b_watch_call(w, e2b_watch_on_look) < 0 && ++w->failures >= E2B_WATCH_FAILURES_MAX) {
                e2b_watch_finish(w, "internal", "the watch failed");
                return 0;
        }
        return e2b_watch_arm(w);
}

static int e2b_watch_arm(E2bWatch *w) {
        if (w->timer)
                return sd_event_source_set_time_relative(w->timer, E2B_WATCH_INTERVAL_MSEC * USEC_PER_MSEC) <
                                               0 ||
                                       sd_event_source_set_enabled(w->timer, SD_EVENT_ONESHOT) < 0
                               ? -EIO
                               : 0;
        return sd_event_add_time_relative(w->server->event, &w->timer, CLOCK_MONOTONIC,
                                          E2B_WATCH_INTERVAL_MSEC * USEC_PER_MSEC, USEC_PER_MSEC * 50,
                                          e2b_watch_on_timer, w);
}

/* ---- the request ---- */

/* The first look: the directory as it is, then the stream begins with {"start":{}}. */
static int e2b_watch_on_first(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bWatch *w = req->userdata;
        HttpResponse *resp = NULL;
        const char *code, *message = NULL;
        int r;

        if (e && sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED))
                return e2b_reply_not_running(req);
        if (e) {
                code = e2b_watch_error_code(e, &message);
                if (!code)
                        return e2b_fs_reply_error(req, 0, "unavailable", "the sandbox is busy, retry", NULL,
                                                  NULL);
                return e2b_fs_reply_error(req, 0, code, message, ": ", w->shown);
        }
        r = e2b_watch_read_listing(reply, &w->seen);
        if (r < 0)
                return r;
        r = connect_envelope_append(&w->out, 0, "{\"start\":{}}", strlen("{\"start\":{}}"));
        if (r >= 0)
                r = e2b_watch_arm(w);
        if (r < 0)
                return r;
        w->n_ref++;
        r = http_response_new_source(HTTP_OK, CONNECT_STREAM_CONTENT_TYPE,
                                     &(HttpBodySource) { .read = e2b_watch_read,
                                                         .free = e2b_watch_release,
                                                         .userdata = w,
                                                         .footprint = E2B_WATCH_BUFFER_MAX },
                                     &resp);
        if (r < 0)
                return r;
        resp->cache_control = "no-cache";
        w->started = true;
        w->quiet_since_usec = e2b_watch_now(w);
        return http_request_reply(req, resp);
}

/* A header's value as a number of at most 'max', or 'def' when absent or not a number. */
static uint64_t e2b_watch_header_number(HttpRequest *req, const char *name, uint64_t def, uint64_t max) {
        const char *v =
                req->connection ? MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, name) : NULL;
        uint64_t n = 0;

        if (!v || !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 12)
                return def;
        for (; *v; v++)
                n = n * 10 + (uint64_t) (*v - '0');
        return MIN(n, max);
}

/* POST /filesystem.Filesystem/WatchDir: one enveloped {"path", "recursive", ...}. */
int http_e2b_fs_watch_dir(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_json_ json_object *o = NULL;
        _cleanup_free_ char *rel = NULL;
        const char *root = NULL;
        char id[SESSION_ID_LEN + 1];
        json_object *v;
        uint64_t timeout_ms;
        E2bWatch *w;
        int r;

        r = e2b_fs_begin(req, id, &o);
        if (r > 0)
                r = e2b_fs_member_path(req, o, "path", &rel, &root);
        if (r <= 0)
                return r;
        if (e2b_watches >= E2B_WATCHES_MAX)
                return e2b_fs_reply_error(req, 0, "resource_exhausted", "too many directories are watched",
                                          NULL, NULL);

        w = http_request_new_userdata(req, sizeof(E2bWatch), e2b_watch_detach);
        if (!w)
                return -ENOMEM;
        e2b_watches++;
        *w = (E2bWatch) { .n_ref = 1, .req = req, .server = req->server, .depth = 1 };
        memcpy(w->id, id, sizeof(w->id));
        /* envd's recursive watch: every level below, as far as a listing goes. */
        if (json_object_object_get_ex(o, "recursive", &v) && json_object_is_type(v, json_type_boolean) &&
            json_object_get_boolean(v))
                w->depth = E2B_WATCH_RECURSIVE_DEPTH;
        w->prefix = TAKE_PTR(rel);
        w->ws = e2b_fs_path_show(WORKSPACE_PATH, w->prefix);
        w->shown = e2b_fs_path_show(root, w->prefix);
        if (!w->ws || !w->shown)
                return -ENOMEM;
        /* The client's deadline (0 or none: as long as the client stays), its keepalive interval. */
        timeout_ms = e2b_watch_header_number(req, "Connect-Timeout-Ms", 0, UINT64_C(1) << 40);
        if (timeout_ms > 0)
                w->deadline_usec = e2b_watch_now(w) + timeout_ms * USEC_PER_MSEC;
        w->keepalive_usec = e2b_watch_header_number(req, "Keepalive-Ping-Interval",
                                                    E2B_WATCH_KEEPALIVE_DEFAULT_SEC, 3600) *
                            USEC_PER_SEC;
        if (w->keepalive_usec == 0)
                w->keepalive_usec = E2B_WATCH_KEEPALIVE_DEFAULT_SEC * USEC_PER_SEC;

        r = session_manager_new_call(req->server->bus, "ListDirectory", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "ssu", id, w->ws, w->depth);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_files_usec(&req->server->config), e2b_watch_on_first);
}
