/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Building and parsing the runner channel's messages from their declarations (runner-schema.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "alloc-util.h"
#include "json-util.h"
#include "macro.h"
#include "runner-schema.h"
#include "string-util.h"

#define FIELD_AT(data, offset, type) ((type *) ((uint8_t *) (data) + (offset)))
#define CFIELD_AT(data, offset, type) ((const type *) ((const uint8_t *) (data) + (offset)))

/* ---- numbers ---- */

static void schema_range(const SchemaField *f, int64_t *ret_min, int64_t *ret_max) {
        int64_t min = INT64_MIN, max = INT64_MAX;

        switch (f->kind) {
        case SCHEMA_U64:
                min = 0;
                break;
        case SCHEMA_INT:
                min = INT32_MIN;
                max = INT32_MAX;
                break;
        case SCHEMA_U32:
                min = 0;
                max = UINT32_MAX;
                break;
        default:
                break;
        }
        if (f->min != 0 || f->max != 0) {
                min = MAX(min, f->min);
                max = MIN(max, f->max);
        }
        *ret_min = min;
        *ret_max = max;
}

/* The number at the field as a signed value; -ERANGE when a uint64_t does not fit. */
static int schema_number_load(const SchemaField *f, const void *data, int64_t *ret) {
        switch (f->kind) {
        case SCHEMA_U64: {
                uint64_t v = *CFIELD_AT(data, f->offset, uint64_t);
                if (v > INT64_MAX)
                        return -ERANGE;
                *ret = (int64_t) v;
                return 0;
        }
        case SCHEMA_I64:
                *ret = *CFIELD_AT(data, f->offset, int64_t);
                return 0;
        case SCHEMA_INT:
                *ret = *CFIELD_AT(data, f->offset, int);
                return 0;
        case SCHEMA_U32:
                *ret = *CFIELD_AT(data, f->offset, uint32_t);
                return 0;
        default:
                return -EINVAL;
        }
}

static void schema_number_store(const SchemaField *f, void *data, int64_t v) {
        switch (f->kind) {
        case SCHEMA_U64:
                *FIELD_AT(data, f->offset, uint64_t) = (uint64_t) v;
                break;
        case SCHEMA_I64:
                *FIELD_AT(data, f->offset, int64_t) = v;
                break;
        case SCHEMA_INT:
                *FIELD_AT(data, f->offset, int) = (int) v;
                break;
        case SCHEMA_U32:
                *FIELD_AT(data, f->offset, uint32_t) = (uint32_t) v;
                break;
        default:
                break;
        }
}

static bool schema_kind_is_number(SchemaKind k) {
        return k == SCHEMA_U64 || k == SCHEMA_I64 || k == SCHEMA_INT || k == SCHEMA_U32;
}

/* ---- building ---- */

static int schema_build_object(const SchemaMessage *m, const void *data, json_object *o);

/* Whether the member goes out at all. */
static bool schema_field_is_sent(const SchemaField *f, const void *data) {
        if (f->flags & SCHEMA_PRESENCE)
                return *CFIELD_AT(data, f->aux_offset, bool);
        if (f->flags & (SCHEMA_MANDATORY | SCHEMA_ALWAYS))
                return true;
        switch (f->kind) {
        case SCHEMA_STRING:
                return *CFIELD_AT(data, f->offset, const char *) != NULL;
        case SCHEMA_BOOL:
                return *CFIELD_AT(data, f->offset, bool);
        case SCHEMA_ARRAY:
                return *CFIELD_AT(data, f->aux_offset, size_t) > 0;
        default:
                return true;
        }
}

static bool schema_string_allowed(const SchemaField *f, const char *s) {
        size_t len = strlen(s);

        if (f->max > 0 && len > (uint64_t) f->max)
                return false;
        if ((f->flags & SCHEMA_PRINTABLE) && !string_is_printable_line(s, len))
                return false;
        return utf8_is_valid_n(s, len);
}

