/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl: the settings of one invocation, the verbs, and the helpers they share. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include "bus-client.h"
#include "config.h"
#include "macro.h"

/* Exit statuses besides 0 and 1 (EXIT_FAILURE). */
#define CTL_EXIT_USAGE 2          /* unknown verb or option, missing argument */
#define CTL_EXIT_NO_SUCH_SESSION 4 /* as systemctl's "no such unit" */

typedef struct Ctl {
        bool json;
        bool stream;              /* exec --stream */
        bool legend;
        uint64_t timeout_ms;      /* exec --timeout; 0: the manager's default */
        int64_t max_age_sec;      /* gc --max-age */
        bool archive;             /* kill --archive */
        char **args;              /* the verb's arguments */
        int n_args;
        sd_bus *bus;              /* opened on first use */
} Ctl;

int verb_status(Ctl *c);
int verb_sessions(Ctl *c);
int verb_runs(Ctl *c);
int verb_inspect(Ctl *c);
int verb_kill(Ctl *c);
int verb_exec(Ctl *c);
int verb_gc(Ctl *c);
int verb_doctor(Ctl *c);
int verb_packages(Ctl *c);
int verb_archives(Ctl *c);
int verb_drain(Ctl *c);
int verb_undrain(Ctl *c);

/* Prints "scopeboxctl: <message>" on stderr; returns error (negative) for "return ctl_error(r, ...)".
 * %m in format is the error's text. */
int ctl_error(int error, const char *format, ...) _printf_(2, 3);

/* The system bus, connected once. */
int ctl_bus(Ctl *c, sd_bus **ret);

/* /etc/scopebox/scopebox.conf through the daemons' own parser. -EINVAL with *ret_error (owned). */
int ctl_load_config(Config *config, char **ret_error);

/* A bus error as an errno (NoSuchSession → -ENXIO), with its message printed. */
int ctl_bus_error(const sd_bus_error *e, int r, const char *what);

/* Properties.GetAll of 'interface' at 'path' of 'destination', read into 'base' with 'fields' (strings
 * point into the reply). *ret_reply is the reply once the call succeeded, also when reading it
 * failed; what the call failed with in 'error' (may be NULL). With auto_start false, a destination
 * that does not run is not started by bus activation. */
int ctl_get_all(sd_bus *bus, const char *destination, const char *path, const char *interface,
                bool auto_start, const BusDictField *fields, void *base, sd_bus_error *error,
                sd_bus_message **ret_reply);

/* Properties of a systemd unit: org.freedesktop.systemd1.Unit (UNIT_FIELDS) plus the type's own
 * interface, where the cgroup's live (UNIT_TYPE_FIELDS); bus-client.h says how the lists are used. */
#define UNIT_FIELDS(F, T)                                        \
        F(T, "LoadState",            s, load_state)              \
        F(T, "ActiveState",          s, active_state)            \
        F(T, "SubState",             s, sub_state)               \
        F(T, "ActiveEnterTimestamp", t, active_enter_usec)
/* The cgroup's numbers are UINT64_MAX where unknown. */
#define UNIT_TYPE_FIELDS(F, T)                                   \
        F(T, "MainPID",            u, main_pid)                  \
        F(T, "StatusText",         s, status_text)               \
        F(T, "MemoryCurrent",      t, memory_current)            \
        F(T, "TasksCurrent",       t, tasks_current)             \
        F(T, "MemoryMax",          t, memory_max)                \
        F(T, "TasksMax",           t, tasks_max)                 \
        F(T, "CPUUsageNSec",       t, cpu_usage_nsec)            \
        F(T, "CPUQuotaPerSecUSec", t, cpu_quota_per_sec_usec)
typedef struct UnitInfo {
        UNIT_FIELDS(BUS_DICT_MEMBER, UnitInfo)
        UNIT_TYPE_FIELDS(BUS_DICT_MEMBER, UnitInfo)
        sd_bus_message *replies[2];
} UnitInfo;
int unit_info_get(sd_bus *bus, const char *unit, UnitInfo *ret);
void unit_info_done(UnitInfo *u);

/* Session info of the manager's ListSessions/ListRunSandboxes/GetSession (docs/dbus-api.md): the
 * keys of a session's a{sv}. */
#define SESSION_INFO_FIELDS(F, T)                                \
        F(T, "state",            s, state)                       \
        F(T, "unit",             s, unit)                        \
        F(T, "created_usec",     t, created_usec)                \
        F(T, "last_active_usec", t, last_active_usec)            \
        F(T, "idle_ttl_usec",    t, idle_ttl_usec)               \
        F(T, "uid",              u, uid)                         \
        F(T, "runner_pid",       u, runner_pid)                  \
        F(T, "execs",            t, execs)                       \
        F(T, "exec_running",     b, exec_running)                \
        F(T, "queued",           u, queued)                      \
        F(T, "ephemeral",        b, ephemeral)                   \
        F(T, "pooled",           b, pooled)                      \
        F(T, "archive_key",      s, archive_key)
typedef struct SessionInfo {
        const char *id; /* the array's, not the dict's */
        SESSION_INFO_FIELDS(BUS_DICT_MEMBER, SessionInfo)
} SessionInfo;
/* Reads the a{sv} of one session. Strings stay owned by the message. */
int session_info_read(sd_bus_message *m, SessionInfo *ret);

/* Whether the bus name has an owner now (without activating it). */
int ctl_name_has_owner(sd_bus *bus, const char *name);

/* Output: tables for people, JSON for scripts. */
typedef struct Table Table;
int table_new(Table **ret, const char *first_header, ...);
int table_add_row(Table *t, const char *first_cell, ...);
/* Columns aligned; the header line first, "N entries listed." last, if asked for. */
void table_print(Table *t, FILE *f, bool header, bool footer);
Table *table_free(Table *t);

/* Where a listing's rows go as bus_message_read_array() reads them: the JSON array and the table
 * (--json prints the one, else the other), the bus for what a row asks further, the time of the
 * listing. */
typedef struct CtlRows {
        const Ctl *ctl;
        sd_bus *bus;
        json_object *array;
        Table *table;
        uint64_t now;
} CtlRows;
DEFINE_TRIVIAL_CLEANUP_FUNC(Table *, table_free);

/* Prints the object pretty and stable (keys in insertion order) on stdout. */
void json_print(json_object *o);
/* A uint64 as JSON: null when UINT64_MAX (unknown). */
json_object *json_uint64_or_null(uint64_t v);

/* "1.5G", "12M", "980K", "512B"; "-" for UINT64_MAX. */
const char *format_bytes(char *buf, size_t size, uint64_t bytes);
/* "3h 2min", "45s", "-" for UINT64_MAX. */
const char *format_duration(char *buf, size_t size, uint64_t usec);
/* A number, or "-" for UINT64_MAX. */
const char *format_u64(char *buf, size_t size, uint64_t v);
/* "90", "500ms", "30s", "5min", "2h", "7d", "1w": a bare number is in 'default_unit_usec'. */
int parse_time_span(const char *s, uint64_t default_unit_usec, uint64_t *ret_usec);

/* Session ids: 32 lowercase hex characters. Prints an error for anything else. */
int ctl_check_session_id(const char *id);
