/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Response bodies produced as they are sent (see http-stream.h). */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "alloc-util.h"
#include "base64.h"
#include "http-stream.h"
#include "string-util.h"

typedef enum PartKind {
        PART_TEXT,      /* bytes of s->text from 'offset' */
        PART_BASE64,    /* base64 of 'data', produced as sent */
        PART_LOSSY,     /* 'data' escaped as JSON string contents, produced as sent */
} PartKind;

typedef struct Part {
        PartKind kind;
        size_t offset;
        const uint8_t *data;
        size_t size;    /* input bytes (TEXT: output bytes too) */
} Part;

struct HttpStream {
        JsonWriter text;
        int error;              /* the first failed append: every later one returns it */
        Part *parts;
        size_t n_parts, n_allocated;
        BusData data;
        uint64_t size;          /* known output bytes, whatever 'unknown' says */
        bool unknown;           /* a PART_LOSSY makes the size unknown */

        /* The reader's place: the next byte is at 'pos'; in the part 'part', 'done' output bytes
         * (PART_LOSSY: input bytes) are sent, and 'sub' bytes of the escape of the next input
         * character (PART_LOSSY only). */
        uint64_t pos;
        size_t part;
        size_t done;
        size_t sub;
};

int http_stream_new(HttpStream **ret) {
        HttpStream *s;

        assert(ret);

        s = calloc(1, sizeof(HttpStream));
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

HttpStream *http_stream_free(HttpStream *s) {
        if (!s)
                return NULL;
        json_writer_done(&s->text);
        free(s->parts);
        bus_data_done(&s->data);
        free(s);
        return NULL;
}

void http_stream_hold(HttpStream *s, BusData *data) {
        assert(s);
        assert(data);
        assert(!s->data.map && !s->data.copy);

        s->data = *data;
        *data = (BusData) {};
}

static int stream_add_part(HttpStream *s, Part p) {
        if (ARRAY_GROW(s->parts, s->n_allocated, s->n_parts, 8) < 0)
                return -ENOMEM;
        s->parts[s->n_parts++] = p;
        return 0;
}

/* The text just appended to s->text, from 'start': extends the last part if that is text. */
static int stream_add_text(HttpStream *s, size_t start) {
        size_t n = s->text.buf.len - start;
        Part *last = s->n_parts > 0 ? &s->parts[s->n_parts - 1] : NULL;

        if (n == 0)
                return 0;
        s->size += n;
        if (last && last->kind == PART_TEXT && last->offset + last->size == start) {
                last->size += n;
                return 0;
        }
        return stream_add_part(s, (Part) { .kind = PART_TEXT, .offset = start, .size = n });
}

static int stream_append(HttpStream *s, const char *text, size_t n) {
        size_t start;
        int r;

        assert(s);
        assert(text || n == 0);

        start = s->text.buf.len;
        r = json_writer_append(&s->text, text, n);
        if (r < 0)
                return r;
        return stream_add_text(s, start);
}


static int stream_vappendf(HttpStream *s, const char *format, va_list ap) {
        char buf[256];
        int k;

        k = vsnprintf(buf, sizeof(buf), format, ap);
        if (k < 0 || (size_t) k >= sizeof(buf))
                return -EINVAL;
        return stream_append(s, buf, (size_t) k);
}

static int stream_append_base64(HttpStream *s, const void *p, size_t n) {
        int r;

        assert(s);
        assert(p || n == 0);

        r = stream_append(s, "\"", 1);
        if (r < 0)
                return r;
        if (n > 0) {
                r = stream_add_part(s, (Part) { .kind = PART_BASE64, .data = p, .size = n });
                if (r < 0)
                        return r;
                s->size += base64_encoded_size(n);
        }
        return stream_append(s, "\"", 1);
}

/* The JSON string contents for the character at p (n > 0 bytes left) into out; returns their
 * length (≤ 6) and the input bytes they stand for in *ret_used. */
static size_t escape_one(const uint8_t *p, size_t n, char out[static 6], size_t *ret_used) {
        static const char hex[] = "0123456789abcdef";
        unsigned char c = p[0];
        size_t l;

        *ret_used = 1;
        if (c >= 0x80) {
                l = utf8_sequence_length(p, n);
                if (l == 0) {
                        memcpy(out, "\xef\xbf\xbd", 3);
                        return 3;
                }
                memcpy(out, p, l);
                *ret_used = l;
                return l;
        }
        if (c >= 0x20 && c != '"' && c != '\\') {
                out[0] = (char) c;
                return 1;
        }
        out[0] = '\\';
        switch (c) {
        case '"':  out[1] = '"'; return 2;
        case '\\': out[1] = '\\'; return 2;
        case '\n': out[1] = 'n'; return 2;
        case '\r': out[1] = 'r'; return 2;
        case '\t': out[1] = 't'; return 2;
        case '\b': out[1] = 'b'; return 2;
        case '\f': out[1] = 'f'; return 2;
        default:
                memcpy(out + 1, "u00", 3);
                out[4] = hex[c >> 4];
                out[5] = hex[c & 15];
                return 6;
        }
}

/* Bytes at the start of p that stand for themselves in a JSON string. */
static size_t plain_run(const uint8_t *p, size_t n) {
        size_t k = 0;

        while (k < n && p[k] >= 0x20 && p[k] < 0x80 && p[k] != '"' && p[k] != '\\')
                k++;
        return k;
}

static int stream_append_text_lossy(HttpStream *s, const void *p, size_t n) {
        const uint8_t *d = p;
        size_t start, i = 0;
        int r;

        assert(s);
        assert(p || n == 0);

        if (n > HTTP_STREAM_EAGER_MAX) {
                s->unknown = true;
                return stream_add_part(s, (Part) { .kind = PART_LOSSY, .data = p, .size = n });
        }

        start = s->text.buf.len;
        r = json_writer_reserve(&s->text, n + 16);
        if (r < 0)
                return r;
        while (i < n) {
                char esc[6];
                size_t k = plain_run(d + i, n - i), used, l;

                r = json_writer_append(&s->text, (const char *) d + i, k);
                if (r < 0)
                        return r;
                i += k;
                if (i == n)
                        break;
                l = escape_one(d + i, n - i, esc, &used);
                r = json_writer_append(&s->text, esc, l);
                if (r < 0)
                        return r;
                i += used;
        }
        return stream_add_text(s, start);
}

/* The first failure sticks (http_stream_error()). */
static int stream_fail(HttpStream *s, int r) {
        if (r < 0 && s->error == 0)
                s->error = r;
        return r < 0 ? s->error : 0;
}

int http_stream_append(HttpStream *s, const char *text, size_t n) {
        assert(s);
        return s->error < 0 ? s->error : stream_fail(s, stream_append(s, text, n));
}

int http_stream_append_str(HttpStream *s, const char *text) {
        return http_stream_append(s, text, strlen(text));
}

int http_stream_appendf(HttpStream *s, const char *format, ...) {
        va_list ap;
        int r;

        assert(s);
        if (s->error < 0)
                return s->error;
        va_start(ap, format);
        r = stream_vappendf(s, format, ap);
        va_end(ap);
        return stream_fail(s, r);
}

int http_stream_append_base64(HttpStream *s, const void *p, size_t n) {
        assert(s);
        return s->error < 0 ? s->error : stream_fail(s, stream_append_base64(s, p, n));
}

int http_stream_append_text_lossy(HttpStream *s, const void *p, size_t n) {
        assert(s);
        return s->error < 0 ? s->error : stream_fail(s, stream_append_text_lossy(s, p, n));
}

int http_stream_error(const HttpStream *s) {
        return s->error;
}

uint64_t http_stream_size(const HttpStream *s) {
        assert(s);
        return s->unknown ? HTTP_STREAM_SIZE_UNKNOWN : s->size;
}

uint64_t http_stream_footprint(const HttpStream *s) {
        assert(s);
        return sizeof(HttpStream) + s->text.buf.cap + s->n_allocated * sizeof(Part) +
                (s->data.map ? s->data.map_size : s->data.copy ? s->data.size : 0);
}

/* Each reader fills 'buf' (room > 0) from the current part and returns the bytes written; the
 * part is finished when it leaves s->done at its end. */
static size_t read_text(HttpStream *s, const Part *p, char *buf, size_t room) {
        size_t k = MIN(room, p->size - s->done);

        memcpy(buf, s->text.buf.s + p->offset + s->done, k);
        s->done += k;
        return k;
}

static size_t read_base64(HttpStream *s, const Part *p, char *buf, size_t room) {
        size_t total = base64_encoded_size(p->size), k;
        char quad[5];

        if (s->done % 4 == 0) {
                /* Whole groups straight into the buffer; base64_encode_to() adds a NUL. */
                size_t q = MIN((room - 1) / 4, (total - s->done) / 4);

                if (room > 4 && q > 0) {
                        size_t in = s->done / 4 * 3;
                        k = base64_encode_to(p->data + in, MIN(q * 3, p->size - in), buf);
                        s->done += k;
                        return k;
                }
        }

        /* Less room than a group, or a group begun: the group again, then what fits of it. */
        (void) base64_encode_to(p->data + s->done / 4 * 3, MIN((size_t) 3, p->size - s->done / 4 * 3), quad);
        k = MIN(room, 4 - s->done % 4);
        memcpy(buf, quad + s->done % 4, k);
        s->done += k;
        return k;
}

static size_t read_lossy(HttpStream *s, const Part *p, char *buf, size_t room) {
        size_t n = 0;

        while (n < room && s->done < p->size) {
                const uint8_t *d = p->data + s->done;
                size_t left = p->size - s->done, k, used, l;
                char esc[6];

                if (s->sub == 0) {
                        k = plain_run(d, MIN(left, room - n));
                        if (k > 0) {
                                memcpy(buf + n, d, k);
                                n += k;
                                s->done += k;
                                continue;
                        }
                }
                l = escape_one(d, left, esc, &used);
                k = MIN(l - s->sub, room - n);
                memcpy(buf + n, esc + s->sub, k);
                n += k;
                s->sub += k;
                if (s->sub == l) {
                        s->sub = 0;
                        s->done += used;
                }
        }
        return n;
}

static bool part_finished(const HttpStream *s, const Part *p) {
        return s->done == (p->kind == PART_BASE64 ? base64_encoded_size(p->size) : p->size);
}

ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
        HttpStream *s = cls;
        size_t n = 0;

        assert(s);

        if (pos != s->pos)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        max = MIN(max, (size_t) SSIZE_MAX);

        while (n < max && s->part < s->n_parts) {
                const Part *p = &s->parts[s->part];

                if (!part_finished(s, p)) {
                        if (p->kind == PART_TEXT)
                                n += read_text(s, p, buf + n, max - n);
                        else if (p->kind == PART_BASE64)
                                n += read_base64(s, p, buf + n, max - n);
                        else
                                n += read_lossy(s, p, buf + n, max - n);
                }
                if (part_finished(s, p)) {
                        s->part++;
                        s->done = 0;
                }
        }

        if (n == 0 && s->part == s->n_parts)
                return MHD_CONTENT_READER_END_OF_STREAM;
        s->pos += n;
        return (ssize_t) n;
}

int http_stream_read_all(HttpStream *s, size_t max_per_call, char **ret, size_t *ret_size) {
        _cleanup_(json_writer_done) JsonWriter out = {};
        int r;

        assert(s);
        assert(max_per_call > 0);
        assert(ret);

        for (;;) {
                ssize_t k;

                r = json_writer_reserve(&out, max_per_call);
                if (r < 0)
                        return r;
                k = http_stream_read(s, s->pos, out.buf.s + out.buf.len, max_per_call);
                if (k == MHD_CONTENT_READER_END_OF_STREAM)
                        break;
                if (k <= 0)
                        return -EIO;
                out.buf.len += (size_t) k;
        }
        *ret = json_writer_steal(&out, ret_size);
        return *ret ? 0 : -ENOMEM;
}
