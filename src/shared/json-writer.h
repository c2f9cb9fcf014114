/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* JSON text assembled by hand (exec results, listings, metrics), on a StrBuf. The first failure
 * sticks: every append after it returns it and does nothing, so a writer is checked once, with
 * json_writer_error() or at json_writer_steal(), instead of after every append. */
#pragma once

#include <stddef.h>

#include "macro.h"
#include "strbuf.h"

typedef struct JsonWriter {
        StrBuf buf;             /* buf.s is the text so far (NUL-terminated once anything was written) */
        int error;              /* the first failure (-ENOMEM, -EINVAL), 0 */
} JsonWriter;

void json_writer_done(JsonWriter *w);
/* 0, or the failure that made the writer stop. */
int json_writer_error(const JsonWriter *w);
int json_writer_reserve(JsonWriter *w, size_t more);
int json_writer_append(JsonWriter *w, const char *s, size_t n);
int json_writer_append_str(JsonWriter *w, const char *s);
int json_writer_appendf(JsonWriter *w, const char *format, ...) _printf_(2, 3);
/* Appends a quoted JSON string. 's' must be valid UTF-8 (checked by the caller). */
int json_writer_append_string(JsonWriter *w, const char *s, size_t n);
/* Appends bytes as a quoted JSON string, invalid UTF-8 replaced by U+FFFD. */
int json_writer_append_string_lossy(JsonWriter *w, const char *s, size_t n);
/* The same, unquoted: text to be quoted later (like Python's errors="replace"). */
int json_writer_append_text_lossy(JsonWriter *w, const void *p, size_t n);
/* Appends a quoted base64 string of the bytes. */
int json_writer_append_base64(JsonWriter *w, const void *p, size_t n);
/* Hands out the text (NUL-terminated) and resets the writer; NULL after a failure. */
char *json_writer_steal(JsonWriter *w, size_t *ret_size);
