/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl archives: released sessions whose workspace waits for its archive to be stored. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "json-util.h"
#include "string-util.h"
#include "time-util.h"

#define ARCHIVES_CALL_TIMEOUT_USEC (30U * USEC_PER_SEC)

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
        if (table_add_row(out->table, id, stem, n,
                          format_duration(ago, sizeof(ago), released && now > released ? now - released : 0),
                          format_duration(failing_for, sizeof(failing_for),
                                          failing && now > failing ? now - failing : UINT64_MAX),
                          isempty(error) ? "-" : error, NULL) < 0)
                return -ENOMEM;
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
                    : table_new(&t, "SESSION", "ARCHIVE", "ATTEMPTS", "RELEASED", "FAILING FOR",
                                "LAST ERROR", NULL) < 0)
                return ctl_error(ENOMEM, "Out of memory.");

        r = bus_message_read_array(reply, "(ssutts)", SIZE_MAX, archives_add_row,
                                   &(CtlRows) { c, bus, array, t, now_usec(CLOCK_REALTIME) });
        if (r == -ENOMEM)
                return ctl_error(ENOMEM, "Out of memory.");
        if (r < 0)
                return ctl_error(r, "Failed to read the session manager's answer: %m");
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
