/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* String helpers: stack concatenation, prefix tests, UTF-8 checks, constant-time compare. */
#pragma once

#include <alloca.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "macro.h"

/* Concatenate NULL-terminated list of strings on the stack (for short strings only). */
#define strjoina(a, ...)                                                        \
        ({                                                                      \
                const char *_list_[] = { a, __VA_ARGS__ };                      \
                size_t _len_ = 0;                                               \
                for (size_t _i_ = 0; _i_ < ELEMENTSOF(_list_) && _list_[_i_]; _i_++) \
                        _len_ += strlen(_list_[_i_]);                           \
                char *_buf_ = alloca(_len_ + 1), *_p_ = _buf_;                  \
                for (size_t _i_ = 0; _i_ < ELEMENTSOF(_list_) && _list_[_i_]; _i_++) \
                        _p_ = stpcpy(_p_, _list_[_i_]);                         \
                *_p_ = 0;                                                       \
                _buf_;                                                          \
        })

const char *startswith(const char *s, const char *prefix) _pure_;
bool endswith(const char *s, const char *suffix) _pure_;

/* Length of the valid UTF-8 sequence at s (1 ≤ n bytes), or 0 if invalid. */
size_t utf8_sequence_length(const unsigned char *s, size_t n) _pure_;
/* True if the buffer is valid UTF-8 (no overlongs, no surrogates, ≤ U+10FFFF). */
bool utf8_is_valid_n(const char *s, size_t n) _pure_;
/* Writes code point 'cp' (≤ U+10FFFF, no surrogate: the caller checked) as UTF-8; returns its
 * length, 1 to 4. */
size_t utf8_encode(uint32_t cp, char out[static 4]);

/* Copy of s with invalid UTF-8 sequences replaced by U+FFFD (like Python's errors="replace"). */
char *utf8_sanitize(const char *s, size_t n, size_t *ret_len);

/* Compare secrets in constant time (HMAC-SHA256 of both, then CRYPTO_memcmp). */
/* The value of a hex digit, either case; -EINVAL for anything else. */
int unhexchar(char c);
bool secret_equal(const char *a, size_t alen, const char *b, size_t blen);

char *hexmem(const void *p, size_t l);

/* RFC 9110 tokens (header names, methods): non-empty, tchar only. */
bool http_token_is_valid(const char *s) _pure_;
/* Header field values: no control characters but tab, so no CR/LF can split a request. */
bool http_field_value_is_valid(const char *s) _pure_;

/* NULL, or at most max bytes without control characters (one line of printable text). */
bool string_is_printable_line(const char *s, size_t max) _pure_;

/* SANDBOX_PRELOAD_MODULES: dotted identifiers separated by spaces, at most 4096 bytes. */
bool module_list_is_valid(const char *s) _pure_;

/* The characters of a name that may go anywhere in a request unescaped: an S3 region or service,
 * an OSS bucket (RFC 3986's unreserved set but '~'). */
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."

/* A non-empty name of NAME_CHARS only. */
static inline bool name_is_valid(const char *s) {
        return !isempty(s) && s[strspn(s, NAME_CHARS)] == 0;
}

/* ASCII A-Z to a-z in place, whatever the locale: header names, schemes and hosts. */
void ascii_strlower(char *s);

/* A blank of an HTTP header's value: a space or a tab. */
static inline bool char_is_blank(char c) {
        return c == ' ' || c == '\t';
}
