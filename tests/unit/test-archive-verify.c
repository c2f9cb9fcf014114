/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of what the storage agent checks of archives: the digest state machine (slices, short
 * files, the shared file offset left alone, interleaving with other event sources), ETag and SHA-256
 * comparisons, and the response headers kept of a transfer. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <systemd/sd-event.h>

#include "archive-verify.h"
#include "macro.h"
#include "tests.h"

static int memfd_with(const void *data, size_t n) {
        int fd = memfd_create("test-archive-verify", MFD_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, data, n), (ssize_t) n);
        return fd;
}

static void expect_sums(const ArchiveDigest *d, const void *data, size_t n) {
        uint8_t md5[EVP_MAX_MD_SIZE], sha256[EVP_MAX_MD_SIZE];

        ASSERT_TRUE(EVP_Digest(data, n, md5, NULL, EVP_md5(), NULL) == 1);
        ASSERT_TRUE(EVP_Digest(data, n, sha256, NULL, EVP_sha256(), NULL) == 1);
        ASSERT_TRUE(archive_digest_md5(d) && memcmp(archive_digest_md5(d), md5, ARCHIVE_MD5_SIZE) == 0);
        ASSERT_TRUE(archive_digest_sha256(d) &&
                    memcmp(archive_digest_sha256(d), sha256, ARCHIVE_SHA256_SIZE) == 0);
}

