/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Artifact MIME types from file names, as Python's mimetypes.guess_type() gives them. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc-util.h"
#include "io-util.h"
#include "macro.h"
#include "mime.h"

#define MIME_OCTET_STREAM "application/octet-stream"
/* No file name has a longer extension (NAME_MAX is 255): longer keys can never match. */
#define MIME_EXT_MAX 255

typedef struct MimeEntry {
        const char *ext;  /* without the dot, as written: only lower-case ones can ever match */
        const char *type;
        size_t order;     /* of definition: the last one of an extension wins */
} MimeEntry;

struct MimeTypes {
        MimeEntry *entries; /* sorted by ext, one per ext */
        size_t n_entries;
        char **buffers;     /* the files' contents, which the entries point into */
        size_t n_buffers;
};

/* Python 3.11's mimetypes._types_map_default, sorted by extension. */
static const MimeEntry builtin_types[] = {
        { .ext = "3g2", .type = "audio/3gpp2" },
        { .ext = "3gp", .type = "audio/3gpp" },
        { .ext = "3gpp", .type = "audio/3gpp" },
        { .ext = "3gpp2", .type = "audio/3gpp2" },
        { .ext = "a", .type = "application/octet-stream" },
        { .ext = "aac", .type = "audio/aac" },
        { .ext = "adts", .type = "audio/aac" },
        { .ext = "ai", .type = "application/postscript" },
        { .ext = "aif", .type = "audio/x-aiff" },
        { .ext = "aifc", .type = "audio/x-aiff" },
        { .ext = "aiff", .type = "audio/x-aiff" },
        { .ext = "ass", .type = "audio/aac" },
        { .ext = "au", .type = "audio/basic" },
        { .ext = "avi", .type = "video/x-msvideo" },
        { .ext = "avif", .type = "image/avif" },
        { .ext = "bat", .type = "text/plain" },
        { .ext = "bcpio", .type = "application/x-bcpio" },
        { .ext = "bin", .type = "application/octet-stream" },
        { .ext = "bmp", .type = "image/bmp" },
        { .ext = "c", .type = "text/plain" },
        { .ext = "cdf", .type = "application/x-netcdf" },
        { .ext = "cpio", .type = "application/x-cpio" },
        { .ext = "csh", .type = "application/x-csh" },
        { .ext = "css", .type = "text/css" },
        { .ext = "csv", .type = "text/csv" },
        { .ext = "dll", .type = "application/octet-stream" },
        { .ext = "doc", .type = "application/msword" },
        { .ext = "dot", .type = "application/msword" },
        { .ext = "dvi", .type = "application/x-dvi" },
        { .ext = "eml", .type = "message/rfc822" },
        { .ext = "eps", .type = "application/postscript" },
        { .ext = "etx", .type = "text/x-setext" },
        { .ext = "exe", .type = "application/octet-stream" },
        { .ext = "gif", .type = "image/gif" },
        { .ext = "gtar", .type = "application/x-gtar" },
        { .ext = "h", .type = "text/plain" },
        { .ext = "h5", .type = "application/x-hdf5" },
        { .ext = "hdf", .type = "application/x-hdf" },
        { .ext = "heic", .type = "image/heic" },
        { .ext = "heif", .type = "image/heif" },
        { .ext = "htm", .type = "text/html" },
        { .ext = "html", .type = "text/html" },
        { .ext = "ico", .type = "image/vnd.microsoft.icon" },
        { .ext = "ief", .type = "image/ief" },
        { .ext = "jpe", .type = "image/jpeg" },
        { .ext = "jpeg", .type = "image/jpeg" },
        { .ext = "jpg", .type = "image/jpeg" },
        { .ext = "js", .type = "application/javascript" },
        { .ext = "json", .type = "application/json" },
        { .ext = "ksh", .type = "text/plain" },
        { .ext = "latex", .type = "application/x-latex" },
        { .ext = "loas", .type = "audio/aac" },
        { .ext = "m1v", .type = "video/mpeg" },
        { .ext = "m3u", .type = "application/vnd.apple.mpegurl" },
        { .ext = "m3u8", .type = "application/vnd.apple.mpegurl" },
        { .ext = "man", .type = "application/x-troff-man" },
        { .ext = "me", .type = "application/x-troff-me" },
        { .ext = "mht", .type = "message/rfc822" },
        { .ext = "mhtml", .type = "message/rfc822" },
        { .ext = "mif", .type = "application/x-mif" },
        { .ext = "mjs", .type = "application/javascript" },
        { .ext = "mov", .type = "video/quicktime" },
        { .ext = "movie", .type = "video/x-sgi-movie" },
        { .ext = "mp2", .type = "audio/mpeg" },
        { .ext = "mp3", .type = "audio/mpeg" },
        { .ext = "mp4", .type = "video/mp4" },
        { .ext = "mpa", .type = "video/mpeg" },
        { .ext = "mpe", .type = "video/mpeg" },
        { .ext = "mpeg", .type = "video/mpeg" },
        { .ext = "mpg", .type = "video/mpeg" },
        { .ext = "ms", .type = "application/x-troff-ms" },
        { .ext = "n3", .type = "text/n3" },
        { .ext = "nc", .type = "application/x-netcdf" },
        { .ext = "nq", .type = "application/n-quads" },
        { .ext = "nt", .type = "application/n-triples" },
        { .ext = "nws", .type = "message/rfc822" },
        { .ext = "o", .type = "application/octet-stream" },
        { .ext = "obj", .type = "application/octet-stream" },
        { .ext = "oda", .type = "application/oda" },
        { .ext = "opus", .type = "audio/opus" },
        { .ext = "p12", .type = "application/x-pkcs12" },
        { .ext = "p7c", .type = "application/pkcs7-mime" },
        { .ext = "pbm", .type = "image/x-portable-bitmap" },
        { .ext = "pdf", .type = "application/pdf" },
        { .ext = "pfx", .type = "application/x-pkcs12" },
        { .ext = "pgm", .type = "image/x-portable-graymap" },
        { .ext = "pl", .type = "text/plain" },
        { .ext = "png", .type = "image/png" },
        { .ext = "pnm", .type = "image/x-portable-anymap" },
        { .ext = "pot", .type = "application/vnd.ms-powerpoint" },
        { .ext = "ppa", .type = "application/vnd.ms-powerpoint" },
        { .ext = "ppm", .type = "image/x-portable-pixmap" },
        { .ext = "pps", .type = "application/vnd.ms-powerpoint" },
        { .ext = "ppt", .type = "application/vnd.ms-powerpoint" },
        { .ext = "ps", .type = "application/postscript" },
        { .ext = "pwz", .type = "application/vnd.ms-powerpoint" },
        { .ext = "py", .type = "text/x-python" },
        { .ext = "pyc", .type = "application/x-python-code" },
        { .ext = "pyo", .type = "application/x-python-code" },
        { .ext = "qt", .type = "video/quicktime" },
        { .ext = "ra", .type = "audio/x-pn-realaudio" },
        { .ext = "ram", .type = "application/x-pn-realaudio" },
        { .ext = "ras", .type = "image/x-cmu-raster" },
        { .ext = "rdf", .type = "application/xml" },
        { .ext = "rgb", .type = "image/x-rgb" },
        { .ext = "roff", .type = "application/x-troff" },
        { .ext = "rtx", .type = "text/richtext" },
        { .ext = "sgm", .type = "text/x-sgml" },
        { .ext = "sgml", .type = "text/x-sgml" },
        { .ext = "sh", .type = "application/x-sh" },
        { .ext = "shar", .type = "application/x-shar" },
        { .ext = "snd", .type = "audio/basic" },
        { .ext = "so", .type = "application/octet-stream" },
        { .ext = "src", .type = "application/x-wais-source" },
        { .ext = "srt", .type = "text/plain" },
        { .ext = "sv4cpio", .type = "application/x-sv4cpio" },
        { .ext = "sv4crc", .type = "application/x-sv4crc" },
        { .ext = "svg", .type = "image/svg+xml" },
        { .ext = "swf", .type = "application/x-shockwave-flash" },
        { .ext = "t", .type = "application/x-troff" },
        { .ext = "tar", .type = "application/x-tar" },
        { .ext = "tcl", .type = "application/x-tcl" },
        { .ext = "tex", .type = "application/x-tex" },
        { .ext = "texi", .type = "application/x-texinfo" },
        { .ext = "texinfo", .type = "application/x-texinfo" },
        { .ext = "tif", .type = "image/tiff" },
        { .ext = "tiff", .type = "image/tiff" },
        { .ext = "tr", .type = "application/x-troff" },
        { .ext = "trig", .type = "application/trig" },
        { .ext = "tsv", .type = "text/tab-separated-values" },
        { .ext = "txt", .type = "text/plain" },
        { .ext = "ustar", .type = "application/x-ustar" },
        { .ext = "vcf", .type = "text/x-vcard" },
        { .ext = "vtt", .type = "text/vtt" },
        { .ext = "wasm", .type = "application/wasm" },
        { .ext = "wav", .type = "audio/x-wav" },
        { .ext = "webm", .type = "video/webm" },
        { .ext = "webmanifest", .type = "application/manifest+json" },
        { .ext = "wiz", .type = "application/msword" },
        { .ext = "wsdl", .type = "application/xml" },
        { .ext = "xbm", .type = "image/x-xbitmap" },
        { .ext = "xlb", .type = "application/vnd.ms-excel" },
        { .ext = "xls", .type = "application/vnd.ms-excel" },
        { .ext = "xml", .type = "text/xml" },
        { .ext = "xpdl", .type = "application/xml" },
        { .ext = "xpm", .type = "image/x-xpixmap" },
        { .ext = "xsl", .type = "application/xml" },
        { .ext = "xwd", .type = "image/x-xwindowdump" },
        { .ext = "zip", .type = "application/zip" },
};

