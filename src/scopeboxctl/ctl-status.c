/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl status: the daemons' units, the manager's counters, the configured limits, storage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "json-util.h"

static const char *const daemon_units[] = {
        "scopebox-gateway.socket",
        "scopebox-gateway.service",
        "scopebox-session-manager.service",
        "scopebox-storage-agent.service",
};
#define STORAGE_AGENT_UNIT "scopebox-storage-agent.service"

/* The session manager's properties that status shows (bus-client.h says how the list is used). */
#define MANAGER_FIELDS(F, T)                        \
        F(T, "Version",      s, version)            \
        F(T, "Sessions",     u, sessions)           \
        F(T, "RunningExecs", u, running_execs)      \
        F(T, "Draining",     b, draining)

typedef struct ManagerState {
        bool active;
        MANAGER_FIELDS(BUS_DICT_MEMBER, ManagerState)
        sd_bus_message *reply;
} ManagerState;

static const BusDictField manager_fields[] = {
        MANAGER_FIELDS(BUS_DICT_FIELD, ManagerState)
        {}
};

/* The manager's properties, only when it runs: status must not start it by bus activation. */
static int manager_state_get(sd_bus *bus, ManagerState *ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        *ret = (ManagerState) {};
        r = ctl_name_has_owner(bus, SESSION_MANAGER_BUS_NAME);
        if (r <= 0)
                return r;
        r = ctl_get_all(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                        SESSION_MANAGER_INTERFACE, false, manager_fields, ret, &e, &ret->reply);
        if (r < 0 && ret->reply)
                return ctl_error(r, "Failed to read the session manager's properties: %m");
        if (r < 0) {
                /* It may just have exited after its idle time. */
                if (sd_bus_error_has_name(&e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                    sd_bus_error_has_name(&e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        return 0;
                return ctl_bus_error(&e, r, "Failed to ask the session manager");
        }
        ret->active = true;
        return 1;
}

/* The limits an operator asks about first, under stable JSON keys. */
static json_object *limits_to_json(const Config *cfg) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "max_sessions",
                               json_object_new_int64(MAX(cfg->max_sessions, (int64_t) 0)));
        json_object_object_add(o, "max_concurrent_execs", json_object_new_uint64(cfg->max_concurrent_execs));
        json_object_object_add(o, "max_concurrent_creates",
                               json_object_new_uint64(cfg->max_concurrent_creates));
        json_object_object_add(o, "memory_bytes", json_object_new_uint64(cfg->memory_limit));
        json_object_object_add(o, "cpu_percent", json_object_new_uint64(cfg->cpu_quota_percent));
        json_object_object_add(o, "tasks", json_object_new_uint64(cfg->pids_limit));
        json_object_object_add(o, "workspace_bytes", json_object_new_uint64(cfg->workspace_size));
        json_object_object_add(o, "idle_ttl_sec", json_object_new_uint64(cfg->idle_ttl_sec));
        json_object_object_add(o, "idle_ttl_cap_sec", json_object_new_uint64(cfg->idle_ttl_cap_sec));
        json_object_object_add(o, "exec_timeout_cap_ms", json_object_new_uint64(cfg->exec_timeout_cap_ms));
        json_object_object_add(o, "queue_timeout_sec", json_object_new_uint64(cfg->queue_timeout_sec));
        json_object_object_add(o, "archive_timeout_sec", json_object_new_uint64(cfg->archive_timeout_sec));
        json_object_object_add(o, "max_code_bytes", json_object_new_uint64(cfg->max_code_bytes));
        json_object_object_add(o, "max_output_bytes", json_object_new_uint64(cfg->max_output_bytes));
        return o;
}

static void limits_print(const Config *cfg) {
        char a[32], b[32];

        printf("Limits:\n");
        if (cfg->max_sessions > 0)
                printf("  Sessions:           %" PRIi64 " at most\n", cfg->max_sessions);
        else
                printf("  Sessions:           unlimited\n");
        printf("  Execs at once:      %" PRIu64 " (creates at once: %" PRIu64 ")\n",
               cfg->max_concurrent_execs, cfg->max_concurrent_creates);
        printf("  Per session:        memory %s, CPU %" PRIu64 "%%, tasks %" PRIu64 ", workspace %s\n",
               format_bytes(a, sizeof(a), cfg->memory_limit), cfg->cpu_quota_percent, cfg->pids_limit,
               format_bytes(b, sizeof(b), cfg->workspace_size));
        printf("  Idle TTL:           %" PRIu64 "s (clients may ask for up to %" PRIu64 "s)\n",
               cfg->idle_ttl_sec, cfg->idle_ttl_cap_sec);
        printf("  Timeouts:           exec at most %" PRIu64 " ms, queue %" PRIu64 "s, archive %" PRIu64
               "s\n",
               cfg->exec_timeout_cap_ms, cfg->queue_timeout_sec, cfg->archive_timeout_sec);
}

static bool dir_exists(const char *path) {
        struct stat st;
        return !isempty(path) && stat(path, &st) >= 0 && S_ISDIR(st.st_mode);
}

/* What status shows, gathered once for either form. */
typedef struct Status {
        ManagerState mgr;
        Config cfg;
        bool config_ok;
        char *config_error;
        bool draining;
        char agent_state[32];
} Status;

static void status_done(Status *st) {
        config_done(&st->cfg);
        st->config_error = mfree(st->config_error);
}

/* The daemons' units: a table row and a JSON object each. */
static int status_collect_daemons(sd_bus *bus, Table *table, json_object *daemons, Status *st) {
        int r;

        for (size_t i = 0; i < ELEMENTSOF(daemon_units); i++) {
                _cleanup_(unit_info_done) UnitInfo u = {};
                char pid[16], mem[32];
                json_object *d;

                r = unit_info_get(bus, daemon_units[i], &u);
                if (r < 0)
                        return ctl_error(r, "Failed to ask systemd about %s: %m", daemon_units[i]);
                if (streq(daemon_units[i], STORAGE_AGENT_UNIT))
                        snprintf(st->agent_state, sizeof(st->agent_state), "%s",
                                 u.active_state ?: "unknown");

                snprintf(pid, sizeof(pid), "%" PRIu32, u.main_pid);
                r = table_add_row(table, daemon_units[i], strna(u.load_state), strna(u.active_state),
                                  strna(u.sub_state), u.main_pid > 0 ? pid : "-",
                                  format_bytes(mem, sizeof(mem), u.memory_current), strempty(u.status_text));
                if (r < 0)
                        return ctl_error(r, "Out of memory.");

                d = json_object_new_object();
                json_object_object_add(d, "unit", json_object_new_string(daemon_units[i]));
                json_object_object_add(d, "load_state", json_object_new_string(strna(u.load_state)));
                json_object_object_add(d, "active_state", json_object_new_string(strna(u.active_state)));
                json_object_object_add(d, "sub_state", json_object_new_string(strna(u.sub_state)));
                json_object_object_add(d, "main_pid",
                                       u.main_pid > 0 ? json_object_new_int64(u.main_pid) : NULL);
                json_object_object_add(d, "status_text", json_object_new_string(strempty(u.status_text)));
                json_object_object_add(d, "memory_bytes", json_uint64_or_null(u.memory_current));
                json_object_array_add(daemons, d);
        }
        return 0;
}

static json_object *status_storage_to_json(const Status *st) {
        const Config *cfg = &st->cfg;
        bool ok = st->config_ok;
        json_object *storage = json_object_new_object();

        json_object_object_add(storage, "local_dir",
                               ok && !isempty(cfg->local_storage_dir)
                                       ? json_object_new_string(cfg->local_storage_dir)
                                       : NULL);
        json_object_object_add(storage, "local_dir_exists",
                               json_object_new_boolean(ok && dir_exists(cfg->local_storage_dir)));
        json_object_object_add(
                storage, "allowed_endpoints",
                json_object_new_string(ok ? strempty(cfg->storage_allowed_endpoints) : ""));
        json_object_object_add(storage, "agent_active_state", json_object_new_string(st->agent_state));
        json_object_object_add(storage, "agent_active",
                               json_object_new_boolean(streq(st->agent_state, "active")));
        return storage;
}

static void status_print_json(const Status *st, json_object *daemons) {
        _cleanup_json_ json_object *root = json_object_new_object();
        const ManagerState *mgr = &st->mgr;
        json_object *m = json_object_new_object(), *conf = json_object_new_object();

        json_object_object_add(root, "version", json_object_new_string(PROJECT_VERSION));
        json_object_object_add(root, "daemons", daemons);

        json_object_object_add(m, "active", json_object_new_boolean(mgr->active));
        json_object_object_add(m, "version",
                               mgr->active ? json_object_new_string(strempty(mgr->version)) : NULL);
        json_object_object_add(m, "sessions", mgr->active ? json_object_new_int64(mgr->sessions) : NULL);
        json_object_object_add(m, "running_execs",
                               mgr->active ? json_object_new_int64(mgr->running_execs) : NULL);
        json_object_object_add(root, "manager", m);
        json_object_object_add(root, "draining", json_object_new_boolean(st->draining));
        json_object_object_add(root, "node_id",
                               st->config_ok ? json_object_new_string(strempty(st->cfg.node_id)) : NULL);

        json_object_object_add(conf, "path", json_object_new_string(SCOPEBOX_CONFIG_FILE));
        json_object_object_add(conf, "ok", json_object_new_boolean(st->config_ok));
        json_object_object_add(conf, "error",
                               st->config_ok ? NULL : json_object_new_string(strempty(st->config_error)));
        json_object_object_add(root, "config", conf);
        json_object_object_add(root, "limits", st->config_ok ? limits_to_json(&st->cfg) : NULL);
        json_object_object_add(root, "storage", status_storage_to_json(st));
        json_print(root);
}

static void status_print_text(const Status *st, Table *table, bool legend) {
        const Config *cfg = &st->cfg;

        table_print(table, stdout, legend, false);
        printf("\n");
        if (st->mgr.active)
                printf("Sessions:             %" PRIu32 " (%" PRIu32 " running an exec)\n", st->mgr.sessions,
                       st->mgr.running_execs);
        else
                printf("Sessions:             inactive (the session manager is not running; it starts on "
                       "demand)\n");
        printf("Draining:             %s\n",
               st->draining ? "yes (new sessions are refused; scopeboxctl undrain)" : "no");
        if (st->config_ok && !isempty(cfg->node_id))
                printf("Node:                 %s (SANDBOX_NODE_ID)\n", cfg->node_id);

        if (!st->config_ok) {
                printf("Configuration:        %s is invalid: %s\n", SCOPEBOX_CONFIG_FILE,
                       strempty(st->config_error));
                return;
        }
        limits_print(cfg);
        printf("Storage:\n");
        if (isempty(cfg->local_storage_dir))
                printf("  local:              not configured (SANDBOX_LOCAL_STORAGE_DIR is empty)\n");
        else
                printf("  local:              %s%s\n", cfg->local_storage_dir,
                       dir_exists(cfg->local_storage_dir) ? "" : " (missing!)");
        printf("  s3, aliyun_oss:     per request (endpoints allowed: %s)\n",
               isempty(cfg->storage_allowed_endpoints) ? "any" : cfg->storage_allowed_endpoints);
        printf("  storage agent:      %s (started on demand, exits when idle)\n", st->agent_state);
}

int verb_status(Ctl *c) {
        _cleanup_json_ json_object *daemons = NULL;
        _cleanup_(table_freep) Table *table = NULL;
        _cleanup_(status_done) Status st = { .agent_state = "unknown" };
        sd_bus *bus;
        int r;

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;

        daemons = json_object_new_array();
        r = table_new(&table, "UNIT", "LOAD", "ACTIVE", "SUB", "PID", "MEMORY", "STATUS", NULL);
        if (!daemons || r < 0)
                return ctl_error(ENOMEM, "Out of memory.");
        r = status_collect_daemons(bus, table, daemons, &st);
        if (r < 0)
                return r;

        r = manager_state_get(bus, &st.mgr);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *mgr_reply = st.mgr.reply;
        if (r < 0)
                return r;

        st.config_ok = ctl_load_config(&st.cfg, &st.config_error) >= 0;
        /* The manager's word while it runs, else its switch (it starts draining again). */
        st.draining = st.mgr.active ? st.mgr.draining
                                    : faccessat(AT_FDCWD, SCOPEBOX_STATE_DIR "/draining", F_OK,
                                                AT_SYMLINK_NOFOLLOW) == 0;

        if (c->json)
                status_print_json(&st, TAKE_PTR(daemons));
        else
                status_print_text(&st, table, c->legend);
        return 0;
}