static void test_digest_known_values(void) {
        static const uint8_t abc_md5[ARCHIVE_MD5_SIZE] = { 0x90, 0x01, 0x50, 0x98, 0x3c, 0xd2, 0x4f, 0xb0,
                                                           0xd6, 0x96, 0x3f, 0x7d, 0x28, 0xe1, 0x7f, 0x72 };
        ArchiveDigest *d;
        int fd;

        /* The empty archive: done at the first step. */
        fd = memfd_with("", 0);
        ASSERT_EQ(archive_digest_new(fd, 0, &d), 0);
        ASSERT_TRUE(!archive_digest_md5(d));
        ASSERT_EQ(archive_digest_step(d), 1);
        ASSERT_TRUE(sha256_hex_matches("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                                       archive_digest_sha256(d)));
        ASSERT_EQ(etag_matches_md5("\"d41d8cd98f00b204e9800998ecf8427e\"", archive_digest_md5(d)), 1);
        archive_digest_free(d);
        close(fd);

        fd = memfd_with("abc", 3);
        ASSERT_EQ(archive_digest_new(fd, 3, &d), 0);
        ASSERT_EQ(archive_digest_step(d), 1);
        ASSERT_TRUE(memcmp(archive_digest_md5(d), abc_md5, sizeof(abc_md5)) == 0);
        ASSERT_TRUE(sha256_hex_matches("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
                                       archive_digest_sha256(d)));
        ASSERT_EQ(archive_digest_step(d), 1); /* done stays done */
        archive_digest_free(d);
        close(fd);
}

static void test_digest_slices(void) {
        size_t n = 2 * ARCHIVE_DIGEST_SLICE + 12345;
        uint8_t *data = malloc(n);
        ArchiveDigest *d;
        unsigned steps = 0;
        int fd, r;

        ASSERT_TRUE(data);
        for (size_t i = 0; i < n; i++)
                data[i] = (uint8_t) (i * 7 + i / 251);
        fd = memfd_with(data, n);
        /* Somebody else's offset (the runner shares the file): pread leaves it where it is. */
        ASSERT_EQ(lseek(fd, 17, SEEK_SET), 17);
        ASSERT_EQ(archive_digest_new(fd, n, &d), 0);
        while ((r = archive_digest_step(d)) == 0) {
                steps++;
                ASSERT_EQ(archive_digest_progress(d), (uint64_t) steps * ARCHIVE_DIGEST_SLICE);
        }
        ASSERT_EQ(r, 1);
        ASSERT_EQ(steps, 2); /* three slices, the last one finishing */
        ASSERT_EQ(archive_digest_progress(d), n);
        ASSERT_EQ(lseek(fd, 0, SEEK_CUR), 17);
        expect_sums(d, data, n);
        archive_digest_free(d);

        /* Only [0, size): what was committed, even when the file is longer now. */
        ASSERT_EQ(archive_digest_new(fd, 1000, &d), 0);
        ASSERT_EQ(archive_digest_step(d), 1);
        expect_sums(d, data, 1000);
        archive_digest_free(d);

        /* A file shorter than the size to hash fails, never hashes less. */
        ASSERT_EQ(archive_digest_new(fd, n + 1, &d), 0);
        while ((r = archive_digest_step(d)) == 0)
                ;
        ASSERT_EQ(r, -ENODATA);
        ASSERT_TRUE(!archive_digest_sha256(d));
        archive_digest_free(d);
        close(fd);
        free(data);

        ASSERT_EQ(archive_digest_new(-1, 1, &d), -EBADF);
}

typedef struct LoopState {
        ArchiveDigest *digest;
        int error;
        unsigned callbacks;
        unsigned other_runs;
        uint64_t progress_seen_by_other;
} LoopState;

static void on_digest_done(ArchiveDigest *d, int error, void *userdata) {
        LoopState *s = userdata;

        s->error = error;
        s->callbacks++;
}

static int on_other_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        LoopState *s = userdata;

        s->other_runs++;
        s->progress_seen_by_other = archive_digest_progress(s->digest);
        return 0;
}

static int on_other_defer(sd_event_source *source, void *userdata) {
        return on_other_timer(source, 0, userdata);
}

static void test_digest_on_the_event_loop(void) {
        size_t n = 10 * ARCHIVE_DIGEST_SLICE + 1;
        uint8_t *data = malloc(n);
        sd_event_source *timer = NULL, *defer = NULL;
        sd_event *event = NULL;
        LoopState s = {};
        unsigned iterations = 0;
        uint64_t before;
        int fd;

        ASSERT_TRUE(data);
        memset(data, 'x', n);
        fd = memfd_with(data, n);
        ASSERT_EQ(sd_event_new(&event), 0);
        ASSERT_EQ(archive_digest_new(fd, n, &s.digest), 0);
        ASSERT_EQ(archive_digest_start(s.digest, event, on_digest_done, &s), 0);
        ASSERT_EQ(archive_digest_start(s.digest, event, on_digest_done, &s), -EBUSY);
        while (s.callbacks == 0) {
                ASSERT_TRUE(iterations < 100);
                if (iterations == 3) {
                        /* Due now, and ready now: both go before the next slice. */
                        ASSERT_EQ(sd_event_add_time_relative(event, &timer, CLOCK_MONOTONIC, 0, 1,
                                                             on_other_timer, &s),
                                  0);
                        ASSERT_EQ(sd_event_add_defer(event, &defer, on_other_defer, &s), 0);
                }
                before = archive_digest_progress(s.digest);
                ASSERT_TRUE(sd_event_run(event, 0) >= 0);
                iterations++;
                /* Never more than one slice per iteration: the loop gets its turn in between. */
                ASSERT_TRUE(archive_digest_progress(s.digest) - before <= ARCHIVE_DIGEST_SLICE);
        }
        ASSERT_EQ(s.callbacks, 1);
        ASSERT_EQ(s.error, 0);
        ASSERT_EQ(s.other_runs, 2);
        ASSERT_EQ(s.progress_seen_by_other, 3 * ARCHIVE_DIGEST_SLICE);
        ASSERT_EQ(iterations, 11 + 2); /* eleven slices, two other sources */
        expect_sums(s.digest, data, n);
        /* Done: no further dispatches. */
        ASSERT_EQ(sd_event_run(event, 0), 0);
        ASSERT_EQ(s.callbacks, 1);
        archive_digest_free(s.digest);
        sd_event_source_unref(timer);
        sd_event_source_unref(defer);
        sd_event_unref(event);
        close(fd);
        free(data);
}

static void test_etag(void) {
        static const uint8_t md5[ARCHIVE_MD5_SIZE] = { 0x90, 0x01, 0x50, 0x98, 0x3c, 0xd2, 0x4f, 0xb0,
                                                       0xd6, 0x96, 0x3f, 0x7d, 0x28, 0xe1, 0x7f, 0x72 };

        ASSERT_EQ(etag_matches_md5("\"900150983cd24fb0d6963f7d28e17f72\"", md5), 1);
        ASSERT_EQ(etag_matches_md5("\"900150983CD24FB0D6963F7D28E17F72\"", md5), 1); /* OSS: upper case */
        ASSERT_EQ(etag_matches_md5("900150983cd24fb0d6963f7d28e17f72", md5), 1);
        ASSERT_EQ(etag_matches_md5("\"900150983cd24fb0d6963f7d28e17f73\"", md5), 0);
        ASSERT_EQ(etag_matches_md5("\"000150983cd24fb0d6963f7d28e17f72\"", md5), 0);
        /* Not a plain MD5: multipart, weak, truncated, not hex, empty, absent. */
        ASSERT_EQ(etag_matches_md5("\"900150983cd24fb0d6963f7d28e17f72-2\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("W/\"900150983cd24fb0d6963f7d28e17f72\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("\"900150983cd24fb0d6963f7d28e17f7\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("\"900150983cd24fb0d6963f7d28e17fzz\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("\"\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("\"", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5("", md5), -EINVAL);
        ASSERT_EQ(etag_matches_md5(NULL, md5), -EINVAL);
}

static void test_etag_equal(void) {
        ASSERT_TRUE(etag_equal("\"9b2cf535f27731c974343645a3985328\"", "9B2CF535F27731C974343645A3985328"));
        ASSERT_TRUE(etag_equal("\"abc-2\"", "\"abc-2\""));
        ASSERT_TRUE(!etag_equal("\"abc-2\"", "\"abc-3\""));
        ASSERT_TRUE(!etag_equal("W/\"abc\"", "W/\"abc\""));
        ASSERT_TRUE(!etag_equal("\"\"", "\"\""));
        ASSERT_TRUE(!etag_equal("", ""));
        ASSERT_TRUE(!etag_equal(NULL, "abc"));
        ASSERT_TRUE(!etag_equal("\"abc", "abc"));
}

static void test_sha256_hex(void) {
        uint8_t sum[ARCHIVE_SHA256_SIZE];

        for (size_t i = 0; i < sizeof(sum); i++)
                sum[i] = (uint8_t) (0xa0 + i);
        ASSERT_TRUE(
                sha256_hex_matches("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf", sum));
        ASSERT_TRUE(
                sha256_hex_matches("A0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBF", sum));
        ASSERT_TRUE(!sha256_hex_matches("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebe",
                                        sum));
        ASSERT_TRUE(
                !sha256_hex_matches("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbeb", sum));
        ASSERT_TRUE(!sha256_hex_matches("a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf0",
                                        sum));
        ASSERT_TRUE(!sha256_hex_matches("", sum));
        ASSERT_TRUE(!sha256_hex_matches(NULL, sum));
}

static void feed(ResponseHeaders *h, const char *line) {
        response_headers_feed(h, line, strlen(line));
}

static void test_response_headers(void) {
        ResponseHeaders h = {};
        char long_line[600];

        feed(&h, "HTTP/1.1 100 Continue\r\n");
        ASSERT_EQ(h.status, 100);
        feed(&h, "ETag: \"ignored\"\r\n");
        feed(&h, "\r\n");
        /* A new response: what came before is forgotten. */
        feed(&h, "HTTP/1.1 200 OK\r\n");
        ASSERT_EQ(h.status, 200);
        ASSERT_STREQ(h.etag, "");
        feed(&h, "content-length:   1234 \r\n");
        feed(&h, "ETag: \"900150983cd24fb0d6963f7d28e17f72\"\r\n");
        feed(&h, "X-Amz-Meta-Scopebox-Sha256: ABCDEF\r\n");
        feed(&h, "x-amz-meta-scopebox-sha256-not: nope\r\n");
        feed(&h, "Last-Modified: Fri, 01 Mar 2024 12:34:56 GMT\r\n");
        feed(&h, "no colon here\r\n");
        ASSERT_TRUE(h.has_content_length && !h.bad_content_length);
        ASSERT_EQ(h.content_length, 1234);
        ASSERT_STREQ(h.etag, "\"900150983cd24fb0d6963f7d28e17f72\"");
        ASSERT_TRUE(h.has_sha256);
        ASSERT_STREQ(h.sha256, "ABCDEF");
        ASSERT_TRUE(!response_headers_etag_is_opaque(&h));
        /* The same Content-Length again is fine, another one is not. */
        feed(&h, "Content-Length: 1234\r\n");
        ASSERT_TRUE(!h.bad_content_length);
        feed(&h, "Content-Length: 99\r\n");
        ASSERT_TRUE(h.bad_content_length);

        feed(&h, "HTTP/2 404 \r\n");
        ASSERT_EQ(h.status, 404);
        ASSERT_TRUE(!h.has_content_length && !h.has_sha256);
        feed(&h, "Content-Length: -1\r\n");
        ASSERT_TRUE(h.bad_content_length && !h.has_content_length);
        feed(&h, "HTTP/1.1 200 OK\r\n");
        feed(&h, "Content-Length: 123456789012345678901234567890\r\n");
        ASSERT_TRUE(h.bad_content_length);
        feed(&h, "HTTP/1.1 200 OK\r\n");
        feed(&h, "Content-Length: \r\n");
        ASSERT_TRUE(h.bad_content_length);

        /* OSS's metadata prefix; over-long values are cut, never overflow. */
        feed(&h, "HTTP/1.1 200 OK\r\n");
        memset(long_line, 'a', sizeof(long_line));
        memcpy(long_line, "x-oss-meta-scopebox-sha256: ", 28);
        response_headers_feed(&h, long_line, sizeof(long_line));
        ASSERT_TRUE(h.has_sha256);
        ASSERT_EQ(strlen(h.sha256), RESPONSE_HEADER_VALUE_MAX - 1);

        /* Server-side encryption with KMS or a customer key: the ETag is no MD5. */
        feed(&h, "HTTP/1.1 200 OK\r\n");
        feed(&h, "x-amz-server-side-encryption: AES256\r\n");
        ASSERT_TRUE(!response_headers_etag_is_opaque(&h));
        feed(&h, "x-amz-server-side-encryption: aws:kms\r\n");
        ASSERT_TRUE(response_headers_etag_is_opaque(&h));
        feed(&h, "HTTP/1.1 200 OK\r\n");
        feed(&h, "x-amz-server-side-encryption: aws:kms:dsse\r\n");
        ASSERT_TRUE(response_headers_etag_is_opaque(&h));
        feed(&h, "HTTP/1.1 200 OK\r\n");
        feed(&h, "x-amz-server-side-encryption-customer-algorithm: AES256\r\n");
        ASSERT_TRUE(response_headers_etag_is_opaque(&h));

        /* Odd status lines: no digits, or more than three. */
        feed(&h, "HTTP/1.1\r\n");
        ASSERT_EQ(h.status, 0);
}

int main(void) {
        RUN(test_digest_known_values);
        RUN(test_digest_slices);
        RUN(test_digest_on_the_event_loop);
        RUN(test_etag);
        RUN(test_etag_equal);
        RUN(test_sha256_hex);
        RUN(test_response_headers);
        return 0;
}
