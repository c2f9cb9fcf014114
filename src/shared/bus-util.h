/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.freedesktop.LogControl1 and small sd-bus helpers; the contract itself is bus-contract.h. */
#pragma once

#include <stdbool.h>

#include <systemd/sd-bus.h>

#include "bus-contract.h"

/* Adds org.freedesktop.LogControl1 at /org/freedesktop/LogControl1 (log level and target). */
int bus_add_log_control(sd_bus *bus);

/* sd_bus_message_append() helper for an a{sv} entry, e.g. ("TasksMax", "t", 256). */
#define BUS_APPEND_PROPERTY(m, name, sig, ...)                                                  \
        sd_bus_message_append(m, "(sv)", name, sig, __VA_ARGS__)
