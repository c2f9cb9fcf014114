/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the agent checks of the archives it stores and fetches: MD5 and SHA-256 of a spool file computed
 * a slice at a time on the event loop, ETags, and the few response headers an archive transfer needs. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "archive-verify.h"
#include "macro.h"
#include "parse-util.h"
#include "string-util.h"

DEFINE_CLEANUP_FUNC(EVP_MD_CTX *, EVP_MD_CTX_free);

struct ArchiveDigest {
        int fd;
        uint64_t offset, size;
        EVP_MD_CTX *md5, *sha256;
        uint8_t md5_sum[ARCHIVE_MD5_SIZE], sha256_sum[ARCHIVE_SHA256_SIZE];
        bool done;
        uint8_t *buffer;
        sd_event_source *source;
        ArchiveDigestCallback callback;
        void *userdata;
};

int archive_digest_new(int fd, uint64_t size, ArchiveDigest **ret) {
        _cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md5 = NULL, *sha256 = NULL;
        ArchiveDigest *d;

        if (fd < 0)
                return -EBADF;
        md5 = EVP_MD_CTX_new();
        sha256 = EVP_MD_CTX_new();
        if (!md5 || !sha256)
                return -ENOMEM;
        if (EVP_DigestInit_ex(md5, EVP_md5(), NULL) != 1 ||
            EVP_DigestInit_ex(sha256, EVP_sha256(), NULL) != 1)
                return -EIO;
        d = calloc(1, sizeof(ArchiveDigest));
        if (!d)
                return -ENOMEM;
        d->buffer = malloc(ARCHIVE_DIGEST_SLICE);
        if (!d->buffer) {
                free(d);
                return -ENOMEM;
        }
        d->fd = fd;
        d->size = size;
        d->md5 = TAKE_PTR(md5);
        d->sha256 = TAKE_PTR(sha256);
        *ret = d;
        return 0;
}

ArchiveDigest *archive_digest_free(ArchiveDigest *d) {
        if (!d)
                return NULL;
        d->source = sd_event_source_disable_unref(d->source);
        EVP_MD_CTX_free(d->md5);
        EVP_MD_CTX_free(d->sha256);
        free(d->buffer);
        free(d);
        return NULL;
}

int archive_digest_step(ArchiveDigest *d) {
        size_t want;
        ssize_t k;

        if (d->done)
                return 1;
        want = (size_t) MIN((uint64_t) ARCHIVE_DIGEST_SLICE, d->size - d->offset);
        if (want > 0) {
                /* pread: the file offset is shared with whoever else holds the file (the runner). */
                k = pread(d->fd, d->buffer, want, (off_t) d->offset);
                if (k < 0)
                        return errno == EINTR ? 0 : -errno;
                if (k == 0)
                        return -ENODATA;
                if (EVP_DigestUpdate(d->md5, d->buffer, (size_t) k) != 1 ||
                    EVP_DigestUpdate(d->sha256, d->buffer, (size_t) k) != 1)
                        return -EIO;
                d->offset += (uint64_t) k;
        }
        if (d->offset < d->size)
                return 0;
        if (EVP_DigestFinal_ex(d->md5, d->md5_sum, NULL) != 1 ||
            EVP_DigestFinal_ex(d->sha256, d->sha256_sum, NULL) != 1)
                return -EIO;
        d->done = true;
        return 1;
}

