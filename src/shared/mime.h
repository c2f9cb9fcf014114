/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Artifact MIME types from file names, as Python's mimetypes.guess_type() gives them. */
#pragma once

#include <stddef.h>

#include "macro.h"

/* The files Python's mimetypes reads, in its order (mimetypes.knownfiles); later ones win. */
#define MIME_TYPES_FILES                                                                         \
        ((const char *const[]) {                                                                 \
                "/etc/mime.types", "/etc/httpd/mime.types", "/etc/httpd/conf/mime.types",        \
                "/etc/apache/mime.types", "/etc/apache2/mime.types",                             \
                "/usr/local/etc/httpd/conf/mime.types", "/usr/local/lib/netscape/mime.types",   \
                "/usr/local/etc/httpd/conf/mime.types", "/usr/local/etc/mime.types", NULL })
/* A mime.types file bigger than this is refused (Debian's is 72 KiB). */
#define MIME_TYPES_FILE_MAX (4U << 20)

typedef struct MimeTypes MimeTypes;

/* Python's builtin table, overlaid by each file of the NULL-terminated 'files' that is a regular
 * file, in order, as mimetypes.init() does: a later definition of an extension replaces an
 * earlier one. Files that do not exist (or are not regular files) are skipped; one that cannot be
 * read, or is over MIME_TYPES_FILE_MAX, fails the whole load (-EFBIG, -EACCES, ...) and its name
 * is in *ret_failed (a pointer into 'files'), where the caller may fall back to the builtin table. */
int mime_types_load(const char *const *files, MimeTypes **ret, const char **ret_failed);
MimeTypes *mime_types_free(MimeTypes *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(MimeTypes *, mime_types_free);
/* How many extensions the table knows. */
size_t mime_types_size(const MimeTypes *m);

/* What Python's mimetypes.guess_type(name)[0] (strict) answers with the table 'm' (NULL: the
 * builtin table alone), or application/octet-stream where it answers None. Only the base name
 * counts. Compression suffixes are encodings (data.csv.gz is text/csv), .tgz is .tar.gz and so
 * on; extensions are compared in lower case. Never NULL; valid as long as 'm'. */
const char *mime_type_from_name(const MimeTypes *m, const char *name);
