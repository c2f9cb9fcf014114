/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ListObjectsV2 pages: XML character data and encoding-type=url keys decoded, bounded and validated. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "macro.h"
#include "s3-listing.h"
#include "string-util.h"

/* The reference "name" between '&' and ';' (both excluded), written to out as UTF-8; returns the bytes
 * written. */
static int decode_reference(const char *name, size_t l, char *out) {
        static const struct {
                const char *name;
                char c;
        } predefined[] = { { "amp", '&' }, { "lt", '<' }, { "gt", '>' }, { "quot", '"' }, { "apos", '\'' } };
        _cleanup_free_ char *digits = NULL;
        unsigned long big;
        uint32_t v;
        bool hex;
        size_t i;

        if (l == 0)
                return -EBADMSG;
        if (name[0] != '#') {
                for (i = 0; i < ELEMENTSOF(predefined); i++)
                        if (strlen(predefined[i].name) == l && strneq(name, predefined[i].name, l)) {
                                out[0] = predefined[i].c;
                                return 1;
                        }
                return -EBADMSG; /* no DTD, so no other named entities */
        }

        /* XML writes the hex form with a lowercase 'x' only. The digits are checked first (strtoul()
         * would take a sign or blanks), and ';' ends the run strspn() counts. */
        hex = l > 1 && name[1] == 'x';
        i = hex ? 2 : 1;
        if (i == l || strspn(name + i, hex ? "0123456789abcdefABCDEF" : "0123456789") < l - i)
                return -EBADMSG;
        digits = strndup(name + i, l - i);
        if (!digits)
                return -ENOMEM;
        errno = 0;
        big = strtoul(digits, NULL, hex ? 16 : 10);
        if (errno == ERANGE || big > 0x10ffff)
                return -ERANGE;
        v = (uint32_t) big;
        if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
                return -ERANGE;
        return (int) utf8_encode(v, out);
}

int xml_text_decode(const char *s, size_t n, char **ret) {
        _cleanup_free_ char *out = NULL;
        size_t o = 0;

        if (!s || !ret)
                return -EINVAL;
        if (memchr(s, 0, n))
                return -EILSEQ;
        /* Every reference is at least as long as what it stands for: n bytes are enough. */
        out = malloc(n + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n;) {
                const char *semi;
                int k;

                if (s[i] != '&') {
                        out[o++] = s[i++];
                        continue;
                }
                semi = memchr(s + i + 1, ';', MIN(n - i - 1, (size_t) XML_CHAR_REF_MAX));
                if (!semi)
                        return -EBADMSG;
                k = decode_reference(s + i + 1, (size_t) (semi - s - i - 1), out + o);
                if (k < 0)
                        return k;
                o += (size_t) k;
                i = (size_t) (semi - s) + 1;
        }
        out[o] = 0;
        if (!utf8_is_valid_n(out, o))
                return -EILSEQ;
        *ret = TAKE_PTR(out);
        return 0;
}

int xml_find_text(const char *p, const char *end, const char *tag, char **ret, const char **ret_after) {
        char open_tag[64], close_tag[64];
        const char *a, *b = NULL;
        int r;

        if (!p || !end || end < p || !tag || !ret ||
            snprintf(open_tag, sizeof(open_tag), "<%s>", tag) >= (int) sizeof(open_tag) ||
            snprintf(close_tag, sizeof(close_tag), "</%s>", tag) >= (int) sizeof(close_tag))
                return -EINVAL;
        a = memmem(p, (size_t) (end - p), open_tag, strlen(open_tag));
        if (a) {
                a += strlen(open_tag);
                b = memmem(a, (size_t) (end - a), close_tag, strlen(close_tag));
        }
        if (!a || !b) {
                *ret = NULL;
                return 0;
        }
        r = xml_text_decode(a, (size_t) (b - a), ret);
        if (r < 0)
                return r;
        if (ret_after)
                *ret_after = b + strlen(close_tag);
        return 1;
}

int s3_url_decode(const char *s, size_t n, char **ret) {
        _cleanup_free_ char *plain = NULL, *out = NULL;
        char *decoded;
        int len;

        if (!s || !ret || n > (size_t) INT32_MAX)
                return -EINVAL;
        /* libcurl passes a '%' without two hex digits through as it is: that is no key S3 encoded. */
        for (size_t i = 0; i < n; i++)
                if (s[i] == '%' && (i + 2 >= n || !isxdigit((unsigned char) s[i + 1]) ||
                                    !isxdigit((unsigned char) s[i + 2])))
                        return -EBADMSG;
        plain = strndup(s, n);
        if (!plain)
                return -ENOMEM;
        /* Form encoding: S3 writes a space as '+', and a '+' of the key as %2B. */
        for (char *c = plain; *c; c++)
                if (*c == '+')
                        *c = ' ';
        /* The handle is only used for its (ignored) settings since libcurl 7.82: NULL is fine. */
        decoded = curl_easy_unescape(NULL, plain, (int) strlen(plain), &len);
        if (!decoded)
                return -ENOMEM;
        out = len >= 0 ? strndup(decoded, (size_t) len) : NULL;
        curl_free(decoded);
        if (!out)
                return -ENOMEM;
        if (strlen(out) != (size_t) len || !utf8_is_valid_n(out, (size_t) len))
                return -EILSEQ;
        *ret = TAKE_PTR(out);
        return 0;
}

