/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /exec as server-sent events: the pipe the runner frames the output onto, the events composed
 * from it, and libmicrohttpd's reader of them, which suspends the connection while nothing waits. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "gateway-server.h"
#include "http-exec-stream.h"
#include "http-stream.h"
#include "io-util.h"
#include "log.h"
#include "stream-frame.h"
#include "string-util.h"

struct ExecSse {
        unsigned n_ref;
        HttpRequest *req;          /* NULL once the request is gone */
        Server *server;
        const ExecStreamFormat *format;
        StreamLines records;       /* the result records' line begun (format->record) */
        sd_event_source *keepalive;
        uint64_t result_bytes;     /* what 'result' holds, counted in Server.response_bytes */

        int fd;                    /* the pipe's read end, -EBADF once done with it */
        sd_event_source *source;
        StreamFrameReader *frames; /* where the pipe's current frame stands */
        uint8_t held[2][4];        /* the start of a UTF-8 sequence, per stream */
        size_t n_held[2];

        JsonWriter out;            /* composed events; 'out_sent' of them are with libmicrohttpd */
        size_t out_sent;
        HttpStream *result;        /* the final event's JSON, sent after 'out' */
        uint64_t result_pos;
        bool result_done;

        bool started;
        bool finished;             /* nothing follows 'out' and 'result' */
};

static bool accept_element_is_event_stream(const char *p, size_t n) {
        static const char type[] = "text/event-stream";
        size_t i = 0, t;

        while (i < n && (p[i] == ' ' || p[i] == '\t'))
                i++;
        t = i;
        while (i < n && p[i] != ';' && p[i] != ' ' && p[i] != '\t')
                i++;
        if (i - t != sizeof(type) - 1 || strncasecmp(p + t, type, sizeof(type) - 1) != 0)
                return false;
        /* Parameters: only q=0 (not acceptable) matters. */
        while (i < n) {
                size_t k;

                while (i < n && (p[i] == ';' || p[i] == ' ' || p[i] == '\t'))
                        i++;
                k = i;
                while (i < n && p[i] != ';')
                        i++;
                if (i - k >= 2 && (p[k] == 'q' || p[k] == 'Q') && p[k + 1] == '=') {
                        bool zero = true;

                        for (size_t j = k + 2; j < i; j++)
                                if (p[j] != '0' && p[j] != '.' && p[j] != ' ' && p[j] != '\t')
                                        zero = false;
                        if (zero && i > k + 2)
                                return false;
                }
        }
        return true;
}

bool http_accept_event_stream(const char *value, size_t n) {
        size_t start = 0;

        if (!value)
                return false;
        for (size_t i = 0; i <= n; i++)
                if (i == n || value[i] == ',') {
                        if (accept_element_is_event_stream(value + start, i - start))
                                return true;
                        start = i + 1;
                }
        return false;
}

/* How many trailing bytes of p[0..n) start a UTF-8 sequence that is not complete yet. */
static size_t utf8_incomplete_tail(const uint8_t *p, size_t n) {
        for (size_t k = 1; k <= MIN(n, (size_t) 3); k++) {
                uint8_t c = p[n - k];
                size_t len;

                if ((c & 0xc0) == 0x80)
                        continue; /* a continuation byte: look further back */
                len = c >= 0xc2 && c <= 0xdf   ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
                return len > k ? k : 0;
        }
        return 0;
}

static int exec_sse_output(JsonWriter *w, unsigned which, const uint8_t *text, size_t n) {
        int r;

        r = json_writer_append_str(w, which == STREAM_FRAME_STDOUT ? "event: stdout\ndata: {\"text\":"
                                                                   : "event: stderr\ndata: {\"text\":");
        if (r >= 0)
                r = json_writer_append_string_lossy(w, (const char *) text, n);
        if (r >= 0)
                r = json_writer_append_str(w, "}\n\n");
        return r;
}

static const ExecStreamFormat exec_sse_format = {
        .content_type = "text/event-stream",
        .output = exec_sse_output,
};

static int exec_stream_format_chunk(const ExecStreamFormat *f, JsonWriter *w, unsigned which,
                                    uint8_t held[static 4], size_t *n_held, const uint8_t *p, size_t n,
                                    bool last) {
        _cleanup_free_ uint8_t *joined = NULL;
        const uint8_t *text = p;
        size_t size = n, keep;
        int r;

        assert(w);
        assert(n_held && *n_held <= 3);

        if (*n_held > 0) {
                joined = malloc(*n_held + n + 1);
                if (!joined)
                        return -ENOMEM;
                memcpy(joined, held, *n_held);
                if (n > 0)
                        memcpy(joined + *n_held, p, n);
                text = joined;
                size = *n_held + n;
        }
        keep = last ? 0 : utf8_incomplete_tail(text, size);
        *n_held = 0;
        if (size - keep > 0) {
                r = f->output(w, which, text, size - keep);
                if (r < 0)
                        return r;
        }
        if (keep > 0)
                memcpy(held, text + size - keep, keep);
        *n_held = keep;
        return 0;
}

