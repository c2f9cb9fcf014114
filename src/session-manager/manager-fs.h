/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's D-Bus methods for E2B's filesystem calls (manager-fs.c). */
#pragma once

#include <systemd/sd-bus.h>

#include "manager.h"

int method_stat_path(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_list_directory(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_make_directory(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_move_path(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_remove_path(sd_bus_message *m, void *userdata, sd_bus_error *error);
