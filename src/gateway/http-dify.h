/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The dify-sandbox API (/health, /v1/sandbox/...): binding, trace context, envelopes, free of MHD and
 * D-Bus for unit tests. */
#pragma once

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bus-contract.h"
#include "config.h"
#include "http-exec.h"
#include "http-router.h"
#include "http-util.h"

#define DIFY_LANGUAGE_PYTHON3 "python3"
#define DIFY_LANGUAGE_NODEJS  "nodejs"

/* Body codes of the envelope {"code":N,"message":"...","data":...}. */
#define DIFY_CODE_SUCCESS       0
#define DIFY_CODE_BAD_REQUEST   (-400)
#define DIFY_CODE_INTERNAL      (-500)
#define DIFY_CODE_UNAVAILABLE   (-503)

/* Upstream's texts, which clients may match. */
#define DIFY_MESSAGE_SUCCESS              "success"
#define DIFY_MESSAGE_UNSUPPORTED_LANGUAGE BUS_MESSAGE_UNSUPPORTED_LANGUAGE
#define DIFY_MESSAGE_TOO_MANY_REQUESTS    "Too many requests"
#define DIFY_MESSAGE_NETWORK_DISABLED     "network is disabled, please enable it in the configuration"

/* The sandbox's own lines in "error", after "process exited with code N". */
#define DIFY_ERROR_TIMEOUT       "error: timeout\n"
#define DIFY_ERROR_NOT_PERMITTED "error: operation not permitted\n"
/* Ours (upstream cuts nothing): a stream ("stdout", "stderr") cut at the limit of N bytes. */
#define DIFY_ERROR_CUT_FORMAT                                                                               \
        "error: %s exceeded SANDBOX_DIFY_MAX_OUTPUT_BYTES (%" PRIu64 " bytes) and was cut off\n"

/* A run's body carries the code JSON-escaped (or percent-encoded): a byte of code takes at most six
 * bytes there ("\u001f"). The rest of the body (language, flags) fits in the slack. */
#define DIFY_BODY_EXPANSION 6U
#define DIFY_BODY_SLACK     (64U * 1024U)
uint64_t dify_run_body_max(const Config *config);

/* X-User-ID and X-User-Type are recorded (and handed to the manager) sanitized and cut to at most
 * this many bytes, the manager's bound on journal fields from its callers. */
#define DIFY_USER_FIELD_MAX 256U
#define DIFY_USER_FIELD_BUF (DIFY_USER_FIELD_MAX + 1U)

/* The distributions of the sandbox's Python, written by tools/install: [{"name":..,"version":..}]. */
#define DIFY_DEPENDENCIES_FILE     SCOPEBOX_DATA_DIR "/python-dependencies.json"
#define DIFY_DEPENDENCIES_SIZE_MAX (4U << 20)

/* {"code":<code>,"message":<message>,"data":null} with HTTP 'status'. */
int dify_response_new_error(unsigned status, int code, const char *message, HttpResponse **ret);

typedef struct DifyString {
        char *data;             /* NUL-terminated, may contain NULs (JSON "\u0000") */
        size_t size;
} DifyString;

/* The body of POST /v1/sandbox/run. */
typedef struct DifyRunRequest {
        DifyString language;
        DifyString code;
        DifyString preload;
        bool enable_network;
        bool report;            /* our extension: exit_reason and resources in "data" */
} DifyRunRequest;

void dify_run_request_done(DifyRunRequest *r);

/* The body of the dependency resources (or their query: ?language=python3). */
typedef struct DifyLanguageRequest {
        DifyString language;
} DifyLanguageRequest;

void dify_language_request_done(DifyLanguageRequest *r);

/* Binds a request like upstream (gin's BindRequest): a body whose media type is application/json is
 * decoded as JSON (an object; member names match case-insensitively, the last one wins, null leaves
 * a field unset), application/x-www-form-urlencoded as a form (the first value wins), anything else
 * binds nothing; 'query' (the "language" query argument, or NULL) fills a language still unset.
 * Required string fields must be non-empty. Returns 0, -EINVAL with a message for the client in
 * *ret_message (owned by the caller), -EBADMSG (with a message naming the field) for a string
 * field holding a NUL byte or invalid UTF-8, or -ENOMEM. 'query' is 'query_size' bytes. */
int dify_run_request_bind(const char *body, size_t size, const char *content_type, DifyRunRequest *ret,
                          char **ret_message);
int dify_language_request_bind(const char *body, size_t size, const char *content_type, const char *query,
                               size_t query_size, DifyLanguageRequest *ret, char **ret_message);

/* The HTTP status of a bind failure: gin's BindJSON (taken when Content-Type is exactly
 * "application/json") answers 400, its other binders leave upstream's 200. The body is -400 either way.
 * A refused string field ('error' -EBADMSG) is 400 always. */
unsigned dify_bind_failure_status(const char *content_type, int error);

bool dify_language_is_supported(const char *language);

