/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Streamed response bodies: the bytes produced piece by piece equal the body composed whole. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base64.h"
#include "http-stream.h"
#include "http-util.h"
#include "tests.h"

/* What json_writer gives for the same parts, composed whole. */
static void reference_lossy(JsonWriter *w, const void *p, size_t n) {
        _cleanup_(json_writer_done) JsonWriter text = {};
        size_t start;

        ASSERT_TRUE(json_writer_append_text_lossy(&text, p, n) == 0);
        start = w->buf.len;
        ASSERT_TRUE(json_writer_append_string(w, text.buf.s ?: "", text.buf.len) == 0);
        /* Without its quotes. */
        memmove(w->buf.s + start, w->buf.s + start + 1, w->buf.len - start - 2);
        w->buf.len -= 2;
        w->buf.s[w->buf.len] = 0;
}

/* Reads the stream with reads of sizes cycling through 'steps'. */
static char *read_stepped(HttpStream *s, const size_t *steps, size_t n_steps, size_t *ret_size) {
        _cleanup_(json_writer_done) JsonWriter out = {};
        uint64_t pos = 0;

        for (size_t i = 0;; i++) {
                size_t max = steps[i % n_steps];
                ssize_t k;

                ASSERT_TRUE(json_writer_reserve(&out, max) == 0);
                k = http_stream_read(s, pos, out.buf.s + out.buf.len, max);
                if (k == MHD_CONTENT_READER_END_OF_STREAM)
                        break;
                ASSERT_TRUE(k > 0 && (size_t) k <= max);
                out.buf.len += (size_t) k;
                pos += (uint64_t) k;
        }
        return json_writer_steal(&out, ret_size);
}

/* Bytes that exercise every escape: controls, quotes, valid multi-byte sequences, broken ones
 * (cut, overlong, surrogates), split across any read boundary. */
static void fill_text(uint8_t *p, size_t n, unsigned seed) {
        static const char *const pieces[] = {
                "plain ascii ", "\n", "\"", "\\", "\x01", "\x1f", "\t", "\xc3\xa4", "\xe4\xb8\xad",
                "\xf0\x9f\x98\x80", "\xc3", "\xe4\xb8", "\xc0\xaf", "\xed\xa0\x80", "\xff", "\x7f",
        };
        size_t i = 0;

        srand(seed);
        while (i < n) {
                const char *piece = pieces[(unsigned) rand() % ELEMENTSOF(pieces)];
                size_t l = MIN(strlen(piece), n - i);

                memcpy(p + i, piece, l);
                i += l;
        }
}

static void check_stream(size_t text_size, size_t blob_size, unsigned seed) {
        static const size_t steps[][4] = {
                { 1 }, { 2, 3 }, { 5, 7, 11, 4 }, { 4096 }, { HTTP_STREAM_BLOCK }, { 3, 65536, 1, 9 },
        };
        _cleanup_(json_writer_done) JsonWriter ref = {};
        _cleanup_free_ uint8_t *text = malloc(text_size + 1), *blob = malloc(blob_size + 1);
        _cleanup_free_ char *enc = NULL;

        ASSERT_TRUE(text && blob);
        fill_text(text, text_size, seed);
        for (size_t i = 0; i < blob_size; i++)
                blob[i] = (uint8_t) (i * 7 + seed);
        enc = base64_encode(blob, blob_size);
        ASSERT_TRUE(enc);

        ASSERT_TRUE(json_writer_append_str(&ref, "{\"t\":\"") == 0);
        reference_lossy(&ref, text, text_size);
        ASSERT_TRUE(json_writer_appendf(&ref, "\",\"b\":\"%s\",\"n\":%u}", enc, seed) == 0);

        for (size_t k = 0; k < ELEMENTSOF(steps); k++) {
                _cleanup_(http_stream_freep) HttpStream *s = NULL;
                _cleanup_free_ char *got = NULL;
                size_t n_steps = 0, size;

                while (n_steps < 4 && steps[k][n_steps] > 0)
                        n_steps++;

                ASSERT_TRUE(http_stream_new(&s) == 0);
                ASSERT_TRUE(http_stream_append_str(s, "{\"t\":\"") == 0);
                ASSERT_TRUE(http_stream_append_text_lossy(s, text, text_size) == 0);
                ASSERT_TRUE(http_stream_append_str(s, "\",\"b\":") == 0);
                ASSERT_TRUE(http_stream_append_base64(s, blob, blob_size) == 0);
                ASSERT_TRUE(http_stream_appendf(s, ",\"n\":%u}", seed) == 0);

                /* Text escaped at once leaves the size known: Content-Length, not chunks. */
                if (text_size <= HTTP_STREAM_EAGER_MAX)
                        ASSERT_EQ(http_stream_size(s), ref.buf.len);
                else
                        ASSERT_TRUE(http_stream_size(s) == HTTP_STREAM_SIZE_UNKNOWN);

                got = read_stepped(s, steps[k], n_steps, &size);
                ASSERT_TRUE(got);
                if (size != ref.buf.len || memcmp(got, ref.buf.s, size) != 0) {
                        size_t i = 0;
                        while (i < MIN(size, ref.buf.len) && got[i] == ref.buf.s[i])
                                i++;
                        fprintf(stderr, "text %zu blob %zu steps %zu: differs at %zu (%zu vs %zu bytes)\n",
                                text_size, blob_size, k, i, size, ref.buf.len);
                        abort();
                }
                /* Once at the end it stays there. */
                ASSERT_TRUE(http_stream_read(s, size, got, 1) == MHD_CONTENT_READER_END_OF_STREAM);
        }
}

