/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's control plane (docs/e2b.md): sandboxes are sessions that carry a record (their
 * template and metadata, kept by the session manager) and a deadline. Answers of ours are
 * {"code": <status>, "message": ...}, which the SDKs turn into their typed errors. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "e2b-token.h"
#include "http-apis.h"
#include "http-e2b.h"
#include "http-router.h"
#include "id.h"
#include "json-util.h"
#include "log.h"
#include "parse-util.h"
#include "string-util.h"
#include "time-util.h"

static const struct {
        const char *name;
        bool stateful;
} e2b_templates[] = {
        { "base", false },
        { "code-interpreter-v1", true },
};

int e2b_response_new_failure(unsigned status, const char *message, HttpResponse **ret) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();

        if (!o || json_object_object_add(o, "code", json_object_new_int((int) status)) < 0 ||
            json_add_string(o, "message", message ?: "") < 0)
                return -ENOMEM;
        return http_response_new_json(status, o, ret);
}

static int e2b_reply(HttpRequest *req, unsigned status, const char *message) {
        HttpResponse *r = NULL;
        int k = e2b_response_new_failure(status, message, &r);

        return http_request_reply_made(req, k, r);
}

static int e2b_reply_not_found(HttpRequest *req, const char *id) {
        char message[64 + SESSION_ID_LEN];

        /* The id was checked: at most a session id's characters. */
        (void) snprintf(message, sizeof(message), "sandbox \"%s\" not found", id);
        return e2b_reply(req, HTTP_NOT_FOUND, message);
}

/* The answer to a failed call in E2B's shape: the status and message the other APIs give. */
int e2b_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        const char *message;
        unsigned status;
        int r;

        /* A call that needs a paused sandbox (its traffic): what E2B's proxy answers for one. */
        if (sd_bus_error_has_name(e, BUS_ERROR_PAUSED)) {
                *ret_internal = false;
                return e2b_response_new_failure(HTTP_BAD_GATEWAY, "sandbox is paused", ret);
        }
        http_bus_error_describe(e, false, &status, &message, ret_internal);
        r = e2b_response_new_failure(status, message, ret);
        if (r >= 0 && (status == HTTP_SERVICE_UNAVAILABLE || status == HTTP_TOO_MANY_REQUESTS))
                (*ret)->retry_after = "1";
        return r;
}

static int e2b_reply_call_error(HttpRequest *req, const sd_bus_error *e, const char *id) {
        if (id && sd_bus_error_has_name(e, BUS_ERROR_NO_SUCH_SESSION))
                return e2b_reply_not_found(req, id);
        return http_request_reply_call_error(req, e, bus_timeout_session_usec(&req->server->config),
                                             e2b_response_new_bus_error);
}

/* RFC 3339 in UTC with milliseconds, as E2B writes its times. */
static int json_add_time(json_object *o, const char *key, uint64_t realtime_usec) {
        time_t t = (time_t) (realtime_usec / USEC_PER_SEC);
        char buf[64];
        struct tm tm;

        if (!gmtime_r(&t, &tm))
                return -EINVAL;
        (void) snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                        (unsigned) (realtime_usec % USEC_PER_SEC / 1000));
        return json_add_string(o, key, buf);
}

/* ---- the record a sandbox's session keeps ---- */

/* {"e2b":1,"template":...,"metadata":{...}}: nothing deeper. */
#define E2B_RECORD_DEPTH 4

/* What the manager keeps of a sandbox (its CreateSession "record"): {"e2b":1,"template":...,
 * "metadata":{...}}. Written by us; read back from the manager, which took it from us. */
typedef struct E2bSandbox {
        const char *id;
        json_object *record; /* owned */
        const char *template; /* in 'record' */
        json_object *metadata; /* in 'record' */
        uint64_t created_usec;
        uint64_t deadline_usec;
        bool paused;
} E2bSandbox;

static void e2b_sandbox_done(E2bSandbox *b) {
        json_object_put(b->record);
        *b = (E2bSandbox) {};
}

/* The info of a record (GetRecord, ListRecords, SetDeadline) that a sandbox's answers use. */
typedef struct E2bRecordInfo {
        uint64_t created_usec;
        uint64_t deadline_usec;
        bool paused;
} E2bRecordInfo;

static const BusDictField e2b_record_info_fields[] = {
        { "created_usec", 't', offsetof(E2bRecordInfo, created_usec) },
        { "deadline_usec", 't', offsetof(E2bRecordInfo, deadline_usec) },
        { "paused", 'b', offsetof(E2bRecordInfo, paused) },
        {}
};

bool e2b_record_reply_paused(sd_bus_message *reply) {
        E2bRecordInfo info = {};
        bool read;

        if (sd_bus_message_is_method_error(reply, NULL) || sd_bus_message_rewind(reply, true) < 0)
                return false;
        read = sd_bus_message_skip(reply, "s") >= 0 &&
               bus_message_read_dict(reply, e2b_record_info_fields, &info) >= 0;
        /* Left as it came, for whoever reads it next. */
        (void) sd_bus_message_rewind(reply, true);
        return read && info.paused;
}

/* Reads "s record, a{sv} info". Returns 0 when it is no sandbox of ours (a record written by
 * something else), 1 when read. */
