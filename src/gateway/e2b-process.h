/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's processes (docs/e2b.md "Commands"): a command is an Exec of the language
 * "command" whose call the gateway holds itself, not the request that started it. It runs until it
 * exits, its timeout passes, a client kills it or the sandbox ends, whether or not a client is
 * connected; its output goes to whoever is connected (Start's stream, Connect's), as envelopes of
 * envd's ProcessEvent. The gateway's restart ends it (its hang-up pipe closes). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "gateway-server.h"
#include "http-request.h"
#include "id.h"

/* Processes the gateway holds at once, per sandbox and in all; clients connected to one. */
#define E2B_PROCESSES_MAX 64U
#define E2B_PROCESSES_PER_SANDBOX_MAX 8U
#define E2B_PROCESS_SUBSCRIBERS_MAX 8U
/* Envelopes a connected client has yet to take; past it the pipe waits (and so does the
 * command, its timeout running). One frame, encoded, may come on top. */
#define E2B_PROCESS_BUFFER_MAX (256U * 1024U)
/* What a command keeps of each stream (the Exec option "output_limit"): what comes past it is not
 * sent, and the command goes on. */
#define E2B_PROCESS_OUTPUT_MAX (16ULL << 20)

typedef struct E2bProcess E2bProcess;

/* Input sendStdin gave that the command has not read yet, at most. */
#define E2B_PROCESS_STDIN_MAX (1U << 20)

/* Starts the Exec of 'code_fd' (exec-command.h) in 'sandbox'; 'config' is what List shows of it;
 * with 'with_stdin', a pipe is its stdin (else it reads nothing). -EMFILE past the bounds above. */
int e2b_process_start(Server *s, const char *sandbox, int code_fd, json_object *config, const char *tag,
                      uint64_t timeout_ms, bool with_stdin, E2bProcess **ret);
/* Input for its stdin: -ENOTCONN when it has none (or it was closed), -ENOBUFS past
 * E2B_PROCESS_STDIN_MAX waiting. */
int e2b_process_write_stdin(E2bProcess *p, const void *data, size_t n);
/* Its stdin ends once what waits is written. -ENOTCONN when it has none. */
int e2b_process_close_stdin(E2bProcess *p);
/* Answers 'req' with the process's events from now on, the start event first. */
int e2b_process_subscribe(E2bProcess *p, HttpRequest *req, unsigned keepalive_sec);
/* Ends it: its Exec call is cancelled (a queued one leaves the queue, a running one is killed). */
void e2b_process_kill(E2bProcess *p);

E2bProcess *e2b_process_find(Server *s, const char *sandbox, uint32_t pid, const char *tag);
unsigned e2b_process_count(Server *s, const char *sandbox);
/* {"config":...,"pid":N,"tag":...} of each of the sandbox's processes, comma-separated. */
int e2b_process_list_append(Server *s, const char *sandbox, JsonWriter *w);
/* At shutdown: every process's call is cancelled and its clients' streams end. */
void e2b_process_free_all(Server *s);
