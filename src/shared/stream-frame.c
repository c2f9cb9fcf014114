/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The reading end of the runner's output frames (stream-frame.h), for the gateway and scopeboxctl. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

#include "macro.h"
#include "stream-frame.h"

static bool header_is_valid(const StreamFrameHeader *h) {
        return (h->stream == STREAM_FRAME_STDOUT || h->stream == STREAM_FRAME_STDERR) &&
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
