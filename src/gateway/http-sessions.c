/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /sessions and DELETE /sessions/{session_id}: create and release sandboxes. */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "http-apis.h"
#include "http-body.h"
#include "http-connection.h"
#include "http-router.h"
#include "id.h"
#include "json-util.h"
#include "log.h"
#include "storage-config.h"
#include "string-util.h"

static const JsonField session_create_fields[] = {
        BODY_IDLE_TTL_SEC, BODY_ARCHIVE_KEY, BODY_STORAGE, BODY_STATEFUL, {}
};
static const JsonField session_release_fields[] = { BODY_DISCARD, BODY_ARCHIVE_KEY, BODY_STORAGE, {} };

/* The body is optional: absent or null means {}. Returns 1 if parsed, 0 if a 422 was prepared. */
static int session_body_parse(HttpRequest *req, const JsonField fields[], SidecarBody *ret) {
        HttpResponse *resp;
        int r;

        if (!req->json)
                return 1;
        r = sidecar_body_read(req->json, fields, ret, &resp);
        if (r == 0)
                (void) http_request_reply(req, resp);
        return r;
}

/* Appends the archive_key and storage options shared by both calls. Contains the storage block's
 * credentials: never log the message. Returns 1 if appended, 0 if a 400 was prepared (the storage
 * block is too large to forward). */
static int session_append_storage_options(HttpRequest *req, sd_bus_message *m, const SidecarBody *b) {
        json_object *body = req->json, *v;
        int r;

        if (!body)
                return 1;

        /* A key with an embedded NUL cannot cross the bus, and an invalid key means "use the session
         * id", which is what leaving it out does (COMPAT.md). */
        if (b->archive_key && json_object_object_get_ex(body, "archive_key", &v) &&
            (size_t) json_object_get_string_len(v) == strlen(b->archive_key) &&
            archive_stem_is_valid(b->archive_key)) {
                r = sd_bus_message_append(m, "{sv}", "archive_key", "s", b->archive_key);
                if (r < 0)
                        return r;
        }

        if (b->storage) {
                const char *text;

                /* The manager refuses larger ones as well. */
                r = http_storage_json(b->storage, &text);
                if (r == -E2BIG)
                        return http_request_reply_detail(req, HTTP_BAD_REQUEST,
                                                         HTTP_DETAIL_STORAGE_TOO_LARGE);
                if (r < 0)
                        return r;
                r = sd_bus_message_append(m, "{sv}", "storage", "s", text);
                if (r < 0)
                        return r;
        }

        return 1;
}

/* The id in a successful CreateSession reply, validated and recorded for the access log. */
static int sessions_post_read_id(HttpRequest *req, sd_bus_message *reply, const char **ret) {
        const char *id;
        int r;

        r = sd_bus_message_read(reply, "s", &id);
        if (r < 0)
                return r;
        if (!session_id_is_valid(id))
                return -EBADMSG;
        http_request_set_session_id(req, id);
        *ret = id;
        return 0;
}

/* A create's state between its call and the end of its request. The session is the client's only
 * once the answer reached it; until the request ends, 'confirm_fd' keeps the write end of the
 * call's hang-up pipe open, and the one byte written into it then tells the session manager that
 * the answer was delivered. The pipe closing without it — here, when the answer did not reach the
 * client, or with this process — has the manager release the session (docs/dbus-api.md). */
typedef struct SessionCreate {
        HttpRequest *req;
        int confirm_fd;
} SessionCreate;

/* The request's end (its userdata_free): for an answered create that is libmicrohttpd's completion of
 * it, the moment to tell whether the answer reached the client. (A router hook with the termination
 * code would say it more directly; http_connection_answer_delivered() reads it off the connection.) */
