/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Response bodies produced as they are sent: JSON text around base64 and escaped strings taken
 * from a mapped memfd, one bounded piece per write, never the whole body in memory at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bus-client.h"
#include "http-util.h"
#include "macro.h"

/* Bytes libmicrohttpd asks the reader for at most per call (its buffer for the response). */
#define HTTP_STREAM_BLOCK       (32U * 1024U)
/* Text up to this size is escaped when the body is composed (its length is then known and the
 * body goes with Content-Length); longer text is escaped as it is sent, in chunked encoding. */
#define HTTP_STREAM_EAGER_MAX   (256U * 1024U)
/* The output size of a stream with text escaped as it is sent. */
#define HTTP_STREAM_SIZE_UNKNOWN UINT64_MAX

typedef struct HttpStream HttpStream;

int http_stream_new(HttpStream **ret);
HttpStream *http_stream_free(HttpStream *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpStream *, http_stream_free);

/* Takes over the mapping (or copy) in *data; parts appended later may point into it. */
void http_stream_hold(HttpStream *s, BusData *data);

/* Appends: each returns the stream's first failure, once there is one, and then does nothing;
 * a composer appends freely and checks http_stream_error() once at the end. */

/* JSON text as is. */
int http_stream_append(HttpStream *s, const char *text, size_t n);
int http_stream_append_str(HttpStream *s, const char *text);
int http_stream_appendf(HttpStream *s, const char *format, ...) _printf_(2, 3);
/* A quoted base64 string of the bytes, encoded as it is sent. 'p' must stay valid as long as
 * the stream (held data, or static). */
int http_stream_append_base64(HttpStream *s, const void *p, size_t n);
/* Bytes as the inside of a JSON string (no quotes), invalid UTF-8 replaced by U+FFFD, as
 * json_writer_append_text_lossy() then json_writer_append_string() would give. Escaped at once
 * up to HTTP_STREAM_EAGER_MAX bytes, else as sent ('p' then stays valid as for base64). */
int http_stream_append_text_lossy(HttpStream *s, const void *p, size_t n);

/* 0, or the first failure of an append (-ENOMEM, -EINVAL). */
int http_stream_error(const HttpStream *s);

/* Exact number of bytes the body has, or HTTP_STREAM_SIZE_UNKNOWN. */
uint64_t http_stream_size(const HttpStream *s);
/* Memory the stream keeps alive until it is freed: held data and composed text. */
uint64_t http_stream_footprint(const HttpStream *s);

/* libmicrohttpd's content reader: the bytes at 'pos' (which must follow the last call's), at
 * most 'max'; MHD_CONTENT_READER_END_OF_STREAM at the end. Bounded work per call. */
ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max);

/* Runs http_stream_read() to the end into one buffer; for tests. */
int http_stream_read_all(HttpStream *s, size_t max_per_call, char **ret, size_t *ret_size);
