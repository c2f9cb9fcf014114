/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* POST /storage/put, /storage/delete and /storage/gc: the caller's object storage, via the storage agent. */
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
#include "http-router.h"
#include "http-storage.h"
#include "io-util.h"
#include "json-util.h"
#include "storage-config.h"
#include "string-util.h"

/* In the contract's order, which decides which missing member a 422 names. */
static const JsonField storage_put_fields[] = {
        BODY_KEY, BODY_DATA_BASE64, BODY_CONTENT_TYPE, BODY_EXPIRES_IN, BODY_STORAGE, {}
};
static const JsonField storage_delete_fields[] = { BODY_KEY, BODY_STORAGE, {} };
static const JsonField storage_gc_fields[] = { BODY_MAX_AGE_SECONDS, BODY_STORAGE, {} };

static const JsonField *const storage_request_fields[_STORAGE_REQUEST_KIND_MAX] = {
        [STORAGE_REQUEST_PUT]    = storage_put_fields,
        [STORAGE_REQUEST_DELETE] = storage_delete_fields,
        [STORAGE_REQUEST_GC]     = storage_gc_fields,
};

/* Returns 0 (an answer was prepared) or the failure to prepare it. */
static int storage_answer_detail(unsigned status, const char *detail, HttpResponse **ret_answer) {
        int r = http_response_new_detail(status, detail, ret_answer);
        return r < 0 ? r : 0;
}

static int storage_answer_zeros(HttpResponse **ret_answer) {
        int r = storage_gc_response_new(0, 0, 0, ret_answer);
        return r < 0 ? r : 0;
}

static bool storage_content_type_is_valid(const char *s, size_t n) {
        if (n != strlen(s) || n > STORAGE_CONTENT_TYPE_MAX)
                return false;
        /* It becomes a header of the provider's request: no line breaks, no controls. */
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) s[i] < 0x20 || s[i] == 0x7f)
                        return false;
        return true;
}

int storage_request_parse(StorageRequestKind kind, json_object *body, StorageRequest *ret,
                          HttpResponse **ret_answer) {
        SidecarBody b = {};
        const char *storage = NULL;
        int r;

        assert(kind >= 0 && kind < _STORAGE_REQUEST_KIND_MAX);
        assert(ret);
        assert(ret_answer);

        r = sidecar_body_read(body, storage_request_fields[kind], &b, ret_answer);
        if (r <= 0)
                return r;

        if (b.storage) {
                r = http_storage_json(b.storage, &storage);
                if (r == -E2BIG)
                        return storage_answer_detail(HTTP_BAD_REQUEST, HTTP_DETAIL_STORAGE_TOO_LARGE,
                                                     ret_answer);
                if (r < 0)
                        return r;
        }

        if (kind == STORAGE_REQUEST_GC) {
                /* Nothing to sweep: no storage, or no age. The contract answers zeros for both. */
                if (!storage || b.max_age_seconds <= 0)
                        return storage_answer_zeros(ret_answer);

                *ret = (StorageRequest) {
                        .storage = storage,
                        .max_age_sec = b.max_age_seconds,
                };
                return 1;
        }

        if (!storage)
                return storage_answer_detail(HTTP_BAD_REQUEST, STORAGE_DETAIL_NOT_CONFIGURED, ret_answer);

        /* A bus string cannot hold a NUL, and the agent refuses longer keys with the same text. */
        if (json_member_string_length(body, "key") != strlen(b.key) || strlen(b.key) > STORAGE_KEY_MAX)
                return storage_answer_detail(HTTP_BAD_REQUEST, STORAGE_DETAIL_INVALID_KEY, ret_answer);

        if (kind == STORAGE_REQUEST_PUT) {
                /* As received: "\u0000text" is not empty. */
                size_t n = b.content_type ? json_member_string_length(body, "content_type") : 0;

                if (n == 0)
                        b.content_type = STORAGE_CONTENT_TYPE_DEFAULT;
                else if (!storage_content_type_is_valid(b.content_type, n))
                        return storage_answer_detail(HTTP_BAD_REQUEST, STORAGE_DETAIL_INVALID_CONTENT_TYPE,
                                                     ret_answer);
        }

        *ret = (StorageRequest) {
                .storage = storage,
                .key = b.key,
        };
        if (kind == STORAGE_REQUEST_PUT) {
                ret->content_type = b.content_type;
                /* The length as received: an embedded NUL must fail decoding, not end the text. */
                ret->data_base64 = b.data_base64;
                ret->data_base64_size = json_member_string_length(body, "data_base64");
                /* Absent, 0 or negative: the agent's default (3600 s); it caps the rest. */
                ret->expires_in = b.expires_in > 0 ? (uint64_t) b.expires_in : 0;
        }
        return 1;
}

