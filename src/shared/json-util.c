/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* json-c helpers: bounded strict parsing and table-driven field dispatch. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "json-util.h"
#include "string-util.h"

int json_parse(const char *buf, size_t len, int max_depth, json_object **ret) {
        json_tokener *tok;
        json_object *o;
        enum json_tokener_error e;
        size_t consumed;
        int r;

        if (len > INT32_MAX)
                return -E2BIG;
        /* Also refuses invalid UTF-8: outside strings, any byte past ASCII is a syntax error. It
         * stops at the first bound exceeded, where a check of the whole buffer first would not. */
        r = json_validate_strict(buf, len, max_depth);
        if (r < 0)
                return r == -ERANGE ? -EBADMSG : r;

        tok = json_tokener_new_ex(max_depth);
        if (!tok)
                return -ENOMEM;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);

        o = json_tokener_parse_ex(tok, buf, (int) len);
        e = json_tokener_get_error(tok);
        if (!o && e == json_tokener_continue) {
                /* A top-level number or literal only ends at the end of input: say so. */
                o = json_tokener_parse_ex(tok, "", 1);
                e = json_tokener_get_error(tok);
                consumed = len;
        } else
                consumed = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);

        if (!o) {
                if (e == json_tokener_error_depth)
                        return -E2BIG;
                /* A literal "null" document parses to NULL with success. */
                if (e == json_tokener_success) {
                        *ret = NULL;
                        return 0;
                }
                return -EBADMSG;
        }
        if (e != json_tokener_success) {
                json_object_put(o);
                return -EBADMSG;
        }
        /* Only trailing whitespace may follow the document. */
        for (size_t i = consumed; i < len; i++)
                if (!strchr(" \t\r\n", buf[i])) {
                        json_object_put(o);
                        return -EBADMSG;
                }
        *ret = o;
        return 0;
}

static int json_dispatch_fail(JsonDispatchError *err, const char *field, const char *type, const char *msg) {
        *err = (JsonDispatchError) { field, type, msg };
        return -EINVAL;
}

/* The JSON type each kind of field takes, and the error when a member is of another. */
static const struct {
        json_type type;
        const char *error, *msg;
} json_field_types[] = {
        [JSON_FIELD_STRING] = { json_type_string, "string_type", "Input should be a valid string" },
        [JSON_FIELD_INT64] = { json_type_int, "int_type", "Input should be a valid integer" },
        [JSON_FIELD_BOOL] = { json_type_boolean, "bool_type", "Input should be a valid boolean" },
        [JSON_FIELD_OBJECT] = { json_type_object, "dict_type", "Input should be a valid dictionary" },
};

/* An integer, or a float without a fractional part. */
static int json_dispatch_int64(json_object *v, const JsonField *f, int64_t *p, JsonDispatchError *err) {
        if (json_object_is_type(v, json_type_int)) {
                errno = 0;
                int64_t i = json_object_get_int64(v);
                /* json-c saturates out-of-range values and sets errno. */
                if (errno == ERANGE || (i == INT64_MAX && json_object_get_uint64(v) != (uint64_t) INT64_MAX))
                        return json_dispatch_fail(
                                err, f->name, "int_parsing_size",
                                "Unable to parse input string as an integer, exceeded maximum size");
                *p = i;
                return 0;
        }
        if (json_object_is_type(v, json_type_double)) {
                double d = json_object_get_double(v);
                if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0)
                        return json_dispatch_fail(
                                err, f->name, "int_from_float",
                                "Input should be a valid integer, got a number with a fractional part");
                *p = (int64_t) d;
                return 0;
        }
        return json_dispatch_fail(err, f->name, json_field_types[JSON_FIELD_INT64].error,
                                  json_field_types[JSON_FIELD_INT64].msg);
}

/* A JSON null (v == NULL) is of no field's type. */
static int json_dispatch_one(json_object *v, const JsonField *f, void *base, JsonDispatchError *err) {
        void *p = (uint8_t *) base + f->offset;

        if ((size_t) f->kind >= ELEMENTSOF(json_field_types))
                return -EINVAL;
        if (f->kind == JSON_FIELD_INT64)
                return json_dispatch_int64(v, f, p, err);
        if (!json_object_is_type(v, json_field_types[f->kind].type))
                return json_dispatch_fail(err, f->name, json_field_types[f->kind].error,
                                          json_field_types[f->kind].msg);

        switch (f->kind) {
        case JSON_FIELD_STRING:
                *(const char **) p = json_object_get_string(v);
                break;
        case JSON_FIELD_BOOL:
                *(bool *) p = json_object_get_boolean(v);
                break;
        case JSON_FIELD_OBJECT:
                *(json_object **) p = v;
                break;
        default:
                return -EINVAL;
        }
        return 0;
}

int json_dispatch(json_object *o, const JsonField fields[], void *base, JsonDispatchError *err) {
        if (!json_object_is_type(o, json_type_object))
                return json_dispatch_fail(
                        err, NULL, "model_attributes_type",
                        "Input should be a valid dictionary or object to extract fields from");
        for (const JsonField *f = fields; f->name; f++) {
                json_object *v = NULL;
                int r;

                if (!json_object_object_get_ex(o, f->name, &v)) {
                        if (f->flags & JSON_MANDATORY)
                                return json_dispatch_fail(err, f->name, "missing", "Field required");
                        continue;
                }
                if (!v && (f->flags & JSON_NULLABLE))
                        continue;
                r = json_dispatch_one(v, f, base, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

json_object *json_object_new_string_len_safe(const char *s, size_t n) {
        if (n > INT32_MAX)
                return NULL;
        return json_object_new_string_len(s, (int) n);
}

int json_add(json_object *o, const char *key, json_object *v) {
        if (!v)
                return -ENOMEM;
        if (json_object_object_add(o, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

void json_add_checked(json_object *o, const char *key, json_object *v, int *error) {
        if (*error < 0) {
                json_object_put(v);
                return;
        }
        *error = json_add(o, key, v);
}