void s3_listing_done(S3Listing *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n_entries; i++)
                free(l->entries[i].key);
        free(l->entries);
        free(l->continuation);
        *l = (S3Listing) {};
}

static const char *reason_of(int r) {
        switch (r) {
        case -EBADMSG:
                return "a malformed character reference or %-escape";
        case -ERANGE:
                return "a character reference to no valid character (NUL, a surrogate, beyond U+10FFFF)";
        case -EILSEQ:
                return "text that is not UTF-8 or contains a NUL";
        default:
                return "an unreadable element";
        }
}

static bool parse_size(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (isempty(s) || strlen(s) > 19 || strspn(s, "0123456789") != strlen(s))
                return false;
        for (; *s; s++)
                v = v * 10 + (uint64_t) (*s - '0');
        *ret = v;
        return true;
}

static int64_t parse_modified(const char *s) {
        struct tm tm = {};
        time_t t;

        /* "2024-03-01T12:34:56.000Z": whole seconds are enough for an age cutoff. */
        if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
                return -1;
        t = timegm(&tm);
        return t < 0 ? -1 : (int64_t) t;
}

int s3_listing_parse(const char *body, size_t size, S3Listing *ret, const char **ret_error) {
        _cleanup_(s3_listing_done) S3Listing l = {};
        _cleanup_free_ char *encoding = NULL, *truncated = NULL;
        const char *p = body, *end = body + size, *error = NULL;
        bool url;
        int r;

        if (!body || !ret)
                return -EINVAL;
        /* A NUL would end every C string early: keys cut short, entries lost. */
        if (memchr(body, 0, size)) {
                error = "a NUL byte";
                r = -EILSEQ;
                goto fail;
        }
        r = xml_find_text(body, end, "EncodingType", &encoding, NULL);
        if (r < 0) {
                error = reason_of(r);
                goto fail;
        }
        url = encoding && streq(encoding, "url");

        l.entries = calloc(S3_LISTING_ENTRIES_MAX, sizeof(S3ListingEntry));
        if (!l.entries)
                return -ENOMEM;
        for (;;) {
                _cleanup_free_ char *key = NULL, *modified = NULL, *size_text = NULL;
                const char *cs, *ce;
                S3ListingEntry *e;

                cs = memmem(p, (size_t) (end - p), "<Contents>", 10);
                if (!cs)
                        break;
                ce = memmem(cs, (size_t) (end - cs), "</Contents>", 11);
                if (!ce)
                        break;
                p = ce + 11;
                r = xml_find_text(cs, ce, "Key", &key, NULL);
                if (r < 0) {
                        error = reason_of(r);
                        goto fail;
                }
                if (!key)
                        continue;
                if (l.n_entries >= S3_LISTING_ENTRIES_MAX) {
                        error = "more entries than asked for";
                        r = -EBADMSG;
                        goto fail;
                }
                if (url) {
                        _cleanup_free_ char *decoded = NULL;
                        r = s3_url_decode(key, strlen(key), &decoded);
                        if (r < 0) {
                                error = reason_of(r);
                                goto fail;
                        }
                        free(key);
                        key = TAKE_PTR(decoded);
                }
                /* Unreadable dates and sizes only make an entry unknown (kept), never the page fail. */
                (void) xml_find_text(cs, ce, "LastModified", &modified, NULL);
                (void) xml_find_text(cs, ce, "Size", &size_text, NULL);
                e = l.entries + l.n_entries++;
                e->key = TAKE_PTR(key);
                e->modified = parse_modified(modified);
                if (!size_text || !parse_size(size_text, &e->size))
                        e->size = 0;
        }

        r = xml_find_text(body, end, "IsTruncated", &truncated, NULL);
        if (r >= 0)
                l.truncated = truncated && streq(truncated, "true");
        if (r >= 0 && l.truncated)
                r = xml_find_text(body, end, "NextContinuationToken", &l.continuation, NULL);
        if (r < 0) {
                error = reason_of(r);
                goto fail;
        }
        if (l.continuation && (isempty(l.continuation) || strlen(l.continuation) > S3_LISTING_TOKEN_MAX)) {
                error = "an empty or overlong continuation token";
                r = -EBADMSG;
                goto fail;
        }
        /* A truncated page without a token: there is no way on, and no looping on the same page. */
        if (l.truncated && !l.continuation)
                l.truncated = false;

        *ret = l;
        l = (S3Listing) {};
        return 0;
fail:
        if (ret_error)
                *ret_error = error;
        return r;
}
