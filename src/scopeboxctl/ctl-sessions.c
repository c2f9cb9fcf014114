/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl sessions, runs, inspect and kill: the manager's sessions (and its dify run sandboxes)
 * with their scopes' usage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "string-util.h"
#include "json-util.h"
#include "time-util.h"

/* Fallback wait for a release when the configuration can't be read. */
#define RELEASE_TIMEOUT_FALLBACK_USEC (300U * USEC_PER_SEC)

static uint64_t elapsed_usec(uint64_t now, uint64_t then) {
        return then > 0 && now > then ? now - then : 0;
}

/* The session as JSON; 'u' (the scope's properties) may be NULL when systemd doesn't know it. */
static json_object *session_to_json(const SessionInfo *s, const UnitInfo *u, uint64_t now) {
        json_object *o = json_object_new_object();
        uint64_t idle = elapsed_usec(now, s->last_active_usec);

        json_object_object_add(o, "id", json_object_new_string(s->id));
        json_object_object_add(o, "state", json_object_new_string(s->state));
        json_object_object_add(o, "unit", json_object_new_string(s->unit));
        json_object_object_add(o, "created_usec", json_object_new_uint64(s->created_usec));
        json_object_object_add(o, "last_active_usec", json_object_new_uint64(s->last_active_usec));
        json_object_object_add(o, "age_sec",
                               json_object_new_uint64(elapsed_usec(now, s->created_usec) / USEC_PER_SEC));
        json_object_object_add(o, "idle_sec", json_object_new_uint64(idle / USEC_PER_SEC));
        json_object_object_add(o, "idle_ttl_sec", json_object_new_uint64(s->idle_ttl_usec / USEC_PER_SEC));
        json_object_object_add(o, "expires_in_sec",
                               json_object_new_uint64(s->idle_ttl_usec > idle
                                                              ? (s->idle_ttl_usec - idle) / USEC_PER_SEC
                                                              : 0));
        json_object_object_add(o, "memory_bytes", json_uint64_or_null(u ? u->memory_current : UINT64_MAX));
        json_object_object_add(o, "tasks", json_uint64_or_null(u ? u->tasks_current : UINT64_MAX));
        json_object_object_add(o, "exec_running", json_object_new_boolean(s->exec_running));
        json_object_object_add(o, "execs", json_object_new_uint64(s->execs));
        json_object_object_add(o, "queued", json_object_new_uint64(s->queued));
        json_object_object_add(o, "ephemeral", json_object_new_boolean(s->ephemeral));
        json_object_object_add(o, "uid", json_object_new_uint64(s->uid));
        json_object_object_add(o, "runner_pid",
                               s->runner_pid > 0 ? json_object_new_uint64(s->runner_pid) : NULL);
        json_object_object_add(o, "archive_key", json_object_new_string(s->archive_key));
        json_object_object_add(o, "pooled", json_object_new_boolean(s->pooled));
        return o;
}

/* The scope's usage; false when systemd does not know the unit (any more). */
static bool scope_info(sd_bus *bus, const SessionInfo *s, UnitInfo *ret) {
        if (isempty(s->unit) || unit_info_get(bus, s->unit, ret) < 0)
                return false;
        if (streq_ptr(ret->load_state, "not-found")) {
                unit_info_done(ret);
                return false;
        }
        return true;
}

/* One row of "sessions" or "runs": the same columns, but a run sandbox's EXEC says whether a run
 * has it (pooled: not yet). */
static int sessions_add_row(sd_bus_message *reply, void *userdata) {
        CtlRows *out = userdata;
        _cleanup_(unit_info_done) UnitInfo u = {};
        char age[32], idle[32], mem[32], tasks[32];
        uint64_t now = out->now;
        SessionInfo s = {};
        bool have_unit;
        int r;

        r = sd_bus_message_enter_container(reply, 'r', "sa{sv}");
        if (r >= 0)
                r = sd_bus_message_read(reply, "s", &s.id);
        if (r >= 0)
                r = session_info_read(reply, &s);
        if (r >= 0)
                r = sd_bus_message_exit_container(reply);
        if (r < 0)
                return r;

        have_unit = scope_info(out->bus, &s, &u);
        json_object_array_add(out->array, session_to_json(&s, have_unit ? &u : NULL, now));
        return table_add_row(out->table, s.id,
                             format_duration(age, sizeof(age), elapsed_usec(now, s.created_usec)),
                             format_duration(idle, sizeof(idle), elapsed_usec(now, s.last_active_usec)),
                             format_bytes(mem, sizeof(mem), have_unit ? u.memory_current : UINT64_MAX),
                             format_u64(tasks, sizeof(tasks), have_unit ? u.tasks_current : UINT64_MAX),
                             s.exec_running ? "running"
                             : s.pooled     ? "pooled"
                                            : "-",
                             s.unit);
}

