/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's D-Bus methods for E2B's filesystem calls (manager-fs.c). */
#pragma once

#include <systemd/sd-bus.h>

#include "manager.h"
#include "session.h"

int method_stat_path(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_list_directory(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_make_directory(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_move_path(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_remove_path(sd_bus_message *m, void *userdata, sd_bus_error *error);

/* In manager-dbus.c, shared with the file calls: the running session a call names (not a dify
 * run's sandbox), NULL with 'error' set; a client's workspace path normalised (< 0 with 'error' set,
 * or -ENOMEM). */
Session *manager_bus_find_running_session(Manager *mgr, const char *id, sd_bus_error *error);
int manager_bus_normalize_path(const char *path, char **ret, sd_bus_error *error);
