/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Base64 of the standard alphabet, decoded as Python's b64decode(validate=True) decodes it. */
#pragma once

#include <stddef.h>

size_t base64_encoded_size(size_t n);
/* Encode into out (base64_encoded_size(n) + 1 bytes, NUL-terminated). Returns the length. */
size_t base64_encode_to(const void *in, size_t n, char *out);
char *base64_encode(const void *in, size_t n);
/* Decodes what Python's base64.b64decode(s, validate=True) accepts, and only that: -EINVAL on
 * any byte outside the alphabet and '=' (whitespace, NUL, the URL-safe alphabet), '=' before
 * data, data after '=', a missing or short padding, 4k+1 data characters. Bits after the last
 * byte are ignored ("QR==" is "A"), and so are extra '=' after a complete quantum ("QUJD=="). */
int base64_decode(const char *in, size_t n, void **ret, size_t *ret_size);
/* Checks the text as base64_decode() would (0 or -EINVAL) without decoding. On success, the
 * length of its meaningful part (the data and the padding its last quantum needs; a decoder may
 * stop there, only '=' follows) and the decoded size. */
int base64_validate(const char *in, size_t n, size_t *ret_used, size_t *ret_decoded_size);
/* Decoded size of the text if it is valid, from its length and trailing '=' alone. */
size_t base64_decoded_size(const char *in, size_t n);
/* An upper bound of the decoded size of any valid text of n bytes. */
size_t base64_decoded_size_max(size_t n);