static int on_digest_slice(sd_event_source *s, void *userdata) {
        ArchiveDigest *d = userdata;
        int r;

        r = archive_digest_step(d);
        if (r == 0)
                return 0;
        (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
        d->callback(d, MIN(r, 0), d->userdata);
        return 0;
}

int archive_digest_start(ArchiveDigest *d, sd_event *event, ArchiveDigestCallback cb, void *userdata) {
        int r;

        if (d->source)
                return -EBUSY;
        d->callback = cb;
        d->userdata = userdata;
        r = sd_event_add_defer(event, &d->source, on_digest_slice, d);
        if (r < 0)
                return r;
        /* Idle: bus calls and transfers that are ready go first; one slice whenever nothing else is. */
        r = sd_event_source_set_priority(d->source, SD_EVENT_PRIORITY_IDLE);
        if (r >= 0)
                r = sd_event_source_set_enabled(d->source, SD_EVENT_ON);
        if (r < 0)
                d->source = sd_event_source_disable_unref(d->source);
        return r;
}

const uint8_t *archive_digest_md5(const ArchiveDigest *d) {
        return d->done ? d->md5_sum : NULL;
}

const uint8_t *archive_digest_sha256(const ArchiveDigest *d) {
        return d->done ? d->sha256_sum : NULL;
}

uint64_t archive_digest_size(const ArchiveDigest *d) {
        return d->size;
}

uint64_t archive_digest_progress(const ArchiveDigest *d) {
        return d->offset;
}

/* 1: s (exactly 2 * size hex digits, any case) is these bytes, 0: another value, -EINVAL: not hex. */
static int hex_matches(const char *s, size_t len, const uint8_t *bytes, size_t size) {
        static const char digits[] = "0123456789abcdef";
        bool same = true;

        if (len != 2 * size || strspn(s, "0123456789abcdefABCDEF") < len)
                return -EINVAL;
        for (size_t i = 0; i < size; i++)
                if (tolower((unsigned char) s[2 * i]) != digits[bytes[i] >> 4] ||
                    tolower((unsigned char) s[2 * i + 1]) != digits[bytes[i] & 0xf])
                        same = false;
        return same;
}

/* An ETag without its quotes: [*ret, *ret + *ret_len). */
static void etag_unquote(const char *etag, const char **ret, size_t *ret_len) {
        size_t l = strlen(etag);

        if (l >= 2 && etag[0] == '"' && etag[l - 1] == '"') {
                etag++;
                l -= 2;
        }
        *ret = etag;
        *ret_len = l;
}

int etag_matches_md5(const char *etag, const uint8_t md5[static ARCHIVE_MD5_SIZE]) {
        size_t l;

        if (!etag)
                return -EINVAL;
        /* A weak validator is not a digest of these bytes. */
        if (strncmp(etag, "W/", 2) == 0)
                return -EINVAL;
        etag_unquote(etag, &etag, &l);
        return hex_matches(etag, l, md5, ARCHIVE_MD5_SIZE);
}

bool etag_equal(const char *a, const char *b) {
        const char *x, *y;
        size_t lx, ly;

        if (isempty(a) || isempty(b) || strncmp(a, "W/", 2) == 0 || strncmp(b, "W/", 2) == 0)
                return false;
        etag_unquote(a, &x, &lx);
        etag_unquote(b, &y, &ly);
        return lx > 0 && lx == ly && strncasecmp(x, y, lx) == 0;
}

bool sha256_hex_matches(const char *s, const uint8_t sha256[static ARCHIVE_SHA256_SIZE]) {
        return s && hex_matches(s, strlen(s), sha256, ARCHIVE_SHA256_SIZE) == 1;
}

static void copy_value(char *dst, const char *src, size_t n) {
        n = MIN(n, (size_t) RESPONSE_HEADER_VALUE_MAX - 1);
        memcpy(dst, src, n);
        dst[n] = 0;
}

void response_headers_feed(ResponseHeaders *h, const char *line, size_t n) {
        const char *colon, *v, *end = line + n;
        size_t name_len;

        /* "HTTP/1.1 200 OK", "HTTP/2 404": the headers of a new response follow. */
        if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
                const char *p = memchr(line, ' ', n);
                long status = 0;

                *h = (ResponseHeaders) {};
                for (p = p ? p + 1 : end; p < end && *p >= '0' && *p <= '9' && status < 1000; p++)
                        status = status * 10 + (*p - '0');
                h->status = status;
                return;
        }
        colon = memchr(line, ':', n);
        if (!colon)
                return;
        name_len = (size_t) (colon - line);
        for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
                ;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
                end--;

#define IS(name) (name_len == strlen(name) && strncasecmp(line, name, name_len) == 0)
        if (IS("Content-Length")) {
                char buf[32];
                uint64_t value;

                if ((size_t) (end - v) >= sizeof(buf)) {
                        h->bad_content_length = true;
                        return;
                }
                memcpy(buf, v, (size_t) (end - v));
                buf[end - v] = 0;
                if (safe_atou64(buf, &value) < 0 || (h->has_content_length && value != h->content_length))
                        h->bad_content_length = true;
                else {
                        h->content_length = value;
                        h->has_content_length = true;
                }
        } else if (IS("ETag"))
                copy_value(h->etag, v, (size_t) (end - v));
        else if (IS("x-amz-meta-" ARCHIVE_SHA256_METADATA) || IS("x-oss-meta-" ARCHIVE_SHA256_METADATA)) {
                copy_value(h->sha256, v, (size_t) (end - v));
                h->has_sha256 = true;
        } else if (IS("x-amz-server-side-encryption"))
                copy_value(h->encryption, v, (size_t) (end - v));
        else if (IS("x-amz-server-side-encryption-customer-algorithm"))
                h->customer_key = true;
#undef IS
}

bool response_headers_etag_is_opaque(const ResponseHeaders *h) {
        /* "aws:kms", "aws:kms:dsse"; "AES256" (SSE-S3) keeps the MD5. */
        return h->customer_key || strncasecmp(h->encryption, "aws:kms", 7) == 0;
}
