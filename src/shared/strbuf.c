/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A growing string for building canonical requests and URLs. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strbuf.h"

void strbuf_done(StrBuf *b) {
        free(b->s);
        *b = (StrBuf) {};
}

int strbuf_reserve(StrBuf *b, size_t more) {
        size_t need, cap;
        char *s;

        if (b->oom)
                return -ENOMEM;
        if (more > SIZE_MAX - b->len - 1) {
                b->oom = true;
                return -ENOMEM;
        }
        need = b->len + more + 1;
        if (need <= b->cap)
                return 0;
        cap = MAX(MAX(b->cap < SIZE_MAX / 2 ? b->cap * 2 : need, need), (size_t) 64);
        s = realloc(b->s, cap);
        if (!s) {
                b->oom = true;
                return -ENOMEM;
        }
        b->s = s;
        b->cap = cap;
        return 0;
}

void strbuf_append_n(StrBuf *b, const char *p, size_t n) {
        if (strbuf_reserve(b, n) < 0)
                return;
        if (n > 0)
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
