/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Strict RFC 4648 base64 (standard alphabet, canonical padding, no whitespace). */
#include <errno.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>

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

int base64_decode(const char *in, size_t n, void **ret, size_t *ret_size) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t pad = 0, o = 0;

        if (n % 4 != 0)
                return -EINVAL;
        if (n >= 1 && in[n - 1] == '=')
                pad++;
        if (n >= 2 && in[n - 2] == '=')
                pad++;

        buf = malloc(n / 4 * 3 + 1);
        if (!buf)
                return -ENOMEM;

        for (size_t i = 0; i < n; i += 4) {
                bool last = i + 4 == n;
                int a, b, c = 0, d = 0;

                a = unbase64char(in[i]);
                b = unbase64char(in[i + 1]);
                if (a < 0 || b < 0)
                        return -EINVAL;
                if (last && pad == 2) {
                        if (in[i + 2] != '=' || in[i + 3] != '=' || (b & 15) != 0)
                                return -EINVAL;
                        buf[o++] = (uint8_t) (a << 2 | b >> 4);
                        break;
                }
                c = unbase64char(in[i + 2]);
                if (c < 0)
                        return -EINVAL;
                if (last && pad == 1) {
                        if (in[i + 3] != '=' || (c & 3) != 0)
                                return -EINVAL;
                        buf[o++] = (uint8_t) (a << 2 | b >> 4);
                        buf[o++] = (uint8_t) ((b & 15) << 4 | c >> 2);
                        break;
                }
                d = unbase64char(in[i + 3]);
                if (d < 0)
                        return -EINVAL;
                buf[o++] = (uint8_t) (a << 2 | b >> 4);
                buf[o++] = (uint8_t) ((b & 15) << 4 | c >> 2);
                buf[o++] = (uint8_t) ((c & 3) << 6 | d);
        }
        buf[o] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = o;
        return 0;
}
