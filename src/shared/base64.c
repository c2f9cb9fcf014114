/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Base64 of the standard alphabet, decoded as Python's b64decode(validate=True) decodes it. */
#include <errno.h>
#include <stdint.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/types.h>

#include "base64.h"
#include "macro.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_size(size_t n) {
        return (n + 2) / 3 * 4;
}

size_t base64_decoded_size_max(size_t n) {
        return n / 4 * 3;
}

size_t base64_encode_to(const void *in, size_t n, char *out) {
        const uint8_t *p = in;
        char *o = out;
        size_t i;

        for (i = 0; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8 | p[i + 2];
                *o++ = alphabet[v >> 18 & 63];
                *o++ = alphabet[v >> 12 & 63];
                *o++ = alphabet[v >> 6 & 63];
                *o++ = alphabet[v & 63];
        }
        if (n - i == 1) {
                uint32_t v = (uint32_t) p[i] << 16;
                *o++ = alphabet[v >> 18 & 63];
                *o++ = alphabet[v >> 12 & 63];
                *o++ = '=';
                *o++ = '=';
        } else if (n - i == 2) {
                uint32_t v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8;
                *o++ = alphabet[v >> 18 & 63];
                *o++ = alphabet[v >> 12 & 63];
                *o++ = alphabet[v >> 6 & 63];
                *o++ = '=';
        }
        *o = 0;
        return (size_t) (o - out);
}

char *base64_encode(const void *in, size_t n) {
        char *out = malloc(base64_encoded_size(n) + 1);
        if (!out)
                return NULL;
        base64_encode_to(in, n, out);
        return out;
}

static int unbase64char(char c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -EINVAL;
}

/* What Python's base64.b64decode(s, validate=True) (binascii.a2b_base64 in strict mode) accepts:
 * alphabet characters, then '=' only; no leading '='; data of 4k+1 characters never; 4k+2 exactly
 * "==", 4k+3 exactly "=", 4k any run of '=' (CPython ignores it). Bits after the last byte are not
 * checked ("QR==" is "A"). Returns the number of data characters, or -EINVAL. */
static ssize_t base64_data_length(const char *in, size_t n) {
        size_t d = 0, pad;

        while (d < n && unbase64char(in[d]) >= 0)
                d++;
        for (pad = d; pad < n; pad++)
                if (in[pad] != '=')
                        return -EINVAL;
        pad = n - d;
        if (d == 0 && pad > 0)
                return -EINVAL;
        switch (d % 4) {
        case 1:
                return -EINVAL;
        case 2:
                if (pad != 2)
                        return -EINVAL;
                break;
        case 3:
                if (pad != 1)
                        return -EINVAL;
                break;
        }
        if (d > SSIZE_MAX)
                return -EINVAL;
        return (ssize_t) d;
}

static size_t base64_data_decoded_size(size_t d) {
        return d / 4 * 3 + (d % 4 == 0 ? 0 : d % 4 - 1);
}

int base64_validate(const char *in, size_t n, size_t *ret_used, size_t *ret_decoded_size) {
        ssize_t d = base64_data_length(in, n);

        if (d < 0)
                return (int) d;
        /* The data and the padding its last quantum needs; what follows is '=' CPython skips. */
        if (ret_used)
                *ret_used = (size_t) d + (d % 4 == 0 ? 0 : 4 - d % 4);
        if (ret_decoded_size)
                *ret_decoded_size = base64_data_decoded_size((size_t) d);
        return 0;
}

size_t base64_decoded_size(const char *in, size_t n) {
        size_t d = n;

        while (d > 0 && in[d - 1] == '=')
                d--;
        return base64_data_decoded_size(d);
}

int base64_decode(const char *in, size_t n, void **ret, size_t *ret_size) {
        _cleanup_free_ uint8_t *buf = NULL;
        ssize_t d;
        size_t i, o = 0;
        uint32_t v;

        d = base64_data_length(in, n);
        if (d < 0)
                return (int) d;

        buf = malloc(base64_data_decoded_size((size_t) d) + 1);
        if (!buf)
                return -ENOMEM;

        for (i = 0; i + 4 <= (size_t) d; i += 4) {
                v = (uint32_t) unbase64char(in[i]) << 18 | (uint32_t) unbase64char(in[i + 1]) << 12 |
                    (uint32_t) unbase64char(in[i + 2]) << 6 | (uint32_t) unbase64char(in[i + 3]);
                buf[o++] = (uint8_t) (v >> 16);
                buf[o++] = (uint8_t) (v >> 8);
                buf[o++] = (uint8_t) v;
        }
        if ((size_t) d - i >= 2) {
                v = (uint32_t) unbase64char(in[i]) << 18 | (uint32_t) unbase64char(in[i + 1]) << 12;
                if ((size_t) d - i == 3)
                        v |= (uint32_t) unbase64char(in[i + 2]) << 6;
                buf[o++] = (uint8_t) (v >> 16);
                if ((size_t) d - i == 3)
                        buf[o++] = (uint8_t) (v >> 8);
        }
        buf[o] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = o;
        return 0;
}
