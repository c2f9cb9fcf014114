/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The reading end of the runner's output frames (stream-frame.h), for the gateway and scopeboxctl;
 * and the bounded lines of a display cell's records, for the runner. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "stream-frame.h"

static bool header_is_valid(const StreamFrameHeader *h) {
        return (h->stream == STREAM_FRAME_STDOUT || h->stream == STREAM_FRAME_STDERR ||
                h->stream == STREAM_FRAME_RESULT) &&
               h->zero[0] == 0 && h->zero[1] == 0 && h->zero[2] == 0 && h->size > 0 &&
               h->size <= STREAM_FRAME_DATA_MAX;
}

int stream_frame_read(StreamFrameReader *reader, int fd, size_t budget, StreamFrameCallback callback,
                      void *userdata) {
        size_t done = 0;

        assert(reader);
        assert(fd >= 0);
        assert(callback);

        while (done < budget) {
                bool in_header = reader->header_got < sizeof(reader->header);
                /* Never past the piece being read, so that every byte is one of this stream's. */
                size_t want = MIN(in_header ? sizeof(reader->header) - reader->header_got
                                            : reader->header.size - reader->data_got,
                                  budget - done);
                uint8_t *p = in_header ? (uint8_t *) &reader->header + reader->header_got
                                       : reader->data + reader->data_got;
                ssize_t k = read(fd, p, want);
                int r;

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN ? 0 : -errno;
                }
                if (k == 0)
                        return reader->header_got == 0 ? 1 : -EPIPE;
                done += (size_t) k;

                if (in_header) {
                        reader->header_got += (size_t) k;
                        if (reader->header_got == sizeof(reader->header) &&
                            !header_is_valid(&reader->header))
                                return -EBADMSG;
                        continue;
                }
                reader->data_got += (size_t) k;
                if (reader->data_got < reader->header.size)
                        continue;

                /* Ready for the next frame before the callback runs: it may ask us to stop here. */
                reader->header_got = reader->data_got = 0;
                r = callback(reader->header.stream, reader->data, reader->header.size, userdata);
                if (r != 0)
                        return r < 0 ? r : 0;
        }
        return 0;
}

static void stream_lines_reset(StreamLines *l) {
        l->size = 0;
        l->skipping = false;
}

/* A whole line, from the line begun or straight from the caller's bytes. */
static int stream_lines_emit(StreamLines *l, const uint8_t *line, size_t size, StreamLineCallback callback,
                             void *userdata) {
        if (l->n_over_total > 0 || size > l->total_max - MIN(l->total, l->total_max)) {
                /* Past the bound, every line that follows is left out too: none arrives out of turn. */
                l->n_over_total++;
                return 0;
        }
        l->total += size;
        return callback(line, size, userdata);
}

int stream_lines_feed(StreamLines *l, const void *data, size_t n, StreamLineCallback callback,
                      void *userdata) {
        const uint8_t *p = data;

        assert(l);
        assert(data || n == 0);
        assert(callback);

        while (n > 0) {
                const uint8_t *nl = memchr(p, '\n', n);
                size_t take = nl ? (size_t) (nl - p) + 1 : n;
                int r = 0;

                if (!l->skipping && take > l->record_max - MIN(l->size, l->record_max)) {
                        l->skipping = true;
                        l->n_too_large++;
                        l->size = 0;
                } else if (!l->skipping && nl && l->size == 0)
                        /* Whole in the caller's bytes: not copied. */
                        r = stream_lines_emit(l, p, take, callback, userdata);
                else if (!l->skipping) {
                        if (l->size + take > l->allocated) {
                                size_t a = MIN(MAX(l->allocated * 2, l->size + take), l->record_max);
                                uint8_t *b = realloc(l->line, a);

                                if (!b) {
                                        l->skipping = true;
                                        l->n_too_large++;
                                        l->size = 0;
                                        return -ENOMEM;
                                }
                                l->line = b;
                                l->allocated = a;
                        }
                        memcpy(l->line + l->size, p, take);
                        l->size += take;
                        if (nl)
                                r = stream_lines_emit(l, l->line, l->size, callback, userdata);
                }
                if (nl) {
                        stream_lines_reset(l);
                        /* A large line's room is not kept for the small ones that follow. */
                        if (l->allocated > STREAM_FRAME_DATA_MAX) {
                                l->line = mfree(l->line);
                                l->allocated = 0;
                        }
                }
                if (r < 0)
                        return r;
                p += take;
                n -= take;
        }
        return 0;
}

void stream_lines_end(StreamLines *l) {
        if (l->size > 0 || l->skipping) {
                if (!l->skipping)
                        l->n_unfinished++;
                stream_lines_reset(l);
        }
}

void stream_lines_done(StreamLines *l) {
        free(l->line);
        *l = STREAM_LINES_INIT(l->record_max, l->total_max);
}
