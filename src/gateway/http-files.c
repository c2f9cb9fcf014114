/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /files, /files/get, /files/list and /files/reset-inputs: files in a session's workspace. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "bus-client.h"
#include "bus-util.h"
#include "http-apis.h"
#include "http-body.h"
#include "http-files.h"
#include "http-router.h"
#include "http-stream.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "string-util.h"

/* In the reference service's model order, which decides which missing field a 422 names. */
static const JsonField files_write_fields[] = { BODY_SESSION_ID, BODY_PATH, BODY_DATA_BASE64, {} };
static const JsonField files_read_fields[] = { BODY_SESSION_ID, BODY_PATH, {} };
static const JsonField files_session_fields[] = { BODY_SESSION_ID, {} };

static const JsonField *const files_request_fields[_FILES_REQUEST_KIND_MAX] = {
        [FILES_REQUEST_WRITE]   = files_write_fields,
        [FILES_REQUEST_READ]    = files_read_fields,
        [FILES_REQUEST_SESSION] = files_session_fields,
};

void files_request_done(FilesRequest *x) {
        assert(x);

        free(x->data);
        *x = (FilesRequest) {};
}

uint64_t files_upload_size(const char *text, size_t n) {
        assert(text || n == 0);

        /* Extra '=' after a complete quantum add nothing ("QUJD==" is 3 bytes, as in Python). */
        return base64_decoded_size(text, n);
}

/* Prepares a client error in *ret_error and returns 'error' (or the failure to prepare it). */
static int files_refuse(int r, int error) {
        return r < 0 ? r : error;
}

static int files_refuse_detail(unsigned status, const char *detail, int error, HttpResponse **ret_error) {
        return files_refuse(http_response_new_detail(status, detail, ret_error), error);
}

int files_request_parse(FilesRequestKind kind, json_object *body, const Config *config, FilesRequest *ret,
                        HttpResponse **ret_error) {
        _cleanup_free_ void *data = NULL;
        size_t data_size = 0;
        SidecarBody b = {};
        int r;

        assert(kind >= 0 && kind < _FILES_REQUEST_KIND_MAX);
        assert(config);
        assert(ret);
        assert(ret_error);

        r = sidecar_body_read(body, files_request_fields[kind], &b, ret_error);
        if (r > 0)
                r = sidecar_body_check_session_id(body, &b, ret_error);
        if (r <= 0)
                return files_refuse(r, -EINVAL);

        if (kind == FILES_REQUEST_WRITE) {
                /* The length as received: an embedded NUL must fail decoding, not end the text. */
                size_t n = json_member_string_length(body, "data_base64");

                /* Refuse from the length alone what cannot fit, before allocating for it. */
                if (files_upload_size(b.data_base64, n) > config->max_upload_bytes)
                        return files_refuse_detail(HTTP_PAYLOAD_TOO_LARGE, FILES_DETAIL_TOO_LARGE, -EFBIG,
                                                   ret_error);

                r = base64_decode(b.data_base64, n, &data, &data_size);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        return files_refuse_detail(HTTP_BAD_REQUEST, FILES_DETAIL_INVALID_BASE64, -EINVAL,
                                                   ret_error);
                if (data_size > config->max_upload_bytes)
                        return files_refuse_detail(HTTP_PAYLOAD_TOO_LARGE, FILES_DETAIL_TOO_LARGE, -EFBIG,
                                                   ret_error);
        }

        if (kind != FILES_REQUEST_SESSION) {
                size_t n = json_member_string_length(body, "path");

                /* A bus string cannot hold a NUL, and no file name can either. The manager judges
                 * everything else about the path, with the contract's texts. */
                if (n != strlen(b.path))
                        return files_refuse_detail(HTTP_BAD_REQUEST, FILES_DETAIL_PATH_OUTSIDE, -EINVAL,
                                                   ret_error);
                /* The body may be 56 MiB, a bus message must stay far below that. */
                if (n > FILES_PATH_MAX)
                        return files_refuse_detail(HTTP_BAD_REQUEST, FILES_DETAIL_PATH_TOO_LONG,
                                                   -ENAMETOOLONG, ret_error);
        }

        *ret = (FilesRequest) {
                .session_id = b.session_id,
                .path = kind != FILES_REQUEST_SESSION ? b.path : NULL,
                .data = TAKE_PTR(data),
                .data_size = data_size,
        };
        return 0;
}