static int schema_build_array(const SchemaField *f, const void *data, json_object **ret) {
        const uint8_t *items = *CFIELD_AT(data, f->offset, const uint8_t *);
        size_t n = *CFIELD_AT(data, f->aux_offset, size_t);
        _cleanup_json_ json_object *a = NULL;
        int r;

        if (f->max > 0 && n > (uint64_t) f->max)
                return -ERANGE;
        if (n > 0 && !items)
                return -EINVAL;
        a = json_object_new_array_ext((int) MIN(n, (size_t) INT32_MAX));
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_new_object();

                if (!e)
                        return -ENOMEM;
                r = schema_build_object(f->sub, items + i * f->sub->size, e);
                if (r >= 0 && json_object_array_add(a, e) < 0)
                        r = -ENOMEM;
                if (r < 0) {
                        json_object_put(e);
                        return r;
                }
        }
        *ret = TAKE_PTR(a);
        return 0;
}

static int schema_build_value(const SchemaField *f, const void *data, json_object **ret) {
        int64_t v, min, max;
        int r;

        if (schema_kind_is_number(f->kind)) {
                r = schema_number_load(f, data, &v);
                if (r < 0)
                        return r;
                schema_range(f, &min, &max);
                if (v < min || v > max)
                        return -ERANGE;
                *ret = f->kind == SCHEMA_INT ? json_object_new_int((int32_t) v) : json_object_new_int64(v);
                return *ret ? 0 : -ENOMEM;
        }
        switch (f->kind) {
        case SCHEMA_STRING: {
                const char *s = *CFIELD_AT(data, f->offset, const char *);

                if (!s || !schema_string_allowed(f, s))
                        return -ERANGE;
                *ret = json_object_new_string(s);
                return *ret ? 0 : -ENOMEM;
        }
        case SCHEMA_BOOL:
                *ret = json_object_new_boolean(*CFIELD_AT(data, f->offset, bool));
                return *ret ? 0 : -ENOMEM;
        case SCHEMA_OBJECT: {
                _cleanup_json_ json_object *o = json_object_new_object();

                if (!o)
                        return -ENOMEM;
                r = schema_build_object(f->sub, (const uint8_t *) data + f->offset, o);
                if (r < 0)
                        return r;
                *ret = TAKE_PTR(o);
                return 0;
        }
        case SCHEMA_ARRAY:
                return schema_build_array(f, data, ret);
        default:
                return -EINVAL;
        }
}

static int schema_build_object(const SchemaMessage *m, const void *data, json_object *o) {
        for (const SchemaField *f = m->fields; f->name; f++) {
                json_object *v = NULL;
                int r;

                if (!schema_field_is_sent(f, data))
                        continue;
                r = schema_build_value(f, data, &v);
                if (r < 0)
                        return r;
                r = json_add(o, f->name, v);
                if (r < 0)
                        return r;
        }
        return 0;
}