int exec_sse_format_chunk(JsonWriter *w, unsigned which, uint8_t held[static 4], size_t *n_held,
                          const uint8_t *p, size_t n, bool last) {
        return exec_stream_format_chunk(&exec_sse_format, w, which, held, n_held, p, n, last);
}

static void exec_sse_close_pipe(ExecSse *s) {
        s->source = sd_event_source_disable_unref(s->source);
        s->fd = safe_close(s->fd);
}

static ExecSse *exec_sse_free(ExecSse *s) {
        exec_sse_close_pipe(s);
        s->keepalive = sd_event_source_disable_unref(s->keepalive);
        stream_lines_done(&s->records);
        free(s->frames);
        json_writer_done(&s->out);
        assert(s->server->response_bytes >= s->result_bytes);
        s->server->response_bytes -= s->result_bytes;
        http_stream_free(s->result);
        free(s);
        return NULL;
}

ExecSse *exec_sse_unref(ExecSse *s) {
        if (!s)
                return NULL;
        assert(s->n_ref > 0);
        if (--s->n_ref == 0)
                exec_sse_free(s);
        return NULL;
}

void exec_sse_detach(ExecSse *s) {
        if (!s)
                return;
        s->req = NULL;
        exec_sse_close_pipe(s);
}

bool exec_sse_started(const ExecSse *s) {
        return s && s->started;
}

static size_t exec_sse_unsent(const ExecSse *s) {
        return s->out.buf.len - s->out_sent;
}

/* What waits for libmicrohttpd changed: a reader that suspended itself runs again. */
static void exec_sse_wake(ExecSse *s) {
        if (s->started && s->req && s->req->state == HTTP_REQUEST_ANSWERED)
                http_request_resume(s->req);
}