int files_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        assert(ret);

        /* The contract knows one text for a missing file, and clients may match it. A file that is
         * too large has more reasons ("file too large", "workspace is full"): those pass through. */
        if (sd_bus_error_has_name(e, BUS_ERROR_NOT_FOUND)) {
                if (ret_internal)
                        *ret_internal = false;
                return http_response_new_detail(HTTP_NOT_FOUND, FILES_DETAIL_NOT_FOUND, ret);
        }
        if (sd_bus_error_has_name(e, BUS_ERROR_TOO_LARGE) && isempty(e->message)) {
                if (ret_internal)
                        *ret_internal = false;
                return http_response_new_detail(HTTP_PAYLOAD_TOO_LARGE, FILES_DETAIL_TOO_LARGE, ret);
        }
        return http_response_new_bus_error(e, ret, ret_internal);
}

int files_reset_inputs_response_new(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal) {
        const char *body;
        char *copy;

        assert(ret);

        if (e && sd_bus_error_is_set(e) && !sd_bus_error_has_name(e, BUS_ERROR_NO_SUCH_SESSION))
                return files_response_new_bus_error(e, ret, ret_internal);

        /* A reaped session is the normal signal to start over, not an error: still 200. */
        body = e && sd_bus_error_is_set(e) ? "{\"ok\":false,\"session_gone\":true}"
                                           : "{\"ok\":true,\"session_gone\":false}";
        if (ret_internal)
                *ret_internal = false;
        copy = strdup(body);
        if (!copy)
                return -ENOMEM;
        return http_response_new_take(HTTP_OK, copy, strlen(copy), ret);
}

int files_read_response_new(const void *data, size_t size, HttpResponse **ret) {
        _cleanup_(http_stream_freep) HttpStream *s = NULL;
        int r;

        assert(data || size == 0);
        assert(ret);

        /* Encoded as it is sent: up to 40 MiB of base64 is never built in one go. */
        r = http_stream_new(&s);
        if (r < 0)
                return r;
        if ((r = http_stream_append_str(s, "{\"data_base64\":")) < 0 ||
            (r = http_stream_append_base64(s, data ?: (const void *) "", size)) < 0 ||
            (r = http_stream_append_str(s, "}")) < 0)
                return r;
        return http_response_new_stream(HTTP_OK, TAKE_PTR(s), ret);
}

int files_list_response_new(const FilesEntry *entries, size_t n, HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        char *body;
        size_t size;
        int r;

        assert(entries || n == 0);
        assert(ret);

        if (n > FILES_LIST_MAX)
                return -EBADMSG;

        r = json_writer_append_str(&w, "{\"files\":[");
        if (r < 0)
                return r;

        for (size_t i = 0; i < n; i++) {
                const FilesEntry *f = &entries[i];
                size_t l;

                if (isempty(f->path))
                        return -EBADMSG;
                l = strlen(f->path);
                if (!utf8_is_valid_n(f->path, l))
                        return -EBADMSG;

                /* Every byte of the name goes through the string escaper: a newline, quote or
                 * backslash in a name stays inside its own JSON string and cannot start a row. */
                if ((r = json_writer_append_str(&w, i > 0 ? ",{\"path\":" : "{\"path\":")) < 0 ||
                    (r = json_writer_append_string(&w, f->path, l)) < 0 ||
                    (r = json_writer_appendf(&w, ",\"size\":%" PRIu64 "}", f->size)) < 0)
                        return r;
        }

        r = json_writer_append_str(&w, "]}");
        if (r < 0)
                return r;

        body = json_writer_steal(&w, &size);
        if (!body)
                return -ENOMEM;
        return http_response_new_take(HTTP_OK, body, size, ret);
}

/* Replies the handlers share. */

static int files_reply_bus_error(HttpRequest *req, const sd_bus_error *e) {
        return http_request_reply_call_error(req, e, bus_timeout_files_usec(&req->server->config),
                                             files_response_new_bus_error);
}

static int files_call(HttpRequest *req, const char *member, const FilesRequest *x, int fd,
                      HttpReplyHandler handler) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(req->server->bus, member, &m);
        if (r < 0)
                return r;
        r = sd_bus_message_append_basic(m, 's', x->session_id);
        if (r >= 0 && x->path)
                r = sd_bus_message_append_basic(m, 's', x->path);
        if (r >= 0 && fd >= 0)
                r = sd_bus_message_append_basic(m, 'h', &fd);
        if (r < 0)
                return r;

        /* Everything the call needs is in the message: while it waits behind the session's exec,
         * an upload is held once, in its memory file, not a second time in the parsed body. */
        http_request_drop_json(req);

        return http_request_call(req, m, bus_timeout_files_usec(&req->server->config), handler);
}

