/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An exec's output as it is produced: the kept bytes of stdout and stderr, in the order they were
 * read, framed (stream-frame.h) onto the pipe of whoever asked for a stream. The bytes stay where the
 * exec keeps them (its OutputBuffers); the stream holds only the order, as segments. A display
 * cell's result records are kept nowhere else: their segments hold a copy until written. Writes never
 * block: a full pipe waits for EPOLLOUT, and a reader that keeps it full makes the exec pause its own
 * reading (runner-exec.c), which the code feels as a full stdout. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "alloc-util.h"
#include "io-util.h"
#include "log.h"
#include "runner.h"
#include "stream-frame.h"

typedef struct StreamSegment {
        uint8_t which;   /* STREAM_FRAME_STDOUT, STREAM_FRAME_STDERR, STREAM_FRAME_RESULT */
        uint32_t size;   /* ≤ STREAM_FRAME_DATA_MAX: one frame */
        uint8_t *data;   /* STREAM_FRAME_RESULT: its bytes (owned); else in the exec's buffer */
} StreamSegment;

struct ExecStream {
        RunnerExec *exec;
        int fd;
        sd_event_source *source;   /* EPOLLOUT, enabled while the pipe was full */
        StreamSegment *segments;
        size_t head, n_segments, n_allocated;
        size_t frame_written;      /* of the head segment's frame, header included */
        size_t position[2];        /* the next unsent kept byte of stdout, stderr */
        bool broken;
};

/* The owned bytes of the segments not written yet. */
static void exec_stream_drop_pending(ExecStream *s) {
        for (size_t i = s->head; i < s->n_segments; i++)
                s->segments[i].data = mfree(s->segments[i].data);
}

ExecStream *exec_stream_free(ExecStream *s) {
        if (!s)
                return NULL;
        s->source = sd_event_source_disable_unref(s->source);
        safe_close(s->fd);
        exec_stream_drop_pending(s);
        free(s->segments);
        free(s);
        return NULL;
}

size_t exec_stream_pending(const ExecStream *s) {
        return s ? s->n_segments - s->head : 0;
}

static const OutputBuffer *exec_stream_buffer(const ExecStream *s, uint8_t which) {
        return which == STREAM_FRAME_STDOUT ? &s->exec->out : &s->exec->err;
}

static int on_stream_writable(sd_event_source *source, int fd, uint32_t revents, void *userdata);

int exec_stream_new(RunnerExec *e, int fd, ExecStream **ret) {
        _cleanup_(exec_stream_freep) ExecStream *s = NULL;
        int r;

        s = calloc(1, sizeof(ExecStream));
        if (!s)
                return -ENOMEM;
        s->exec = e;
        s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (s->fd < 0)
                return -errno;
        r = fd_is_pipe_write_end(s->fd);
        if (r <= 0)
                return r < 0 ? r : -EBADF;
        r = fd_nonblock(s->fd, true);
        if (r < 0)
                return r;
        r = sd_event_add_io(e->runner->event, &s->source, s->fd, EPOLLOUT, on_stream_writable, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(s->source, SD_EVENT_OFF);
        (void) sd_event_source_set_description(s->source, "exec-stream");
        *ret = TAKE_PTR(s);
        return 0;
}

/* The reader is gone (or the pipe failed): no more frames; the exec goes on without them. */
static void exec_stream_break(ExecStream *s, int error) {
        if (error != -EPIPE)
                log_struct(LOG_DEBUG, error, LOG_FIELDS(LOG_SESSION_FIELD(s->exec->runner->session_id)),
                           "Dropping the output stream of exec %s: %m", s->exec->exec_id);
        s->broken = true;
        exec_stream_drop_pending(s);
        s->head = s->n_segments = s->frame_written = 0;
        s->source = sd_event_source_disable_unref(s->source);
        s->fd = safe_close(s->fd);
}

/* Writes what the pipe takes now. */
static void exec_stream_write(ExecStream *s) {
        while (!s->broken && s->head < s->n_segments) {
                StreamSegment *seg = &s->segments[s->head];
                size_t i = seg->which == STREAM_FRAME_STDOUT ? 0 : 1;
                uint8_t *data = seg->data ?: (uint8_t *) exec_stream_buffer(s, seg->which)->data +
                                                     s->position[i];
                StreamFrameHeader h = { .stream = seg->which, .size = seg->size };
                size_t header_left = s->frame_written < sizeof(h) ? sizeof(h) - s->frame_written : 0;
                size_t data_done = s->frame_written - (sizeof(h) - header_left);
                struct iovec iov[2] = {
                        { (uint8_t *) &h + (sizeof(h) - header_left), header_left },
                        { data + data_done, seg->size - data_done },
                };
                ssize_t k;

                k = writev(s->fd, header_left > 0 ? iov : iov + 1, header_left > 0 ? 2 : 1);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                (void) sd_event_source_set_enabled(s->source, SD_EVENT_ON);
                                return;
                        }
                        exec_stream_break(s, -errno);
                        return;
                }
                s->frame_written += (size_t) k;
                if (s->frame_written < sizeof(h) + seg->size)
                        continue;
                if (seg->data)
                        seg->data = mfree(seg->data);
                else
                        s->position[i] += seg->size;
                s->frame_written = 0;
                if (++s->head == s->n_segments)
                        s->head = s->n_segments = 0;
        }
        if (s->source)
                (void) sd_event_source_set_enabled(s->source, SD_EVENT_OFF);
}

