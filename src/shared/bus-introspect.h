/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The introspection XML of a daemon's interfaces, made from its own vtables (--bus-introspect;
 * the build installs it under /usr/share/dbus-1/interfaces/), without a bus. */
#pragma once

#include <systemd/sd-bus.h>

typedef struct BusInterface {
        const char *path;
        const char *interface;
        const sd_bus_vtable *vtable;
} BusInterface;

/* The <node> with this interface alone, as sd-bus introspects it (into *ret, to free). */
int bus_introspect_interface(const BusInterface *iface, char **ret);

/* Handles "--bus-introspect=INTERFACE" (prints its XML) and "--bus-introspect=list" (the
 * interface names) for the NULL-terminated 'ifaces'. Returns 0 when 'arg' is not that option,
 * 1 when it was answered on stdout, -errno after naming the problem on stderr. */
int bus_introspect_argument(const char *arg, const BusInterface *ifaces);
