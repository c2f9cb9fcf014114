/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* NUL bytes in a request's header section, seen in libmicrohttpd 0.9.75's own copy of it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

/* The libmicrohttpd release whose buffer layout the check relies on (see http-header-check.c). */
#define HTTP_HEADER_CHECK_MHD_VERSION "0.9.75"

/* libmicrohttpd reports every header value with strlen(), so a NUL in a line cuts the value short
 * without a trace in the API. Its copy of the header section still shows the bytes after the NUL:
 * this walks that copy line by line. Fed the request line first, then every header field in the
 * order libmicrohttpd reports them, then finished. */
typedef struct HttpHeaderCheck {
        const char *start, *end;        /* the section: request line to empty line, in MHD's buffer */
        const char *line_end;           /* where the content of the line seen last ends */
        const char *line_name;          /* its field name; NULL: the request line */
        /* A refusal: "<what> ["<name>"] <reason>", 'reason' NULL if none. */
        const char *what;
        const char *name;               /* NUL-terminated, in MHD's buffer; NULL if no name */
        const char *reason;
        bool folded;                    /* a field continued on the next line (obs-fold) */
        bool unknown;                   /* the section has a shape the check does not know */
} HttpHeaderCheck;

/* 'method', 'url' and 'version' as given to the access handler (pointers into the section),
 * 'section_size' as MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE reports it, 'raw_target_size' the
 * strlen() of the request target as the URI log callback saw it (before decoding). */
void http_header_check_begin(HttpHeaderCheck *c, const char *method, const char *url, const char *version,
                             size_t section_size, size_t raw_target_size);
void http_header_check_field(HttpHeaderCheck *c, const char *key, size_t key_size, const char *value,
                             size_t value_size);
void http_header_check_end(HttpHeaderCheck *c);

/* The whole check for a request in the access handler's first call. 'raw_target' as the URI log
 * callback saw it (not NULL). Leaves c->unknown set, refusing nothing, if the library is not the
 * release the check knows or the section is not laid out as that release lays it out. */
void http_header_check_connection(HttpHeaderCheck *c, struct MHD_Connection *connection, const char *method,
                                  const char *url, const char *version, const char *raw_target);

/* Whether the running libmicrohttpd is the one the check knows. */
bool http_header_check_supported(void);
