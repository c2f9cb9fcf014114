/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pieces of the Connect protocol (JSON codec) that envd's RPCs of the E2B API use
 * (docs/e2b.md): the envelopes of a server-streaming call and the error codes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json-writer.h"

#define CONNECT_FLAG_COMPRESSED 0x01U
#define CONNECT_FLAG_END_STREAM 0x02U
#define CONNECT_ENVELOPE_HEADER 5U
#define CONNECT_STREAM_CONTENT_TYPE "application/connect+json"

/* The one message of a streaming request's body ('body' is the whole body): -EBADMSG when the body
 * is not exactly one envelope, -EPROTONOSUPPORT when it is compressed or an end-stream. */
int connect_envelope_unwrap(const char *body, size_t size, const char **ret_msg, size_t *ret_size);
/* An envelope of 'n' bytes of JSON with 'flags'. */
int connect_envelope_append(JsonWriter *w, uint8_t flags, const char *msg, size_t n);
/* The end-stream envelope: {} without 'code', else {"error":{"code","message"}}. */
int connect_end_stream_append(JsonWriter *w, const char *code, const char *message);
/* The HTTP status of a unary call's error with this Connect code (its protocol's table). */
unsigned connect_code_http_status(const char *code) _pure_;
/* {"code":"<code>","message":"<message>"}, the body of a unary call's error. */
int connect_error_json(JsonWriter *w, const char *code, const char *message);
/* Answers 'req' with a Connect error: for a server-streaming call ('stream'), 200 and the
 * end-stream envelope with the error, as Connect ends a failed stream (a status would lose the
 * code); for a unary one {"code","message"} with 'status', or the code's own if 0. */
typedef struct HttpRequest HttpRequest;
int connect_reply_error(HttpRequest *req, bool stream, unsigned status, const char *code,
                        const char *message);
/* The user an "Authorization: Basic base64(user:)" header names, into 'ret' (NUL-terminated);
 * -EINVAL when the header is not that. */
int connect_basic_user(const char *value, size_t n, char *ret, size_t ret_size);
