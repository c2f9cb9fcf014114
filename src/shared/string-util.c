/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* String helpers: stack concatenation, prefix tests, UTF-8 checks, constant-time compare. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "string-util.h"

const char *startswith(const char *s, const char *prefix) {
        size_t l = strlen(prefix);
        return strncmp(s, prefix, l) == 0 ? s + l : NULL;
}

bool endswith(const char *s, const char *suffix) {
        size_t sl = strlen(s), xl = strlen(suffix);
        return sl >= xl && memcmp(s + sl - xl, suffix, xl) == 0;
}

size_t utf8_sequence_length(const unsigned char *s, size_t n) {
        uint32_t cp;
        size_t len;

        if (s[0] < 0x80)
                return 1;
        if (s[0] >= 0xc2 && s[0] <= 0xdf)
                len = 2, cp = s[0] & 0x1f;
        else if (s[0] >= 0xe0 && s[0] <= 0xef)
                len = 3, cp = s[0] & 0x0f;
        else if (s[0] >= 0xf0 && s[0] <= 0xf4)
                len = 4, cp = s[0] & 0x07;
        else
                return 0;
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

bool utf8_is_valid_n(const char *s, size_t n) {
        const unsigned char *p = (const unsigned char *) s;
        while (n > 0) {
                size_t l = utf8_sequence_length(p, n);
                if (l == 0)
                        return false;
                p += l;
                n -= l;
        }
        return true;
}

char *utf8_sanitize(const char *s, size_t n, size_t *ret_len) {
        const unsigned char *p = (const unsigned char *) s;
        char *out, *o;

        /* Worst case every byte becomes a 3-byte U+FFFD. */
        out = malloc(n * 3 + 1);
        if (!out)
                return NULL;
        o = out;
        while (n > 0) {
                size_t l = utf8_sequence_length(p, n);
                if (l == 0) {
                        memcpy(o, "\xef\xbf\xbd", 3);
                        o += 3;
                        l = 1;
                } else {
                        memcpy(o, p, l);
                        o += l;
                }
                p += l;
                n -= l;
        }
        *o = 0;
        if (ret_len)
                *ret_len = (size_t) (o - out);
        return out;
}

bool secret_equal(const char *a, size_t alen, const char *b, size_t blen) {
        static unsigned char key[32];
        static bool key_ready = false;
        unsigned char ha[EVP_MAX_MD_SIZE], hb[EVP_MAX_MD_SIZE];
        unsigned la = 0, lb = 0;

        /* Hash both sides under a random per-process key so that neither the length nor the
         * content of the expected value influences the time taken by the comparison. */
        if (!key_ready) {
                if (RAND_bytes(key, sizeof(key)) != 1)
                        return false;
                key_ready = true;
        }
        if (!HMAC(EVP_sha256(), key, sizeof(key), (const unsigned char *) a, alen, ha, &la) ||
            !HMAC(EVP_sha256(), key, sizeof(key), (const unsigned char *) b, blen, hb, &lb))
                return false;
        return la == lb && CRYPTO_memcmp(ha, hb, la) == 0;
}

char *hexmem(const void *p, size_t l) {
        static const char table[] = "0123456789abcdef";
        const uint8_t *x = p;
        char *r = malloc(l * 2 + 1);
        if (!r)
                return NULL;
        for (size_t i = 0; i < l; i++) {
                r[i * 2] = table[x[i] >> 4];
                r[i * 2 + 1] = table[x[i] & 15];
        }
        r[l * 2] = 0;
        return r;
}

static bool http_tchar(char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                (c && strchr("!#$%&'*+-.^_`|~", c));
}

bool http_token_is_valid(const char *s) {
        if (!s || !*s)
                return false;
        for (; *s; s++)
                if (!http_tchar(*s))
                        return false;
        return true;
}

bool http_field_value_is_valid(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
                        return false;
        return true;
}

bool string_is_printable_line(const char *s, size_t max) {
        if (!s)
                return true;
        if (strlen(s) > max)
                return false;
        for (const char *c = s; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        return false;
        return true;
}

bool module_list_is_valid(const char *s) {
        if (strlen(s) > 4096)
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '_' || *c == '.' || *c == ' '))
                        return false;
        return true;
}

size_t utf8_encode(uint32_t cp, char out[static 4]) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xc0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xe0 | (cp >> 12));
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
                out[2] = (char) (0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char) (0xf0 | (cp >> 18));
        out[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char) (0x80 | (cp & 0x3f));
        return 4;
}

void ascii_strlower(char *s) {
        for (; *s; s++)
                if (*s >= 'A' && *s <= 'Z')
                        *s = (char) (*s - 'A' + 'a');
}

int unhexchar(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -EINVAL;
}
