/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl's shared helpers: errors, the bus, systemd unit properties, tables, JSON, formatting. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "id.h"
#include "parse-util.h"
#include "string-util.h"

int ctl_error(int error, const char *format, ...) {
        va_list ap;

        errno = abs(error);
        fputs("scopeboxctl: ", stderr);
        va_start(ap, format);
        vfprintf(stderr, format, ap);
        va_end(ap);
        fputc('\n', stderr);
        return -abs(error);
}

int ctl_bus(Ctl *c, sd_bus **ret) {
        int r;

        if (!c->bus) {
                r = sd_bus_open_system(&c->bus);
                if (r < 0)
                        return ctl_error(r, "Failed to connect to the system bus: %m");
        }
        *ret = c->bus;
        return 0;
}

int ctl_load_config(Config *config, char **ret_error) {
        return config_load(config, SCOPEBOX_CONFIG_FILE, ret_error);
}

int ctl_bus_error(const sd_bus_error *e, int r, const char *what) {
        if (sd_bus_error_has_name(e, BUS_ERROR_NO_SUCH_SESSION))
                return ctl_error(ENXIO, "%s: no such session.", what);
        if (sd_bus_error_is_set(e))
                return ctl_error(r, "%s: %s", what, e->message ?: e->name);
        return ctl_error(r, "%s: %m", what);
}

int ctl_name_has_owner(sd_bus *bus, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int has, r;

        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", &e, &reply, "s", name);
        if (r < 0)
                return r;
        r = sd_bus_message_read(reply, "b", &has);
        return r < 0 ? r : has;
}

int ctl_get_all(sd_bus *bus, const char *destination, const char *path, const char *interface,
                bool auto_start, const BusDictField *fields, void *base, sd_bus_error *error,
                sd_bus_message **ret_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = sd_bus_message_new_method_call(bus, &m, destination, path, "org.freedesktop.DBus.Properties",
                                           "GetAll");
        if (r >= 0)
                r = sd_bus_message_set_auto_start(m, auto_start);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", interface);
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, error, ret_reply);
        if (r < 0)
                return r;
        return bus_message_read_dict(*ret_reply, fields, base);
}

int ctl_check_session_id(const char *id) {
        if (!session_id_is_valid(id))
                return ctl_error(ENXIO,
                                 "'%s' is not a session id (32 lowercase hex digits): no such session.", id);
        return 0;
}

/* ---- systemd units ---- */

static const BusDictField unit_fields[] = {
        UNIT_FIELDS(BUS_DICT_FIELD, UnitInfo)
        {}
};

static const BusDictField unit_type_fields[] = {
        UNIT_TYPE_FIELDS(BUS_DICT_FIELD, UnitInfo)
        {}
};

static const char *unit_type_interface(const char *unit) {
        static const char *const types[][2] = {
                { ".service", "org.freedesktop.systemd1.Service" },
                { ".scope",   "org.freedesktop.systemd1.Scope"   },
                { ".socket",  "org.freedesktop.systemd1.Socket"  },
                { ".slice",   "org.freedesktop.systemd1.Slice"   },
        };
        for (size_t i = 0; i < ELEMENTSOF(types); i++)
                if (endswith(unit, types[i][0]))
                        return types[i][1];
        return NULL;
}

int unit_info_get(sd_bus *bus, const char *unit, UnitInfo *ret) {
        _cleanup_free_ char *path = NULL;
        const char *interface;
        int r;

        /* Asking for the object path loads the unit if it isn't (as systemctl show does); that
         * starts nothing. */
        r = sd_bus_path_encode("/org/freedesktop/systemd1/unit", unit, &path);
        if (r < 0)
                return r;

        *ret = (UnitInfo) {
                .memory_current = UINT64_MAX,
                .tasks_current = UINT64_MAX,
                .memory_max = UINT64_MAX,
                .tasks_max = UINT64_MAX,
                .cpu_usage_nsec = UINT64_MAX,
                .cpu_quota_per_sec_usec = UINT64_MAX,
        };
        r = ctl_get_all(bus, "org.freedesktop.systemd1", path, "org.freedesktop.systemd1.Unit", true,
                        unit_fields, ret, NULL, &ret->replies[0]);
        if (r >= 0 && (interface = unit_type_interface(unit)))
                r = ctl_get_all(bus, "org.freedesktop.systemd1", path, interface, true, unit_type_fields,
                                ret, NULL, &ret->replies[1]);
        if (r < 0) {
                unit_info_done(ret);
                return r;
        }
        return 0;
}

void unit_info_done(UnitInfo *u) {
        for (size_t i = 0; i < ELEMENTSOF(u->replies); i++)
                u->replies[i] = sd_bus_message_unref(u->replies[i]);
}

/* ---- sessions ---- */

static const BusDictField session_fields[] = {
        SESSION_INFO_FIELDS(BUS_DICT_FIELD, SessionInfo)
        {}
};

int session_info_read(sd_bus_message *m, SessionInfo *ret) {
        const char *id = ret->id;

        *ret = (SessionInfo) { .id = id, .state = "", .unit = "", .archive_key = "" };
        return bus_message_read_dict(m, session_fields, ret);
}

/* ---- tables ---- */

#define TABLE_COLUMNS_MAX 12

struct Table {
        size_t n_columns;
        size_t n_rows;     /* including the header */
        char **cells;      /* n_rows * n_columns */
};

