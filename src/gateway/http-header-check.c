/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* NUL bytes in a request's header section, seen in libmicrohttpd 0.9.75's own copy of it. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include <microhttpd.h>

#include "http-header-check.h"

/*
 * What libmicrohttpd 0.9.75 (src/microhttpd/connection.c) leaves in its read buffer once it has
 * parsed a request's header section, and so what this check relies on:
 *
 * 1. get_next_header_line() cuts the lines in place: a line ends at the first LF, and that LF and
 *    a CR right before it are overwritten with NUL ("\r\n" becomes two NULs, a bare "\n" one).
 *    The buffer pointer then moves past the line, so the lines lie one after the other. A NUL the
 *    client sent stays a NUL. MHD_connection_handle_idle() sets header_size = read_buffer - method
 *    when it meets the empty line (one whose first byte is NUL): the section is
 *    [method, method + header_size), from the request line to the empty line's terminator.
 * 2. parse_initial_message_line(): 'method' is the start of the request line; the first space
 *    becomes a NUL, spaces after it are skipped, and 'url' points at the request target. The last
 *    space becomes a NUL and 'version' follows it; parse_http_version() only takes exactly eight
 *    bytes "HTTP/d.d" running to the end of the line, so the request line's content ends at
 *    version + 8. The URI log callback runs before '?' and percent-decoding are cut into the
 *    target: its strlen() there is the target's length up to the first NUL the client sent.
 * 3. process_header_line(): the line starts with the field name, 'key'; strchr(line, ':') finds
 *    the colon and makes it a NUL (a NUL before the colon leaves no colon to find, and
 *    libmicrohttpd answers 400 itself). 'value' points past the colon and any SP and HT. Both
 *    sizes are strlen(): value + value_size is the first NUL at or after 'value', which is the end
 *    of the line unless the client sent a NUL there. Trailing whitespace stays in the value.
 * 4. process_broken_line(): a line that starts with SP or HT continues the previous field. The
 *    name is then copied out of the section (MHD_pool_reallocate(), which zeroes the old bytes)
 *    and the continuation appended to the name, while the value still points at the first line:
 *    the key of a folded field lies outside the section.
 * 5. Cookies are parsed from a copy. Nothing else writes into the section before the handler.
 *
 * So between the end of one line's content (value + value_size, or version + 8) and the next key
 * there is only the terminator, one or two NULs, unless the client sent a NUL in the line: then
 * the rest of the line shows there (bytes that are not NUL), or the NULs are more than two. After
 * the last line come its terminator and the empty line's, two to four NULs. What this cannot see
 * is a NUL standing where a CR could: right before a bare LF ("v\0\n" leaves the bytes "v\r\n"
 * leaves), and at the end of the section as long as the NULs and terminators there make no more
 * than four ("v\0\r\n\n", "v\0\0\n\n", "v\n\0\r\n" look like "v\r\n\r\n"). Such a NUL hides no
 * byte after it: the value as reported is all the client sent in the line. Nor can it see a line
 * before the request line that begins with a NUL: libmicrohttpd skips it as an empty line, and it
 * is part of no request.
 */

/* Terminator NULs between a line's content and the next line; at the end, with the empty line's. */
#define LINE_END_MIN     1U
#define LINE_END_MAX     2U
#define SECTION_END_MIN  (2U * LINE_END_MIN)
#define SECTION_END_MAX  (2U * LINE_END_MAX)

static void check_refuse(HttpHeaderCheck *c, const char *what, const char *name, const char *reason) {
        if (c->reason || c->unknown)
                return;
        c->what = what;
        c->name = name;
        c->reason = reason;
}

static bool check_done(const HttpHeaderCheck *c) {
        return c->reason || c->folded || c->unknown;
}

static bool in_section(const HttpHeaderCheck *c, const char *p) {
        /* Compared as integers: the pointers may belong to different objects (a folded key). */
        return (uintptr_t) p >= (uintptr_t) c->start && (uintptr_t) p < (uintptr_t) c->end;
}

/* The bytes from the end of the last line's content to 'next' (the next line's start, or the end
 * of the section): the terminator(s) and whatever the client put after a NUL. */