static void session_create_free(void *p) {
        SessionCreate *c = p;

        if (!c)
                return;
        if (c->confirm_fd >= 0) {
                HttpRequest *req = c->req;
                bool delivered = req->state == HTTP_REQUEST_ANSWERED &&
                                 (req->status == HTTP_OK || req->status == HTTP_CREATED) &&
                                 req->connection && http_connection_answer_delivered(req->connection);

                if (delivered && write(c->confirm_fd, "", 1) != 1)
                        log_struct(LOG_WARNING, errno, LOG_FIELDS(LOG_SESSION_FIELD(req->session_id)),
                                   "Failed to confirm session %s to the session manager, which releases "
                                   "it: %m", req->session_id);
                else if (!delivered)
                        log_debug("The answer of the create of session %s did not reach its client; the "
                                  "session manager releases the session.", req->session_id);
        }
        safe_close(c->confirm_fd);
        free(c);
}

int http_session_create_confirm_later(HttpRequest *req, sd_bus_message *reply, const char **ret_id) {
        SessionCreate *c = req->userdata;

        /* From now on the manager waits for our word, which comes once the request ends (and never
         * when this fails: the manager then releases the session, and the client gets a 500). */
        c->confirm_fd = fcntl(req->hangup_fd, F_DUPFD_CLOEXEC, 3);
        if (c->confirm_fd < 0)
                return -errno;
        return sessions_post_read_id(req, reply, ret_id);
}

static int sessions_post_on_reply(HttpRequest *req, sd_bus_message *reply) {
        char body[sizeof("{\"session_id\":\"\",\"restored\":false,\"stateful\":true}") + SESSION_ID_LEN];
        const sd_bus_error *e;
        const char *id;
        json_object *v;
        bool stateful;
        int restore_failed = 0, r;

        e = sd_bus_message_get_error(reply);
        if (e)
                return http_request_reply_call_error(req, e, bus_timeout_session_usec(&req->server->config),
                                                     http_response_new_bus_error);

        r = http_session_create_confirm_later(req, reply, &id);
        if (r < 0)
                return r;

        /* Only with SANDBOX_START_EMPTY_ON_RESTORE_FAILURE: the archive could not be restored and the
         * session started empty. (A manager of an earlier version answers the id alone.) */
        if (sd_bus_message_read(reply, "b", &restore_failed) <= 0)
                restore_failed = 0;

        /* A stateful session says so (a server without them ignores the member): its client can
         * tell. The body was validated before the call. */
        stateful = req->json && json_object_object_get_ex(req->json, "stateful", &v) &&
                   json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);

        /* Validated: 32 hex digits need no escaping. */
        (void) snprintf(body, sizeof(body), "{\"session_id\":\"%s\"%s%s}", id,
                        restore_failed ? ",\"restored\":false" : "", stateful ? ",\"stateful\":true" : "");
        return http_request_reply_literal(req, HTTP_OK, body);
}

/* The client of a create went away before its answer: the hang-up pipe is closed already, so the
 * manager undoes the create, or releases the session it answered with (unarchived: its workspace
 * holds only what was restored), whichever of the two crossed. Nothing is left to do here. */
static int sessions_post_on_gone(HttpRequest *req, sd_bus_message *reply) {
        if (!sd_bus_message_is_method_error(reply, NULL))
                log_debug("A create was answered after its client went away; the session manager releases "
                          "the session.");
        return 0;
}

int http_sessions_post(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        const Config *config = &req->server->config;
        SidecarBody b = {};
        int r;

        r = session_body_parse(req, session_create_fields, &b);
        if (r <= 0)
                return r;

        r = session_manager_new_call(req->server->bus, "CreateSession", &m);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r < 0)
                return r;

        /* 0 (or absent) lets the manager pick SANDBOX_IDLE_TTL_SECONDS; anything else ends up in
         * [1, SANDBOX_IDLE_TTL_CAP_SECONDS], as upstream clamps it. */
        if (b.idle_ttl_sec != 0) {
                uint64_t ttl = b.idle_ttl_sec < 0 ? 1
                                                  : MIN((uint64_t) b.idle_ttl_sec, config->idle_ttl_cap_sec);

                r = sd_bus_message_append(m, "{sv}", "idle_ttl_sec", "t", ttl);
                if (r < 0)
                        return r;
        }

        r = session_append_storage_options(req, m, &b);
        if (r <= 0)
                return r;
        /* Only when asked: a stateless create is the same call as before. */
        if (b.stateful) {
                r = sd_bus_message_append(m, "{sv}", "stateful", "b", 1);
                if (r < 0)
                        return r;
        }

        return http_session_create_call(req, m, sessions_post_on_reply);
}

