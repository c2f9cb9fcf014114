/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.freedesktop.LogControl1, as every daemon of ours serves it. */
#include <errno.h>
#include <string.h>

#include "bus-util.h"
#include "log.h"
#include "macro.h"
#include "string-util.h"

static int property_get_log_level(sd_bus *bus, const char *path, const char *interface,
                                  const char *property, sd_bus_message *reply, void *userdata,
                                  sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", log_level_to_string(log_get_max_level()));
}

static int property_set_log_level(sd_bus *bus, const char *path, const char *interface,
                                  const char *property, sd_bus_message *value, void *userdata,
                                  sd_bus_error *error) {
        const char *t;
        int r, level;

        r = sd_bus_message_read(value, "s", &t);
        if (r < 0)
                return r;
        level = log_level_from_string(t);
        if (level < 0)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "Invalid log level '%s'", t);
        log_info("Setting log level to %s.", t);
        log_set_max_level(level);
        return sd_bus_emit_properties_changed(bus, path, interface, property, NULL);
}

static int property_get_log_target(sd_bus *bus, const char *path, const char *interface,
                                   const char *property, sd_bus_message *reply, void *userdata,
                                   sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", "journal");
}

static int property_get_identifier(sd_bus *bus, const char *path, const char *interface,
                                   const char *property, sd_bus_message *reply, void *userdata,
                                   sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", log_get_identifier());
}

static const sd_bus_vtable log_control_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_WRITABLE_PROPERTY("LogLevel", "s", property_get_log_level, property_set_log_level, 0,
                                 SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LogTarget", "s", property_get_log_target, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("SyslogIdentifier", "s", property_get_identifier, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_VTABLE_END,
};

int bus_add_log_control(sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, "/org/freedesktop/LogControl1",
                                        "org.freedesktop.LogControl1", log_control_vtable, NULL);
}
