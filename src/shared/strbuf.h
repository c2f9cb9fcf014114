/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The project's growing string (canonical requests, URLs, and under JsonWriter every JSON text
 * the gateway writes by hand). Appends remember the first allocation failure, so call sites append
 * freely and check once in strbuf_steal(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct StrBuf {
        char *s;
        size_t len, cap;
        bool oom;
} StrBuf;

void strbuf_done(StrBuf *b);
/* Room for 'more' bytes and a NUL after the current end; -ENOMEM (remembered) if there is none. */
int strbuf_reserve(StrBuf *b, size_t more);
void strbuf_append_n(StrBuf *b, const char *p, size_t n);
void strbuf_append(StrBuf *b, const char *p);
void strbuf_append_c(StrBuf *b, char c);
/* Appends s with every byte for which keep() is false written as %XX (uppercase hex). */
void strbuf_append_percent_encoded(StrBuf *b, const char *s, bool (*keep)(unsigned char c, bool keep_slash),
                                   bool keep_slash);
/* Hands the string out (an empty string if nothing was appended) and resets the buffer;
 * -ENOMEM if any append failed. */
int strbuf_steal(StrBuf *b, char **ret);