static int e2b_sandbox_read(sd_bus_message *m, const char *id, E2bSandbox *ret) {
        _cleanup_(json_object_putp) json_object *record = NULL;
        E2bRecordInfo info = {};
        const char *text;
        json_object *v, *t;
        int r;

        r = sd_bus_message_read(m, "s", &text);
        if (r >= 0)
                r = bus_message_read_dict(m, e2b_record_info_fields, &info);
        if (r < 0)
                return r;

        if (json_parse(text, strlen(text), E2B_RECORD_DEPTH, &record) < 0 ||
            !json_object_is_type(record, json_type_object) ||
            !json_object_object_get_ex(record, "e2b", &v) ||
            !json_object_object_get_ex(record, "template", &t) || !json_object_is_type(t, json_type_string))
                return 0;
        if (!json_object_object_get_ex(record, "metadata", &v) || !json_object_is_type(v, json_type_object))
                v = NULL;
        *ret = (E2bSandbox) {
                .id = id,
                .template = json_object_get_string(t),
                .metadata = v,
                .created_usec = info.created_usec,
                .deadline_usec = info.deadline_usec,
                .paused = info.paused,
                .record = TAKE_PTR(record),
        };
        return 1;
}

/* The sandbox a GetRecord or SetDeadline reply for the request's sandbox names. Returns 1 with
 * it, 0 when the answer was prepared (the call failed, or it is no sandbox). */
static int e2b_reply_sandbox(HttpRequest *req, sd_bus_message *reply, E2bSandbox *ret) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        int r;

        if (e)
                return e2b_reply_call_error(req, e, req->session_id);
        r = e2b_sandbox_read(reply, req->session_id, ret);
        if (r == 0)
                return e2b_reply_not_found(req, req->session_id);
        return r;
}

/* The members every answer about a sandbox has (Sandbox: create, connect). */
static int e2b_sandbox_add_identity(HttpRequest *req, json_object *o, const E2bSandbox *b) {
        char envd[E2B_TOKEN_LEN + 1], traffic[E2B_TOKEN_LEN + 1];
        int r;

        r = e2b_token(req->server, E2B_TOKEN_ENVD, b->id, envd);
        if (r >= 0)
                r = e2b_token(req->server, E2B_TOKEN_TRAFFIC, b->id, traffic);
        if (r < 0)
                return r;
        if (json_add_string(o, "sandboxID", b->id) < 0 ||
            json_add_string(o, "clientID", E2B_CLIENT_ID) < 0 ||
            json_add_string(o, "templateID", b->template) < 0 ||
            json_add_string(o, "alias", b->template) < 0 ||
            json_add_string(o, "envdVersion", E2B_ENVD_VERSION) < 0 ||
            json_add_string(o, "envdAccessToken", envd) < 0 ||
            json_add_string(o, "trafficAccessToken", traffic) < 0 ||
            json_object_object_add(o, "domain",
                                   isempty(req->server->config.e2b_domain)
                                           ? NULL
                                           : json_object_new_string(req->server->config.e2b_domain)) < 0)
                return -ENOMEM;
        return 0;
}

