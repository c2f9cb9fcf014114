/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* json-c helpers: bounded strict parsing and table-driven field dispatch. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "macro.h"

DEFINE_CLEANUP_FUNC(json_object *, json_object_put);
#define _cleanup_json_ _cleanup_(json_object_putp)

/* Bounds of every document json_parse() accepts, so that no request body can keep a daemon busy:
 * nesting, members of one object, and tokens (each value and each key counts one) of the whole
 * document. A request of the API has a few dozen tokens; the largest documents the daemons parse
 * (file lists of at most 500 entries) a few thousand. */
#define JSON_DEPTH_MAX   32
#define JSON_MEMBERS_MAX 1024U
#define JSON_TOKENS_MAX  65536U

typedef struct JsonLimits {
        int depth_max;
        size_t members_max;
        size_t tokens_max;
} JsonLimits;

/* Strict RFC 8259 check of a whole buffer: -EBADMSG for anything json-c would be lenient about
 * (quotes, comments, NaN, lone surrogates, trailing garbage) and for invalid UTF-8 in a string,
 * -EILSEQ for a \u0000 in a member name (C strings would cut it short and alias another),
 * -ENOTUNIQ for a duplicate key, -E2BIG when nesting exceeds max_depth or the document has more
 * than JSON_MEMBERS_MAX members in one object or JSON_TOKENS_MAX tokens, -ERANGE for absurd
 * numerals. Time is linear in the size, O(n log n) in the members of one object. */
int json_validate_strict(const char *buf, size_t len, int max_depth);
/* The same with explicit limits. */
int json_validate_strict_limits(const char *buf, size_t len, const JsonLimits *limits);
/* A short English description of an error of json_validate_strict() or json_parse(), for
 * messages to clients; NULL for other errors. */
const char *json_strict_error_to_string(int error) _pure_;

/* Parse exactly one JSON document covering the whole buffer, after json_validate_strict().
 * -EBADMSG for syntax errors or invalid UTF-8, -EILSEQ for a \u0000 in a member name, -ENOTUNIQ for
 * duplicate keys, -E2BIG when nesting exceeds max_depth or the document is too large. */
int json_parse(const char *buf, size_t len, int max_depth, json_object **ret);

typedef enum JsonFieldKind {
        JSON_FIELD_STRING,   /* const char * borrowed from the object */
        JSON_FIELD_INT64,    /* int64_t; integral floats accepted */
        JSON_FIELD_BOOL,     /* bool */
        JSON_FIELD_OBJECT,   /* json_object * borrowed */
} JsonFieldKind;

typedef enum JsonFieldFlags {
        JSON_MANDATORY = 1 << 0,
        JSON_NULLABLE = 1 << 1, /* null is accepted and leaves the default */
} JsonFieldFlags;

typedef struct JsonField {
        const char *name;
        JsonFieldKind kind;
        size_t offset;
        unsigned flags;
} JsonField;

/* What went wrong, in the vocabulary of pydantic's validation errors. */
typedef struct JsonDispatchError {
        const char *field; /* NULL when the document itself is wrong */
        const char *type;  /* "missing", "string_type", "int_type", "bool_type", "dict_type", ... */
        const char *msg;   /* "Field required", "Input should be a valid string", ... */
} JsonDispatchError;

/* Fill the struct at 'base' from the members of 'o'. Unknown members are ignored. Returns -EINVAL
 * and fills *err on a missing mandatory member or a member of the wrong type. */
int json_dispatch(json_object *o, const JsonField fields[], void *base, JsonDispatchError *err);

/* Convenience builders that return NULL on OOM. */
json_object *json_object_new_string_len_safe(const char *s, size_t n);

/* json_object_object_add() that can fail: 'v' is taken, a NULL 'v' is its failed allocation;
 * -ENOMEM then, or if the add fails. */
int json_add(json_object *o, const char *key, json_object *v);

/* json_add() for messages whose every member matters (the manager's requests to the
 * runner, its state records): 'v' is taken, a NULL 'v' is its failed allocation; the first
 * failure is kept in *error (0 to begin with) and later adds do nothing, so a message is checked
 * once, after its last member, and never goes out with one silently missing. */
void json_add_checked(json_object *o, const char *key, json_object *v, int *error);
