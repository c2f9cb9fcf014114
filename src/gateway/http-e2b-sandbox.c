/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The traffic of an E2B sandbox (docs/e2b.md): requests that name it in E2b-Sandbox-Id and a port
 * in E2b-Sandbox-Port, authenticated by its token (e2b-token.h). As E2B's proxy does, a sandbox
 * that does not run (unknown, killed, past its timeout) is answered 502 on every port. */
#include <errno.h>
#include <string.h>

#include "bus-client.h"
#include "bus-util.h"
#include "exec-command.h"
#include "http-e2b.h"
#include "http-request.h"
#include "id.h"
#include "string-util.h"

int e2b_reply_not_running(HttpRequest *req) {
        HttpResponse *r = NULL;
        int k = http_response_new_take(HTTP_BAD_GATEWAY, strdup("sandbox not running"),
                                       strlen("sandbox not running"), &r);

        if (k >= 0)
                r->content_type = "text/plain; charset=utf-8";
        return http_request_reply_made(req, k, r);
}

/* The sandbox of the request: its id (the router checked it with the token), and whether the port
 * named is 'port'. Returns 1 with the id, 0 when a 502 was prepared. */
int e2b_sandbox_of(HttpRequest *req, const char *port, char ret[static SESSION_ID_LEN + 1]) {
        const HttpRequestHeaders *h = &req->headers;

        if (h->n_e2b_sandbox_id != 1 || h->e2b_sandbox_id_size != SESSION_ID_LEN)
                return e2b_reply_not_running(req);
        memcpy(ret, h->e2b_sandbox_id, SESSION_ID_LEN);
        ret[SESSION_ID_LEN] = 0;
        if (!session_id_is_valid(ret))
                return e2b_reply_not_running(req);
        http_request_set_session_id(req, ret);
        if (h->n_e2b_sandbox_port != 1 || !streq(strempty(h->e2b_sandbox_port), port))
                return e2b_reply_not_running(req);
        return 1;
}

/* The continuation of a request whose sandbox is asked for first, and what it keeps meanwhile. */
typedef struct E2bIfRunning {
        HttpHandler then;
        json_object *kept;
        sd_bus_message *record;    /* GetRecord's answer, for 'then' */
} E2bIfRunning;

static void e2b_if_running_free(void *userdata) {
        E2bIfRunning *c = userdata;

        json_object_put(c->kept);
        sd_bus_message_unref(c->record);
        free(c);
}

static int e2b_if_running_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bIfRunning *c = req->userdata;

        if (e && sd_bus_error_has_name(e, BUS_ERROR_NO_SUCH_SESSION))
                return e2b_reply_not_running(req);
        if (e)
                return http_request_reply_ok_or_call_error(req, reply,
                                                           bus_timeout_session_usec(&req->server->config));
        /* A paused sandbox answers nothing, as E2B's proxy says of one. */
        if (e2b_record_reply_paused(reply))
                return e2b_reply_not_running(req);
        c->record = sd_bus_message_ref(reply);
        return c->then(req);
}

int e2b_if_running_keep(HttpRequest *req, const char *port, HttpHandler then, json_object *kept) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_json_ json_object *k = kept;
        char id[SESSION_ID_LEN + 1];
        E2bIfRunning *c;
        int r;

        r = e2b_sandbox_of(req, port, id);
        if (r <= 0)
                return r;
        c = http_request_new_userdata(req, sizeof(E2bIfRunning), e2b_if_running_free);
        if (!c)
                return -ENOMEM;
        *c = (E2bIfRunning) { .then = then, .kept = TAKE_PTR(k) };
        r = session_manager_new_call(req->server->bus, "GetRecord", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", id);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_session_usec(&req->server->config),
                                 e2b_if_running_on_reply);
}

int e2b_if_running(HttpRequest *req, const char *port, HttpHandler then) {
        return e2b_if_running_keep(req, port, then, NULL);
}

/* The sandbox's environment variables in its record ({"envVars": {...}}, http-e2b.c), checked as
 * the create checked them: a record is the gateway's own, but the manager keeps it. */
static int e2b_record_envs(sd_bus_message *reply, json_object **ret) {
        _cleanup_json_ json_object *record = NULL;
        json_object *envs;
        const char *text;
        int r;

        *ret = NULL;
        r = sd_bus_message_read(reply, "s", &text);
        if (r < 0)
                return r;
        if (json_parse(text, strlen(text), 8, &record) < 0 || !json_object_is_type(record, json_type_object))
                return -EBADMSG;
        if (!json_object_object_get_ex(record, "envVars", &envs))
                return 0;
        if (!e2b_envs_valid(envs, E2B_MAP_ENTRIES_MAX))
                return -EBADMSG;
        *ret = json_object_get(envs);
        return 0;
}

json_object *e2b_if_running_take(HttpRequest *req, json_object **ret_envs) {
        E2bIfRunning *c = req->userdata;
        json_object *kept = c ? TAKE_PTR(c->kept) : NULL;

        if (ret_envs && (!c || !c->record || e2b_record_envs(c->record, ret_envs) < 0))
                *ret_envs = NULL;
        http_request_free_userdata(req);
        return kept;
}

static int e2b_health_running(HttpRequest *req) {
        return http_request_reply_literal(req, HTTP_NO_CONTENT, "");
}

/* GET /health (envd's): 204 while the sandbox runs. */
int http_e2b_health(HttpRequest *req) {
        return e2b_if_running(req, E2B_PORT_ENVD, e2b_health_running);
}

static int e2b_other_running(HttpRequest *req) {
        return http_request_reply_failure(req, HTTP_NOT_FOUND,
                                          "not served by this scopebox version (docs/e2b.md)");
}

/* Any other request to a sandbox: what E2B's proxy says of one that is gone, or 404. */
int http_e2b_sandbox_other(HttpRequest *req) {
        const HttpRequestHeaders *h = &req->headers;

        return e2b_if_running(req, h->n_e2b_sandbox_port == 1 ? strempty(h->e2b_sandbox_port) : "",
                              e2b_other_running);
}

bool e2b_envs_valid(json_object *envs, size_t max) {
        if (!envs)
                return true;
        if (!json_object_is_type(envs, json_type_object) || (size_t) json_object_object_length(envs) > max)
                return false;
        json_object_object_foreach(
                envs, name, value) if (!exec_command_env_name_ok(name, strlen(name)) ||
                                       !json_object_is_type(value, json_type_string) ||
                                       memchr(json_object_get_string(value), 0,
                                              (size_t) json_object_get_string_len(value))) return false;
        return true;
}

int e2b_envs_pack(JsonWriter *w, json_object *envs) {
        int r = 0;

        if (!envs)
                return 0;
        json_object_object_foreach(envs, name, value) {
                r = json_writer_append_str(w, name);
                if (r >= 0)
                        r = json_writer_append(w, "=", 1);
                if (r >= 0)
                        r = json_writer_append(w, json_object_get_string(value),
                                               (size_t) json_object_get_string_len(value));
                if (r >= 0)
                        r = json_writer_append(w, "", 1);
                if (r < 0)
                        break;
        }
        return r;
}