/* Parses the body for 'kind'. Returns 1 when the call may go ahead, 0 when a client error was
 * prepared. */
static int files_parse(HttpRequest *req, FilesRequestKind kind, FilesRequest *ret) {
        HttpResponse *error;
        int r;

        r = files_request_parse(kind, req->json, &req->server->config, ret, &error);
        if (r < 0) {
                if (!error)
                        return r;
                (void) http_request_reply(req, error);
                return 0;
        }
        http_request_set_session_id(req, ret->session_id);
        return 1;
}

/* The handlers whose call carries what the body names, and nothing else. */
static int files_parse_and_call(HttpRequest *req, FilesRequestKind kind, const char *member,
                                HttpReplyHandler handler) {
        _cleanup_(files_request_done) FilesRequest x = {};
        int r;

        r = files_parse(req, kind, &x);
        if (r <= 0)
                return r;

        return files_call(req, member, &x, -EBADF, handler);
}

/* POST /files */

static int files_post_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e;

        e = sd_bus_message_get_error(reply);
        if (e)
                return files_reply_bus_error(req, e);
        return http_request_reply_literal(req, HTTP_OK, "{\"ok\":true}");
}

int http_files_post(HttpRequest *req) {
        _cleanup_(files_request_done) FilesRequest x = {};
        _cleanup_close_ int fd = -EBADF;
        int r;

        r = files_parse(req, FILES_REQUEST_WRITE, &x);
        if (r <= 0)
                return r;

        /* The content crosses the bus as a sealed memfd; the decoded copy can go right away. */
        fd = memfd_new_data("scopebox-upload", x.data, x.data_size);
        if (fd < 0)
                return fd;
        free(x.data);
        x.data = NULL;

        return files_call(req, "WriteFile", &x, fd, files_post_on_reply);
}

/* POST /files/get */

static int files_get_on_reply(HttpRequest *req, sd_bus_message *reply) {
        _cleanup_(bus_data_done) BusData data = {};
        const sd_bus_error *e;
        HttpResponse *resp;
        int fd, r;

        e = sd_bus_message_get_error(reply);
        if (e)
                return files_reply_bus_error(req, e);

        r = sd_bus_message_read_basic(reply, 'h', &fd);
        if (r < 0)
                return r;
        /* The manager refuses larger files; a bigger memfd is its bug, never a reason to
         * encode gigabytes. */
        r = bus_data_load(fd, req->server->config.max_upload_bytes, &data);
        if (r < 0)
                return r;

        r = files_read_response_new(data.data, data.size, &resp);
        if (r < 0)
                return r;
        http_stream_hold(resp->stream, &data);
        return http_request_reply(req, resp);
}

int http_files_get(HttpRequest *req) {
        return files_parse_and_call(req, FILES_REQUEST_READ, "ReadFile", files_get_on_reply);
}

/* POST /files/list */

typedef struct FilesList {
        FilesEntry entries[FILES_LIST_MAX];
        size_t n;
} FilesList;

static int files_read_entry(sd_bus_message *m, void *userdata) {
        FilesList *l = userdata;
        FilesEntry *e = &l->entries[l->n];
        int r = sd_bus_message_read(m, "(st)", &e->path, &e->size);

        if (r >= 0)
                l->n++;
        return r;
}

static int files_list_on_reply(HttpRequest *req, sd_bus_message *reply) {
        FilesList list = {};
        const sd_bus_error *e;
        HttpResponse *resp;
        int r;

        e = sd_bus_message_get_error(reply);
        if (e)
                return files_reply_bus_error(req, e);

        r = bus_message_read_array(reply, "(st)", FILES_LIST_MAX, files_read_entry, &list);
        if (r < 0)
                return r;

        r = files_list_response_new(list.entries, list.n, &resp);
        if (r < 0)
                return r;
        return http_request_reply(req, resp);
}

int http_files_list(HttpRequest *req) {
        return files_parse_and_call(req, FILES_REQUEST_SESSION, "ListFiles", files_list_on_reply);
}

/* POST /files/reset-inputs */

static int files_reset_inputs_on_reply(HttpRequest *req, sd_bus_message *reply) {
        /* Also the answer to a success. */
        return http_request_reply_call_error(req, sd_bus_message_get_error(reply),
                                             bus_timeout_files_usec(&req->server->config),
                                             files_reset_inputs_response_new);
}

int http_files_reset_inputs(HttpRequest *req) {
        return files_parse_and_call(req, FILES_REQUEST_SESSION, "ResetInputs", files_reset_inputs_on_reply);
}
