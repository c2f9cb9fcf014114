/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /exec: request validation and response composition, free of MHD and D-Bus for unit tests. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "bus-client.h"
#include "config.h"
#include "exec-reply.h"
#include "http-util.h"
#include "mime.h"

typedef struct ExecRequest {
        const char *session_id; /* borrowed from the JSON body */
        const char *code;       /* borrowed, 'code_size' bytes, may contain NULs */
        size_t code_size;
        uint64_t timeout_ms;    /* effective: defaulted and clamped */
        bool report;            /* "report": true: exit_reason and resources in the result */
        bool stream;            /* "stream": true/false, when 'stream_given' */
        bool stream_given;
} ExecRequest;

/* Validates a /exec body like the reference FastAPI service, in its order: schema (422), session id
 * (400), code size (413), then defaults and clamps the timeout. On a client error returns a negative
 * errno with the response to send in *ret_error; on an internal error *ret_error stays NULL. */
int exec_request_parse(json_object *body, const Config *config, ExecRequest *ret, HttpResponse **ret_error);

/* Effective timeout: absent or 0 → default, then clamped to [BUS_EXEC_TIMEOUT_MIN_MS, cap]. */
uint64_t exec_timeout_effective(bool given, int64_t timeout_ms, uint64_t cap_ms);

/* The decoded reply of Exec(), pointing into the shared data buffer by offsets. */
/* The extension members (docs/api.md "Exit reason and resources") of /exec and dify results:
 * "exit_reason" when 'wanted' or the exec was cancelled, "resources" when 'wanted'. */
typedef struct ExecReport {
        bool wanted;
        const char *exit_reason;  /* NULL: the manager did not say */
        const char *kernel;       /* a stateful cell's (always shown); NULL: stateless */
        uint64_t wall_usec;
        uint64_t cpu_usec, max_rss_bytes, written_bytes, processes;  /* EXEC_USAGE_UNKNOWN */
} ExecReport;

void exec_report_from_info(ExecReport *ret, const ExecInfo *info, bool wanted);
bool exec_report_cancelled(const ExecReport *r);
/* Appends ,"exit_reason":"…","resources":{…} as 'r' says (maybe nothing). */
int exec_report_append(HttpStream *s, const ExecReport *r);

typedef struct ExecResult {
        int32_t exit_code;
        uint64_t stdout_size;
        uint64_t stderr_size;
        const ExecFile *files;
        size_t n_files;
        bool timed_out;
        bool stdout_truncated;
        bool stderr_truncated;
        uint32_t files_skipped;
        uint64_t timeout_ms;    /* the effective timeout, for the timeout note */
        const ExecBlocked *blocked;
        size_t n_blocked;
        int32_t signal;         /* the signal that ended the interpreter, 0 if none */
        ExecReport report;
} ExecResult;

/* Checks every offset and size in 'result' against the data buffer. -EBADMSG if any is out of
 * bounds or a file has no usable name. */
int exec_result_validate(const ExecResult *result, size_t data_size);

/* Builds the 200 response {"stdout","stderr","exit_code","files"} from a validated result and the data
 * buffer (stdout at 0, stderr after it, artifacts at their offsets). Artifacts are base64-encoded
 * straight into the response body. When the sandbox refused system calls, "blocked_syscalls"
 * ([{name, verdict, count}]) is added, and stderr gets a note naming them if the code failed; a
 * process the filter killed (SIGSYS) gets a note too. An artifact's mime_type comes from its name
 * and 'mime_types' (NULL: Python's builtin table alone). */
int exec_result_compose(const ExecResult *result, const void *data, size_t data_size, const Config *config,
                        const MimeTypes *mime_types, HttpResponse **ret);
