/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A growing string for building canonical requests and URLs. Appends remember the first
 * allocation failure, so call sites append freely and check once in strbuf_steal(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct StrBuf {
        char *s;
        size_t len, cap;
        bool oom;
} StrBuf;

void strbuf_done(StrBuf *b);
void strbuf_append_n(StrBuf *b, const char *p, size_t n);
void strbuf_append(StrBuf *b, const char *p);
void strbuf_append_c(StrBuf *b, char c);
/* Appends s with every byte for which keep() is false written as %XX (uppercase hex). */
void strbuf_append_percent_encoded(StrBuf *b, const char *s, bool (*keep)(unsigned char c, bool keep_slash),
                                   bool keep_slash);
/* Hands the string out (an empty string if nothing was appended) and resets the buffer;
 * -ENOMEM if any append failed. */
int strbuf_steal(StrBuf *b, char **ret);
