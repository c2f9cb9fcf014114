/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The APIs the gateway serves: what each of their routes takes and which resource serves it. */
#include "http-apis.h"
#include "http-dify.h"
#include "http-e2b-fs.h"
#include "http-e2b.h"
#include "http-storage.h"

const HttpRoute http_sidecar_routes[] = {
        { "GET",    "/healthz",             HTTP_ROUTE_PUBLIC,                     http_health_get         },
        { "POST",   "/sessions",            HTTP_ROUTE_JSON,                       http_sessions_post      },
        { "DELETE", "/sessions/",           HTTP_ROUTE_JSON | HTTP_ROUTE_PATH_ARG, http_sessions_delete    },
        { "POST",   "/sessions/*/reset",    HTTP_ROUTE_JSON | HTTP_ROUTE_PATH_ARG, http_sessions_reset     },
        { "POST",   "/exec",                HTTP_ROUTE_JSON,                       http_exec_post          },
        { "POST",   "/exec/cancel",         HTTP_ROUTE_JSON,                       http_exec_cancel        },
        { "POST",   "/files",               HTTP_ROUTE_JSON,                       http_files_post         },
        { "POST",   "/files/get",           HTTP_ROUTE_JSON,                       http_files_get          },
        { "POST",   "/files/list",          HTTP_ROUTE_JSON,                       http_files_list         },
        { "POST",   "/files/reset-inputs",  HTTP_ROUTE_JSON,                       http_files_reset_inputs },
        /* Objects of up to SANDBOX_MAX_STORAGE_BODY_BYTES (300 MiB), everything else 56 MiB. */
        { "POST",   "/storage/put",         HTTP_ROUTE_JSON,                       http_storage_put,
          http_storage_put_body_max },
        { "POST",   "/storage/delete",      HTTP_ROUTE_JSON,                       http_storage_delete     },
        { "POST",   "/storage/gc",          HTTP_ROUTE_JSON,                       http_storage_gc         },
        { "GET",    "/metrics",             HTTP_ROUTE_SCRAPE_KEY,                 http_metrics_get        },
        {}
};

#define DIFY_ROUTE (HTTP_ROUTE_API_KEY | HTTP_ROUTE_RAW_BODY)

const HttpRoute http_dify_routes[] = {
        { "GET",  "/health",                          HTTP_ROUTE_PUBLIC, http_dify_health        },
        { "POST", "/v1/sandbox/run",                  DIFY_ROUTE, http_dify_run, dify_run_body_max },
        { "GET",  "/v1/sandbox/dependencies",         DIFY_ROUTE, http_dify_dependencies_list    },
        { "POST", "/v1/sandbox/dependencies/update",  DIFY_ROUTE, http_dify_dependencies_update  },
        { "GET",  "/v1/sandbox/dependencies/refresh", DIFY_ROUTE, http_dify_dependencies_refresh },
        {}
};

/* The sidecar API: answers of ours are {"detail": ...}, a too large body 413 (the router's defaults). */
const HttpApi http_sidecar_api = {
        .name = "sidecar",
        .routes = http_sidecar_routes,
};

/* The dify-sandbox API: answers of ours in its envelope; it counts its runs (MAX_REQUESTS). */
const HttpApi http_dify_api = {
        .name = "dify-sandbox",
        .routes = http_dify_routes,
        .failure = dify_response_new_failure,
        .too_large = dify_response_new_too_large,
        .counted = "dify run",
};

#define E2B_ROUTE (HTTP_ROUTE_E2B_KEY | HTTP_ROUTE_JSON)
#define E2B_PATH_ROUTE (E2B_ROUTE | HTTP_ROUTE_PATH_ARG)

/* The E2B control plane: both create dialects (SDK 2.x: /v2), the calls of docs/e2b.md. */
const HttpRoute http_e2b_routes[] = {
        { "POST",   "/sandboxes",                E2B_ROUTE,      http_e2b_create      },
        { "GET",    "/sandboxes",                E2B_ROUTE,      http_e2b_list_v1     },
        { "POST",   "/v2/sandboxes",             E2B_ROUTE,      http_e2b_create      },
        { "GET",    "/v2/sandboxes",             E2B_ROUTE,      http_e2b_list        },
        { "GET",    "/sandboxes/",               E2B_PATH_ROUTE, http_e2b_get         },
        { "DELETE", "/sandboxes/",               E2B_PATH_ROUTE, http_e2b_kill        },
        { "POST",   "/sandboxes/*/timeout",      E2B_PATH_ROUTE, http_e2b_set_timeout },
        { "POST",   "/sandboxes/*/connect",      E2B_PATH_ROUTE, http_e2b_connect     },
        { "POST",   "/v2/sandboxes/*/connect",   E2B_PATH_ROUTE, http_e2b_connect     },
        { "POST",   "/sandboxes/*/pause",        E2B_PATH_ROUTE, http_e2b_pause       },
        { "POST",   "/sandboxes/*/resume",       E2B_PATH_ROUTE, http_e2b_resume      },
        { "GET",    "/sandboxes/*/metrics",      E2B_PATH_ROUTE, http_e2b_metrics     },
        {}
};

