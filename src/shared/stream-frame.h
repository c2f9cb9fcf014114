/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The frames in which the runner hands an exec's output, as it is produced, to whoever asked for a
 * stream (the gateway, through the manager's Exec "stream" option): a header, then 'size' bytes of
 * the stream named. Only kept bytes are framed (the first SANDBOX_MAX_OUTPUT_BYTES of each stream),
 * in the order the runner read them; both ends are on one host, so the size is in host order. */
#pragma once

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