/* SandboxDetail (getInfo) and ListedSandbox (list): the same members here. */
static int e2b_sandbox_detail(HttpRequest *req, const E2bSandbox *b, json_object **ret) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object(), *lifecycle = NULL;
        const Config *c = &req->server->config;
        int r;

        if (!o)
                return -ENOMEM;
        r = e2b_sandbox_add_identity(req, o, b);
        if (r < 0)
                return r;
        lifecycle = json_object_new_object();
        if (!lifecycle || json_add_string(lifecycle, "onTimeout", "kill") < 0 ||
            json_object_object_add(lifecycle, "autoResume", json_object_new_boolean(false)) < 0)
                return -ENOMEM;
        if (json_object_object_add(o, "metadata",
                                   b->metadata ? json_object_get(b->metadata) : json_object_new_object()) <
                    0 ||
            json_add_time(o, "startedAt", b->created_usec) < 0 ||
            json_add_time(o, "endAt", b->deadline_usec) < 0 ||
            json_add_string(o, "state", b->paused ? "paused" : "running") < 0 ||
            json_object_object_add(
                    o, "cpuCount",
                    json_object_new_int64((int64_t) MAX((c->cpu_quota_percent + 99) / 100, 1))) < 0 ||
            json_object_object_add(o, "memoryMB", json_object_new_int64((int64_t) (c->memory_limit >> 20))) <
                    0 ||
            json_object_object_add(o, "diskSizeMB",
                                   json_object_new_int64((int64_t) (c->workspace_size >> 20))) < 0 ||
            json_object_object_add(o, "lifecycle", TAKE_PTR(lifecycle)) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- the path's sandbox id ---- */

/* The id in "{id}" or "{id}/<verb>" (the router checked the shape). Returns 1 with the id, 0 when a
 * 404 was prepared: an id that is no session id names no sandbox. */
static int e2b_path_id(HttpRequest *req, char ret[static SESSION_ID_LEN + 1]) {
        const char *arg = req->path_arg, *slash = strchr(arg, '/');
        size_t n = slash ? (size_t) (slash - arg) : strlen(arg);

        if (n != SESSION_ID_LEN) {
                /* Not shown back: it can be anything. */
                return e2b_reply(req, HTTP_NOT_FOUND, "sandbox not found");
        }
        memcpy(ret, arg, n);
        ret[n] = 0;
        if (!session_id_is_valid(ret))
                return e2b_reply(req, HTTP_NOT_FOUND, "sandbox not found");
        http_request_set_session_id(req, ret);
        return 1;
}

/* The body's "timeout" (seconds): 'fallback' when absent or null; 1 when read, 0 when a 400 was
 * prepared. At most SANDBOX_IDLE_TTL_CAP_SECONDS, the longest a session may idle. */
static int e2b_body_timeout(HttpRequest *req, uint64_t fallback, uint64_t *ret) {
        const Config *c = &req->server->config;
        json_object *v;
        int64_t t;
        char message[96];

        *ret = fallback;
        if (!req->json || !json_object_object_get_ex(req->json, "timeout", &v) || !v)
                return 1;
        if (!json_object_is_type(v, json_type_int))
                return e2b_reply(req, HTTP_BAD_REQUEST, "timeout must be an integer number of seconds");
        t = json_object_get_int64(v);
        if (t < 0)
                return e2b_reply(req, HTTP_BAD_REQUEST, "timeout must not be negative");
        if ((uint64_t) t > c->idle_ttl_cap_sec) {
                (void) snprintf(message, sizeof(message), "timeout must be at most %" PRIu64 " seconds",
                                c->idle_ttl_cap_sec);
                return e2b_reply(req, HTTP_BAD_REQUEST, message);
        }
        *ret = (uint64_t) t;
        return 1;
}

static uint64_t realtime_now_usec(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- POST /sandboxes, POST /v2/sandboxes ---- */

/* A map of strings from the body, bounded; 1 when valid (or absent: *ret NULL), 0 when a 400 was
 * prepared. */
static int e2b_body_string_map(HttpRequest *req, const char *name, json_object **ret) {
        json_object *v;
        char message[128];
        size_t n = 0;

        *ret = NULL;
        if (!req->json || !json_object_object_get_ex(req->json, name, &v) || !v)
                return 1;
        if (!json_object_is_type(v, json_type_object)) {
                (void) snprintf(message, sizeof(message), "%s must be an object of strings", name);
                return e2b_reply(req, HTTP_BAD_REQUEST, message);
        }
        json_object_object_foreach(v, key, value) {
                if (!json_object_is_type(value, json_type_string) || ++n > E2B_MAP_ENTRIES_MAX ||
                    strlen(key) > E2B_MAP_KEY_MAX ||
                    (size_t) json_object_get_string_len(value) > E2B_MAP_VALUE_MAX ||
                    memchr(json_object_get_string(value), 0, (size_t) json_object_get_string_len(value))) {
                        (void) snprintf(message, sizeof(message),
                                        "%s must be an object of at most %u strings (keys of at most %u "
                                        "bytes, values of at most %u, without NUL)",
                                        name, E2B_MAP_ENTRIES_MAX, E2B_MAP_KEY_MAX, E2B_MAP_VALUE_MAX);
                        return e2b_reply(req, HTTP_BAD_REQUEST, message);
                }
        }
        *ret = v;
        return 1;
}

/* Members that ask for what scopebox does not do: refused rather than ignored, so that nobody
 * believes a sandbox has what it lacks (docs/e2b.md). */
static int e2b_body_refuse_unsupported(HttpRequest *req) {
        static const struct {
                const char *member;
                const char *message;
        } refused[] = {
                { "autoPause", "autoPause is not supported by scopebox: a sandbox ends at its timeout" },
                { "autoResume", "autoResume is not supported by scopebox" },
                { "network", "network rules are not supported by scopebox: sandboxes have no network" },
                { "mcp", "MCP servers are not supported by scopebox" },
                { "volumeMounts", "volumes are not supported by scopebox" },
        };
        json_object *v;

        if (!req->json)
                return 1;
        for (size_t i = 0; i < ELEMENTSOF(refused); i++)
                if (json_object_object_get_ex(req->json, refused[i].member, &v) && v &&
                    !(json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v)))
                        return e2b_reply(req, HTTP_BAD_REQUEST, refused[i].message);
        /* allow_internet_access is not looked at: the SDKs before 2.51 and the Python SDK send
         * true when their user said nothing, so it can't say what the user wants. Sandboxes have no
         * network (docs/e2b.md). */
        return 1;
}

typedef struct E2bCreate {
        char *template;
} E2bCreate;

static int e2b_create_on_reply(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *id,
                *template = req->json
                                    ? json_object_get_string(json_object_object_get(req->json, "templateID"))
                                    : NULL;
        E2bSandbox b;
        int r;

        if (e)
                return e2b_reply_call_error(req, e, NULL);
        r = http_session_create_confirm_later(req, reply, &id);
        if (r < 0)
                return r;
        b = (E2bSandbox) { .id = id, .template = template ?: E2B_TEMPLATE_DEFAULT };
        o = json_object_new_object();
        if (!o)
                return -ENOMEM;
        r = e2b_sandbox_add_identity(req, o, &b);
        if (r < 0)
                return r;
        return http_request_reply_json(req, HTTP_CREATED, o);
}

int http_e2b_create(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_(json_object_putp) json_object *record = NULL;
        json_object *metadata, *envs, *v = NULL;
        const char *template = E2B_TEMPLATE_DEFAULT, *text;
        bool stateful = false, known = false;
        uint64_t timeout;
        int r;

        if (req->json && !json_object_is_type(req->json, json_type_object))
                return e2b_reply(req, HTTP_BAD_REQUEST, "the body must be a JSON object");
        if (req->json && json_object_object_get_ex(req->json, "templateID", &v) && v) {
                if (!json_object_is_type(v, json_type_string))
                        return e2b_reply(req, HTTP_BAD_REQUEST, "templateID must be a string");
                template = json_object_get_string(v);
        }
        /* A NUL in it would name another template. */
        if (v && strlen(template) != (size_t) json_object_get_string_len(v))
                return e2b_reply(req, HTTP_BAD_REQUEST, "templateID contains a NUL character");
        for (size_t i = 0; i < ELEMENTSOF(e2b_templates); i++)
                if (streq(template, e2b_templates[i].name)) {
                        known = true;
                        stateful = e2b_templates[i].stateful;
                }
        if (!known) {
                char message[160];

                if (strlen(template) > 64)
                        return e2b_reply(req, HTTP_NOT_FOUND, "template not found");
                (void) snprintf(message, sizeof(message),
                                "template '%s' not found (this server has 'base' and 'code-interpreter-v1')",
                                template);
                return e2b_reply(req, HTTP_NOT_FOUND, message);
        }
        r = e2b_body_timeout(req, E2B_TIMEOUT_DEFAULT_SEC, &timeout);
        if (r <= 0)
                return r;
        r = e2b_body_refuse_unsupported(req);
        if (r <= 0)
                return r;
        r = e2b_body_string_map(req, "metadata", &metadata);
        if (r <= 0)
                return r;
        r = e2b_body_string_map(req, "envVars", &envs);
        if (r <= 0)
                return r;
        /* The sandbox's environment, kept in its record: every command and cell gets it. */
        if (!e2b_envs_valid(envs, E2B_MAP_ENTRIES_MAX))
                return e2b_reply(req, HTTP_BAD_REQUEST, "envVars names must be non-empty and without '='");

        record = json_object_new_object();
        if (!record || json_object_object_add(record, "e2b", json_object_new_int(1)) < 0 ||
            json_add_string(record, "template", template) < 0 ||
            json_object_object_add(record, "metadata",
                                   metadata ? json_object_get(metadata) : json_object_new_object()) < 0 ||
            (envs && json_object_object_length(envs) > 0 &&
             json_object_object_add(record, "envVars", json_object_get(envs)) < 0))
                return -ENOMEM;
        text = json_object_to_json_string_ext(record, JSON_C_TO_STRING_PLAIN);
        if (!text)
                return -ENOMEM;
        if (strlen(text) > BUS_SESSION_RECORD_MAX)
                return e2b_reply(req, HTTP_BAD_REQUEST, "metadata and envVars too large");

        /* The options stay open: the call adds its hang-up pipe. */
        r = session_manager_new_call(req->server->bus, "CreateSession", &m);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}{sv}", "stateful", "b", (int) stateful, "record", "s",
                                          text, "deadline_usec", "t",
                                          realtime_now_usec() + timeout * USEC_PER_SEC);
        if (r < 0)
                return r;
        return http_session_create_call(req, m, e2b_create_on_reply);
}