int http_session_create_call(HttpRequest *req, sd_bus_message *m, HttpReplyHandler on_reply) {
        SessionCreate *c;

        /* A create whose client hangs up, or never gets the answer, is undone (docs/dbus-api.md). */
        req->gone_handler = sessions_post_on_gone;
        c = http_request_new_userdata(req, sizeof(SessionCreate), session_create_free);
        if (!c)
                return -ENOMEM;
        *c = (SessionCreate) { .req = req, .confirm_fd = -EBADF };
        return http_request_call_until_hangup(req, m, bus_timeout_session_usec(&req->server->config),
                                              on_reply);
}

/* What became of the workspace of a session with effective storage (docs/api.md); without storage
 * the contract's plain {"ok":true}. */
static const char *const release_archive_outcomes[] = {
        "stored", "pending", "skipped", "kept", "abandoned", "discarded",
};

static int sessions_delete_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e;
        const char *outcome = NULL;

        e = sd_bus_message_get_error(reply);
        /* Release is idempotent: a session that is already gone is released. */
        if (e && !sd_bus_error_has_name(e, BUS_ERROR_NO_SUCH_SESSION))
                return http_request_reply_call_error(req, e, bus_timeout_session_usec(&req->server->config),
                                                     http_response_new_bus_error);
        if (!e && sd_bus_message_read(reply, "s", &outcome) < 0)
                outcome = NULL;
        for (size_t i = 0; outcome && i < ELEMENTSOF(release_archive_outcomes); i++)
                if (streq(outcome, release_archive_outcomes[i])) {
                        char body[64];
                        snprintf(body, sizeof(body), "{\"ok\":true,\"archive\":\"%s\"}", outcome);
                        return http_request_reply_literal(req, HTTP_OK, body);
                }
        return http_request_reply_literal(req, HTTP_OK, "{\"ok\":true}");
}

/* The call 'member' about the session 'id' from the path, which it names first. Returns 1 with the
 * call, 0 when a 400 was prepared for an invalid id. */
static int session_new_call(HttpRequest *req, const char *id, const char *member, sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!session_id_is_valid(id))
                return http_request_reply_detail(req, HTTP_BAD_REQUEST, BUS_MESSAGE_INVALID_SESSION_ID);
        http_request_set_session_id(req, id);

        r = session_manager_new_call(req->server->bus, member, &m);
        if (r < 0)
                return r;
        r = sd_bus_message_append(m, "s", id);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 1;
}

int http_sessions_delete(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        const char *id = req->path_arg;
        SidecarBody b = {};
        int r;

        /* FastAPI validates the body before the handler looks at the path. */
        r = session_body_parse(req, session_release_fields, &b);
        if (r <= 0)
                return r;

        r = session_new_call(req, id, "ReleaseSession", &m);
        if (r <= 0)
                return r;
        r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        if (b.discard) {
                r = sd_bus_message_append(m, "{sv}", "discard", "b", 1);
                if (r < 0)
                        return r;
        }
        r = session_append_storage_options(req, m, &b);
        if (r <= 0)
                return r;
        r = sd_bus_message_close_container(m);
        if (r < 0)
                return r;

        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config),
                                 sessions_delete_on_reply);
}

static int sessions_reset_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const Config *config = &req->server->config;

        return http_request_reply_ok_or_call_error(req, reply, bus_timeout_session_usec(config));
}

int http_sessions_reset(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        const char *arg = req->path_arg, *slash = strchr(arg, '/');
        char id[SESSION_ID_LEN + 1];
        int r;

        /* The router hands over "{id}/reset". */
        if (!slash || (size_t) (slash - arg) > SESSION_ID_LEN)
                return http_request_reply_detail(req, HTTP_BAD_REQUEST, BUS_MESSAGE_INVALID_SESSION_ID);
        memcpy(id, arg, (size_t) (slash - arg));
        id[slash - arg] = 0;
        r = session_new_call(req, id, "ResetKernel", &m);
        if (r <= 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config),
                                 sessions_reset_on_reply);
}
