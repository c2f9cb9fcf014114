/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /exec as a stream of server-sent events (docs/api.md "Streaming"): the runner's frames of
 * stdout and stderr (stream-frame.h), read from a pipe while the exec runs, become "stdout" and
 * "stderr" events; the result, exactly the JSON body the exec gives without streaming, is the
 * "result" event; a failure after the stream began is an "error" event. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http-router.h"
#include "http-util.h"
#include "macro.h"

/* Composed event text a stream holds for a client that reads slower than the code writes; past it
 * the pipe is not read, which slows the exec down (the runner pauses its output). One frame, escaped,
 * may come on top. */
#define EXEC_SSE_BUFFER_MAX (256U * 1024U)
/* Bytes of the pipe handled per event-loop iteration. */
#define EXEC_SSE_READ_MAX (128U * 1024U)

typedef struct ExecSse ExecSse;

/* How a stream writes what it reads: server-sent events (POST /exec, the default), or another
 * protocol's lines (the E2B API's /execute, http-e2b-execute.c). */
typedef struct ExecStreamFormat {
        const char *content_type;
        /* 'n' bytes of stdout or stderr (STREAM_FRAME_*), whole UTF-8 sequences unless 'last'. */
        int (*output)(JsonWriter *w, unsigned which, const uint8_t *text, size_t n);
        /* One line of the result records (STREAM_FRAME_RESULT), '\n' included: hostile (the
         * sandbox's), to be checked. NULL: such frames are a protocol error. */
        int (*record)(JsonWriter *w, const uint8_t *line, size_t n);
        /* The longest record line taken, '\n' included (longer ones are skipped unread and
         * counted: exec_stream_records_left_out()); 0: STREAM_RESULT_RECORD_MAX. */
        size_t record_max;
        /* What is written after this many seconds with nothing else; 0: nothing. */
        unsigned keepalive_sec;
        const char *keepalive;
} ExecStreamFormat;

/* Whether an Accept header value lists text/event-stream (with a q other than 0). */
bool http_accept_event_stream(const char *value, size_t n) _pure_;

/* The stream of 'req'; *ret_write_fd is the write end of its pipe, for the Exec call. */
int exec_sse_new(HttpRequest *req, ExecSse **ret, int *ret_write_fd);
/* The same in another 'format' (static). */
int exec_stream_new(HttpRequest *req, const ExecStreamFormat *format, ExecSse **ret, int *ret_write_fd);
ExecSse *exec_sse_unref(ExecSse *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(ExecSse *, exec_sse_unref);
/* Its request goes away: no more reading, the body (if libmicrohttpd still has it) ends in error. */
void exec_sse_detach(ExecSse *s);

/* Whether the response (200, text/event-stream) has been handed to the request. */
bool exec_sse_started(const ExecSse *s) _pure_;
/* The result arrived: 'result' (a 200 response whose body is a stream, taken) is the final event,
 * after every frame still in the pipe. Starts the response if it has not started. */
int exec_sse_finish(ExecSse *s, HttpResponse *result);
/* The call failed after the response started: 'error' (taken) becomes the "error" event. */
int exec_sse_fail(ExecSse *s, HttpResponse *error);
/* How many record lines were left out: over the format's record_max, past the cell's bound, or
 * unfinished. */
unsigned exec_stream_records_left_out(const ExecSse *s) _pure_;
/* The end of a stream in another format: 'text' (its own lines) after everything read. Starts the
 * response if it has not started. */
int exec_stream_finish_text(ExecSse *s, const char *text, size_t n);

/* The event text for 'n' bytes of stream 'which' (STREAM_FRAME_*), after bytes held back from the
 * last chunk of that stream (an incomplete UTF-8 sequence, at most 3 bytes, in 'held'); keeps the
 * end of a sequence that may continue in the next chunk. With 'last', holds nothing back. For tests
 * and the stream itself. */
int exec_sse_format_chunk(JsonWriter *w, unsigned which, uint8_t held[static 4], size_t *n_held,
                          const uint8_t *p, size_t n, bool last);