static void test_equal_to_whole(void) {
        for (unsigned seed = 1; seed <= 3; seed++) {
                check_stream(0, 0, seed);
                check_stream(1, 1, seed);
                check_stream(100, 2, seed);
                check_stream(1000, 3, seed);
                check_stream(4097, 100000, seed);
                /* Past the eager limit: escaped as sent. */
                check_stream(HTTP_STREAM_EAGER_MAX + 1, 5, seed);
                check_stream(3 * HTTP_STREAM_EAGER_MAX + 17, 3 * HTTP_STREAM_BLOCK + 1, seed);
        }
}

static void test_bounded_work(void) {
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        size_t blob_size = 8U << 20, text_size = 4U << 20;
        _cleanup_free_ uint8_t *blob = calloc(1, blob_size), *text = malloc(text_size);
        char buf[HTTP_STREAM_BLOCK];
        uint64_t pos = 0;
        ssize_t k;

        ASSERT_TRUE(blob && text);
        memset(text, '\x01', text_size); /* every byte becomes 6 */
        ASSERT_TRUE(http_stream_new(&s) == 0);
        ASSERT_TRUE(http_stream_append_base64(s, blob, blob_size) == 0);
        ASSERT_TRUE(http_stream_append_text_lossy(s, text, text_size) == 0);
        /* Composing copied nothing big: what it keeps is a few parts. */
        ASSERT_TRUE(http_stream_footprint(s) < 64U * 1024U);

        /* Every call fills at most its buffer; the total is what the parts make. */
        while ((k = http_stream_read(s, pos, buf, sizeof(buf))) != MHD_CONTENT_READER_END_OF_STREAM) {
                ASSERT_TRUE(k > 0 && (size_t) k <= sizeof(buf));
                pos += (uint64_t) k;
        }
        ASSERT_EQ(pos, 2 + base64_encoded_size(blob_size) + 6 * text_size);

        /* A read out of place is an error, never bytes of the wrong offset. */
        ASSERT_TRUE(http_stream_read(s, pos - 1, buf, sizeof(buf)) == MHD_CONTENT_READER_END_WITH_ERROR);
}

static void test_hold(void) {
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        BusData d = {};
        char *copy = strdup("held bytes");
        _cleanup_free_ char *got = NULL;
        size_t size;

        ASSERT_TRUE(copy);
        d.copy = copy;
        d.data = (const uint8_t *) copy;
        d.size = strlen(copy);

        ASSERT_TRUE(http_stream_new(&s) == 0);
        ASSERT_TRUE(http_stream_append_base64(s, d.data, d.size) == 0);
        http_stream_hold(s, &d);
        ASSERT_TRUE(!d.copy && !d.map);
        /* The held copy counts in what the stream keeps alive. */
        ASSERT_TRUE(http_stream_footprint(s) >= strlen("held bytes"));
        ASSERT_TRUE(http_stream_read_all(s, 3, &got, &size) == 0);
        ASSERT_STREQ(got, "\"aGVsZCBieXRlcw==\"");
}

/* An append that fails (a formatted piece over 256 bytes) sticks: the composer checks once. */
static void test_sticky_error(void) {
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        char big[300];

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ASSERT_EQ(http_stream_new(&s), 0);
        ASSERT_EQ(http_stream_append_str(s, "{"), 0);
        ASSERT_EQ(http_stream_appendf(s, "%s", big), -EINVAL);
        ASSERT_EQ(http_stream_append_str(s, "}"), -EINVAL);
        ASSERT_EQ(http_stream_append_base64(s, "x", 1), -EINVAL);
        ASSERT_EQ(http_stream_append_text_lossy(s, "x", 1), -EINVAL);
        ASSERT_EQ(http_stream_error(s), -EINVAL);
        ASSERT_EQ(http_stream_size(s), 1U);
}

int main(void) {
        RUN(test_equal_to_whole);
        RUN(test_bounded_work);
        RUN(test_hold);
        RUN(test_sticky_error);
        return 0;
}
