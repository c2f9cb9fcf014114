/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Command line of the daemons: systemd starts them without arguments; --help and --version are
 * for the operator at a shell. */
#pragma once

#include <stdint.h>

#include <systemd/sd-event.h>

#include "bus-introspect.h"
#include "config.h"

/* Returns 0 when the daemon should start (no arguments), 1 when --help or --version was answered
 * on stdout, -EINVAL after naming a bad argument on stderr. `how` says how the daemon is started,
 * e.g. "by scopebox-gateway.socket". */
int daemon_parse_argv(int argc, char *argv[], const char *name, const char *summary, const char *how);
/* The same for a daemon that serves 'ifaces' (NULL-terminated): --bus-introspect=INTERFACE|list
 * too (bus-introspect.h). */
int daemon_parse_argv_bus(int argc, char *argv[], const char *name, const char *summary, const char *how,
                          const BusInterface *ifaces);

/* The start of the main() of a bus daemon that serves one interface: daemon_parse_argv_bus() (the
 * same returns), then, when it is to start, log_setup(name). */
int daemon_setup_bus(int argc, char *argv[], const char *name, const char *summary, const char *how,
                     const BusInterface *iface);

/* The daemon's one event loop, sd_event_default(), which each of the signals listed, ended by -1,
 * ends. Those are blocked first, and SIGCHLD with them, which sd_event_add_child() wants blocked. */
int daemon_event_new(sd_event **ret, ...);

/* The environment variable that sets how long a bus-activated daemon stays idle before it exits
 * (whole seconds, 1 to 86400), for tests and debugging; docs/operations.md. */
#define DAEMON_IDLE_EXIT_ENV "SCOPEBOX_IDLE_EXIT_SEC"
/* That delay: $SCOPEBOX_IDLE_EXIT_SEC if the unit sets it, 'def' otherwise. -EINVAL (and 'def') for
 * a value that is no whole number of seconds in that range. */
int daemon_idle_exit_usec(uint64_t def, uint64_t *ret);

/* The daemon's configuration: config_load() of $SCOPEBOX_CONFIG (the default file when it is unset).
 * A bad value or file is logged ("Invalid configuration: ..."), and its error returned. */
int daemon_load_config(Config *c);