/* The code the manager runs: 'preload' + "\n" + code when preload is enabled and not empty, else the
 * code alone. -EFBIG when that exceeds 'max' bytes. */
int dify_run_code(const DifyRunRequest *r, bool preload_enabled, uint64_t max, char **ret, size_t *ret_size);

/* A W3C trace context (https://www.w3.org/TR/trace-context/#traceparent-header). */
#define TRACEPARENT_LEN 55U
typedef struct TraceContext {
        char trace_id[33];      /* 32 lowercase hex digits, not all zero */
        char span_id[17];       /* 16 lowercase hex digits, not all zero (the header's parent-id) */
        char flags[3];
} TraceContext;

/* Parses a traceparent value: version 00 exactly, or a later version (not ff) possibly followed by
 * "-" and more fields; lowercase hex only; all-zero ids refused. -EINVAL otherwise. */
int trace_context_parse(const char *s, TraceContext *ret);
/* New random ids, flags 00 (we sample nothing). */
int trace_context_generate(TraceContext *ret);
/* "00-<trace>-<span>-<flags>" */
void trace_context_format(const TraceContext *t, char buf[static TRACEPARENT_LEN + 1]);

/* The decoded reply of Run(). */
typedef struct DifyResult {
        int32_t exit_code;      /* of the interpreter; 128 + n when signal n killed it */
        uint64_t stdout_size;
        uint64_t stderr_size;
        bool timed_out;
        int32_t signal;
        const ExecBlocked *blocked;
        size_t n_blocked;
        bool stdout_truncated;  /* cut at output_limit bytes (SANDBOX_DIFY_MAX_OUTPUT_BYTES) */
        bool stderr_truncated;
        uint64_t output_limit;
        ExecReport report;
} DifyResult;

/* The exit code clients see: -1 on timeout and when a signal ended the interpreter (what Go's
 * ProcessState.ExitCode() gave upstream), else the interpreter's. */
int32_t dify_result_exit_code(const DifyResult *r);
/* Whether the code failed on something the sandbox refused: the filter killed it (SIGSYS), or it
 * answered a call with EPERM (new processes and programs, privileged calls) and stderr shows that
 * error ("Operation not permitted", Node's "EPERM"). Libraries probe and cope: Debian's pandas runs
 * "uname -p" at import, urllib3 opens an IPv6 socket (EAFNOSUPPORT without a network); a later,
 * unrelated failure must not be blamed on those. ENOSYS, ENOTTY and EAFNOSUPPORT never count. */
bool dify_result_refused(const DifyResult *r, const char *stderr_text, size_t stderr_size);
/* The sandbox's own lines for "error": the timeout, then a refusal. */
const char *dify_result_sandbox_message(const DifyResult *r, const char *stderr_text, size_t stderr_size,
                                        char buf[static 64]);

/* Upstream's buildExecutionError(): empty when the exit code is 0; otherwise
 * "process exited with code N", then the sandbox's message and the whole stderr, each on a new line
 * unless the text before it ends with one. Appends the text (not quoted) to 'out'. */
int dify_error_compose(int32_t exit_code, const char *sandbox_message, const char *stderr_text,
                       size_t stderr_size, JsonWriter *out);

/* Appends to 'out' a line for each stream cut at the output limit, each on a line of its own:
 * "error: stdout exceeded SANDBOX_DIFY_MAX_OUTPUT_BYTES (N bytes) and was cut off". Dify parses
 * stdout for its <<RESULT>> tags, so a note there would corrupt the result: it goes to "error",
 * where Dify raises it instead of the misleading "no result tag found". */
int dify_error_append_cuts(const DifyResult *r, JsonWriter *out);

/* The 200 envelope {"code":0,"message":"success","data":{"stdout","stderr","error","exit_code"}} from
 * the data buffer (stdout at 0, stderr after it), streams decoded as UTF-8 with replacement.
 * "error" is upstream's composition with the cut notes after the sandbox's own lines; a cut run
 * has a non-empty "error" even with exit code 0 (the exit code stays the interpreter's).
 * -EBADMSG if the sizes do not fit the buffer. */
int dify_result_compose(const DifyResult *r, const void *data, size_t data_size, HttpResponse **ret);

/* The 200 envelope {"code":0,"message":"success","data":{"dependencies":[{"name","version"}]}} from
 * the text of the dependency file (NULL: none, an empty list). Entries without a name are skipped;
 * -EBADMSG when the text is no JSON array. */
int dify_dependencies_compose(const char *text, size_t size, HttpResponse **ret);
/* Reads 'path' and composes that. A missing file lists nothing. */
int dify_dependencies_load(const char *path, HttpResponse **ret);

/* The runs in flight (HttpApi.counted) of the server, which must serve the API. */
unsigned *dify_runs(Server *s);
/* The router's own answers to the API's requests (HttpApi.failure, .too_large). */
int dify_response_new_failure(unsigned status, const char *message, HttpResponse **ret);
int dify_response_new_too_large(const HttpRequest *req, HttpResponse **ret);
