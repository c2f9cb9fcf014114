/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* JSON text assembled by hand, on a StrBuf, with one sticky error (json-writer.h). */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "json-writer.h"
#include "string-util.h"

void json_writer_done(JsonWriter *w) {
        assert(w);
        strbuf_done(&w->buf);
        *w = (JsonWriter) {};
}

int json_writer_error(const JsonWriter *w) {
        return w->error;
}

static int writer_fail(JsonWriter *w, int error) {
        if (w->error == 0)
                w->error = error;
        return w->error;
}

int json_writer_reserve(JsonWriter *w, size_t more) {
        assert(w);
        if (w->error < 0)
                return w->error;
        /* Always room for a terminating NUL, which an empty writer has too once reserved. */
        if (strbuf_reserve(&w->buf, more) < 0)
                return writer_fail(w, -ENOMEM);
        w->buf.s[w->buf.len] = 0;
        return 0;
}

int json_writer_append(JsonWriter *w, const char *s, size_t n) {
        int r = json_writer_reserve(w, n);

        if (r < 0)
                return r;
        strbuf_append_n(&w->buf, s, n);
        return 0;
}

int json_writer_append_str(JsonWriter *w, const char *s) {
        return json_writer_append(w, s, strlen(s));
}

int json_writer_appendf(JsonWriter *w, const char *format, ...) {
        va_list ap;
        int k, r;

        if (w->error < 0)
                return w->error;
        va_start(ap, format);
        k = vsnprintf(NULL, 0, format, ap);
        va_end(ap);
        if (k < 0)
                return writer_fail(w, -EINVAL);
        r = json_writer_reserve(w, (size_t) k);
        if (r < 0)
                return r;
        va_start(ap, format);
        (void) vsnprintf(w->buf.s + w->buf.len, (size_t) k + 1, format, ap);
        va_end(ap);
        w->buf.len += (size_t) k;
        return 0;
}

int json_writer_append_string(JsonWriter *w, const char *s, size_t n) {
        static const char hex[] = "0123456789abcdef";
        size_t run = 0;

        /* Worst case every byte becomes \u00XX. Reserve for the common case; appends grow it. */
        (void) json_writer_reserve(w, n + 2);
        (void) json_writer_append(w, "\"", 1);
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                char esc[6];
                size_t l;

                if (c >= 0x20 && c != '"' && c != '\\')
                        continue;

                /* The plain run before this byte, then its escape. */
                (void) json_writer_append(w, s + run, i - run);
                run = i + 1;

                esc[0] = '\\';
                l = 2;
                switch (c) {
                case '"':  esc[1] = '"'; break;
                case '\\': esc[1] = '\\'; break;
                case '\n': esc[1] = 'n'; break;
                case '\r': esc[1] = 'r'; break;
                case '\t': esc[1] = 't'; break;
                case '\b': esc[1] = 'b'; break;
                case '\f': esc[1] = 'f'; break;
                default:
                        memcpy(esc + 1, "u00", 3);
                        esc[4] = hex[c >> 4];
                        esc[5] = hex[c & 15];
                        l = 6;
                }
                (void) json_writer_append(w, esc, l);
        }
        (void) json_writer_append(w, s + run, n - run);
        return json_writer_append(w, "\"", 1);
}

/* Appends bytes as UTF-8 text with replacement, quoted as a JSON string or not. */
static int json_writer_append_lossy(JsonWriter *w, const char *s, size_t n, bool quoted) {
        _cleanup_free_ char *fixed = NULL;

        if (w->error < 0)
                return w->error;
        if (!utf8_is_valid_n(s, n)) {
                fixed = utf8_sanitize(s, n, &n);
                if (!fixed)
                        return writer_fail(w, -ENOMEM);
                s = fixed;
        }
        return quoted ? json_writer_append_string(w, s, n) : json_writer_append(w, s, n);
}

int json_writer_append_string_lossy(JsonWriter *w, const char *s, size_t n) {
        return json_writer_append_lossy(w, s, n, true);
}

int json_writer_append_text_lossy(JsonWriter *w, const void *p, size_t n) {
        return json_writer_append_lossy(w, p, n, false);
}

int json_writer_append_base64(JsonWriter *w, const void *p, size_t n) {
        int r = json_writer_reserve(w, base64_encoded_size(n) + 2);

        if (r < 0)
                return r;
        w->buf.s[w->buf.len++] = '"';
        /* base64_encode_to() writes the NUL too, reserve() left room for it. */
        w->buf.len += base64_encode_to(p, n, w->buf.s + w->buf.len);
        w->buf.s[w->buf.len++] = '"';
        w->buf.s[w->buf.len] = 0;
        return 0;
}

char *json_writer_steal(JsonWriter *w, size_t *ret_size) {
        char *d;

        assert(w);
        if (json_writer_reserve(w, 0) < 0) {
                json_writer_done(w);
                return NULL;
        }
        d = TAKE_PTR(w->buf.s);
        if (ret_size)
                *ret_size = w->buf.len;
        *w = (JsonWriter) {};
        return d;
}