static int exec_stream_grow(ExecStream *s) {
        /* Written segments make room first. */
        if (s->head > 0) {
                memmove(s->segments, s->segments + s->head,
                        (s->n_segments - s->head) * sizeof(StreamSegment));
                s->n_segments -= s->head;
                s->head = 0;
        }
        return ARRAY_GROW(s->segments, s->n_allocated, s->n_segments, 16);
}

int exec_stream_push(ExecStream *s, uint8_t which, size_t n) {
        int r;

        if (!s || s->broken)
                return 0;
        while (n > 0) {
                StreamSegment *last = s->n_segments > s->head ? &s->segments[s->n_segments - 1] : NULL;
                size_t take;

                /* Bytes of the same stream join the last frame, unless its header is out. */
                if (last && last->which == which && !last->data && last->size < STREAM_FRAME_DATA_MAX &&
                    !(s->n_segments - 1 == s->head && s->frame_written > 0)) {
                        take = MIN(n, STREAM_FRAME_DATA_MAX - last->size);
                        last->size += (uint32_t) take;
                        n -= take;
                        continue;
                }
                if (s->n_segments == s->n_allocated) {
                        r = exec_stream_grow(s);
                        if (r < 0) {
                                exec_stream_break(s, r);
                                return r;
                        }
                }
                take = MIN(n, (size_t) STREAM_FRAME_DATA_MAX);
                s->segments[s->n_segments++] = (StreamSegment) { .which = which, .size = (uint32_t) take };
                n -= take;
        }
        exec_stream_write(s);
        return 0;
}

int exec_stream_push_copy(ExecStream *s, uint8_t which, const void *data, size_t n) {
        const uint8_t *p = data;
        int r;

        if (!s || s->broken)
                return 0;
        while (n > 0) {
                size_t take = MIN(n, (size_t) STREAM_FRAME_DATA_MAX);
                uint8_t *copy;

                if (s->n_segments == s->n_allocated) {
                        r = exec_stream_grow(s);
                        if (r < 0) {
                                exec_stream_break(s, r);
                                return r;
                        }
                }
                copy = malloc(take);
                if (!copy) {
                        exec_stream_break(s, -ENOMEM);
                        return -ENOMEM;
                }
                memcpy(copy, p, take);
                s->segments[s->n_segments++] = (StreamSegment) { .which = which, .size = (uint32_t) take,
                                                                 .data = copy };
                p += take;
                n -= take;
        }
        exec_stream_write(s);
        return 0;
}

static int on_stream_writable(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        ExecStream *s = userdata;

        exec_stream_write(s);
        runner_exec_stream_progress(s->exec);
        return 0;
}