static ssize_t exec_sse_read(void *userdata, uint64_t pos, char *buf, size_t max) {
        ExecSse *s = userdata;
        size_t n;

        for (;;) {
                if (exec_sse_unsent(s) > 0) {
                        n = MIN(max, exec_sse_unsent(s));
                        memcpy(buf, s->out.buf.s + s->out_sent, n);
                        s->out_sent += n;
                        if (s->out_sent == s->out.buf.len)
                                s->out.buf.len = s->out_sent = 0;
                        else if (s->out_sent >= EXEC_SSE_BUFFER_MAX / 4) {
                                /* What was sent goes, so that the buffer stays within its bound. */
                                memmove(s->out.buf.s, s->out.buf.s + s->out_sent, exec_sse_unsent(s));
                                s->out.buf.len -= s->out_sent;
                                s->out_sent = 0;
                        }
                        /* Room again: read on. */
                        if (s->source && exec_sse_unsent(s) < EXEC_SSE_BUFFER_MAX / 2)
                                (void) sd_event_source_set_enabled(s->source, SD_EVENT_ON);
                        return (ssize_t) n;
                }
                if (s->result && !s->result_done) {
                        ssize_t k = http_stream_read(s->result, s->result_pos, buf, max);

                        if (k == MHD_CONTENT_READER_END_WITH_ERROR)
                                return k;
                        if (k != MHD_CONTENT_READER_END_OF_STREAM) {
                                s->result_pos += (uint64_t) k;
                                return k;
                        }
                        s->result_done = true;
                        if (json_writer_append_str(&s->out, "\n\n") < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        continue;
                }
                if (s->finished)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (!s->req || s->req->client_gone)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                /* Nothing yet: libmicrohttpd would call again at once. */
                http_request_suspend(s->req);
                return 0;
        }
}

static void exec_sse_release(void *userdata) {
        exec_sse_unref(userdata);
}

/* Hands the response to the request, which starts sending it. */
static int exec_sse_start(ExecSse *s) {
        /* The events waiting for the client are kept within their bound: that much counts
         * against the budget while libmicrohttpd holds the stream, like any queued response. */
        HttpBodySource source = { .read = exec_sse_read, .free = exec_sse_release, .userdata = s,
                                  .footprint = EXEC_SSE_BUFFER_MAX };
        HttpResponse *resp;
        int r;

        if (s->started || !s->req)
                return 0;
        s->n_ref++;
        r = http_response_new_source(HTTP_OK, s->format->content_type, &source, &resp);
        if (r < 0)
                return r;
        resp->cache_control = "no-cache";
        s->started = true;
        (void) http_request_reply(s->req, resp);
        http_request_resume(s->req);
        return 0;
}

typedef struct ExecSseRead {
        ExecSse *sse;
        bool ignore_buffer;        /* draining: read on, however much the client has yet to take */
} ExecSseRead;

static bool exec_sse_buffer_full(const ExecSseRead *c) {
        return !c->ignore_buffer && exec_sse_unsent(c->sse) >= EXEC_SSE_BUFFER_MAX;
}

static int exec_stream_on_record(const uint8_t *line, size_t size, void *userdata) {
        ExecSse *s = userdata;

        return s->format->record(&s->out, line, size);
}

/* A complete frame becomes an event; past the buffer's bound the rest waits in the pipe. */
static int exec_sse_on_frame(unsigned stream, const uint8_t *data, size_t size, void *userdata) {
        ExecSseRead *c = userdata;
        ExecSse *s = c->sse;
        unsigned i = stream == STREAM_FRAME_STDOUT ? 0 : 1;
        int r;

        if (stream == STREAM_FRAME_RESULT) {
                /* Only a stream that asked for records (the Exec option "display") gets them. */
                if (!s->format->record)
                        return -EBADMSG;
                r = stream_lines_feed(&s->records, data, size, exec_stream_on_record, s);
        } else
                r = exec_stream_format_chunk(s->format, &s->out, stream, s->held[i], &s->n_held[i], data,
                                             size, false);
        if (r < 0)
                return r;
        return exec_sse_buffer_full(c);
}

/* Takes what the pipe has, at most 'budget' bytes; 1 at its end (EOF, or a frame we cannot use). */
static int exec_sse_read_pipe(ExecSse *s, size_t budget, bool ignore_buffer) {
        ExecSseRead c = { .sse = s, .ignore_buffer = ignore_buffer };
        int r;

        if (s->fd < 0 || exec_sse_buffer_full(&c))
                return 0;
        r = stream_frame_read(s->frames, s->fd, budget, exec_sse_on_frame, &c);
        if (r == -EBADMSG) {
                log_debug("Malformed output frame from the session manager, ignoring the rest.");
                return 1;
        }
        /* A frame cut by the end of the pipe was never a frame: dropped, as the end itself. */
        return r == -EPIPE ? 1 : r;
}

static int on_pipe(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        ExecSse *s = userdata;
        size_t before = exec_sse_unsent(s);
        int r;

        if (!s->req || s->req->client_gone) {
                /* Nobody reads: the runner's writes fail, and it goes on without a stream. */
                exec_sse_close_pipe(s);
                return 0;
        }
        r = exec_sse_read_pipe(s, EXEC_SSE_READ_MAX, false);
        if (r != 0) {
                if (r < 0)
                        log_debug_errno(r, "Failed to read the output stream, ignoring the rest: %m");
                exec_sse_close_pipe(s);
        } else if (exec_sse_unsent(s) >= EXEC_SSE_BUFFER_MAX)
                (void) sd_event_source_set_enabled(s->source, SD_EVENT_OFF);

        if (exec_sse_unsent(s) > before) {
                if (!s->started) {
                        r = exec_sse_start(s);
                        if (r < 0)
                                log_debug_errno(r, "Failed to start the event stream: %m");
                } else
                        exec_sse_wake(s);
        }
        return 0;
}

/* Nothing written for the format's keepalive interval: its keepalive, and again after as long. */
static int on_keepalive(sd_event_source *source, uint64_t usec, void *userdata) {
        ExecSse *s = userdata;

        if (s->finished || !s->req)
                return 0;
        if (exec_sse_unsent(s) == 0 && json_writer_append_str(&s->out, s->format->keepalive) >= 0) {
                if (!s->started)
                        (void) exec_sse_start(s);
                else
                        exec_sse_wake(s);
        }
        (void) sd_event_source_set_time_relative(source, s->format->keepalive_sec * USEC_PER_SEC);
        return sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
}

int exec_sse_new(HttpRequest *req, ExecSse **ret, int *ret_write_fd) {
        return exec_stream_new(req, &exec_sse_format, ret, ret_write_fd);
}

int exec_stream_new(HttpRequest *req, const ExecStreamFormat *format, ExecSse **ret, int *ret_write_fd) {
        _cleanup_(exec_sse_unrefp) ExecSse *s = NULL;
        int fds[2], r;

        assert(req);
        assert(format);
        assert(ret);
        assert(ret_write_fd);

        s = calloc(1, sizeof(ExecSse));
        if (!s)
                return -ENOMEM;
        s->n_ref = 1;
        s->req = req;
        s->server = req->server;
        s->format = format;
        s->records = STREAM_LINES_INIT(format->record_max ?: STREAM_RESULT_RECORD_MAX, STREAM_RESULTS_MAX);
        if (format->keepalive_sec > 0) {
                r = sd_event_add_time_relative(req->server->event, &s->keepalive, CLOCK_MONOTONIC,
                                               format->keepalive_sec * USEC_PER_SEC, USEC_PER_SEC / 4,
                                               on_keepalive, s);
                if (r < 0)
                        return r;
        }
        s->fd = -EBADF;
        s->frames = calloc(1, sizeof(StreamFrameReader));
        if (!s->frames)
                return -ENOMEM;
        /* Our end never blocks; the runner makes its own end non-blocking. */
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        s->fd = fds[0];
        r = fd_nonblock(s->fd, true);
        if (r >= 0)
                r = sd_event_add_io(req->server->event, &s->source, s->fd, EPOLLIN, on_pipe, s);
        if (r < 0) {
                safe_close(fds[1]);
                return r;
        }
        (void) sd_event_source_set_description(s->source, "exec-stream");
        *ret_write_fd = fds[1];
        *ret = TAKE_PTR(s);
        return 0;
}

/* The rest of the pipe, then what was held back: every frame the runner wrote came before its
 * result, so the pipe has them all now (its write end may still be open: never wait for EOF). */
static int exec_sse_drain(ExecSse *s) {
        int r = 0;

        if (s->fd >= 0) {
                r = exec_sse_read_pipe(s, SIZE_MAX, true);
                if (r < 0)
                        log_debug_errno(r, "Failed to read the output stream, ignoring the rest: %m");
                exec_sse_close_pipe(s);
        }
        for (unsigned i = 0; i < 2; i++) {
                r = exec_stream_format_chunk(s->format, &s->out,
                                             i == 0 ? STREAM_FRAME_STDOUT : STREAM_FRAME_STDERR, s->held[i],
                                             &s->n_held[i], NULL, 0, true);
                if (r < 0)
                        return r;
        }
        /* A record without its end was never whole: left out. */
        stream_lines_end(&s->records);
        return 0;
}

int exec_sse_finish(ExecSse *s, HttpResponse *result) {
        _cleanup_(http_response_freep) HttpResponse *resp = result;
        int r;

        assert(s);
        assert(resp && resp->stream);

        r = exec_sse_drain(s);
        if (r >= 0)
                r = json_writer_append_str(&s->out, "event: result\ndata: ");
        if (r < 0)
                return r;
        s->result = TAKE_PTR(resp->stream);
        /* The result's memory file, mapped while it is sent, counts as a queued response's. */
        s->result_bytes = http_stream_footprint(s->result);
        s->server->response_bytes += s->result_bytes;
        s->finished = true;
        if (!s->started)
                return exec_sse_start(s);
        exec_sse_wake(s);
        return 0;
}

unsigned exec_stream_records_left_out(const ExecSse *s) {
        return s->records.n_too_large + s->records.n_over_total + s->records.n_unfinished;
}

int exec_stream_finish_text(ExecSse *s, const char *text, size_t n) {
        int r;

        assert(s);

        r = exec_sse_drain(s);
        if (r >= 0)
                r = json_writer_append(&s->out, text, n);
        if (r < 0)
                return r;
        s->finished = true;
        s->keepalive = sd_event_source_disable_unref(s->keepalive);
        if (!s->started)
                return exec_sse_start(s);
        exec_sse_wake(s);
        return 0;
}

int exec_sse_fail(ExecSse *s, HttpResponse *error) {
        _cleanup_(http_response_freep) HttpResponse *resp = error;
        _cleanup_free_ char *body = NULL;
        size_t size = 0;
        int r;

        assert(s);
        assert(resp);

        (void) exec_sse_drain(s);
        if (resp->stream) {
                /* Error bodies are small; flatten whatever came. */
                r = http_response_flatten(resp);
                if (r < 0)
                        return r;
        }
        body = TAKE_PTR(resp->body);
        size = resp->size;
        /* {"status":N,<the members of the body>}: the body is a JSON object with members. */
        if (body && size >= 2 && body[0] == '{' && body[1] != '}')
                r = json_writer_appendf(&s->out, "event: error\ndata: {\"status\":%u,%.*s\n\n", resp->status,
                                        (int) (size - 1), body + 1);
        else
                r = json_writer_appendf(&s->out, "event: error\ndata: {\"status\":%u}\n\n", resp->status);
        if (r < 0)
                return r;
        s->finished = true;
        exec_sse_wake(s);
        return 0;
}
