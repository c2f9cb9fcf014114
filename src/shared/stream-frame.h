/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The frames in which the runner hands an exec's output, as it is produced, to whoever asked for a
 * stream (the gateway, through the manager's Exec "stream" option): a header, then 'size' bytes of
 * the stream named. Only kept bytes are framed (the first SANDBOX_MAX_OUTPUT_BYTES of each stream),
 * in the order the runner read them; both ends are on one host, so the size is in host order.
 *
 * A stateful cell run with the Exec option "display" has a third stream, its result records
 * (docs/api.md "Display records"): one JSON object a line, as the sandbox's kernel wrote them,
 * never parsed by the runner. Its frames, put together, are whole lines only (StreamLines below):
 * a record over STREAM_RESULT_RECORD_MAX bytes, those past STREAM_RESULTS_MAX bytes in all and an
 * unfinished last line are left out whole, never cut. A frame may end inside a line. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STREAM_FRAME_STDOUT 1U
#define STREAM_FRAME_STDERR 2U
#define STREAM_FRAME_RESULT 3U
/* At most this many bytes follow a header. */
#define STREAM_FRAME_DATA_MAX (64U * 1024U)
/* A display cell's records: each at most this long with its newline, at most this much in all. */
#define STREAM_RESULT_RECORD_MAX_MIB 16
#define STREAM_RESULTS_MAX_MIB 32
#define STREAM_RESULT_RECORD_MAX (STREAM_RESULT_RECORD_MAX_MIB * 1024U * 1024U)
#define STREAM_RESULTS_MAX (STREAM_RESULTS_MAX_MIB * 1024U * 1024U)

typedef struct StreamFrameHeader {
        uint8_t stream;   /* STREAM_FRAME_STDOUT, STREAM_FRAME_STDERR or STREAM_FRAME_RESULT */
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
 * than 1, 2 or 3, non-zero padding, a size of 0 or above STREAM_FRAME_DATA_MAX); -EPIPE at EOF
 * inside a frame; the callback's error; or the read's -errno. After a negative return the stream
 * can't be resynchronised: stop reading it. A reader that asked for no records refuses stream 3 in
 * its callback. */
int stream_frame_read(StreamFrameReader *reader, int fd, size_t budget, StreamFrameCallback callback,
                      void *userdata);

/* The sending end of the records' stream: the whole lines of what the sandbox wrote, within the
 * bounds; what is left out is counted, whole lines only. Lines are not looked into. */
typedef struct StreamLines {
        size_t record_max;         /* a line's bound, its '\n' included */
        uint64_t total_max;        /* all lines' */
        uint8_t *line;             /* the line begun, not yet whole */
        size_t size, allocated;
        bool skipping;             /* the line begun is over record_max: left out up to its '\n' */
        uint64_t total;            /* bytes of the lines handed on */
        unsigned n_too_large;      /* lines left out: over record_max, */
        unsigned n_over_total;     /* past total_max, */
        unsigned n_unfinished;     /* without their '\n' at the end */
} StreamLines;

#define STREAM_LINES_INIT(rmax, tmax) ((StreamLines) { .record_max = (rmax), .total_max = (tmax) })

/* One whole line, its '\n' included; valid during the call only. Returns 0 or a negative errno. */
typedef int (*StreamLineCallback)(const uint8_t *line, size_t size, void *userdata);

/* 'n' more bytes: each line they complete that is within the bounds goes to 'callback'. Returns 0,
 * -ENOMEM (the line begun is then left out, as too large), or the callback's error. */
int stream_lines_feed(StreamLines *l, const void *data, size_t n, StreamLineCallback callback,
                      void *userdata);
/* The end of the bytes: a line begun and not finished is left out. */
void stream_lines_end(StreamLines *l);
void stream_lines_done(StreamLines *l);