int schema_build(const SchemaMessage *m, const void *data, json_object **ret) {
        _cleanup_json_ json_object *o = json_object_new_object();
        int r = 0;

        if (!o)
                return -ENOMEM;
        if (m->kind == SCHEMA_REQUEST)
                r = json_add(o, "op", json_object_new_string(m->name));
        else if (m->kind != SCHEMA_NESTED)
                r = json_add(o, "ok", json_object_new_boolean(m->kind == SCHEMA_REPLY));
        if (r < 0)
                return r;
        r = schema_build_object(m, data, o);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- parsing ---- */

static int schema_parse_object(const SchemaMessage *m, json_object *o, void *data, const char **ret_field);

static int schema_parse_array(const SchemaField *f, json_object *v, void *data, const char **ret_field) {
        size_t n;
        uint8_t *items;
        int r;

        if (!json_object_is_type(v, json_type_array))
                return -EBADMSG;
        n = json_object_array_length(v);
        if (f->max > 0 && n > (uint64_t) f->max)
                return -EBADMSG;
        items = calloc(n + 1, f->sub->size);
        if (!items)
                return -ENOMEM;
        /* Owned by the struct from here: schema_done() frees what was parsed so far. */
        *FIELD_AT(data, f->offset, uint8_t *) = items;
        for (size_t i = 0; i < n; i++) {
                r = schema_parse_object(f->sub, json_object_array_get_idx(v, i), items + i * f->sub->size,
                                        ret_field);
                *FIELD_AT(data, f->aux_offset, size_t) = i + 1;
                if (r < 0)
                        return r;
        }
        return 0;
}

static int schema_parse_value(const SchemaField *f, json_object *v, void *data, const char **ret_field) {
        int64_t x, min, max;

        if (schema_kind_is_number(f->kind)) {
                if (!json_object_is_type(v, json_type_int))
                        return -EBADMSG;
                x = json_object_get_int64(v);
                schema_range(f, &min, &max);
                if (x < min || x > max)
                        return -EBADMSG;
                schema_number_store(f, data, x);
                return 0;
        }
        switch (f->kind) {
        case SCHEMA_STRING: {
                const char *s = json_object_get_string(v);

                if (!json_object_is_type(v, json_type_string) ||
                    (size_t) json_object_get_string_len(v) != strlen(s) || !schema_string_allowed(f, s))
                        return -EBADMSG;
                *FIELD_AT(data, f->offset, const char *) = s;
                return 0;
        }
        case SCHEMA_BOOL:
                if (!json_object_is_type(v, json_type_boolean))
                        return -EBADMSG;
                *FIELD_AT(data, f->offset, bool) = json_object_get_boolean(v);
                return 0;
        case SCHEMA_OBJECT:
                return schema_parse_object(f->sub, v, (uint8_t *) data + f->offset, ret_field);
        case SCHEMA_ARRAY:
                return schema_parse_array(f, v, data, ret_field);
        default:
                return -EINVAL;
        }
}

static int schema_parse_object(const SchemaMessage *m, json_object *o, void *data, const char **ret_field) {
        if (!json_object_is_type(o, json_type_object))
                return -EBADMSG;
        for (const SchemaField *f = m->fields; f->name; f++) {
                json_object *v;
                int r;

                if (!json_object_object_get_ex(o, f->name, &v)) {
                        if (f->flags & SCHEMA_MANDATORY) {
                                if (ret_field)
                                        *ret_field = f->name;
                                return -EBADMSG;
                        }
                        continue;
                }
                r = schema_parse_value(f, v, data, ret_field);
                if (r < 0) {
                        /* The innermost member is named; an outer one only when nothing deeper was. */
                        if (ret_field &&
                            (!*ret_field || (f->kind != SCHEMA_OBJECT && f->kind != SCHEMA_ARRAY)))
                                *ret_field = f->name;
                        return r;
                }
                if (f->flags & SCHEMA_PRESENCE)
                        *FIELD_AT(data, f->aux_offset, bool) = true;
        }
        return 0;
}

int schema_parse(const SchemaMessage *m, json_object *o, void *data, const char **ret_field) {
        if (ret_field)
                *ret_field = NULL;
        memset(data, 0, m->size);
        return schema_parse_object(m, o, data, ret_field);
}

void schema_done(const SchemaMessage *m, void *data) {
        for (const SchemaField *f = m->fields; f->name; f++) {
                if (f->kind == SCHEMA_OBJECT)
                        schema_done(f->sub, (uint8_t *) data + f->offset);
                else if (f->kind == SCHEMA_ARRAY) {
                        uint8_t **items = FIELD_AT(data, f->offset, uint8_t *);
                        size_t *n = FIELD_AT(data, f->aux_offset, size_t);

                        for (size_t i = 0; *items && i < *n; i++)
                                schema_done(f->sub, *items + i * f->sub->size);
                        *items = mfree(*items);
                        *n = 0;
                }
        }
}
