/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Strict RFC 4648 base64 (standard alphabet, canonical padding, no whitespace). */
#pragma once

#include <stddef.h>

size_t base64_encoded_size(size_t n);
/* Encode into out (base64_encoded_size(n) + 1 bytes, NUL-terminated). Returns the length. */
size_t base64_encode_to(const void *in, size_t n, char *out);
char *base64_encode(const void *in, size_t n);
/* Strict decode: -EINVAL on any non-alphabet byte, bad padding or non-zero trailing bits. */
int base64_decode(const char *in, size_t n, void **ret, size_t *ret_size);
/* Decoded size of a well-formed input, for checking limits before decoding. */
size_t base64_decoded_size_max(size_t n);
