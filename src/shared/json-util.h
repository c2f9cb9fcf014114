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

#define JSON_DEPTH_MAX 32

/* Strict RFC 8259 check of a whole buffer: -EBADMSG for anything json-c would be lenient about
 * (quotes, comments, NaN, lone surrogates, trailing garbage), -ENOTUNIQ for a duplicate key,
 * -E2BIG when nesting exceeds max_depth, -ERANGE for absurd numerals. Input must be UTF-8. */
int json_validate_strict(const char *buf, size_t len, int max_depth);

/* Parse exactly one JSON document covering the whole buffer, after json_validate_strict().
 * -EBADMSG for syntax errors or invalid UTF-8, -ENOTUNIQ for duplicate keys, -E2BIG when nesting
 * exceeds max_depth. */
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
