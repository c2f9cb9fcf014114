/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl drain, undrain: stop or resume taking new sessions (SetDraining), persisted by the
 * session manager; existing sessions and dify runs go on. */
#include <errno.h>
#include <stdio.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "json-util.h"

#define DRAIN_CALL_TIMEOUT_USEC (30U * USEC_PER_SEC)

static int set_draining(Ctl *c, bool draining) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        sd_bus *bus;
        int r;

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        r = session_manager_new_call(bus, "SetDraining", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "b", (int) draining);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, DRAIN_CALL_TIMEOUT_USEC, &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, draining ? "Failed to drain" : "Failed to undrain");

        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "draining", json_object_new_boolean(draining));
                json_print(o);
        } else if (draining)
                printf("Draining: new sessions are refused (503 node is draining); existing sessions and "
                       "dify runs go on. Undo with scopeboxctl undrain.\n");
        else
                printf("Not draining: new sessions are accepted.\n");
        return 0;
}

int verb_drain(Ctl *c) {
        return set_draining(c, true);
}

int verb_undrain(Ctl *c) {
        return set_draining(c, false);
}
