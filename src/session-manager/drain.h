/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Draining (scopeboxctl drain): no new sessions while the existing ones finish, persisted. */
#pragma once

#include <stdbool.h>

typedef struct Manager Manager;

/* In the state directory (SCOPEBOX_STATE_DIR): present while the node drains. */
#define MANAGER_DRAINING_FILE "draining"

/* The switch in 'dir': -EBADFD when something other than a regular file has its name. */
int drain_state_load(const char *dir, bool *ret);
int drain_state_save(const char *dir, bool draining);

/* At start: m->draining from the state directory. */
int manager_load_draining(Manager *m);
/* Persists, then switches, logs and emits PropertiesChanged. 1 if it changed, 0 if it was so. */
int manager_set_draining(Manager *m, bool draining);