/* The manager's list 'method' (ListSessions, ListRunSandboxes) as a table or JSON; *ret_rows the
 * number of rows. */
static int list_print(Ctl *c, sd_bus *bus, const char *method, const char *what, unsigned *ret_rows) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_json_ json_object *list = NULL;
        _cleanup_(table_freep) Table *table = NULL;
        int r;

        r = sd_bus_call_method(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                               SESSION_MANAGER_INTERFACE, method, &e, &reply, NULL);
        if (r < 0)
                return ctl_bus_error(&e, r, what);

        list = json_object_new_array();
        r = table_new(&table, "ID", "AGE", "IDLE", "MEMORY", "TASKS", "EXEC", "UNIT", NULL);
        if (!list || r < 0)
                return ctl_error(ENOMEM, "Out of memory.");

        r = bus_message_read_array(reply, "(sa{sv})", SIZE_MAX, sessions_add_row,
                                   &(CtlRows) { c, bus, list, table, now_usec(CLOCK_REALTIME) });
        if (r < 0)
                return ctl_error(r, "Failed to read the list: %m");
        *ret_rows = (unsigned) json_object_array_length(list);
        if (c->json)
                json_print(list);
        else
                table_print(table, stdout, c->legend, c->legend);
        return 0;
}

int verb_sessions(Ctl *c) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *runs = NULL;
        unsigned n_rows, n_runs = 0;
        sd_bus *bus;
        int draining = 0, r;

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        r = list_print(c, bus, "ListSessions", "Failed to list sessions", &n_rows);
        if (r < 0 || c->json || !c->legend)
                return r;
        /* A dify run's sandbox (pooled, or serving a run) is no session: no call of the sidecar API
         * knows its id, and ListSessions does not list it. Counted, for the legend. */
        if (sd_bus_call_method(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                               SESSION_MANAGER_INTERFACE, "ListRunSandboxes", NULL, &runs, NULL) >= 0 &&
            sd_bus_message_enter_container(runs, 'a', "(sa{sv})") >= 0)
                while (sd_bus_message_skip(runs, "(sa{sv})") > 0)
                        n_runs++;
        if (n_runs > 0)
                printf("\n%u dify run sandbox%s (pooled, or serving a run): no session%s, "
                       "see scopeboxctl runs.\n",
                       n_runs, n_runs == 1 ? "" : "es", n_runs == 1 ? "" : "s");
        /* The list answered, so the manager runs: its word on draining costs no activation. */
        if (sd_bus_get_property_trivial(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                                        SESSION_MANAGER_INTERFACE, "Draining", NULL, 'b', &draining) >= 0 &&
            draining)
                printf("\nDraining: no new sessions; these finish (scopeboxctl undrain).\n");
        return 0;
}

int verb_runs(Ctl *c) {
        unsigned n_rows;
        sd_bus *bus;
        int r;

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        r = list_print(c, bus, "ListRunSandboxes", "Failed to list run sandboxes", &n_rows);
        if (r >= 0 && !c->json && c->legend && n_rows > 0)
                printf("\nNo sessions: no call of the sidecar API knows these ids (docs/dify.md).\n");
        return r;
}

static const char *format_quota(char *buf, size_t size, uint64_t per_sec_usec) {
        if (per_sec_usec == UINT64_MAX)
                return "-";
        snprintf(buf, size, "%" PRIu64 "%%", per_sec_usec / 10000);
        return buf;
}

