/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JSON request bodies of the sidecar API (docs/api.md). Each member is declared once: its name
 * (the JSON member's and the C member's), its type, and whether a body that lists it must carry it
 * (a missing one is named in the 422) or may leave it out or null (the member keeps its zero). A
 * resource lists its body's members in the contract's order, which decides which missing member a
 * 422 names, and reads the body into a SidecarBody. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "http-util.h"
#include "json-util.h"

typedef struct SidecarBody {
        /* Strings and the storage block are borrowed from the body. POST /exec (session_id also
         * /exec/cancel and /files): */
        const char *session_id;
        const char *code;
        int64_t timeout_ms;
        bool report;
        bool stream;
        /* /files (data_base64 also /storage/put): */
        const char *path;
        const char *data_base64;
        /* /sessions (archive_key and storage also DELETE /sessions/{id}, storage also /storage): */
        int64_t idle_ttl_sec;
        const char *archive_key;
        bool stateful;
        bool discard;
        json_object *storage;
        /* /storage: */
        const char *key;
        const char *content_type;
        int64_t expires_in;
        int64_t max_age_seconds;
} SidecarBody;

#define SIDECAR_MEMBER(name, kind, flags) \
        { #name, JSON_FIELD_##kind, offsetof(SidecarBody, name), JSON_##flags }

#define BODY_SESSION_ID      SIDECAR_MEMBER(session_id, STRING, MANDATORY)
#define BODY_CODE            SIDECAR_MEMBER(code, STRING, MANDATORY)
#define BODY_TIMEOUT_MS      SIDECAR_MEMBER(timeout_ms, INT64, NULLABLE)
#define BODY_REPORT          SIDECAR_MEMBER(report, BOOL, NULLABLE)
#define BODY_STREAM          SIDECAR_MEMBER(stream, BOOL, NULLABLE)
#define BODY_PATH            SIDECAR_MEMBER(path, STRING, MANDATORY)
#define BODY_DATA_BASE64     SIDECAR_MEMBER(data_base64, STRING, MANDATORY)
#define BODY_IDLE_TTL_SEC    SIDECAR_MEMBER(idle_ttl_sec, INT64, NULLABLE)
#define BODY_ARCHIVE_KEY     SIDECAR_MEMBER(archive_key, STRING, NULLABLE)
#define BODY_STATEFUL        SIDECAR_MEMBER(stateful, BOOL, NULLABLE)
#define BODY_DISCARD         SIDECAR_MEMBER(discard, BOOL, NULLABLE)
/* A missing storage block is no schema error: the routes answer "not configured" or zeros for it. */
#define BODY_STORAGE         SIDECAR_MEMBER(storage, OBJECT, NULLABLE)
#define BODY_KEY             SIDECAR_MEMBER(key, STRING, MANDATORY)
#define BODY_CONTENT_TYPE    SIDECAR_MEMBER(content_type, STRING, NULLABLE)
#define BODY_EXPIRES_IN      SIDECAR_MEMBER(expires_in, INT64, NULLABLE)
#define BODY_MAX_AGE_SECONDS SIDECAR_MEMBER(max_age_seconds, INT64, MANDATORY)

/* Reads the members 'fields' lists (terminated by an empty entry) from 'body' into *ret, which the
 * caller initialized. Returns 1 when read, 0 when refused with the answer in *ret_error (no body:
 * 422 "missing"; a member missing or of the wrong type: 422 naming it), negative when the answer
 * could not be made. */
int sidecar_body_read(json_object *body, const JsonField fields[], SidecarBody *ret,
                      HttpResponse **ret_error);
/* Whether b->session_id, as received (a NUL in it counts), is a session id: 1, or 0 with a 400 in
 * *ret_error, negative when the answer could not be made. */
int sidecar_body_check_session_id(json_object *body, const SidecarBody *b, HttpResponse **ret_error);
