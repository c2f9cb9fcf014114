/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Artifact MIME types from file extensions. */
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "mime.h"

/* The types Python's mimetypes module reports for what code interpreters usually write. */
static const struct {
        const char *ext;
        const char *type;
} mime_table[] = {
        { "txt", "text/plain" },
        { "log", "text/plain" },
        { "md", "text/markdown" },
        { "csv", "text/csv" },
        { "tsv", "text/tab-separated-values" },
        { "html", "text/html" },
        { "htm", "text/html" },
        { "css", "text/css" },
        { "xml", "application/xml" },
        { "json", "application/json" },
        { "js", "text/javascript" },
        { "py", "text/x-python" },
        { "png", "image/png" },
        { "jpg", "image/jpeg" },
        { "jpeg", "image/jpeg" },
        { "gif", "image/gif" },
        { "bmp", "image/bmp" },
        { "webp", "image/webp" },
        { "svg", "image/svg+xml" },
        { "tif", "image/tiff" },
        { "tiff", "image/tiff" },
        { "ico", "image/vnd.microsoft.icon" },
        { "pdf", "application/pdf" },
        { "zip", "application/zip" },
        { "gz", "application/gzip" },
        { "tgz", "application/gzip" },
        { "tar", "application/x-tar" },
        { "xls", "application/vnd.ms-excel" },
        { "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
        { "doc", "application/msword" },
        { "docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document" },
        { "ppt", "application/vnd.ms-powerpoint" },
        { "pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation" },
        { "mp3", "audio/mpeg" },
        { "wav", "audio/x-wav" },
        { "mp4", "video/mp4" },
        { "parquet", "application/vnd.apache.parquet" },
};

const char *mime_type_from_name(const char *name) {
        const char *dot;

        if (!name)
                return "application/octet-stream";
        dot = strrchr(name, '.');
        if (!dot || dot == name || strchr(dot, '/'))
                return "application/octet-stream";
        for (size_t i = 0; i < ELEMENTSOF(mime_table); i++)
                if (strcasecmp(dot + 1, mime_table[i].ext) == 0)
                        return mime_table[i].type;
        return "application/octet-stream";
}