/* ---- GET /sandboxes/{id} ---- */

static int e2b_get_on_reply(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        _cleanup_(e2b_sandbox_done) E2bSandbox b = {};
        int r;

        r = e2b_reply_sandbox(req, reply, &b);
        if (r <= 0)
                return r;
        r = e2b_sandbox_detail(req, &b, &o);
        if (r < 0)
                return r;
        return http_request_reply_json(req, HTTP_OK, o);
}

static int e2b_record_call(HttpRequest *req, const char *member, sd_bus_message **ret) {
        char id[SESSION_ID_LEN + 1];
        int r;

        r = e2b_path_id(req, id);
        if (r <= 0)
                return r;
        r = session_manager_new_call(req->server->bus, member, ret);
        if (r >= 0)
                r = sd_bus_message_append(*ret, "s", id);
        return r < 0 ? r : 1;
}

/* GetRecord of the path's sandbox, answered by 'on_reply'. */
static int e2b_get_record(HttpRequest *req, HttpReplyHandler on_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = e2b_record_call(req, "GetRecord", &m);
        if (r <= 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config), on_reply);
}

int http_e2b_get(HttpRequest *req) {
        return e2b_get_record(req, e2b_get_on_reply);
}

/* ---- DELETE /sandboxes/{id} ---- */

/* 204, or the call's error (ReleaseSession, SetDeadline). */
static int e2b_no_content_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                return e2b_reply_call_error(req, e, req->session_id);
        return http_request_reply_literal(req, HTTP_NO_CONTENT, "");
}

/* Only a sandbox is killed or paused, never another session: after the GetRecord that says it is
 * one, the manager's 'member' on it ("s id", and for ReleaseSession no options), answered by
 * 'on_reply'. */
static int e2b_call_on_sandbox(HttpRequest *req, sd_bus_message *reply, const char *member,
                               HttpReplyHandler on_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_(e2b_sandbox_done) E2bSandbox b = {};
        int r;

        r = e2b_reply_sandbox(req, reply, &b);
        if (r <= 0)
                return r;
        r = session_manager_new_call(req->server->bus, member, &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", req->session_id);
        if (r >= 0 && streq(member, "ReleaseSession"))
                r = sd_bus_message_append(m, "a{sv}", 0);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config), on_reply);
}

static int e2b_kill_on_record(HttpRequest *req, sd_bus_message *reply) {
        return e2b_call_on_sandbox(req, reply, "ReleaseSession", e2b_no_content_on_reply);
}

int http_e2b_kill(HttpRequest *req) {
        return e2b_get_record(req, e2b_kill_on_record);
}

/* ---- POST /sandboxes/{id}/timeout, POST /sandboxes/{id}/connect, /v2/sandboxes/{id}/connect ---- */

/* A connect or resume: whether it resumed a paused sandbox (ResumeSession said so). */
typedef struct E2bConnect {
        bool resumed;
} E2bConnect;

static int e2b_connect_on_reply(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        _cleanup_(e2b_sandbox_done) E2bSandbox b = {};
        const E2bConnect *c = req->userdata;
        int r;

        r = e2b_reply_sandbox(req, reply, &b);
        if (r <= 0)
                return r;
        o = json_object_new_object();
        if (!o)
                return -ENOMEM;
        r = e2b_sandbox_add_identity(req, o, &b);
        if (r < 0)
                return r;
        /* E2B's: 201 when the sandbox was resumed, 200 when it ran. */
        return http_request_reply_json(req, c && c->resumed ? HTTP_CREATED : HTTP_OK, o);
}

