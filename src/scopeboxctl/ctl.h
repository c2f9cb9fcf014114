/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl: the settings of one invocation, the verbs, and the helpers they share. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

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

/* Properties of a systemd unit: org.freedesktop.systemd1.Unit plus the type's own interface. */
typedef struct UnitInfo {
        const char *load_state;
        const char *active_state;
        const char *sub_state;
        uint32_t main_pid;
        const char *status_text;
        uint64_t memory_current;  /* UINT64_MAX: unknown */
        uint64_t tasks_current;   /* UINT64_MAX: unknown */
        uint64_t memory_max;
        uint64_t tasks_max;
        uint64_t cpu_usage_nsec;
        uint64_t cpu_quota_per_sec_usec;
        uint64_t active_enter_usec;
        sd_bus_message *replies[2];
} UnitInfo;
int unit_info_get(sd_bus *bus, const char *unit, UnitInfo *ret);
void unit_info_done(UnitInfo *u);

/* Session info of the manager's ListSessions/ListRunSandboxes/GetSession (docs/dbus-api.md). */
typedef struct SessionInfo {
        const char *id;
        const char *state;
        const char *unit;
        uint64_t created_usec;
        uint64_t last_active_usec;
        uint64_t idle_ttl_usec;
        uint32_t uid;
        uint32_t runner_pid;
        uint64_t execs;
        bool exec_running;
        uint32_t queued;
        bool ephemeral;
        bool pooled;
        const char *archive_key;
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
