/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* multipart/form-data (RFC 7578), as far as the E2B SDKs send it for uploads: parts with a
 * Content-Disposition of form-data, a name and a filename. Hostile input: the parser reads the
 * buffered body once, copies nothing but the names, and bounds the parts and their headers. */
#pragma once

#include <stddef.h>

#define MULTIPART_PARTS_MAX 100U
#define MULTIPART_HEADERS_MAX (8U * 1024U) /* the header section of one part */
#define MULTIPART_NAME_MAX 4096U /* a name or filename, decoded */

typedef struct MultipartPart {
        char *name; /* the form field's name, owned */
        char *filename; /* owned; NULL if the part has none */
        const char *data; /* into the body */
        size_t size;
} MultipartPart;

typedef struct MultipartForm {
        MultipartPart parts[MULTIPART_PARTS_MAX];
        size_t n;
} MultipartForm;

void multipart_form_done(MultipartForm *f);

/* The boundary of a Content-Type "multipart/form-data; boundary=..." (quoted or not), at most 70
 * characters (RFC 2046): a new string, -EINVAL if there is none or the type is another. */
int multipart_boundary(const char *content_type, char **ret);

/* Splits 'n' bytes of 'body' into *ret's parts. -EBADMSG for a body that is not well formed
 * (no closing delimiter, a part without Content-Disposition form-data and a name, a name with a
 * NUL or a control character), -E2BIG past the bounds. Call multipart_form_done() on failure too. */
int multipart_parse(const char *boundary, const char *body, size_t n, MultipartForm *ret);