static int e2b_set_deadline(HttpRequest *req, uint64_t fallback, bool extend_only,
                            HttpReplyHandler on_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        uint64_t timeout;
        int r;

        if (req->json && !json_object_is_type(req->json, json_type_object))
                return e2b_reply(req, HTTP_BAD_REQUEST, "the body must be a JSON object");
        r = e2b_body_timeout(req, fallback, &timeout);
        if (r <= 0)
                return r;
        r = e2b_record_call(req, "SetDeadline", &m);
        if (r <= 0)
                return r;
        r = sd_bus_message_append(m, "tb", realtime_now_usec() + timeout * USEC_PER_SEC, (int) extend_only);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config), on_reply);
}

int http_e2b_set_timeout(HttpRequest *req) {
        if (!req->json || !json_object_object_get(req->json, "timeout"))
                return e2b_reply(req, HTTP_BAD_REQUEST, "timeout is required");
        return e2b_set_deadline(req, 0, false, e2b_no_content_on_reply);
}

/* The body's "memory" (the SDKs' keepMemory, onResume: 'reboot'): a pause keeps the memory here,
 * so false, which asks for a sandbox that restarts from its files, is refused, never ignored. 1
 * when it may go on, 0 when a 400 was prepared. */
static int e2b_body_memory(HttpRequest *req, const char *refusal) {
        json_object *v;

        if (req->json && !json_object_is_type(req->json, json_type_object))
                return e2b_reply(req, HTTP_BAD_REQUEST, "the body must be a JSON object");
        if (!req->json || !json_object_object_get_ex(req->json, "memory", &v) || !v)
                return 1;
        if (!json_object_is_type(v, json_type_boolean))
                return e2b_reply(req, HTTP_BAD_REQUEST, "memory must be a boolean");
        if (!json_object_get_boolean(v))
                return e2b_reply(req, HTTP_BAD_REQUEST, refusal);
        return 1;
}

/* ResumeSession of the path's sandbox (none: a sandbox that runs stays as it is), then 'then'. */
static int e2b_resume_call(HttpRequest *req, HttpReplyHandler on_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!http_request_new_userdata(req, sizeof(E2bConnect), free))
                return -ENOMEM;
        r = e2b_record_call(req, "ResumeSession", &m);
        if (r <= 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config), on_reply);
}

/* Reads ResumeSession's answer into the request's E2bConnect. 1 when read, 0 when the answer was
 * prepared (the call failed). */
static int e2b_resume_read(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bConnect *c = req->userdata;
        int resumed, r;

        if (e)
                return e2b_reply_call_error(req, e, req->session_id);
        r = sd_bus_message_read(reply, "b", &resumed);
        if (r < 0)
                return r;
        c->resumed = resumed;
        return 1;
}

static int e2b_connect_on_resume(HttpRequest *req, sd_bus_message *reply) {
        int r = e2b_resume_read(req, reply);

        if (r <= 0)
                return r;
        return e2b_set_deadline(req, E2B_TIMEOUT_DEFAULT_SEC, true, e2b_connect_on_reply);
}

/* connect (v1, v2): resumes a paused sandbox, extends the deadline, answers as create. */
int http_e2b_connect(HttpRequest *req) {
        int r;

        r = e2b_body_memory(req, "memory: false (onResume: 'reboot') is not supported by scopebox: a paused "
                                 "sandbox keeps its memory and resumes where it was (docs/e2b.md)");
        if (r <= 0)
                return r;
        return e2b_resume_call(req, e2b_connect_on_resume);
}

static int e2b_resume_on_resume(HttpRequest *req, sd_bus_message *reply) {
        const E2bConnect *c = req->userdata;
        char message[64 + SESSION_ID_LEN];
        int r;

        r = e2b_resume_read(req, reply);
        if (r <= 0)
                return r;
        if (!c->resumed) {
                (void) snprintf(message, sizeof(message), "sandbox \"%s\" is already running",
                                req->session_id);
                return e2b_reply(req, HTTP_CONFLICT, message);
        }
        return e2b_set_deadline(req, E2B_TIMEOUT_DEFAULT_SEC, true, e2b_connect_on_reply);
}

/* POST /sandboxes/{id}/resume (deprecated by E2B, older SDKs): as connect, but 409 for a sandbox
 * that runs, as E2B answers it. */
int http_e2b_resume(HttpRequest *req) {
        int r;

        if (req->json && !json_object_is_type(req->json, json_type_object))
                return e2b_reply(req, HTTP_BAD_REQUEST, "the body must be a JSON object");
        r = e2b_body_refuse_unsupported(req);
        if (r <= 0)
                return r;
        return e2b_resume_call(req, e2b_resume_on_resume);
}

/* ---- POST /sandboxes/{id}/pause ---- */

static int e2b_reply_already_paused(HttpRequest *req) {
        char message[64 + SESSION_ID_LEN];

        (void) snprintf(message, sizeof(message), "sandbox \"%s\" is already paused", req->session_id);
        return e2b_reply(req, HTTP_CONFLICT, message);
}

static int e2b_pause_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        /* The SDKs' pause() returns false on 409. */
        if (e && sd_bus_error_has_name(e, BUS_ERROR_PAUSED))
                return e2b_reply_already_paused(req);
        return e2b_no_content_on_reply(req, reply);
}