int storage_data_memfd(const char *text, size_t n, size_t chunk, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        size_t used;
        int r;

        assert(text || n == 0);
        assert(chunk >= 4 && chunk % 4 == 0);
        assert(ret_fd);

        /* Judge the whole text first. Its meaningful part is whole quanta (the last one padded if
         * short), so steps of 'chunk' bytes decode the same on their own as within the whole; the
         * extra '=' Python ignores after it are not decoded at all. */
        r = base64_validate(text, n, &used, NULL);
        if (r < 0)
                return r;

        fd = memfd_new_empty("scopebox-object");
        if (fd < 0)
                return fd;

        for (size_t off = 0; off < used;) {
                _cleanup_free_ void *data = NULL;
                size_t l = MIN(chunk, used - off), size = 0;

                r = base64_decode(text + off, l, &data, &size);
                if (r < 0)
                        return r;
                r = write_all(fd, data, size);
                if (r < 0)
                        return r;
                off += l;
        }

        r = memfd_seal(fd);
        if (r < 0)
                return r;

        *ret_fd = TAKE_FD(fd);
        return 0;
}

static int storage_writer_respond(JsonWriter *w, HttpResponse **ret) {
        char *body;
        size_t n;

        body = json_writer_steal(w, &n);
        if (!body)
                return -ENOMEM;
        return http_response_new_take(HTTP_OK, body, n, ret);
}

static int json_writer_append_member(JsonWriter *w, const char *prefix, const char *value) {
        size_t n = strlen(value);
        int r;

        if (!utf8_is_valid_n(value, n))
                return -EBADMSG;
        r = json_writer_append_str(w, prefix);
        if (r < 0)
                return r;
        return json_writer_append_string(w, value, n);
}

int storage_put_response_new(const char *provider, const char *key, const char *url, uint64_t expires_in,
                             HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        assert(provider);
        assert(key);
        assert(url);
        assert(ret);

        if ((r = json_writer_append_member(&w, "{\"provider\":", provider)) < 0 ||
            (r = json_writer_append_member(&w, ",\"key\":", key)) < 0 ||
            (r = json_writer_append_member(&w, ",\"url\":", url)) < 0 ||
            (r = json_writer_appendf(&w, ",\"expires_in\":%" PRIu64 "}", expires_in)) < 0)
                return r;
        return storage_writer_respond(&w, ret);
}

int storage_delete_response_new(const char *key, HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        assert(key);
        assert(ret);

        if ((r = json_writer_append_member(&w, "{\"ok\":true,\"key\":", key)) < 0 ||
            (r = json_writer_append_str(&w, "}")) < 0)
                return r;
        return storage_writer_respond(&w, ret);
}

int storage_gc_response_new(uint64_t deleted, uint64_t scanned, uint64_t freed_bytes, HttpResponse **ret) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        assert(ret);

        r = json_writer_appendf(&w, "{\"deleted\":%" PRIu64 ",\"scanned\":%" PRIu64
                                ",\"freed_bytes\":%" PRIu64 "}", deleted, scanned, freed_bytes);
        if (r < 0)
                return r;
        return storage_writer_respond(&w, ret);
}

int storage_response_new_bus_error(StorageRequestKind kind, const sd_bus_error *e, HttpResponse **ret,
                                   bool *ret_internal) {
        const char *detail;

        assert(ret);

        if (ret_internal)
                *ret_internal = false;

        /* The contract: a sweep of storage that is not in effect, or that may not be used, finds
         * nothing. */
        if (kind == STORAGE_REQUEST_GC &&
            sd_bus_error_has_names(e, BUS_ERROR_STORAGE_NOT_CONFIGURED, BUS_ERROR_STORAGE_REFUSED))
                return storage_gc_response_new(0, 0, 0, ret);

        /* The agent's own errors, answered as everywhere (http-util.c). */
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_INVALID_ARGS, BUS_ERROR_STORAGE_FAILED,
                                   BUS_ERROR_STORAGE_NOT_CONFIGURED, BUS_ERROR_STORAGE_REFUSED,
                                   BUS_ERROR_POLICY_UNAVAILABLE))
                return http_response_new_bus_error(e, ret, ret_internal);

        /* Everything else is on our side. The generic texts name the session manager; sd-bus
         * answers a call timeout and a lost connection alike with NoReply. */
        if (ret_internal)
                *ret_internal = true;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_NO_REPLY, SD_BUS_ERROR_TIMEOUT))
                detail = "storage agent did not answer";
        else if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                        SD_BUS_ERROR_DISCONNECTED))
                detail = "storage agent unavailable";
        else
                detail = "internal error";
        return http_response_new_detail(HTTP_INTERNAL_SERVER_ERROR, detail, ret);
}

/* The handlers. */

/* Reads a successful reply into its answer. */
typedef int (*StorageAnswer)(sd_bus_message *reply, HttpResponse **ret);

