/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include "connect-rpc.h"
#include "http-request.h"
#include "http-util.h"
#include "macro.h"
#include "string-util.h"

int connect_envelope_unwrap(const char *body, size_t size, const char **ret_msg, size_t *ret_size) {
        const uint8_t *h = (const uint8_t *) body;
        uint32_t n;

        if (!body || size < CONNECT_ENVELOPE_HEADER)
                return -EBADMSG;
        n = (uint32_t) h[1] << 24 | (uint32_t) h[2] << 16 | (uint32_t) h[3] << 8 | h[4];
        if ((size_t) n != size - CONNECT_ENVELOPE_HEADER)
                return -EBADMSG;
        if (h[0] != 0)
                return -EPROTONOSUPPORT;
        *ret_msg = body + CONNECT_ENVELOPE_HEADER;
        *ret_size = n;
        return 0;
}

int connect_envelope_append(JsonWriter *w, uint8_t flags, const char *msg, size_t n) {
        uint8_t h[CONNECT_ENVELOPE_HEADER] = { flags, (uint8_t) (n >> 24), (uint8_t) (n >> 16),
                                               (uint8_t) (n >> 8), (uint8_t) n };
        int r;

        if (n > UINT32_MAX)
                return -E2BIG;
        r = json_writer_append(w, (const char *) h, sizeof(h));
        return r < 0 ? r : json_writer_append(w, msg, n);
}

int connect_error_json(JsonWriter *w, const char *code, const char *message) {
        int r = json_writer_appendf(w, "{\"code\":\"%s\",\"message\":", code);

        if (r >= 0)
                r = json_writer_append_string_lossy(w, message, strlen(message));
        return r < 0 ? r : json_writer_append_str(w, "}");
}

int connect_end_stream_append(JsonWriter *w, const char *code, const char *message) {
        _cleanup_(json_writer_done) JsonWriter m = {};
        int r;

        if (!code)
                return connect_envelope_append(w, CONNECT_FLAG_END_STREAM, "{}", 2);
        r = json_writer_append_str(&m, "{\"error\":");
        if (r >= 0)
                r = connect_error_json(&m, code, message);
        if (r >= 0)
                r = json_writer_append_str(&m, "}");
        return r < 0 ? r : connect_envelope_append(w, CONNECT_FLAG_END_STREAM, m.buf.s, m.buf.len);
}

unsigned connect_code_http_status(const char *code) {
        static const struct {
                const char *code;
                unsigned status;
        } table[] = {
                { "canceled", 499 },
                { "unknown", 500 },
                { "invalid_argument", 400 },
                { "deadline_exceeded", 504 },
                { "not_found", 404 },
                { "already_exists", 409 },
                { "permission_denied", 403 },
                { "resource_exhausted", 429 },
                { "failed_precondition", 400 },
                { "aborted", 409 },
                { "out_of_range", 400 },
                { "unimplemented", 501 },
                { "internal", 500 },
                { "unavailable", 503 },
                { "data_loss", 500 },
                { "unauthenticated", 401 },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(code, table[i].code))
                        return table[i].status;
        return 500;
}

int connect_reply_error(HttpRequest *req, bool stream, unsigned status, const char *code,
                        const char *message) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        HttpResponse *resp = NULL;
        int r;

        r = stream ? connect_end_stream_append(&w, code, message) : connect_error_json(&w, code, message);
        if (r < 0)
                return r;
        r = http_response_new_writer(stream ? HTTP_OK : status ?: connect_code_http_status(code), &w, &resp);
        if (r >= 0 && stream)
                resp->content_type = CONNECT_STREAM_CONTENT_TYPE;
        return http_request_reply_made(req, r, resp);
}

int connect_basic_user(const char *value, size_t n, char *ret, size_t ret_size) {
        _cleanup_free_ void *decoded = NULL;
        const char *colon;
        size_t size;

        if (n < 6 || strncasecmp(value, "Basic ", 6) != 0)
                return -EINVAL;
        value += 6;
        n -= 6;
        while (n > 0 && *value == ' ')
                value++, n--;
        if (base64_decode(value, n, &decoded, &size) < 0)
                return -EINVAL;
        colon = memchr(decoded, ':', size);
        if (!colon || memchr(decoded, 0, size) || (size_t) (colon - (const char *) decoded) + 1 > ret_size)
                return -EINVAL;
        memcpy(ret, decoded, (size_t) (colon - (const char *) decoded));
        ret[colon - (const char *) decoded] = 0;
        return 0;
}