static int e2b_pause_on_record(HttpRequest *req, sd_bus_message *reply) {
        return e2b_call_on_sandbox(req, reply, "PauseSession", e2b_pause_on_reply);
}

/* Freezes the sandbox where it is (docs/e2b.md "Pause and resume"): 204, 409 when paused already. */
int http_e2b_pause(HttpRequest *req) {
        int r;

        r = e2b_body_memory(req, "memory: false (keepMemory: false) is not supported by scopebox: a paused "
                                 "sandbox keeps its memory (docs/e2b.md)");
        if (r <= 0)
                return r;
        return e2b_get_record(req, e2b_pause_on_record);
}

int http_e2b_unsupported(HttpRequest *req) {
        return e2b_reply(req, HTTP_NOT_IMPLEMENTED, "not supported by this scopebox version (docs/e2b.md)");
}

/* ---- GET /v2/sandboxes, GET /sandboxes ---- */

/* Decodes %XX in 'n' bytes of 's' into a new string; -EINVAL for a malformed escape or a NUL. */
static int e2b_unescape(const char *s, size_t n, char **ret) {
        char *d = malloc(n + 1), *p = d;

        if (!d)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '%') {
                        int hi = i + 2 < n ? unhexchar(s[i + 1]) : -1,
                            lo = i + 2 < n ? unhexchar(s[i + 2]) : -1;

                        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                                free(d);
                                return -EINVAL;
                        }
                        *p++ = (char) (hi << 4 | lo);
                        i += 2;
                } else
                        *p++ = s[i];
        }
        *p = 0;
        *ret = d;
        return 0;
}

/* One "key=value" of the metadata filter, each side percent-encoded twice over (docs/e2b.md). */
static int e2b_filter_pair(const char *s, size_t n, char **ret_key, char **ret_value) {
        _cleanup_free_ char *k1 = NULL, *v1 = NULL, *k = NULL, *v = NULL;
        const char *eq = memchr(s, '=', n);
        int r;

        if (!eq)
                return -EINVAL;
        r = e2b_unescape(s, (size_t) (eq - s), &k1);
        if (r >= 0)
                r = e2b_unescape(eq + 1, n - (size_t) (eq + 1 - s), &v1);
        if (r >= 0)
                r = e2b_unescape(k1, strlen(k1), &k);
        if (r >= 0)
                r = e2b_unescape(v1, strlen(v1), &v);
        if (r < 0)
                return r;
        *ret_key = TAKE_PTR(k);
        *ret_value = TAKE_PTR(v);
        return 0;
}

/* Calls 'pair' with each "key=value" of the metadata filter, decoded; -EINVAL for a filter that
 * is not well formed, or what 'pair' returns when not 0. */
static int e2b_filter_foreach(const char *filter, int (*pair)(const char *k, const char *v, void *userdata),
                              void *userdata) {
        size_t n = strlen(filter);

        for (const char *p = filter; p < filter + n;) {
                const char *amp = memchr(p, '&', (size_t) (filter + n - p));
                size_t l = amp ? (size_t) (amp - p) : (size_t) (filter + n - p);
                _cleanup_free_ char *k = NULL, *v = NULL;
                int r;

                if (l > 0) {
                        r = e2b_filter_pair(p, l, &k, &v);
                        if (r >= 0)
                                r = pair(k, v, userdata);
                        if (r != 0)
                                return r;
                }
                p += l + 1;
        }
        return 0;
}

static int e2b_filter_pair_ok(const char *k, const char *v, void *userdata) {
        return 0;
}

static int e2b_filter_pair_matches(const char *k, const char *v, void *userdata) {
        const E2bSandbox *b = userdata;
        json_object *have;

        return b->metadata && json_object_object_get_ex(b->metadata, k, &have) &&
                               streq(json_object_get_string(have), v)
                       ? 0
                       : 1;
}

static bool e2b_metadata_matches(const E2bSandbox *b, const char *filter) {
        return e2b_filter_foreach(filter, e2b_filter_pair_matches, (void *) b) == 0;
}

static int e2b_sandbox_compare(const void *a, const void *b) {
        const E2bSandbox *x = a, *y = b;

        /* The newest first; the id decides between equal times. */
        if (x->created_usec != y->created_usec)
                return x->created_usec > y->created_usec ? -1 : 1;
        return strcmp(y->id, x->id);
}

/* The position a page token names: the last sandbox of the page before. */
static int e2b_token_parse(const char *s, uint64_t *ret_usec, char ret_id[static SESSION_ID_LEN + 1]) {
        if (strlen(s) != 16 + SESSION_ID_LEN)
                return -EINVAL;
        *ret_usec = 0;
        for (size_t i = 0; i < 16; i++) {
                int d = unhexchar(s[i]);
                if (d < 0)
                        return -EINVAL;
                *ret_usec = *ret_usec << 4 | (uint64_t) d;
        }
        memcpy(ret_id, s + 16, SESSION_ID_LEN + 1);
        return session_id_is_valid(ret_id) ? 0 : -EINVAL;
}

typedef struct E2bListQuery {
        const char *metadata;
        bool running; /* the state filter lets running sandboxes through */
        bool paused;  /* ... paused ones */
        unsigned limit;
        bool asc;
        bool has_after;
        E2bSandbox after; /* id points into after_id */
        char after_id[SESSION_ID_LEN + 1];
} E2bListQuery;

static const char *e2b_query(HttpRequest *req, const char *name) {
        return req->connection ? MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, name)
                               : NULL;
}

