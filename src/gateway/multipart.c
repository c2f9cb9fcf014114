/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* multipart/form-data for uploads (multipart.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "multipart.h"
#include "string-util.h"

#define BOUNDARY_MAX 70U

void multipart_form_done(MultipartForm *f) {
        for (size_t i = 0; i < f->n; i++) {
                free(f->parts[i].name);
                free(f->parts[i].filename);
        }
        f->n = 0;
}

static const char *skip_blanks(const char *p, const char *end) {
        while (p < end && (*p == ' ' || *p == '\t'))
                p++;
        return p;
}

/* A parameter value at 'p' (a token, or a quoted string with \-escapes) up to 'end': a new
 * string; *ret_end past it. */
static int param_value(const char *p, const char *end, size_t max, char **ret, const char **ret_end) {
        _cleanup_free_ char *v = NULL;
        size_t n = 0;

        v = malloc(max + 1);
        if (!v)
                return -ENOMEM;
        if (p < end && *p == '"') {
                for (p++;; p++) {
                        if (p >= end)
                                return -EBADMSG;
                        if (*p == '"') {
                                p++;
                                break;
                        }
                        if (*p == '\\' && p + 1 < end)
                                p++;
                        if ((unsigned char) *p < 0x20 || *p == 0x7f)
                                return -EBADMSG;
                        if (n >= max)
                                return -E2BIG;
                        v[n++] = *p;
                }
        } else
                for (; p < end && *p != ';' && *p != ' ' && *p != '\t'; p++) {
                        if ((unsigned char) *p < 0x20 || *p == 0x7f || *p == '"')
                                return -EBADMSG;
                        if (n >= max)
                                return -E2BIG;
                        v[n++] = *p;
                }
        v[n] = 0;
        *ret = TAKE_PTR(v);
        *ret_end = p;
        return 0;
}

/* The parameters "; key=value" of a header value from 'p', each value at most 'max' bytes: those
 * named in keys[] into values[] (NULL if absent), the others checked and skipped. */
static int parse_params(const char *p, const char *end, const char *const *keys, char **values,
                        size_t n_keys, size_t max) {
        while ((p = skip_blanks(p, end)) < end) {
                const char *key, *eq;
                char **dst = NULL, *value = NULL;
                int r;

                if (*p != ';')
                        return -EBADMSG;
                p = skip_blanks(p + 1, end);
                key = p;
                eq = memchr(p, '=', (size_t) (end - p));
                if (!eq)
                        return -EBADMSG;
                for (size_t i = 0; i < n_keys; i++)
                        if ((size_t) (eq - key) == strlen(keys[i]) &&
                            strncasecmp(key, keys[i], strlen(keys[i])) == 0)
                                dst = &values[i];
                r = param_value(eq + 1, end, max, &value, &p);
                if (r < 0)
                        return r;
                if (dst && *dst) { /* the same parameter twice: which one counts is ambiguous */
                        free(value);
                        return -EBADMSG;
                }
                if (dst)
                        *dst = value;
                else
                        free(value);
        }
        return 0;
}

int multipart_boundary(const char *content_type, char **ret) {
        static const char type[] = "multipart/form-data";
        static const char *const keys[] = { "boundary" };
        char *v = NULL;
        int r;

        if (!content_type || strncasecmp(content_type, type, strlen(type)) != 0)
                return -EINVAL;
        /* Parameter by parameter: a "boundary=" inside another's quoted value is no boundary. */
        r = parse_params(content_type + strlen(type), content_type + strlen(content_type), keys, &v, 1,
                         BOUNDARY_MAX);
        if (r < 0 || isempty(v)) {
                free(v);
                return r == -ENOMEM ? r : -EINVAL;
        }
        *ret = v;
        return 0;
}

/* One part's header section [p, end): its Content-Disposition's name and filename. */
static int parse_part_headers(const char *p, const char *end, MultipartPart *part) {
        bool disposition = false;

        while (p < end) {
                const char *eol = memmem(p, (size_t) (end - p), "\r\n", 2) ?: end, *colon;

                colon = memchr(p, ':', (size_t) (eol - p));
                if (!colon)
                        return -EBADMSG;
                if ((size_t) (colon - p) == strlen("Content-Disposition") &&
                    strncasecmp(p, "Content-Disposition", (size_t) (colon - p)) == 0) {
                        const char *v = skip_blanks(colon + 1, eol);

                        if (disposition || (size_t) (eol - v) < strlen("form-data") ||
                            strncasecmp(v, "form-data", strlen("form-data")) != 0)
                                return -EBADMSG;
                        static const char *const keys[] = { "name", "filename" };
                        char *values[2] = {};
                        int r;

                        disposition = true;
                        r = parse_params(v + strlen("form-data"), eol, keys, values, 2, MULTIPART_NAME_MAX);
                        part->name = values[0];
                        part->filename = values[1];
                        if (r < 0)
                                return r;
                }
                p = eol + 2;
        }
        return disposition && part->name ? 0 : -EBADMSG;
}

int multipart_parse(const char *boundary, const char *body, size_t n, MultipartForm *ret) {
        _cleanup_free_ char *delim = NULL;
        const char *p = body, *end = body + n;
        size_t dl;
        int r;

        ret->n = 0;
        /* "\r\n--<boundary>"; the body's first delimiter has no CRLF before it. */
        if (asprintf(&delim, "\r\n--%s", boundary) < 0)
                return -ENOMEM;
        dl = strlen(delim);
        if (n < dl - 2 || memcmp(p, delim + 2, dl - 2) != 0)
                return -EBADMSG;
        p += dl - 2;
        for (;;) {
                const char *headers, *hend, *next;
                MultipartPart *part;

                /* After a delimiter: "--" closes the body, CRLF opens a part. */
                if (end - p >= 2 && p[0] == '-' && p[1] == '-')
                        return 0;
                p = skip_blanks(p, end);
                if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
                        break;
                headers = p + 2;
                hend = memmem(headers, MIN((size_t) (end - headers), (size_t) MULTIPART_HEADERS_MAX + 4),
                              "\r\n\r\n", 4);
                if (!hend && headers + 2 <= end && headers[0] == '\r' && headers[1] == '\n')
                        hend = headers - 2; /* no header at all */
                if (!hend)
                        return (size_t) (end - headers) > MULTIPART_HEADERS_MAX ? -E2BIG : -EBADMSG;
                if (ret->n >= MULTIPART_PARTS_MAX)
                        return -E2BIG;
                part = &ret->parts[ret->n++];
                *part = (MultipartPart) {};
                r = parse_part_headers(headers, hend, part);
                if (r < 0)
                        return r;
                part->data = hend + 4;
                next = memmem(part->data, (size_t) (end - part->data), delim, dl);
                if (!next)
                        break;
                part->size = (size_t) (next - part->data);
                p = next + dl;
        }
        multipart_form_done(ret);
        return -EBADMSG;
}
