/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A strict RFC 8259 validator run before json-c parses: json-c accepts single quotes, comments,
 * NaN and duplicate keys (last one wins), which lets two parsers disagree about one document.
 * This rejects all of that, bounds the nesting depth, and checks number ranges. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

typedef struct Parser {
        const char *p, *end;
        int depth, max_depth;
        int error;
} Parser;

/* Keys of one object, decoded, for the duplicate check. */
typedef struct KeySet {
        char **keys;
        size_t n, allocated;
} KeySet;

static void keyset_done(KeySet *k) {
        for (size_t i = 0; i < k->n; i++)
                free(k->keys[i]);
        free(k->keys);
}

static int fail(Parser *ps, int e) {
        if (ps->error == 0)
                ps->error = e;
        return -e;
}

static void skip_ws(Parser *ps) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
                ps->p++;
}

static int hex4(const char *s, uint32_t *ret) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
                char c = s[i];
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (uint32_t) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (uint32_t) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (uint32_t) (c - 'A' + 10);
                else
                        return -EINVAL;
        }
        *ret = v;
        return 0;
}

static size_t utf8_put(char *out, uint32_t cp) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xc0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xe0 | (cp >> 12));
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
                out[2] = (char) (0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char) (0xf0 | (cp >> 18));
        out[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char) (0x80 | (cp & 0x3f));
        return 4;
}

/* Validates a string; when ret is given, also returns its decoded form (for keys). */
static int parse_string(Parser *ps, char **ret) {
        const char *start;
        char *out = NULL;
        size_t o = 0;

        if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, EBADMSG);
        start = ++ps->p;
        if (ret) {
                /* Decoded text is never longer than the escaped source. */
                const char *q = memchr(start, '"', (size_t) (ps->end - start));
                size_t bound = (size_t) (ps->end - start);
                (void) q;
                out = malloc(bound + 1);
                if (!out)
                        return fail(ps, ENOMEM);
        }
        while (ps->p < ps->end) {
                unsigned char c = (unsigned char) *ps->p;

                if (c == '"') {
                        ps->p++;
                        if (ret) {
                                out[o] = 0;
                                *ret = out;
                        }
                        return 0;
                }
                if (c < 0x20)
                        break; /* raw control characters must be escaped */
                if (c != '\\') {
                        if (out)
                                out[o++] = (char) c;
                        ps->p++;
                        continue;
                }
                if (ps->end - ps->p < 2)
                        break;
                c = (unsigned char) ps->p[1];
                ps->p += 2;
                if (c == 'u') {
                        uint32_t cp, lo;

                        if (ps->end - ps->p < 4 || hex4(ps->p, &cp) < 0)
                                break;
                        ps->p += 4;
                        if (cp >= 0xdc00 && cp <= 0xdfff)
                                break; /* lone low surrogate */
                        if (cp >= 0xd800 && cp <= 0xdbff) {
                                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                                    hex4(ps->p + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                                        break; /* lone high surrogate */
                                ps->p += 6;
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        }
                        if (out)
                                o += utf8_put(out + o, cp);
                        continue;
                }
                static const char escapes[] = "\"\\/bfnrt", decoded[] = "\"\\/\b\f\n\r\t";
                const char *e = c ? strchr(escapes, c) : NULL;
                if (!e)
                        break;
                if (out)
                        out[o++] = decoded[e - escapes];
        }
        free(out);
        return fail(ps, EBADMSG);
}

static int parse_number(Parser *ps) {
        const char *s = ps->p;
        bool digits = false;

        if (ps->p < ps->end && *ps->p == '-')
                ps->p++;
        if (ps->p < ps->end && *ps->p == '0') {
                ps->p++;
                digits = true;
        } else
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
                        ps->p++;
                        digits = true;
                }
        if (!digits)
                return fail(ps, EBADMSG);
        if (ps->p < ps->end && *ps->p == '.') {
                ps->p++;
                if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                        return fail(ps, EBADMSG);
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                        ps->p++;
        }
        if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
                ps->p++;
                if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
                        ps->p++;
                if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                        return fail(ps, EBADMSG);
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                        ps->p++;
        }
        /* Absurdly long numerals are refused outright; range checks happen per field. */
        if (ps->p - s > 64)
                return fail(ps, ERANGE);
        return 0;
}

static int parse_value(Parser *ps);

static int parse_object(Parser *ps) {
        KeySet keys = {};
        int r = 0;

        ps->p++; /* '{' */
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == '}') {
                ps->p++;
                return 0;
        }
        for (;;) {
                char *key = NULL;

                skip_ws(ps);
                r = parse_string(ps, &key);
                if (r < 0)
                        break;
                for (size_t i = 0; i < keys.n; i++)
                        if (streq(keys.keys[i], key)) {
                                free(key);
                                r = fail(ps, ENOTUNIQ);
                                goto finish;
                        }
                if (keys.n == keys.allocated) {
                        size_t na = MAX(keys.allocated * 2, (size_t) 8);
                        char **nk = realloc(keys.keys, na * sizeof(char *));
                        if (!nk) {
                                free(key);
                                r = fail(ps, ENOMEM);
                                break;
                        }
                        keys.keys = nk;
                        keys.allocated = na;
                }
                keys.keys[keys.n++] = key;

                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') {
                        r = fail(ps, EBADMSG);
                        break;
                }
                ps->p++;
                r = parse_value(ps);
                if (r < 0)
                        break;
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == '}') {
                        ps->p++;
                        break;
                }
                r = fail(ps, EBADMSG);
                break;
        }
finish:
        keyset_done(&keys);
        return r;
}

static int parse_array(Parser *ps) {
        int r;

        ps->p++; /* '[' */
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
                ps->p++;
                return 0;
        }
        for (;;) {
                r = parse_value(ps);
                if (r < 0)
                        return r;
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == ']') {
                        ps->p++;
                        return 0;
                }
                return fail(ps, EBADMSG);
        }
}

static int parse_literal(Parser *ps, const char *lit) {
        size_t l = strlen(lit);
        if ((size_t) (ps->end - ps->p) < l || memcmp(ps->p, lit, l) != 0)
                return fail(ps, EBADMSG);
        ps->p += l;
        return 0;
}

static int parse_value(Parser *ps) {
        int r;

        skip_ws(ps);
        if (ps->p >= ps->end)
                return fail(ps, EBADMSG);
        switch (*ps->p) {
        case '{':
        case '[':
                if (++ps->depth > ps->max_depth)
                        return fail(ps, E2BIG);
                r = *ps->p == '{' ? parse_object(ps) : parse_array(ps);
                ps->depth--;
                return r;
        case '"':
                return parse_string(ps, NULL);
        case 't':
                return parse_literal(ps, "true");
        case 'f':
                return parse_literal(ps, "false");
        case 'n':
                return parse_literal(ps, "null");
        default:
                return parse_number(ps);
        }
}

int json_validate_strict(const char *buf, size_t len, int max_depth) {
        Parser ps = { .p = buf, .end = buf + len, .max_depth = max_depth };

        (void) parse_value(&ps);
        if (ps.error == 0) {
                skip_ws(&ps);
                if (ps.p != ps.end)
                        ps.error = EBADMSG;
        }
        return -ps.error;
}