/* 1 when the query is valid, 0 when a 400 was prepared. */
static int e2b_list_query(HttpRequest *req, bool paged, E2bListQuery *q) {
        const char *state = e2b_query(req, "state"), *limit = e2b_query(req, "limit"),
                   *token = e2b_query(req, "nextToken"), *order = e2b_query(req, "order");

        *q = (E2bListQuery) {
                .metadata = e2b_query(req, "metadata"), .running = true, .paused = true, .limit = UINT_MAX
        };
        if (q->metadata && e2b_filter_foreach(q->metadata, e2b_filter_pair_ok, NULL) < 0)
                return e2b_reply(req, HTTP_BAD_REQUEST,
                                 "metadata must be key=value pairs joined by &, "
                                 "each side percent-encoded");
        if (state) {
                q->running = q->paused = false;
                for (const char *p = state; *p;) {
                        size_t l = strcspn(p, ",");

                        if (l == strlen("running") && strneq(p, "running", l))
                                q->running = true;
                        else if (l == strlen("paused") && strneq(p, "paused", l))
                                q->paused = true;
                        else
                                return e2b_reply(req, HTTP_BAD_REQUEST, "state must list running or paused");
                        p += l + (p[l] == ',');
                }
        }
        if (!paged)
                return 1;
        q->limit = E2B_LIST_LIMIT_MAX;
        if (limit) {
                uint64_t l;

                if (safe_atou64(limit, &l) < 0 || l < 1 || l > E2B_LIST_LIMIT_MAX)
                        return e2b_reply(req, HTTP_BAD_REQUEST, "limit must be between 1 and 100");
                q->limit = (unsigned) l;
        }
        if (order) {
                if (!streq(order, "asc") && !streq(order, "desc"))
                        return e2b_reply(req, HTTP_BAD_REQUEST, "order must be asc or desc");
                q->asc = streq(order, "asc");
        }
        if (token && *token) {
                if (e2b_token_parse(token, &q->after.created_usec, q->after_id) < 0)
                        return e2b_reply(req, HTTP_BAD_REQUEST, "invalid nextToken");
                q->after.id = q->after_id;
                q->has_after = true;
        }
        return 1;
}

typedef struct E2bList {
        E2bSandbox *items;
        size_t n;
} E2bList;

static void e2b_list_done(E2bList *l) {
        for (size_t i = 0; i < l->n; i++)
                e2b_sandbox_done(&l->items[i]);
        free(l->items);
        *l = (E2bList) {};
}

static int e2b_list_on_reply(HttpRequest *req, sd_bus_message *reply, bool paged) {
        _cleanup_(json_object_putp) json_object *array = NULL;
        _cleanup_(e2b_list_done) E2bList l = {};
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        char next[16 + SESSION_ID_LEN + 1] = "";
        E2bListQuery q;
        size_t first = 0, shown = 0;
        int r;

        if (e)
                return e2b_reply_call_error(req, e, NULL);
        r = e2b_list_query(req, paged, &q);
        if (r <= 0)
                return r;

        r = sd_bus_message_enter_container(reply, 'a', "(ssa{sv})");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(reply, 'r', "ssa{sv}")) > 0) {
                E2bSandbox b;
                const char *id;

                r = sd_bus_message_read(reply, "s", &id);
                if (r < 0)
                        return r;
                if (!session_id_is_valid(id))
                        return -EBADMSG;
                r = e2b_sandbox_read(reply, id, &b);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(reply);
                if (r < 0) {
                        e2b_sandbox_done(&b);
                        return r;
                }
                if (b.record && (b.paused ? q.paused : q.running) &&
                    (!q.metadata || e2b_metadata_matches(&b, q.metadata))) {
                        E2bSandbox *a = reallocarray(l.items, l.n + 1, sizeof(E2bSandbox));

                        if (!a) {
                                e2b_sandbox_done(&b);
                                return -ENOMEM;
                        }
                        l.items = a;
                        l.items[l.n++] = b;
                } else
                        e2b_sandbox_done(&b);
        }
        if (r < 0)
                return r;

        qsort(l.items, l.n, sizeof(E2bSandbox), e2b_sandbox_compare);
        if (q.asc)
                for (size_t i = 0; i < l.n / 2; i++) {
                        E2bSandbox t = l.items[i];
                        l.items[i] = l.items[l.n - 1 - i];
                        l.items[l.n - 1 - i] = t;
                }
        if (q.has_after)
                while (first < l.n && (q.asc ? e2b_sandbox_compare(&l.items[first], &q.after) >= 0
                                             : e2b_sandbox_compare(&l.items[first], &q.after) <= 0))
                        first++;

        array = json_object_new_array();
        if (!array)
                return -ENOMEM;
        for (size_t i = first; i < l.n && shown < q.limit; i++, shown++) {
                json_object *o;

                r = e2b_sandbox_detail(req, &l.items[i], &o);
                if (r < 0)
                        return r;
                if (json_object_array_add(array, o) < 0) {
                        json_object_put(o);
                        return -ENOMEM;
                }
        }
        if (first + shown < l.n && shown > 0) {
                const E2bSandbox *last = &l.items[first + shown - 1];
                (void) snprintf(next, sizeof(next), "%016" PRIx64 "%s", last->created_usec, last->id);
        }
        r = http_request_reply_json(req, HTTP_OK, array);
        if (r >= 0 && req->response && *next) {
                req->response->next_token = strdup(next);
                if (!req->response->next_token)
                        return -ENOMEM;
        }
        return r;
}

static int e2b_list_paged_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return e2b_list_on_reply(req, reply, true);
}

static int e2b_list_all_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return e2b_list_on_reply(req, reply, false);
}

