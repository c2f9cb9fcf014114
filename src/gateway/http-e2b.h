/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API (docs/e2b.md): its control plane (http-e2b.c) and the traffic of its sandboxes
 * (http-e2b-sandbox.c), served on the gateway's socket named "e2b" (scopebox-gateway-e2b.socket). */
#pragma once

#include "http-router.h"
#include "json-writer.h"
#include "id.h"

#define E2B_SOCKET_NAME "e2b"
/* What the SDKs gate features on (docs/e2b.md "Versions"). */
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_CLIENT_ID "scopebox"
#define E2B_TEMPLATE_DEFAULT "base"
/* E2B's default sandbox timeout, for a create that names none. */
#define E2B_TIMEOUT_DEFAULT_SEC 300U
#define E2B_LIST_LIMIT_MAX 100U
/* Bounds of metadata (and envVars): what a record may hold stays far below BUS_SESSION_RECORD_MAX
 * once escaped. */
#define E2B_MAP_ENTRIES_MAX 64U
#define E2B_MAP_KEY_MAX 128U
#define E2B_MAP_VALUE_MAX 512U
/* The ports of a sandbox that E2b-Sandbox-Port may name: envd's and the code interpreter's. */
#define E2B_PORT_ENVD "49983"
#define E2B_PORT_JUPYTER "49999"

/* The one code context of a sandbox (its kernel). */
#define E2B_CONTEXT_DEFAULT "default"

/* {"code": <status>, "message": "<message>"} (HttpApi.failure). */
int e2b_response_new_failure(unsigned status, const char *message, HttpResponse **ret);

/* The answer to a failed call in that shape, with the status the other APIs give it. */
int e2b_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);

int http_e2b_create(HttpRequest *req);
int http_e2b_get(HttpRequest *req);
int http_e2b_kill(HttpRequest *req);
int http_e2b_set_timeout(HttpRequest *req);
int http_e2b_connect(HttpRequest *req);
int http_e2b_list(HttpRequest *req);
int http_e2b_list_v1(HttpRequest *req);
int http_e2b_unsupported(HttpRequest *req);
int http_e2b_pause(HttpRequest *req);
int http_e2b_resume(HttpRequest *req);
int http_e2b_metrics(HttpRequest *req);
/* Whether a GetRecord reply ("s record, a{sv} info") says the sandbox is paused; false for an
 * error. The reply is rewound, before and after. */
bool e2b_record_reply_paused(sd_bus_message *reply);
int http_e2b_health(HttpRequest *req);
int http_e2b_sandbox_other(HttpRequest *req);
int http_e2b_execute(HttpRequest *req);
int http_e2b_files_get(HttpRequest *req);
int http_e2b_files_post(HttpRequest *req);
int http_e2b_contexts_list(HttpRequest *req);
int http_e2b_contexts_refuse(HttpRequest *req);
int http_e2b_context_restart(HttpRequest *req);
int http_e2b_process_start(HttpRequest *req);
/* The body limits of envd's process RPCs. */
uint64_t e2b_command_body_max(const Config *config);
uint64_t e2b_rpc_body_max(const Config *config);
int http_e2b_process_connect(HttpRequest *req);
int http_e2b_process_list(HttpRequest *req);
int http_e2b_process_signal(HttpRequest *req);
int http_e2b_process_input(HttpRequest *req);
int http_e2b_process_close_stdin(HttpRequest *req);
int http_e2b_process_unimplemented(HttpRequest *req);

/* The sandbox a request of its traffic names (E2b-Sandbox-Id, checked with its token by the
 * router), and whether the port named is 'port'. Returns 1 with the id, 0 when a 502 was prepared
 * (as E2B's proxy answers for a sandbox or port that does not answer). */
int e2b_sandbox_of(HttpRequest *req, const char *port, char ret[static SESSION_ID_LEN + 1]);
/* 'then' runs if the sandbox of the request's traffic runs (after e2b_sandbox_of(); GetRecord);
 * otherwise 502, or the call's failure. Takes the request's userdata. */
int e2b_if_running(HttpRequest *req, const char *port, HttpHandler then);
/* The same, keeping 'kept' (taken) for 'then', which takes it back with e2b_if_running_take() (and
 * lets go of the request's userdata), with the sandbox's environment variables ("envVars" of its
 * record, an object of strings, or NULL) if 'ret_envs'. */
int e2b_if_running_keep(HttpRequest *req, const char *port, HttpHandler then, json_object *kept);
json_object *e2b_if_running_take(HttpRequest *req, json_object **ret_envs);
/* 502 "sandbox not running", in plain text. */
int e2b_reply_not_running(HttpRequest *req);

/* Environment variables as a client gives them (envVars, envs, env_vars): an object of at most
 * 'max' strings without NUL whose names have no '=' (NULL is none). */
bool e2b_envs_valid(json_object *envs, size_t max);
/* Appends "NAME=value" NUL for each (exec-command.h's entries, the kernel's environment block). */
int e2b_envs_pack(JsonWriter *w, json_object *envs);
