/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The frames in which the runner hands an exec's output, as it is produced, to whoever asked for a
 * stream (the gateway, through the manager's Exec "stream" option): a header, then 'size' bytes of
 * the stream named. Only kept bytes are framed (the first SANDBOX_MAX_OUTPUT_BYTES of each stream),
 * in the order the runner read them; both ends are on one host, so the size is in host order. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define STREAM_FRAME_STDOUT 1U
#define STREAM_FRAME_STDERR 2U
/* At most this many bytes follow a header. */
#define STREAM_FRAME_DATA_MAX (64U * 1024U)

typedef struct StreamFrameHeader {
        uint8_t stream;   /* STREAM_FRAME_STDOUT or STREAM_FRAME_STDERR */
        uint8_t zero[3];
        uint32_t size;    /* 1 … STREAM_FRAME_DATA_MAX */
} StreamFrameHeader;

_Static_assert(sizeof(StreamFrameHeader) == 8, "the frame header is 8 bytes");

/* The reading end: where the frame being read stands. All zeroes is a reader at the start of a
 * stream. Large (a whole frame's data): allocate it with its owner, not on a small stack. */
typedef struct StreamFrameReader {
        StreamFrameHeader header;
        size_t header_got;
        size_t data_got;
        uint8_t data[STREAM_FRAME_DATA_MAX];
} StreamFrameReader;

/* One complete frame of 'stream' (STREAM_FRAME_*). The data stays valid until the next read.
 * Returns 0 to go on, > 0 to stop reading for now (stream_frame_read() returns 0: the rest stays
 * in the pipe), or a negative errno, which stream_frame_read() returns. */
typedef int (*StreamFrameCallback)(unsigned stream, const uint8_t *data, size_t size, void *userdata);

/* Reads from the non-blocking 'fd' what it has, at most 'budget' bytes, and calls 'callback' once
 * per complete frame. Returns 0 when the pipe is empty for now, the budget is spent or the callback
 * asked to stop; 1 at EOF between frames; -EBADMSG at a header that makes no sense (a stream other
 * than 1 or 2, non-zero padding, a size of 0 or above STREAM_FRAME_DATA_MAX); -EPIPE at EOF inside
 * a frame; the callback's error; or the read's -errno. After a negative return the stream can't be
 * resynchronised: stop reading it. */
int stream_frame_read(StreamFrameReader *reader, int fd, size_t budget, StreamFrameCallback callback,
                      void *userdata);
