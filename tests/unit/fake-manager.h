/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A fake session manager on the other end of a socketpair bus, for tests of the gateway's resources. */
#pragma once

#include <sys/socket.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <systemd/sd-id128.h>

#include "bus-util.h"
#include "macro.h"
#include "tests.h"

/* Serves 'vtable' (with 'userdata') at the manager's object on *ret_manager, connected to *ret_client;
 * both attached to 'event', the handshake done (sd-bus blocks a send with fds until it knows they
 * can pass, and the peer is in this very thread). */
static inline void fake_manager_connect(sd_event *event, const sd_bus_vtable *vtable, void *userdata,
                                        sd_bus **ret_manager, sd_bus **ret_client) {
        sd_bus *manager = NULL, *client = NULL;
        sd_id128_t id;
        int pair[2];

        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
        ASSERT_TRUE(sd_id128_randomize(&id) >= 0);

        ASSERT_TRUE(sd_bus_new(&manager) >= 0);
        ASSERT_TRUE(sd_bus_set_fd(manager, pair[0], pair[0]) >= 0);
        ASSERT_TRUE(sd_bus_set_server(manager, 1, id) >= 0);
        ASSERT_TRUE(sd_bus_negotiate_fds(manager, 1) >= 0);
        ASSERT_TRUE(sd_bus_add_object_vtable(manager, NULL, SESSION_MANAGER_OBJECT_PATH,
                                             SESSION_MANAGER_INTERFACE, vtable, userdata) >= 0);
        ASSERT_TRUE(sd_bus_start(manager) >= 0);
        ASSERT_TRUE(sd_bus_attach_event(manager, event, 0) >= 0);

        ASSERT_TRUE(sd_bus_new(&client) >= 0);
        ASSERT_TRUE(sd_bus_set_fd(client, pair[1], pair[1]) >= 0);
        ASSERT_TRUE(sd_bus_negotiate_fds(client, 1) >= 0);
        ASSERT_TRUE(sd_bus_start(client) >= 0);
        ASSERT_TRUE(sd_bus_attach_event(client, event, 0) >= 0);
        ASSERT_TRUE(bus_errors_register() >= 0);

        for (unsigned i = 0; i < 100 && sd_bus_is_ready(client) <= 0; i++)
                ASSERT_TRUE(sd_event_run(event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(sd_bus_is_ready(client) > 0);

        *ret_manager = manager;
        *ret_client = client;
}
