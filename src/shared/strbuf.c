/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A growing string for building canonical requests and URLs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strbuf.h"

void strbuf_done(StrBuf *b) {
        free(b->s);
        *b = (StrBuf) {};
}

void strbuf_append_n(StrBuf *b, const char *p, size_t n) {
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = MAX(MAX(b->cap * 2, b->len + n + 1), (size_t) 64);
                char *s = realloc(b->s, cap);
                if (!s) {
                        b->oom = true;
                        return;
                }
                b->s = s;
                b->cap = cap;
        }
        memcpy(b->s + b->len, p, n);
        b->len += n;
        b->s[b->len] = 0;
}

void strbuf_append(StrBuf *b, const char *p) {
        strbuf_append_n(b, p, strlen(p));
}

void strbuf_append_c(StrBuf *b, char c) {
        strbuf_append_n(b, &c, 1);
}

void strbuf_append_percent_encoded(StrBuf *b, const char *s, bool (*keep)(unsigned char c, bool keep_slash),
                                   bool keep_slash) {
        static const char hex[] = "0123456789ABCDEF";

        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (keep(*p, keep_slash))
                        strbuf_append_c(b, (char) *p);
                else {
                        char e[3] = { '%', hex[*p >> 4], hex[*p & 15] };
                        strbuf_append_n(b, e, 3);
                }
}

int strbuf_steal(StrBuf *b, char **ret) {
        if (!b->oom && !b->s)
                strbuf_append_n(b, "", 0);
        if (b->oom) {
                strbuf_done(b);
                return -ENOMEM;
        }
        *ret = TAKE_PTR(b->s);
        *b = (StrBuf) {};
        return 0;
}