static void check_line_end(HttpHeaderCheck *c, const char *next, size_t min, size_t max) {
        size_t n;

        if (next < c->line_end) {
                c->unknown = true;
                return;
        }
        n = (size_t) (next - c->line_end);
        for (size_t i = 0; i < n; i++)
                if (c->line_end[i] != 0) {
                        /* Bytes after a NUL in the line (or after a line that begins with one,
                         * which libmicrohttpd took for the empty line): either way the line's. */
                        n = SIZE_MAX;
                        break;
                }
        if (n != SIZE_MAX && n < min) {
                c->unknown = true;
                return;
        }
        if (n <= max)
                return;
        if (c->line_name)
                check_refuse(c, "header field", c->line_name, "contains a NUL byte");
        else
                check_refuse(c, "header section", NULL, "contains a NUL byte");
}

void http_header_check_begin(HttpHeaderCheck *c, const char *method, const char *url, const char *version,
                             size_t section_size, size_t raw_target_size) {
        size_t m, target_size;

        assert(c);

        *c = (HttpHeaderCheck) {};
        if (!method || !url || !version || section_size == 0) {
                c->unknown = true;
                return;
        }
        c->start = method;
        c->end = method + section_size;

        /* method NUL spaces target NUL "HTTP/d.d" terminator … */
        if (!in_section(c, url) || !in_section(c, version) || url <= method || version <= url ||
            (size_t) (c->end - version) < 8 || version[-1] != 0) {
                c->unknown = true;
                return;
        }

        /* The method ends at the first NUL: the first space unless the client sent a NUL in it.
         * Between its end and the target there are only libmicrohttpd's NUL and spaces. */
        m = strnlen(method, (size_t) (url - method));
        if (m == (size_t) (url - method)) {
                c->unknown = true;
                return;
        }
        for (const char *p = method + m + 1; p < url; p++)
                if (*p != ' ') {
                        check_refuse(c, "method", NULL, "contains a NUL byte");
                        return;
                }

        target_size = (size_t) (version - 1 - url);
        if (raw_target_size > target_size) {
                c->unknown = true;
                return;
        }
        if (raw_target_size < target_size) {
                check_refuse(c, "request target", NULL, "contains a NUL byte");
                return;
        }

        c->line_end = version + 8;
        c->line_name = NULL;
}

void http_header_check_field(HttpHeaderCheck *c, const char *key, size_t key_size, const char *value,
                             size_t value_size) {
        assert(c);

        if (check_done(c))
                return;
        if (!key || !value) {
                c->unknown = true;
                return;
        }
        if (!in_section(c, key)) {
                /* RFC 9112 §5.2 lets a server refuse obs-fold with 400; libmicrohttpd 0.9.75 glues
                 * the continuation to the field's name instead, which no other parser would. */
                c->folded = true;
                return;
        }
        if (!in_section(c, value) || value < key + key_size + 1 || key[key_size] != 0 ||
            (size_t) (c->end - value) <= value_size) {
                c->unknown = true;
                return;
        }
        for (const char *p = key + key_size + 1; p < value; p++)
                if (*p != ' ' && *p != '\t') {
                        c->unknown = true;
                        return;
                }

        check_line_end(c, key, LINE_END_MIN, LINE_END_MAX);
        if (check_done(c))
                return;
        c->line_end = value + value_size;
        c->line_name = key;
}

void http_header_check_end(HttpHeaderCheck *c) {
        assert(c);

        if (check_done(c))
                return;
        check_line_end(c, c->end, SECTION_END_MIN, SECTION_END_MAX);
}

bool http_header_check_supported(void) {
        const char *v = MHD_get_version();

        return v && strcmp(v, HTTP_HEADER_CHECK_MHD_VERSION) == 0;
}

static enum MHD_Result check_one(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                 const char *value, size_t value_size) {
        HttpHeaderCheck *c = cls;

        http_header_check_field(c, key, key_size, value, value_size);
        return check_done(c) ? MHD_NO : MHD_YES;
}

void http_header_check_connection(HttpHeaderCheck *c, struct MHD_Connection *connection, const char *method,
                                  const char *url, const char *version, const char *raw_target) {
        const union MHD_ConnectionInfo *info;

        assert(c);
        assert(connection);
        assert(raw_target);

        *c = (HttpHeaderCheck) { .unknown = true };
        if (!http_header_check_supported())
                return;
        info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (!info)
                return;

        http_header_check_begin(c, method, url, version, info->header_size, strlen(raw_target));
        /* The fields in the order of their lines: libmicrohttpd appends each as it parses it. */
        (void) MHD_get_connection_values_n(connection, MHD_HEADER_KIND, check_one, c);
        http_header_check_end(c);
}
