/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The APIs the gateway serves (registered with server_add_api() by its main()): their route tables,
 * and the handlers of their resources (http-<resource>.c). */
#pragma once

#include "http-router.h"

/* The sidecar (Aivory) API (docs/api.md). */
extern const HttpApi http_sidecar_api;
extern const HttpRoute http_sidecar_routes[];
/* The dify-sandbox API (docs/dify.md); its paths are disjoint from the sidecar's. */
extern const HttpApi http_dify_api;
extern const HttpRoute http_dify_routes[];

/* The E2B API (docs/e2b.md), on its own socket. */
extern const HttpApi http_e2b_api;
extern const HttpRoute http_e2b_routes[];
extern const HttpRoute http_e2b_sandbox_routes[];

/* A CreateSession call 'm' for 'req' whose session is the client's only once the answer reached it
 * (http-sessions.c); 'on_reply' calls http_session_create_confirm_later() on success, which reads
 * the id. */
int http_session_create_call(HttpRequest *req, sd_bus_message *m, HttpReplyHandler on_reply);
int http_session_create_confirm_later(HttpRequest *req, sd_bus_message *reply, const char **ret_id);

int http_health_get(HttpRequest *req);
int http_sessions_post(HttpRequest *req);
int http_sessions_delete(HttpRequest *req);
/* POST /sessions/{id}/reset: a stateful session's interpreter starts fresh. */
int http_sessions_reset(HttpRequest *req);
int http_exec_post(HttpRequest *req);
/* POST /exec/cancel {"session_id"}: ends the session's running exec (docs/api.md). */
int http_exec_cancel(HttpRequest *req);
int http_files_post(HttpRequest *req);
int http_files_get(HttpRequest *req);
int http_files_list(HttpRequest *req);
int http_files_reset_inputs(HttpRequest *req);
int http_storage_put(HttpRequest *req);
int http_storage_delete(HttpRequest *req);
int http_storage_gc(HttpRequest *req);
int http_metrics_get(HttpRequest *req);
int http_dify_health(HttpRequest *req);
int http_dify_run(HttpRequest *req);
int http_dify_dependencies_list(HttpRequest *req);
int http_dify_dependencies_update(HttpRequest *req);
int http_dify_dependencies_refresh(HttpRequest *req);
