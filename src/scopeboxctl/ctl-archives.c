/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl archives: released sessions whose workspace waits for its archive to be stored, and the
 * damaged archives the storage agent moved aside (quarantined) in the operator's local storage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "json-util.h"
#include "storage-config.h"
#include "string-util.h"
#include "time-util.h"

#define ARCHIVES_CALL_TIMEOUT_USEC (30U * USEC_PER_SEC)
/* Where quarantined archives are looked for: the operator's storage, the local provider under its
 * default prefix (as scopeboxctl gc sweeps it). S3 and OSS blocks come with requests; their
 * quarantined archives are in the storage agent's journal (SCOPEBOX_EVENT=archive-quarantined). */
#define CTL_ARCHIVES_STORAGE "{\"provider\":\"local\",\"prefix\":\"" STORAGE_DEFAULT_PREFIX "\"}"

/* The session manager's method 'member' (no arguments); errors printed with 'what'. */
static int archives_call(sd_bus *bus, const char *member, const char *what, sd_bus_message **ret_reply) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(bus, member, &m);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, ARCHIVES_CALL_TIMEOUT_USEC, &e, ret_reply);
        if (r < 0)
                return ctl_bus_error(&e, r, what);
        return 0;
}

static int archives_add_row(sd_bus_message *reply, void *userdata) {
        CtlRows *out = userdata;
        const char *id, *stem, *error;
        uint32_t attempts;
        uint64_t released, failing, now = out->now;
        char n[32], ago[32], failing_for[32];
        int r;

        r = sd_bus_message_read(reply, "(ssutts)", &id, &stem, &attempts, &released, &failing, &error);
        if (r < 0)
                return r;
        if (out->ctl->json) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "state", json_object_new_string("pending"));
                json_object_object_add(o, "id", json_object_new_string(id));
                json_object_object_add(o, "archive", json_object_new_string(stem));
                json_object_object_add(o, "attempts", json_object_new_uint64(attempts));
                json_object_object_add(o, "released_usec", json_object_new_uint64(released));
                json_object_object_add(o, "first_failure_usec", json_object_new_uint64(failing));
                json_object_object_add(o, "last_error", json_object_new_string(error));
                json_object_array_add(out->array, o);
                return 0;
        }
        snprintf(n, sizeof(n), "%" PRIu32, attempts);
        if (table_add_row(out->table, "pending", id, stem, n,
                          format_duration(ago, sizeof(ago), released && now > released ? now - released : 0),
                          format_duration(failing_for, sizeof(failing_for),
                                          failing && now > failing ? now - failing : UINT64_MAX),
                          isempty(error) ? "-" : error, NULL) < 0)
                return -ENOMEM;
        return 0;
}

/* One quarantined archive of ListQuarantinedArchives: (key, stem, size, quarantined_usec). */
static int archives_add_quarantined(sd_bus_message *reply, void *userdata) {
        CtlRows *out = userdata;
        const char *key, *stem;
        uint64_t size, when;
        char ago[32], bytes[32];
        _cleanup_free_ char *where = NULL;
        int r;

        r = sd_bus_message_read(reply, "(sstt)", &key, &stem, &size, &when);
        if (r < 0)
                return r;
        if (out->ctl->json) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "state", json_object_new_string("quarantined"));
                json_object_object_add(o, "id", NULL);
                json_object_object_add(o, "archive", json_object_new_string(stem));
                json_object_object_add(o, "key", json_object_new_string(key));
                json_object_object_add(o, "size", json_object_new_uint64(size));
                json_object_object_add(o, "quarantined_usec", json_object_new_uint64(when));
                json_object_array_add(out->array, o);
                return 0;
        }
        if (asprintf(&where, "damaged (%s), kept as '%s'", format_bytes(bytes, sizeof(bytes), size), key) <
            0)
                return -ENOMEM;
        if (table_add_row(out->table, "quarantined", "-", stem, "-",
                          format_duration(ago, sizeof(ago), when && out->now > when ? out->now - when : 0),
                          "-", where, NULL) < 0)
                return -ENOMEM;
        return 0;
}

/* The quarantined archives of the operator's local storage, when it has one. */
static int archives_list_quarantined(Ctl *c, sd_bus *bus, CtlRows *rows) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *config_error = NULL;
        _cleanup_(config_done) Config cfg = {};
        int truncated, r;

        r = ctl_load_config(&cfg, &config_error);
        if (r < 0)
                return ctl_error(r, "Invalid configuration: %s", strempty(config_error));
        if (!storage_json_effective(CTL_ARCHIVES_STORAGE, cfg.local_storage_dir))
                return 0;
        r = storage_agent_new_call(bus, "ListQuarantinedArchives", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", CTL_ARCHIVES_STORAGE);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, ARCHIVES_CALL_TIMEOUT_USEC, &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, "Failed to list quarantined archives");
        r = bus_message_read_array(reply, "(sstt)", SIZE_MAX, archives_add_quarantined, rows);
        if (r >= 0)
                r = sd_bus_message_read(reply, "b", &truncated);
        if (r == -ENOMEM)
                return ctl_error(ENOMEM, "Out of memory.");
        if (r < 0)
                return ctl_error(r, "Failed to read the storage agent's answer: %m");
        if (truncated)
                fprintf(stderr, "scopeboxctl: more quarantined archives than one answer holds; "
                                "the first ones are listed.\n");
        return 0;
}

static int archives_list(Ctl *c, sd_bus *bus) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        _cleanup_json_ json_object *array = NULL;
        int r;

        r = archives_call(bus, "ListPendingArchives", "Failed to list pending archives", &reply);
        if (r < 0)
                return r;

        if (c->json ? !(array = json_object_new_array())
                    : table_new(&t, "STATE", "SESSION", "ARCHIVE", "ATTEMPTS", "SINCE", "FAILING FOR",
                                "LAST ERROR", NULL) < 0)
                return ctl_error(ENOMEM, "Out of memory.");

        CtlRows rows = { c, bus, array, t, now_usec(CLOCK_REALTIME) };
        r = bus_message_read_array(reply, "(ssutts)", SIZE_MAX, archives_add_row, &rows);
        if (r == -ENOMEM)
                return ctl_error(ENOMEM, "Out of memory.");
        if (r < 0)
                return ctl_error(r, "Failed to read the session manager's answer: %m");
        r = archives_list_quarantined(c, bus, &rows);
        if (r < 0)
                return r;
        if (c->json)
                json_print(array);
        else
                table_print(t, stdout, c->legend, c->legend);
        return 0;
}

static int archives_retry(Ctl *c, sd_bus *bus) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        uint32_t n;
        int r;

        r = archives_call(bus, "RetryArchives", "Failed to retry pending archives", &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_read(reply, "u", &n);
        if (r < 0)
                return ctl_error(r, "Failed to read the session manager's answer: %m");
        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "retried", json_object_new_uint64(n));
                json_print(o);
        } else
                printf("Retrying %" PRIu32 " pending archive%s now.\n", n, n == 1 ? "" : "s");
        return 0;
}

int verb_archives(Ctl *c) {
        sd_bus *bus;
        int r;

        if (c->n_args != 1 || !(streq(c->args[0], "list") || streq(c->args[0], "retry")))
                return ctl_error(EINVAL, "Usage: scopeboxctl archives list|retry");
        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        return streq(c->args[0], "list") ? archives_list(c, bus) : archives_retry(c, bus);
}
