/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A strict RFC 8259 validator run before json-c parses: json-c accepts single quotes, comments,
 * NaN and duplicate keys (last one wins), which lets two parsers disagree about one document.
 * This rejects all of that and NUL in strings (which C strings would cut short), bounds the
 * nesting depth, the members of each object and the tokens of the document, and checks number
 * ranges. It runs in O(n log n) of the members of an object and linear time otherwise: the keys
 * of an object are sorted once to find duplicates. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc-util.h"
#include "json-util.h"
#include "macro.h"
#include "string-util.h"

typedef struct Parser {
        const char *p, *end;
        int depth;
        JsonLimits limits;
        size_t n_tokens;
        int error;
} Parser;

/* One key of an object, decoded: it points into the document when it holds no escape, else into
 * 'owned'. */
typedef struct Key {
        const char *s;
        size_t n;
        char *owned;
} Key;

/* Keys of one object, for the duplicate check. */
typedef struct KeySet {
        Key *keys;
        size_t n, allocated;
} KeySet;

static void keyset_done(KeySet *k) {
        for (size_t i = 0; i < k->n; i++)
                free(k->keys[i].owned);
        free(k->keys);
}

static int key_compare(const void *a, const void *b) {
        const Key *x = a, *y = b;
        int c = memcmp(x->s, y->s, MIN(x->n, y->n));

        if (c != 0)
                return c;
        return x->n < y->n ? -1 : x->n > y->n;
}

/* Sorted, equal keys are neighbours. Keys hold no NUL, but memcmp() would not care anyway. */
static bool keyset_has_duplicate(KeySet *k) {
        if (k->n < 2)
                return false;
        qsort(k->keys, k->n, sizeof(Key), key_compare);
        for (size_t i = 1; i < k->n; i++)
                if (key_compare(&k->keys[i - 1], &k->keys[i]) == 0)
                        return true;
        return false;
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

/* Takes c when it comes next. */
static bool skip_char(Parser *ps, char c) {
        if (ps->p >= ps->end || *ps->p != c)
                return false;
        ps->p++;
        return true;
}

static size_t skip_digits(Parser *ps) {
        const char *s = ps->p;

        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                ps->p++;
        return (size_t) (ps->p - s);
}

/* Takes the opening bracket, then 'close' when it follows at once: true for an empty object or array. */
static bool parse_open(Parser *ps, char close) {
        ps->p++;
        skip_ws(ps);
        return skip_char(ps, close);
}

/* After a member or an element: 1 when a ',' says another follows, 0 when 'close' ends the
 * object or array. */
static int parse_next(Parser *ps, char close) {
        skip_ws(ps);
        if (skip_char(ps, ','))
                return 1;
        if (skip_char(ps, close))
                return 0;
        return fail(ps, EBADMSG);
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

/* The code point of the \u escape whose hex digits start at s, a surrogate pair taken together, and
 * how many bytes after the "\u" it took: -EINVAL for a malformed escape or a lone surrogate. */
static int parse_u_escape(const char *s, const char *end, uint32_t *ret, size_t *ret_len) {
        uint32_t cp, lo;

        if (end - s < 4 || hex4(s, &cp) < 0)
                return -EINVAL;
        if (cp >= 0xdc00 && cp <= 0xdfff)
                return -EINVAL; /* lone low surrogate */
        if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - s < 10 || s[4] != '\\' || s[5] != 'u' || hex4(s + 6, &lo) < 0 ||
                    lo < 0xdc00 || lo > 0xdfff)
                        return -EINVAL; /* lone high surrogate */
                *ret = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                *ret_len = 10;
                return 0;
        }
        *ret = cp;
        *ret_len = 4;
        return 0;
}

static const char escapes[] = "\"\\/bfnrt", escaped[] = "\"\\/\b\f\n\r\t";

/* Decodes the contents of a string that parse_string() accepted, [s, end) without the quotes, into
 * 'out', which has room for end - s bytes: decoded text is never longer than its source. */
static size_t decode_string(const char *s, const char *end, char *out) {
        size_t o = 0;

        while (s < end) {
                uint32_t cp;
                size_t l;

                if (*s != '\\') {
                        out[o++] = *s++;
                        continue;
                }
                if (s[1] == 'u') {
                        (void) parse_u_escape(s + 2, end, &cp, &l); /* checked before */
                        o += utf8_encode(cp, out + o);
                        s += 2 + l;
                        continue;
                }
                out[o++] = escaped[strchr(escapes, s[1]) - escapes];
                s += 2;
        }
        return o;
}

/* Validates a string; when ret is given, also returns its decoded form (for keys). A raw NUL (a
 * control character) and invalid UTF-8 are refused with -EBADMSG. An escaped NUL (\u0000) is
 * refused with -EILSEQ in keys, whose C strings would cut it and alias another member; in values
 * it is kept, and the resource that reads the value refuses it with a 400 naming the field. */