/* mimetypes._suffix_map_default: compared in lower case. The last suffix of every value is an
 * encoding, none is a key again, so one step of replacement is all there is. */
static const struct {
        const char *ext, *replacement_root, *replacement_ext;
} suffix_map[] = {
        { "svgz", ".svg", "gz" },
        { "tgz", ".tar", "gz" },
        { "taz", ".tar", "gz" },
        { "tz", ".tar", "gz" },
        { "tbz2", ".tar", "bz2" },
        { "txz", ".tar", "xz" },
};

/* mimetypes._encodings_map_default: compared as written (".Z" is compress, ".z" nothing). */
static const char *const encodings[] = { "gz", "Z", "bz2", "xz", "br" };

static int entry_compare(const void *a, const void *b) {
        const MimeEntry *x = a, *y = b;
        int c = strcmp(x->ext, y->ext);

        if (c != 0)
                return c;
        return x->order < y->order ? -1 : x->order > y->order;
}

static int entry_compare_ext(const void *key, const void *e) {
        return strcmp(key, ((const MimeEntry *) e)->ext);
}

MimeTypes *mime_types_free(MimeTypes *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_buffers; i++)
                free(m->buffers[i]);
        free(m->buffers);
        free(m->entries);
        free(m);
        return NULL;
}

size_t mime_types_size(const MimeTypes *m) {
        return m ? m->n_entries : ELEMENTSOF(builtin_types);
}

