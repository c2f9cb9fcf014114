/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session manager without a bus for unit tests: every call to systemd fails at once (the "stop
 * scope fails synchronously" case), one exec slot, the event loop of its own. */
#pragma once

#include <stdlib.h>

#include <systemd/sd-event.h>

#include "manager.h"
#include "tests.h"

static inline Manager *test_manager_new(void) {
        Manager *m = calloc(1, sizeof(Manager));

        ASSERT_TRUE(m);
        metrics_init(&m->metrics);
        m->config.max_concurrent_execs = 1;
        m->config.queue_timeout_sec = 10;
        ASSERT_TRUE(sd_event_new(&m->event) >= 0);
        return m;
}