static int e2b_list(HttpRequest *req, HttpReplyHandler on_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(req->server->bus, "ListRecords", &m);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config), on_reply);
}

int http_e2b_list(HttpRequest *req) {
        return e2b_list(req, e2b_list_paged_on_reply);
}

int http_e2b_list_v1(HttpRequest *req) {
        return e2b_list(req, e2b_list_all_on_reply);
}

/* ---- GET /sandboxes/{id}/metrics ---- */

/* GetSessionUsage's answer (docs/dbus-api.md). */
typedef struct E2bUsage {
        uint64_t sampled_usec, cpu_usec, previous_sampled_usec, previous_cpu_usec;
        uint64_t memory_bytes, memory_cache_bytes, files_bytes;
} E2bUsage;

static const BusDictField e2b_usage_fields[] = {
        { "sampled_usec", 't', offsetof(E2bUsage, sampled_usec) },
        { "cpu_usec", 't', offsetof(E2bUsage, cpu_usec) },
        { "previous_sampled_usec", 't', offsetof(E2bUsage, previous_sampled_usec) },
        { "previous_cpu_usec", 't', offsetof(E2bUsage, previous_cpu_usec) },
        { "memory_bytes", 't', offsetof(E2bUsage, memory_bytes) },
        { "memory_cache_bytes", 't', offsetof(E2bUsage, memory_cache_bytes) },
        { "files_bytes", 't', offsetof(E2bUsage, files_bytes) },
        {}
};

/* The query's "start" or "end" (unix seconds): 'fallback' when absent; -EINVAL when malformed. */
static int e2b_query_seconds(HttpRequest *req, const char *name, uint64_t fallback, uint64_t *ret) {
        const char *v = e2b_query(req, name);

        *ret = fallback;
        if (!v)
                return 0;
        return safe_atou64(v, ret) < 0 ? -EINVAL : 0;
}

/* One SandboxMetric: the sample now. CPU as a share of the sandbox's CPUs since the previous
 * sample (an earlier metrics call, or the start); memory as charged to the sandbox (its files'
 * pages included, its cache also apart); disk as what its file systems hold (tmpfs). */
static int e2b_metric(HttpRequest *req, const E2bUsage *u, json_object **ret) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        const Config *c = &req->server->config;
        uint64_t cpus = MAX((c->cpu_quota_percent + 99) / 100, 1), wall, used;
        double percent = 0;

        if (!o)
                return -ENOMEM;
        wall = u->sampled_usec > u->previous_sampled_usec ? u->sampled_usec - u->previous_sampled_usec : 0;
        used = u->cpu_usec > u->previous_cpu_usec ? u->cpu_usec - u->previous_cpu_usec : 0;
        if (wall > 0)
                percent = MIN(100.0 * (double) used / (double) wall / (double) cpus, 100.0);
        if (json_add_time(o, "timestamp", u->sampled_usec) < 0 ||
            json_object_object_add(o, "timestampUnix",
                                   json_object_new_int64((int64_t) (u->sampled_usec / USEC_PER_SEC))) < 0 ||
            json_object_object_add(o, "cpuCount", json_object_new_int64((int64_t) cpus)) < 0 ||
            json_object_object_add(o, "cpuUsedPct",
                                   json_object_new_double((double) (int64_t) (percent * 100) / 100)) < 0 ||
            json_object_object_add(o, "memUsed", json_object_new_int64((int64_t) u->memory_bytes)) < 0 ||
            json_object_object_add(o, "memTotal", json_object_new_int64((int64_t) c->memory_limit)) < 0 ||
            json_object_object_add(o, "memCache",
                                   json_object_new_int64((int64_t) u->memory_cache_bytes)) < 0 ||
            json_object_object_add(o, "diskUsed", json_object_new_int64((int64_t) u->files_bytes)) < 0 ||
            json_object_object_add(o, "diskTotal", json_object_new_int64((int64_t) c->workspace_size)) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

static int e2b_metrics_on_usage(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(json_object_putp) json_object *array = NULL, *metric = NULL;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint64_t start, end, at;
        E2bUsage u = {};
        int r;

        if (e)
                return e2b_reply_call_error(req, e, req->session_id);
        r = bus_message_read_dict(reply, e2b_usage_fields, &u);
        if (r < 0)
                return r;
        array = json_object_new_array();
        if (!array)
                return -ENOMEM;
        at = u.sampled_usec / USEC_PER_SEC;
        /* (Checked before the call.) */
        (void) e2b_query_seconds(req, "start", 0, &start);
        (void) e2b_query_seconds(req, "end", UINT64_MAX, &end);
        /* Only the sample of now is kept: a window that ends before it has none. */
        if (start <= at && at <= end) {
                r = e2b_metric(req, &u, &metric);
                if (r < 0)
                        return r;
                if (json_object_array_add(array, metric) < 0)
                        return -ENOMEM;
                TAKE_PTR(metric);
        }
        return http_request_reply_json(req, HTTP_OK, array);
}

static int e2b_metrics_on_record(HttpRequest *req, sd_bus_message *reply) {
        return e2b_call_on_sandbox(req, reply, "GetSessionUsage", e2b_metrics_on_usage);
}

/* getMetrics(): the sandbox's use now, from its scope's cgroup counters (docs/e2b.md). */
int http_e2b_metrics(HttpRequest *req) {
        uint64_t t;

        if (e2b_query_seconds(req, "start", 0, &t) < 0 || e2b_query_seconds(req, "end", 0, &t) < 0)
                return e2b_reply(req, HTTP_BAD_REQUEST, "start and end must be unix times in seconds");
        return e2b_get_record(req, e2b_metrics_on_record);
}