#define E2B_SANDBOX_ROUTE HTTP_ROUTE_E2B_TOKEN
#define E2B_SANDBOX_JSON_ROUTE (HTTP_ROUTE_E2B_TOKEN | HTTP_ROUTE_JSON)
#define E2B_SANDBOX_RAW_ROUTE (HTTP_ROUTE_E2B_TOKEN | HTTP_ROUTE_RAW_BODY)
#define E2B_SANDBOX_PATH_ROUTE (E2B_SANDBOX_JSON_ROUTE | HTTP_ROUTE_PATH_ARG)

/* envd's process service. */
#define E2B_RPC(method) "/process.Process/" method
#define RPC_MAX e2b_rpc_body_max

/* envd's filesystem RPCs (http-e2b-fs.h): Connect calls whose bodies the handler reads. */
#define E2B_FS_ROUTE(method, handler) \
        { "POST", E2B_FS method, E2B_SANDBOX_RAW_ROUTE, handler, http_e2b_fs_body_max }

/* A sandbox's traffic (E2b-Sandbox-Id). */
const HttpRoute http_e2b_sandbox_routes[] = {
        { "GET",    "/health",             E2B_SANDBOX_ROUTE,      http_e2b_health          },
        { "GET",    "/files",              E2B_SANDBOX_ROUTE,      http_e2b_files_get       },
        { "POST",   "/files",              E2B_SANDBOX_RAW_ROUTE,  http_e2b_files_post      },
        { "POST",   "/execute",            E2B_SANDBOX_JSON_ROUTE, http_e2b_execute         },
        { "GET",    "/contexts",           E2B_SANDBOX_ROUTE,      http_e2b_contexts_list   },
        { "POST",   "/contexts",           E2B_SANDBOX_JSON_ROUTE, http_e2b_contexts_refuse },
        { "DELETE", "/contexts/",          E2B_SANDBOX_PATH_ROUTE, http_e2b_contexts_refuse },
        { "POST",   "/contexts/*/restart", E2B_SANDBOX_PATH_ROUTE, http_e2b_context_restart },
        /* envd's process RPCs (Connect): the streaming ones take their envelope as it came. A
         * command's message is at most twice SANDBOX_MAX_CODE_BYTES (its strings escaped), the
         * others' 2 MiB (input is at most 1 MiB, in base64). */
        { "POST", E2B_RPC("Start"), E2B_SANDBOX_RAW_ROUTE, http_e2b_process_start, e2b_command_body_max },
        { "POST", E2B_RPC("Connect"), E2B_SANDBOX_RAW_ROUTE, http_e2b_process_connect, RPC_MAX },
        { "POST", E2B_RPC("List"), E2B_SANDBOX_JSON_ROUTE, http_e2b_process_list, RPC_MAX },
        { "POST", E2B_RPC("SendSignal"), E2B_SANDBOX_JSON_ROUTE, http_e2b_process_signal, RPC_MAX },
        { "POST", E2B_RPC("SendInput"), E2B_SANDBOX_JSON_ROUTE, http_e2b_process_input, RPC_MAX },
        { "POST", E2B_RPC("CloseStdin"), E2B_SANDBOX_JSON_ROUTE, http_e2b_process_close_stdin, RPC_MAX },
        { "POST", E2B_RPC("Update"), E2B_SANDBOX_JSON_ROUTE, http_e2b_process_unimplemented, RPC_MAX },
        { "POST", E2B_RPC("StreamInput"), E2B_SANDBOX_RAW_ROUTE, http_e2b_process_unimplemented, RPC_MAX },
        /* envd's filesystem RPCs (http-e2b-fs.c): Connect, bodies read there. */
        E2B_FS_ROUTE("Stat", http_e2b_fs_stat),
        E2B_FS_ROUTE("ListDir", http_e2b_fs_list_dir),
        E2B_FS_ROUTE("MakeDir", http_e2b_fs_make_dir),
        E2B_FS_ROUTE("Move", http_e2b_fs_move),
        E2B_FS_ROUTE("Remove", http_e2b_fs_remove),
        E2B_FS_ROUTE("WatchDir", http_e2b_fs_watch_dir),
        E2B_FS_ROUTE("CreateWatcher", http_e2b_fs_watcher),
        E2B_FS_ROUTE("GetWatcherEvents", http_e2b_fs_watcher),
        E2B_FS_ROUTE("RemoveWatcher", http_e2b_fs_watcher),
        {}
};

/* Any other path of a sandbox: 502 once it is gone (as E2B's proxy), else 404. */
static const HttpRoute http_e2b_sandbox_other_route = {
        "*", "*", E2B_SANDBOX_ROUTE, http_e2b_sandbox_other,
};

/* The E2B API, alone on its socket: every answer of ours there is {"code":N,"message":...}. */
const HttpApi http_e2b_api = {
        .name = "E2B",
        .routes = http_e2b_routes,
        .sandbox_routes = http_e2b_sandbox_routes,
        .sandbox_other = &http_e2b_sandbox_other_route,
        .failure = e2b_response_new_failure,
        .socket = E2B_SOCKET_NAME,
        .shapes_all = true,
};