static int parse_string(Parser *ps, Key *ret) {
        const char *start;
        bool escaped_any = false;

        if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, EBADMSG);
        start = ++ps->p;
        while (ps->p < ps->end) {
                unsigned char c = (unsigned char) *ps->p;

                if (c == '"') {
                        const char *close = ps->p++;

                        if (!ret)
                                return 0;
                        *ret = (Key) { .s = start, .n = (size_t) (close - start) };
                        if (escaped_any) {
                                ret->owned = malloc(MAX(ret->n, (size_t) 1));
                                if (!ret->owned)
                                        return fail(ps, ENOMEM);
                                ret->n = decode_string(start, close, ret->owned);
                                ret->s = ret->owned;
                        }
                        return 0;
                }
                if (c < 0x20)
                        break; /* raw control characters must be escaped */
                if (c >= 0x80) {
                        /* Multi-byte sequences are made of bytes ≥ 0x80 only: check the whole run. */
                        const char *q = ps->p;

                        while (q < ps->end && (unsigned char) *q >= 0x80)
                                q++;
                        if (!utf8_is_valid_n(ps->p, (size_t) (q - ps->p)))
                                break;
                        ps->p = q;
                        continue;
                }
                if (c != '\\') {
                        ps->p++;
                        continue;
                }
                if (ps->end - ps->p < 2)
                        break;
                c = (unsigned char) ps->p[1];
                escaped_any = true;
                if (c == 'u') {
                        uint32_t cp;
                        size_t l;

                        if (parse_u_escape(ps->p + 2, ps->end, &cp, &l) < 0)
                                break;
                        if (cp == 0 && ret)
                                return fail(ps, EILSEQ);
                        ps->p += 2 + l;
                        continue;
                }
                if (c == 0 || !strchr(escapes, c))
                        break;
                ps->p += 2;
        }
        return fail(ps, EBADMSG);
}

static int parse_number(Parser *ps) {
        const char *s = ps->p;

        (void) skip_char(ps, '-');
        /* A leading 0 stands alone: what digits follow it are left to fail the caller. */
        if (!skip_char(ps, '0') && skip_digits(ps) == 0)
                return fail(ps, EBADMSG);
        if (skip_char(ps, '.') && skip_digits(ps) == 0)
                return fail(ps, EBADMSG);
        if (skip_char(ps, 'e') || skip_char(ps, 'E')) {
                if (!skip_char(ps, '+'))
                        (void) skip_char(ps, '-');
                if (skip_digits(ps) == 0)
                        return fail(ps, EBADMSG);
        }
        /* Absurdly long numerals are refused outright; range checks happen per field. */
        if (ps->p - s > 64)
                return fail(ps, ERANGE);
        return 0;
}

static int parse_value(Parser *ps);

static int parse_object(Parser *ps) {
        _cleanup_(keyset_done) KeySet keys = {};
        int r;

        if (parse_open(ps, '}'))
                return 0;
        do {
                Key key = {};

                if (keys.n >= ps->limits.members_max || ++ps->n_tokens > ps->limits.tokens_max)
                        return fail(ps, E2BIG);
                skip_ws(ps);
                r = parse_string(ps, &key);
                if (r < 0)
                        return r;
                if (ARRAY_GROW(keys.keys, keys.allocated, keys.n, 8) < 0) {
                        free(key.owned);
                        return fail(ps, ENOMEM);
                }
                keys.keys[keys.n++] = key;

                skip_ws(ps);
                if (!skip_char(ps, ':'))
                        return fail(ps, EBADMSG);
                r = parse_value(ps);
                if (r < 0)
                        return r;
                r = parse_next(ps, '}');
                if (r < 0)
                        return r;
        } while (r > 0);
        /* Once the object is complete: a syntax error further on wins over a duplicate. */
        if (keyset_has_duplicate(&keys))
                return fail(ps, ENOTUNIQ);
        return 0;
}

static int parse_array(Parser *ps) {
        int r;

        if (parse_open(ps, ']'))
                return 0;
        do {
                r = parse_value(ps);
                if (r < 0)
                        return r;
                r = parse_next(ps, ']');
        } while (r > 0);
        return r;
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
        if (++ps->n_tokens > ps->limits.tokens_max)
                return fail(ps, E2BIG);
        switch (*ps->p) {
        case '{':
        case '[':
                if (++ps->depth > ps->limits.depth_max)
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

int json_validate_strict_limits(const char *buf, size_t len, const JsonLimits *limits) {
        Parser ps = { .p = buf, .end = buf + len, .limits = *limits };

        assert(buf || len == 0);
        assert(limits);

        (void) parse_value(&ps);
        if (ps.error == 0) {
                skip_ws(&ps);
                if (ps.p != ps.end)
                        ps.error = EBADMSG;
        }
        return -ps.error;
}

int json_validate_strict(const char *buf, size_t len, int max_depth) {
        return json_validate_strict_limits(buf, len, &(const JsonLimits) {
                        .depth_max = max_depth,
                        .members_max = JSON_MEMBERS_MAX,
                        .tokens_max = JSON_TOKENS_MAX,
                });
}

const char *json_strict_error_to_string(int error) {
        switch (abs(error)) {
        case EBADMSG:
                return "invalid JSON";
        case ENOTUNIQ:
                return "duplicate member in a JSON object";
        case E2BIG:
                return "JSON document too large (nesting, members of an object or values)";
        case ERANGE:
                return "JSON number too long";
        case EILSEQ:
                return "NUL (\\u0000) in a JSON member name";
        default:
                return NULL;
        }
}