static int mime_types_add(MimeTypes *m, size_t *allocated, const char *ext, const char *type) {
        if (strlen(ext) > MIME_EXT_MAX)
                return 0;
        if (ARRAY_GROW(m->entries, *allocated, m->n_entries, ELEMENTSOF(builtin_types) * 16) < 0)
                return -ENOMEM;
        m->entries[m->n_entries] = (MimeEntry) { .ext = ext, .type = type, .order = m->n_entries };
        m->n_entries++;
        return 0;
}

/* What Python's str.split() splits on, of ASCII. */
static bool is_python_space(char c) {
        return (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == ' ';
}

/* The next word of a NUL-terminated line, NUL-terminated in place; NULL at the end. */
static char *line_next_word(char **line) {
        char *p = *line, *word;

        while (*p && is_python_space(*p))
                p++;
        if (!*p)
                return NULL;
        word = p;
        while (*p && !is_python_space(*p))
                p++;
        if (*p)
                *p++ = 0;
        *line = p;
        return word;
}

/* mimetypes.MimeTypes.readfp(): lines end at \n, \r or \r\n (Python reads text files with
 * universal newlines); a word starting with '#' ends the line; the first word is a type, every
 * further one a suffix of it. The buffer (size bytes and a NUL) is cut into words in place. */
static int mime_types_parse(MimeTypes *m, size_t *allocated, char *p, size_t size) {
        char *end = p + size;
        int r;

        while (p < end) {
                const char *type = NULL;
                char *line = p, *eol = p, *word;

                while (eol < end && *eol != '\n' && *eol != '\r')
                        eol++;
                p = eol < end && eol[0] == '\r' && eol + 1 < end && eol[1] == '\n' ? eol + 2 : eol + 1;
                *eol = 0;

                while ((word = line_next_word(&line)) && word[0] != '#') {
                        if (!type) {
                                type = word;
                                continue;
                        }
                        r = mime_types_add(m, allocated, word, type);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* Like Python: os.path.isfile() (following symlinks) decides whether a file is read at all (0 if
 * not), and then failing to read it is an error. 1 with the contents. */
static int mime_types_read_file(const char *path, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
                return 0;
        /* O_NONBLOCK: should it have turned into a FIFO since, opening must not hang. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return 0;
        if (st.st_size > MIME_TYPES_FILE_MAX)
                return -EFBIG;
        return read_full_fd(fd, MIME_TYPES_FILE_MAX, ret, ret_size) < 0 ? -EFBIG : 1;
}

int mime_types_load(const char *const *files, MimeTypes **ret, const char **ret_failed) {
        _cleanup_(mime_types_freep) MimeTypes *m = NULL;
        size_t allocated = 0, n;
        int r;

        assert(files);
        assert(ret);

        m = calloc(1, sizeof(MimeTypes));
        if (!m)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(builtin_types); i++) {
                r = mime_types_add(m, &allocated, builtin_types[i].ext, builtin_types[i].type);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; files[i]; i++) {
                _cleanup_free_ char *text = NULL;
                char **b;
                size_t size;

                r = mime_types_read_file(files[i], &text, &size);
                if (r < 0 && ret_failed)
                        *ret_failed = files[i];
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                /* A NUL would silently shorten a word: such a file is not a mime.types file. */
                if (memchr(text, 0, size)) {
                        if (ret_failed)
                                *ret_failed = files[i];
                        return -EBADMSG;
                }
                b = reallocarray(m->buffers, m->n_buffers + 1, sizeof(char *));
                if (!b)
                        return -ENOMEM;
                m->buffers = b;
                m->buffers[m->n_buffers++] = text;
                r = mime_types_parse(m, &allocated, TAKE_PTR(text), size);
                if (r < 0)
                        return r;
        }

        /* By extension, then definition: the last of each run is the one that stays. */
        qsort(m->entries, m->n_entries, sizeof(MimeEntry), entry_compare);
        n = 0;
        for (size_t i = 0; i < m->n_entries; i++) {
                if (i + 1 < m->n_entries && streq(m->entries[i].ext, m->entries[i + 1].ext))
                        continue;
                m->entries[n++] = m->entries[i];
        }
        m->n_entries = n;

        *ret = TAKE_PTR(m);
        return 0;
}

/* posixpath.splitext() of a name without '/': the extension starts at the last '.', unless only
 * dots precede it (".bashrc" and "..png" have none). The offset of that '.', or n if none. */
static size_t name_extension(const char *s, size_t n) {
        const char *dot = memrchr(s, '.', n);

        if (!dot)
                return n;
        for (const char *p = s; p < dot; p++)
                if (*p != '.')
                        return (size_t) (dot - s);
        return n;
}

/* The extension in lower case as Python's str.lower() makes it, as far as it can reach an ASCII
 * key: ASCII letters, and U+212A KELVIN SIGN, the one other character whose lower() is ASCII
 * ('k'). Other letters stay as they are (the mime.types files are ASCII). False if too long. */
static bool extension_lower(const char *ext, size_t n, char key[static MIME_EXT_MAX + 1]) {
        size_t o = 0;

        for (size_t i = 0; i < n; i++, o++) {
                if (o >= MIME_EXT_MAX)
                        return false;
                if (n - i >= 3 && memcmp(ext + i, "\xe2\x84\xaa", 3) == 0) {
                        key[o] = 'k';
                        i += 2;
                } else if (ext[i] >= 'A' && ext[i] <= 'Z')
                        key[o] = (char) (ext[i] - 'A' + 'a');
                else
                        key[o] = ext[i];
        }
        key[o] = 0;
        return true;
}

static bool extension_is_encoding(const char *ext, size_t n) {
        for (size_t i = 0; i < ELEMENTSOF(encodings); i++)
                if (strlen(encodings[i]) == n && memcmp(encodings[i], ext, n) == 0)
                        return true;
        return false;
}

/* mimetypes.MimeTypes.guess_type(name, strict=True)[0], on a base name. */
const char *mime_type_from_name(const MimeTypes *m, const char *name) {
        const char *url, *colon, *ext, *root_suffix = NULL;
        char key[MIME_EXT_MAX + 1];
        const MimeEntry *found;
        size_t n, e, ext_n;

        if (!name)
                return MIME_OCTET_STREAM;
        url = strrchr(name, '/');
        url = url ? url + 1 : name;

        /* urllib.parse._splittype(): whatever precedes the first ':' is a URL scheme, and a data:
         * URL with a ',' is text/plain (its media type would need a '/', which no base name has). */
        colon = strchr(url, ':');
        if (colon && colon > url) {
                bool data = colon - url == 4 && strncasecmp(url, "data", 4) == 0;

                url = colon + 1;
                if (data)
                        return strchr(url, ',') ? "text/plain" : MIME_OCTET_STREAM;
        }

        n = strlen(url);
        e = name_extension(url, n);
        if (e == n)
                return MIME_OCTET_STREAM;
        ext = url + e + 1;
        ext_n = n - e - 1;

        /* suffix_map: "a.tgz" is looked at as "a.tar.gz". */
        if (extension_lower(ext, ext_n, key))
                for (size_t i = 0; i < ELEMENTSOF(suffix_map); i++)
                        if (streq(key, suffix_map[i].ext)) {
                                root_suffix = suffix_map[i].replacement_root;
                                ext = suffix_map[i].replacement_ext;
                                ext_n = strlen(ext);
                                break;
                        }

        /* An encoding (compression) is no type: the extension before it decides. */
        if (extension_is_encoding(ext, ext_n)) {
                if (root_suffix) {
                        ext = root_suffix + 1;
                        ext_n = strlen(ext);
                } else {
                        size_t r = name_extension(url, e);

                        if (r == e)
                                return MIME_OCTET_STREAM;
                        ext = url + r + 1;
                        ext_n = e - r - 1;
                }
        }

        if (!extension_lower(ext, ext_n, key))
                return MIME_OCTET_STREAM;
        if (m)
                found = bsearch(key, m->entries, m->n_entries, sizeof(MimeEntry), entry_compare_ext);
        else
                found = bsearch(key, builtin_types, ELEMENTSOF(builtin_types), sizeof(MimeEntry),
                                entry_compare_ext);
        return found ? found->type : MIME_OCTET_STREAM;
}
