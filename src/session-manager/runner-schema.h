/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Messages of the manager ⇄ runner channel as data. A message is a table of members — JSON name,
 * type, bounds, and where the value lives in the C struct that both sides use — from which one
 * function builds the JSON object and one parses and checks it. runner-protocol.c declares every
 * message of the channel once; neither side spells a member name or checks a bound by hand. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

typedef enum SchemaKind {
        SCHEMA_STRING, /* const char *: NULL is absent; parsed strings are borrowed from the object */
        SCHEMA_U64, /* uint64_t */
        SCHEMA_I64, /* int64_t */
        SCHEMA_INT, /* int */
        SCHEMA_U32, /* uint32_t */
        SCHEMA_BOOL, /* bool: absent is false */
        SCHEMA_OBJECT, /* a struct of type 'sub' at 'offset' */
        SCHEMA_ARRAY, /* 'sub' structs: the pointer at 'offset', a size_t count at 'aux_offset' */
} SchemaKind;

typedef enum SchemaFlags {
        SCHEMA_MANDATORY = 1 << 0, /* parse: its absence is an error; build: always sent */
        SCHEMA_ALWAYS = 1 << 1, /* build: sent even when false; parse: may be absent */
        SCHEMA_PRESENCE = 1 << 2, /* a bool at 'aux_offset' says whether it is there (both ways) */
        SCHEMA_PRINTABLE = 1 << 3, /* strings: one line of printable characters */
} SchemaFlags;

typedef struct SchemaMessage SchemaMessage;

typedef struct SchemaField {
        const char *name;
        SchemaKind kind;
        unsigned flags;
        size_t offset;
        size_t aux_offset;
        /* Numbers: the range allowed. Strings: 'max' is the longest length in bytes. Arrays: 'max'
         * is the most elements. 0 and 0 mean: the type's own range (no string or array bound). */
        int64_t min, max;
        const SchemaMessage *sub;
} SchemaField;

typedef enum SchemaMessageKind {
        SCHEMA_NESTED, /* an object inside another */
        SCHEMA_REQUEST, /* "op": its name, first */
        SCHEMA_REPLY, /* "ok": true, first */
        SCHEMA_ERROR, /* "ok": false, first */
} SchemaMessageKind;

struct SchemaMessage {
        const char *name; /* a request's "op" */
        SchemaMessageKind kind;
        size_t size; /* of its struct (arrays of it) */
        const SchemaField *fields; /* ends with a member whose name is NULL */
};

/* Defaults: when neither MANDATORY nor ALWAYS is set, strings go when not NULL, bools when true,
 * numbers and objects always, arrays when their count is not 0. */

/* Builds the object of 'm' from the struct at 'data', its "op" or "ok" first (by its kind).
 * -ENOMEM, or -ERANGE for a value the declaration does not allow (our bug: nothing is sent). The
 * caller owns *ret. */
int schema_build(const SchemaMessage *m, const void *data, json_object **ret);

/* Fills the struct at 'data' (zeroed first) from 'o'. Unknown members ("op" and "ok" too) are
 * ignored: the other side may be newer. -EBADMSG on a missing mandatory member, a wrong type or a
 * value out of bounds, with the member's name in *ret_field (may be NULL); -ENOMEM. Strings point
 * into 'o'; arrays are allocated: schema_done() frees them, also after a failure. */
int schema_parse(const SchemaMessage *m, json_object *o, void *data, const char **ret_field);
void schema_done(const SchemaMessage *m, void *data);
