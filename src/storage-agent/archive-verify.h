/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the agent checks of the archives it stores and fetches: MD5 and SHA-256 of a spool file computed
 * a slice at a time on the event loop, ETags, and the few response headers an archive transfer needs. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

/* At most this much is read and hashed per event loop iteration: a 200 MiB archive never holds up bus
 * calls or other transfers for longer than one slice takes. */
#define ARCHIVE_DIGEST_SLICE (256U * 1024U)
#define ARCHIVE_MD5_SIZE 16
#define ARCHIVE_SHA256_SIZE 32
#define ARCHIVE_SHA256_HEX_LEN (2 * ARCHIVE_SHA256_SIZE)

/* The user metadata our uploads carry: the hex SHA-256 of the archive ("x-amz-meta-" / "x-oss-meta-"
 * in front on the wire). Objects written by others (the upstream sidecar) have none. */
#define ARCHIVE_SHA256_METADATA "scopebox-sha256"

typedef struct ArchiveDigest ArchiveDigest;

/* error: 0 when the sums are ready (archive_digest_md5() etc.), else a negative errno (-ENODATA: the
 * file is shorter than the size to hash). The digest may be freed in the callback. */
typedef void (*ArchiveDigestCallback)(ArchiveDigest *d, int error, void *userdata);

/* Hashes bytes [0, size) of fd (borrowed: it must stay open until the digest is done or freed). */
int archive_digest_new(int fd, uint64_t size, ArchiveDigest **ret);
ArchiveDigest *archive_digest_free(ArchiveDigest *d);

/* One slice: 0 with more to do, 1 when done (the sums are ready), a negative errno on failure. The
 * state machine itself, for callers that drive it (and for the unit test). */
int archive_digest_step(ArchiveDigest *d);

/* Runs the steps from an idle-priority defer source of 'event' (everything else pending is dispatched
 * first), then calls cb once. */
int archive_digest_start(ArchiveDigest *d, sd_event *event, ArchiveDigestCallback cb, void *userdata);

/* The sums, once done. */
const uint8_t *archive_digest_md5(const ArchiveDigest *d);
const uint8_t *archive_digest_sha256(const ArchiveDigest *d);
uint64_t archive_digest_size(const ArchiveDigest *d);
/* How much has been hashed so far. */
uint64_t archive_digest_progress(const ArchiveDigest *d);

/* Whether an ETag is a plain MD5 of the body (a quoted or bare 32 hex digits; multipart and other
 * composite ETags are not) and if so whether it is this one, case-insensitively: 1 same, 0 different,
 * -EINVAL not a plain MD5 (nothing to compare). */
int etag_matches_md5(const char *etag, const uint8_t md5[static ARCHIVE_MD5_SIZE]);

/* Whether two strong ETags name the same object version: equal but for their quotes and the case of
 * their hex digits (OSS writes them in upper case). Weak or empty ones never are. */
bool etag_equal(const char *a, const char *b);

/* Whether s is exactly 64 hex digits naming this SHA-256 (case-insensitive). */
bool sha256_hex_matches(const char *s, const uint8_t sha256[static ARCHIVE_SHA256_SIZE]);

/* The response headers a transfer keeps (values truncated to RESPONSE_HEADER_VALUE_MAX - 1 bytes,
 * which no value we compare can reach). A status line starts over: only the final response counts
 * (a "100 Continue" or a redirect before it is forgotten). */
#define RESPONSE_HEADER_VALUE_MAX 160

typedef struct ResponseHeaders {
        long status;                                  /* of the status line, 0 until one was seen */
        bool has_content_length;
        /* present but not a number, or given twice differently */
        bool bad_content_length;
        uint64_t content_length;
        char etag[RESPONSE_HEADER_VALUE_MAX];
        char sha256[RESPONSE_HEADER_VALUE_MAX];       /* x-amz-meta- / x-oss-meta-scopebox-sha256 */
        bool has_sha256;
        char encryption[RESPONSE_HEADER_VALUE_MAX];   /* x-amz-server-side-encryption */
        bool customer_key;                            /* x-amz-server-side-encryption-customer-algorithm */
} ResponseHeaders;

/* Feeds one header line as libcurl's CURLOPT_HEADERFUNCTION hands it over (CRLF included, not
 * NUL-terminated). Lines without a colon other than status lines are ignored. */
void response_headers_feed(ResponseHeaders *h, const char *line, size_t n);

/* Whether the server stores the object encrypted with a key of its own or the client's (SSE-KMS,
 * SSE-C): then its ETag is not the MD5 of the body and says nothing. */
bool response_headers_etag_is_opaque(const ResponseHeaders *h);