static int storage_put_answer(sd_bus_message *reply, HttpResponse **ret) {
        const char *provider, *key, *url;
        uint64_t expires_in;
        int r;

        r = sd_bus_message_read(reply, "ssst", &provider, &key, &url, &expires_in);
        if (r < 0)
                return r;
        return storage_put_response_new(provider, key, url, expires_in, ret);
}

static int storage_delete_answer(sd_bus_message *reply, HttpResponse **ret) {
        const char *key;
        int r;

        r = sd_bus_message_read(reply, "s", &key);
        if (r < 0)
                return r;
        return storage_delete_response_new(key, ret);
}

static int storage_gc_answer(sd_bus_message *reply, HttpResponse **ret) {
        uint64_t deleted, scanned, freed_bytes;
        int r;

        r = sd_bus_message_read(reply, "ttt", &deleted, &scanned, &freed_bytes);
        if (r < 0)
                return r;
        return storage_gc_response_new(deleted, scanned, freed_bytes, ret);
}

/* The on_reply of each request: the answer to an error, or 'answer' for a success. */
static int storage_reply(HttpRequest *req, StorageRequestKind kind, sd_bus_message *reply,
                         StorageAnswer answer) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        bool internal = false;
        HttpResponse *resp;
        int r;

        if (e) {
                r = storage_response_new_bus_error(kind, e, &resp, &internal);
                if (r >= 0)
                        http_request_log_bus_error(req, e, internal);
        } else
                r = answer(reply, &resp);
        if (r < 0)
                return r;
        return http_request_reply(req, resp);
}

static int storage_put_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return storage_reply(req, STORAGE_REQUEST_PUT, reply, storage_put_answer);
}

static int storage_delete_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return storage_reply(req, STORAGE_REQUEST_DELETE, reply, storage_delete_answer);
}

static int storage_gc_on_reply(HttpRequest *req, sd_bus_message *reply) {
        return storage_reply(req, STORAGE_REQUEST_GC, reply, storage_gc_answer);
}

/* What each request is on the bus: the agent's method, and what answers its reply. */
static const struct {
        const char *method;
        HttpReplyHandler on_reply;
} storage_calls[_STORAGE_REQUEST_KIND_MAX] = {
        [STORAGE_REQUEST_PUT]    = { "PutObject",      storage_put_on_reply    },
        [STORAGE_REQUEST_DELETE] = { "DeleteObject",   storage_delete_on_reply },
        [STORAGE_REQUEST_GC]     = { "CollectGarbage", storage_gc_on_reply     },
};

/* POST /storage/put, /storage/delete and /storage/gc: the body checked, then the agent's method. */
static int storage_handle(HttpRequest *req, StorageRequestKind kind) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = -EBADF;
        const Config *config = &req->server->config;
        HttpResponse *answer;
        StorageRequest x;
        int r;

        r = storage_request_parse(kind, req->json, &x, &answer);
        if (r <= 0)
                return r < 0 ? r : http_request_reply(req, answer);

        if (kind == STORAGE_REQUEST_PUT) {
                /* The object crosses the bus as a sealed memfd, decoded into it piece by piece. */
                r = storage_data_memfd(x.data_base64, x.data_base64_size, STORAGE_DECODE_CHUNK, &fd);
                if (r == -EINVAL)
                        return http_request_reply_detail(req, HTTP_BAD_REQUEST,
                                                         STORAGE_DETAIL_INVALID_BASE64);
                if (r < 0)
                        return r;
        }

        r = storage_agent_new_call(req->server->bus, storage_calls[kind].method, &m);
        if (r < 0)
                return r;
        /* The message holds the storage block's credentials: never log it. */
        switch (kind) {
        case STORAGE_REQUEST_PUT:
                r = sd_bus_message_append(m, "sssht", x.storage, x.key, x.content_type, fd, x.expires_in);
                break;
        case STORAGE_REQUEST_DELETE:
                r = sd_bus_message_append(m, "ss", x.storage, x.key);
                break;
        default:
                r = sd_bus_message_append(m, "sx", x.storage, x.max_age_sec);
        }
        if (r < 0)
                return r;

        /* Everything the call needs is in the message now. The parsed body can be as large as the
         * upload: let it go rather than hold it while the agent transfers. */
        json_object_put(req->json);
        req->json = NULL;
        x = (StorageRequest) {};

        return http_request_call(req, m,
                                 kind == STORAGE_REQUEST_GC ? bus_timeout_storage_gc_usec(config)
                                                            : bus_timeout_storage_usec(config),
                                 storage_calls[kind].on_reply);
}

uint64_t http_storage_put_body_max(const Config *config) {
        return config->max_storage_body_bytes;
}

int http_storage_put(HttpRequest *req) {
        return storage_handle(req, STORAGE_REQUEST_PUT);
}

int http_storage_delete(HttpRequest *req) {
        return storage_handle(req, STORAGE_REQUEST_DELETE);
}

int http_storage_gc(HttpRequest *req) {
        return storage_handle(req, STORAGE_REQUEST_GC);
}
