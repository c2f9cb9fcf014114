/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* S3/OSS ListObjectsV2 pages: the XML text of what we use, decoded and checked, within fixed bounds. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Listings come from an endpoint the client chose: hostile input. Pure functions, linear in the size
 * of the body (which the transfer already bounds, TRANSFER_BODY_MAX); errors are negative errno values
 * and ret_ parameters are written on success only:
 *   -EBADMSG  malformed: a '&' that starts no valid reference, a '%' without two hex digits, a page
 *             with more entries than asked for, a truncated page without a usable token
 *   -ERANGE   a character reference to no character: 0 (NUL), a surrogate, beyond U+10FFFF
 *   -EILSEQ   a decoded key that is not UTF-8 or contains a NUL */

/* What we ask for per page, and so the most a page may hold (S3 never returns more than max-keys). */
#define S3_LISTING_ENTRIES_MAX 1000
/* Continuation tokens go back into the next request's URL: AWS's are ~100 bytes, MinIO's carry a key. */
#define S3_LISTING_TOKEN_MAX 4096U
/* "&#x10FFFF;" is 10; leading zeros are allowed by XML but not without end. */
#define XML_CHAR_REF_MAX 16U

/* XML character data: the five predefined entities and numeric character references (&#N; &#xH;)
 * decoded to UTF-8. XML 1.0 forbids most C0 controls even as references, but S3 writes them that way
 * (&#x1;), so any code point from U+0001 to U+10FFFF but the surrogates is accepted. */
int xml_text_decode(const char *s, size_t n, char **ret);

/* The text of the first <tag>…</tag> in [p, end), decoded: 1 and *ret set when found, 0 and *ret NULL
 * when absent. ret_after (optional) points past the closing tag when found. */
int xml_find_text(const char *p, const char *end, const char *tag, char **ret, const char **ret_after);

/* Percent-decodes a value that S3 sent with encoding-type=url ('+' is a space there, a literal '+'
 * comes as %2B). The result is UTF-8 without NULs. */
int s3_url_decode(const char *s, size_t n, char **ret);

typedef struct S3ListingEntry {
        char *key;
        int64_t modified;             /* Unix seconds; -1: missing or unparsable (never collected) */
        uint64_t size;                /* 0 when missing or unparsable */
} S3ListingEntry;

typedef struct S3Listing {
        S3ListingEntry *entries;
        size_t n_entries;
        bool truncated;
        char *continuation;           /* NextContinuationToken as sent (opaque, never URL-decoded) */
} S3Listing;

void s3_listing_done(S3Listing *l);

/* Parses one page. Keys are URL-decoded when the page says <EncodingType>url</EncodingType> (servers
 * that ignore the parameter send them as they are, and '%' is a valid key character). On failure
 * *ret_error (optional) says what was wrong, for the log: a static string. */
int s3_listing_parse(const char *body, size_t size, S3Listing *ret, const char **ret_error);