int verb_inspect(Ctl *c) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(unit_info_done) UnitInfo u = {};
        _cleanup_json_ json_object *o = NULL;
        uint64_t now = now_usec(CLOCK_REALTIME);
        SessionInfo s = { .id = c->args[0] };
        bool have_unit;
        sd_bus *bus;
        int r;

        r = ctl_check_session_id(s.id);
        if (r < 0)
                return r;
        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        r = sd_bus_call_method(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                               SESSION_MANAGER_INTERFACE, "GetSession", &e, &reply, "s", s.id);
        if (r < 0)
                return ctl_bus_error(&e, r, s.id);
        r = session_info_read(reply, &s);
        if (r < 0)
                return ctl_error(r, "Failed to read the session's properties: %m");

        have_unit = scope_info(bus, &s, &u);
        o = session_to_json(&s, have_unit ? &u : NULL, now);
        if (!o)
                return ctl_error(ENOMEM, "Out of memory.");

        if (c->json) {
                json_object *scope = NULL;

                if (have_unit) {
                        scope = json_object_new_object();
                        json_object_object_add(scope, "active_state",
                                               json_object_new_string(strna(u.active_state)));
                        json_object_object_add(scope, "sub_state",
                                               json_object_new_string(strna(u.sub_state)));
                        json_object_object_add(scope, "memory_bytes", json_uint64_or_null(u.memory_current));
                        json_object_object_add(scope, "memory_max_bytes", json_uint64_or_null(u.memory_max));
                        json_object_object_add(scope, "tasks", json_uint64_or_null(u.tasks_current));
                        json_object_object_add(scope, "tasks_max", json_uint64_or_null(u.tasks_max));
                        json_object_object_add(scope, "cpu_usage_nsec",
                                               json_uint64_or_null(u.cpu_usage_nsec));
                        json_object_object_add(scope, "cpu_quota_per_sec_usec",
                                               json_uint64_or_null(u.cpu_quota_per_sec_usec));
                }
                json_object_object_add(o, "scope", scope);
                json_print(o);
                return 0;
        }

        char a[32], b[32], d[32];
        uint64_t idle = elapsed_usec(now, s.last_active_usec);

        printf("Session:     %s (%s)\n", s.id, s.state);
        printf("Unit:        %s (%s/%s)\n", s.unit, have_unit ? strna(u.active_state) : "unknown",
               have_unit ? strna(u.sub_state) : "unknown");
        printf("Age:         %s\n", format_duration(a, sizeof(a), elapsed_usec(now, s.created_usec)));
        printf("Idle:        %s of %s (reaped in %s)\n", format_duration(a, sizeof(a), idle),
               format_duration(b, sizeof(b), s.idle_ttl_usec),
               format_duration(d, sizeof(d), s.idle_ttl_usec > idle ? s.idle_ttl_usec - idle : 0));
        printf("Execs:       %" PRIu64 "%s, %" PRIu32 " calls queued\n", s.execs,
               s.exec_running ? " (one running now)" : "", s.queued);
        printf("Memory:      %s (limit %s)\n",
               format_bytes(a, sizeof(a), have_unit ? u.memory_current : UINT64_MAX),
               format_bytes(b, sizeof(b), have_unit ? u.memory_max : UINT64_MAX));
        printf("Tasks:       %s (limit %s)\n",
               format_u64(a, sizeof(a), have_unit ? u.tasks_current : UINT64_MAX),
               format_u64(b, sizeof(b), have_unit ? u.tasks_max : UINT64_MAX));
        printf("CPU:         %s used (quota %s)\n",
               format_duration(a, sizeof(a), have_unit && u.cpu_usage_nsec != UINT64_MAX
                                                     ? u.cpu_usage_nsec / NSEC_PER_USEC : UINT64_MAX),
               format_quota(b, sizeof(b), have_unit ? u.cpu_quota_per_sec_usec : UINT64_MAX));
        printf("Sandbox uid: %" PRIu32 "\n", s.uid);
        if (s.runner_pid > 0)
                printf("Runner PID:  %" PRIu32 "\n", s.runner_pid);
        /* Client-chosen text never reaches the operator's terminal raw. */
        if (!isempty(s.archive_key))
                printf("Archive key: %s\n",
                       string_is_printable_line(s.archive_key, 1024) ? s.archive_key : "(not printable)");
        return 0;
}

int verb_kill(Ctl *c) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *config_error = NULL;
        _cleanup_(config_done) Config cfg = {};
        const char *id = c->args[0];
        uint64_t timeout = RELEASE_TIMEOUT_FALLBACK_USEC;
        sd_bus *bus;
        int r;

        r = ctl_check_session_id(id);
        if (r < 0)
                return r;
        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        if (ctl_load_config(&cfg, &config_error) >= 0)
                timeout = bus_timeout_session_usec(&cfg);

        /* discard: no archive, the stored one is deleted; otherwise what DELETE /sessions does. */
        r = session_manager_new_call(bus, "ReleaseSession", &m);
        if (r >= 0)
                r = c->archive ? sd_bus_message_append(m, "sa{sv}", id, 0)
                               : sd_bus_message_append(m, "sa{sv}", id, 1, "discard", "b", 1);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, timeout, &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, id);

        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_string(id));
                json_object_object_add(o, "released", json_object_new_boolean(true));
                json_object_object_add(o, "discarded", json_object_new_boolean(!c->archive));
                json_print(o);
        } else
                printf("Session %s ended (%s).\n", id,
                       c->archive ? "workspace archived when storage is configured"
                                  : "workspace discarded, stored archive deleted");
        return 0;
}