static int table_add_cells(Table *t, const char *first, va_list ap) {
        char **cells;

        cells = reallocarray(t->cells, (t->n_rows + 1) * t->n_columns, sizeof(char *));
        if (!cells)
                return -ENOMEM;
        t->cells = cells;
        for (size_t i = 0; i < t->n_columns; i++) {
                const char *s = i == 0 ? first : va_arg(ap, const char *);
                cells[t->n_rows * t->n_columns + i] = strdup(strempty(s));
                if (!cells[t->n_rows * t->n_columns + i]) {
                        for (size_t j = 0; j < i; j++)
                                free(cells[t->n_rows * t->n_columns + j]);
                        return -ENOMEM;
                }
        }
        t->n_rows++;
        return 0;
}

int table_new(Table **ret, const char *first_header, ...) {
        _cleanup_(table_freep) Table *t = NULL;
        va_list ap;
        int r;

        t = calloc(1, sizeof(Table));
        if (!t)
                return -ENOMEM;
        /* Headers end with NULL; count them first. */
        va_start(ap, first_header);
        for (const char *h = first_header; h; h = va_arg(ap, const char *))
                t->n_columns++;
        va_end(ap);
        assert(t->n_columns > 0 && t->n_columns <= TABLE_COLUMNS_MAX);

        va_start(ap, first_header);
        r = table_add_cells(t, first_header, ap);
        va_end(ap);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(t);
        return 0;
}

int table_add_row(Table *t, const char *first_cell, ...) {
        va_list ap;
        int r;

        va_start(ap, first_cell);
        r = table_add_cells(t, first_cell, ap);
        va_end(ap);
        return r;
}

void table_print(Table *t, FILE *f, bool header, bool footer) {
        size_t width[TABLE_COLUMNS_MAX] = {};

        for (size_t row = header ? 0 : 1; row < t->n_rows; row++)
                for (size_t col = 0; col < t->n_columns; col++)
                        width[col] = MAX(width[col], strlen(t->cells[row * t->n_columns + col]));

        for (size_t row = header ? 0 : 1; row < t->n_rows; row++) {
                for (size_t col = 0; col < t->n_columns; col++) {
                        const char *s = t->cells[row * t->n_columns + col];
                        if (col + 1 == t->n_columns)
                                fputs(s, f);
                        else
                                fprintf(f, "%-*s ", (int) width[col], s);
                }
                fputc('\n', f);
        }
        if (footer)
                fprintf(f, "\n%zu %s listed.\n", t->n_rows - 1, t->n_rows == 2 ? "entry" : "entries");
}

Table *table_free(Table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_rows * t->n_columns; i++)
                free(t->cells[i]);
        free(t->cells);
        return mfree(t);
}

/* ---- JSON ---- */

void json_print(json_object *o) {
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE));
}

json_object *json_uint64_or_null(uint64_t v) {
        return v == UINT64_MAX ? NULL : json_object_new_uint64(v);
}

/* ---- formatting ---- */

const char *format_bytes(char *buf, size_t size, uint64_t bytes) {
        static const char suffixes[] = "KMGTPE";

        if (bytes == UINT64_MAX)
                return "-";
        if (bytes < 1024) {
                snprintf(buf, size, "%" PRIu64 "B", bytes);
                return buf;
        }
        for (size_t i = 0; suffixes[i]; i++) {
                uint64_t unit = 1ULL << (10 * (i + 1));
                if (bytes < unit * 1024 || !suffixes[i + 1]) {
                        if (bytes < unit * 10)
                                snprintf(buf, size, "%.1f%c", (double) bytes / (double) unit, suffixes[i]);
                        else
                                snprintf(buf, size, "%" PRIu64 "%c", bytes / unit, suffixes[i]);
                        return buf;
                }
        }
        return buf;
}

const char *format_duration(char *buf, size_t size, uint64_t usec) {
        uint64_t s = usec / USEC_PER_SEC;

        if (usec == UINT64_MAX)
                return "-";
        if (s < 60)
                snprintf(buf, size, "%" PRIu64 "s", s);
        else if (s < 3600)
                snprintf(buf, size, "%" PRIu64 "min %" PRIu64 "s", s / 60, s % 60);
        else if (s < 86400)
                snprintf(buf, size, "%" PRIu64 "h %" PRIu64 "min", s / 3600, s % 3600 / 60);
        else
                snprintf(buf, size, "%" PRIu64 "d %" PRIu64 "h", s / 86400, s % 86400 / 3600);
        return buf;
}

const char *format_u64(char *buf, size_t size, uint64_t v) {
        if (v == UINT64_MAX)
                return "-";
        snprintf(buf, size, "%" PRIu64, v);
        return buf;
}

int parse_time_span(const char *s, uint64_t default_unit_usec, uint64_t *ret_usec) {
        static const struct {
                const char *suffix;
                uint64_t usec;
        } units[] = {
                { "ms",  USEC_PER_MSEC },
                { "s",   USEC_PER_SEC },
                { "min", 60 * USEC_PER_SEC },
                { "m",   60 * USEC_PER_SEC },
                { "h",   3600 * USEC_PER_SEC },
                { "d",   86400 * USEC_PER_SEC },
                { "w",   7 * 86400 * USEC_PER_SEC },
        };
        uint64_t unit = default_unit_usec, n;
        size_t digits = strspn(s, "0123456789");
        char number[24];

        if (digits == 0 || digits >= sizeof(number))
                return -EINVAL;
        if (s[digits]) {
                unit = 0;
                for (size_t i = 0; i < ELEMENTSOF(units) && !unit; i++)
                        if (streq(s + digits, units[i].suffix))
                                unit = units[i].usec;
                if (!unit)
                        return -EINVAL;
        }
        memcpy(number, s, digits);
        number[digits] = 0;
        if (safe_atou64(number, &n) < 0 || n > UINT64_MAX / 2 / unit)
                return -ERANGE;
        *ret_usec = n * unit;
        return 0;
}
