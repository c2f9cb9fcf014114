/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The /files resources: request validation and response building, free of MHD and D-Bus for unit tests. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <json-c/json.h>

#include "bus-contract.h"
#include "config.h"
#include "http-util.h"

/* Longest path the gateway forwards, in bytes; the manager refuses longer ones as well. */
#define FILES_PATH_MAX 4096U
/* Most entries /files/list returns (the contract's number, not configurable). */
#define FILES_LIST_MAX 500U

#define FILES_DETAIL_PATH_OUTSIDE "path must be under /workspace"
#define FILES_DETAIL_PATH_TOO_LONG "path too long"
#define FILES_DETAIL_INVALID_BASE64 "invalid base64"
#define FILES_DETAIL_TOO_LARGE BUS_MESSAGE_FILE_TOO_LARGE
#define FILES_DETAIL_NOT_FOUND BUS_MESSAGE_FILE_NOT_FOUND

typedef enum FilesRequestKind {
        FILES_REQUEST_WRITE,    /* POST /files: session_id, path, data_base64 */
        FILES_REQUEST_READ,     /* POST /files/get: session_id, path */
        FILES_REQUEST_SESSION,  /* POST /files/list, /files/reset-inputs: session_id */
        _FILES_REQUEST_KIND_MAX,
} FilesRequestKind;

typedef struct FilesRequest {
        const char *session_id; /* borrowed from the JSON body */
        const char *path;       /* borrowed; NULL for FILES_REQUEST_SESSION */
        void *data;             /* the decoded upload (owned), FILES_REQUEST_WRITE only */
        size_t data_size;
} FilesRequest;

void files_request_done(FilesRequest *x);

/* Validates a body in the reference service's order: schema (422), session id (400), then for
 * uploads the size from the base64 text's length (413), strict base64 (400) and the decoded size
 * (413), then the path as far as the bus can carry it (400; the manager checks the rest). On a
 * client error returns a negative errno with the response to send in *ret_error; on an internal
 * error *ret_error stays NULL. */
int files_request_parse(FilesRequestKind kind, json_object *body, const Config *config, FilesRequest *ret,
                        HttpResponse **ret_error);

/* The size a base64 text of 'n' bytes decodes to if it is well-formed: 3 bytes per 4 data characters, 1 or 2
 * for a short last quantum. Lets a text be refused for its size before memory is spent on decoding it (a
 * malformed one is refused by the decoder anyway). */
uint64_t files_upload_size(const char *text, size_t n);

/* Answers a failed file call. Like http_response_new_bus_error(), but a missing file always gets
 * the contract's text (404 "file not found"), and an oversized one without a message "file too
 * large". */
int files_response_new_bus_error(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);

/* /files/reset-inputs: 200 {"ok":true,"session_gone":false} on success (e == NULL), 200
 * {"ok":false,"session_gone":true} for a session that is gone, the usual mapping otherwise. */
int files_reset_inputs_response_new(const sd_bus_error *e, HttpResponse **ret, bool *ret_internal);

/* /files/get: 200 {"data_base64":"..."}, encoded straight into the body. */
int files_read_response_new(const void *data, size_t size, HttpResponse **ret);

typedef struct FilesEntry {
        const char *path;       /* relative to /workspace */
        uint64_t size;
} FilesEntry;

/* /files/list: 200 {"files":[{"path":...,"size":...},...]} in the given order. -EBADMSG for more
 * than FILES_LIST_MAX entries or a path that is empty or not UTF-8. */
int files_list_response_new(const FilesEntry *entries, size_t n, HttpResponse **ret);
