/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The io.scopebox.StorageAgent1 bus API. */
#include "agent.h"
#include "bus-util.h"

static int method_get_version(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;

        agent_touch(a);
        return sd_bus_reply_method_return(m, "s", PROJECT_VERSION);
}

static const sd_bus_vtable agent_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("GetVersion", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", version), method_get_version,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

int agent_add_bus_objects(Agent *a) {
        return sd_bus_add_object_vtable(a->bus, NULL, STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                        agent_vtable, a);
}
