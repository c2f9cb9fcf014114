/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Introspection without a bus: a private peer connection over a socket pair, the vtable on one
 * end, org.freedesktop.DBus.Introspectable.Introspect from the other, both driven here until
 * the answer is in. The XML is sd-bus's own, so it can't drift from what the daemon serves. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-id128.h>

#include "bus-introspect.h"
#include "macro.h"
#include "string-util.h"

/* Rounds of processing before giving up: the handshake and the call take a handful. */
#define INTROSPECT_ROUNDS_MAX 1000

typedef struct IntrospectCall {
        bool done;
        int error;
        char *xml;
} IntrospectCall;

static int on_introspect_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        IntrospectCall *c = userdata;
        const char *xml;
        int r;

        c->done = true;
        r = sd_bus_message_get_errno(m);
        if (r > 0) {
                c->error = -r;
                return 0;
        }
        r = sd_bus_message_read(m, "s", &xml);
        if (r < 0) {
                c->error = r;
                return 0;
        }
        c->xml = strdup(xml);
        c->error = c->xml ? 0 : -ENOMEM;
        return 0;
}

/* Takes 'fd' in any case: the bus owns it once set. */
static int bus_new_peer(int fd, bool server, sd_bus **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *b = NULL;
        sd_id128_t id;
        int r;

        r = sd_bus_new(&b);
        if (r >= 0)
                r = sd_bus_set_fd(b, fd, fd);
        if (r < 0) {
                safe_close(fd);
                return r;
        }
        if (server) {
                r = sd_id128_randomize(&id);
                if (r >= 0)
                        r = sd_bus_set_server(b, 1, id);
        }
        if (r >= 0)
                r = sd_bus_set_anonymous(b, 1);
        if (r >= 0)
                r = sd_bus_start(b);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(b);
        return 0;
}

/* Keeps the lines of the <interface> named 'name' between the document's head and </node>. */
static int keep_interface(const char *xml, const char *name, char **ret) {
        _cleanup_free_ char *open = NULL;
        const char *node, *start, *end;
        char *out;
        size_t head;

        if (asprintf(&open, "<interface name=\"%s\">", name) < 0)
                return -ENOMEM;
        node = strstr(xml, "<node>");
        start = strstr(xml, open);
        end = start ? strstr(start, "</interface>") : NULL;
        if (!node || !start || !end)
                return -ENOENT;
        while (start > xml && start[-1] == ' ')
                start--;
        end += strlen("</interface>");
        head = (size_t) (node - xml) + strlen("<node>");
        if (asprintf(&out, "%.*s\n%.*s\n</node>\n", (int) head, xml, (int) (end - start), start) < 0)
                return -ENOMEM;
        *ret = out;
        return 0;
}

int bus_introspect_interface(const BusInterface *iface, char **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *server = NULL, *client = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        IntrospectCall call = {};
        int fds[2], r;

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) < 0)
                return -errno;
        r = bus_new_peer(fds[0], true, &server);
        if (r < 0) {
                safe_close(fds[1]);
                return r;
        }
        r = bus_new_peer(fds[1], false, &client);
        if (r < 0)
                return r;
        r = sd_bus_add_object_vtable(server, NULL, iface->path, iface->interface, iface->vtable, NULL);
        if (r < 0)
                return r;
        r = sd_bus_call_method_async(client, &slot, NULL, iface->path, "org.freedesktop.DBus.Introspectable",
                                     "Introspect", on_introspect_reply, &call, NULL);
        if (r < 0)
                return r;

        for (unsigned i = 0; !call.done && i < INTROSPECT_ROUNDS_MAX; i++) {
                struct pollfd p[2];
                int a, b;

                a = sd_bus_process(server, NULL);
                b = sd_bus_process(client, NULL);
                if (a < 0 || b < 0)
                        return a < 0 ? a : b;
                if (call.done || a > 0 || b > 0)
                        continue;
                p[0] = (struct pollfd) { .fd = sd_bus_get_fd(server),
                                         .events = (short) sd_bus_get_events(server) };
                p[1] = (struct pollfd) { .fd = sd_bus_get_fd(client),
                                         .events = (short) sd_bus_get_events(client) };
                if (poll(p, 2, 1000) < 0 && errno != EINTR)
                        return -errno;
        }
        if (!call.done)
                return -ETIMEDOUT;
        if (call.error < 0)
                return call.error;
        r = keep_interface(call.xml, iface->interface, ret);
        free(call.xml);
        return r;
}

int bus_introspect_argument(const char *arg, const BusInterface *ifaces) {
        const char *name = startswith(arg, "--bus-introspect=");

        if (!name)
                return 0;
        for (const BusInterface *i = ifaces; i && i->interface; i++) {
                _cleanup_free_ char *xml = NULL;
                int r;

                if (streq(name, "list")) {
                        printf("%s\n", i->interface);
                        continue;
                }
                if (!streq(name, i->interface))
                        continue;
                r = bus_introspect_interface(i, &xml);
                if (r < 0) {
                        fprintf(stderr, "Failed to introspect %s: %s\n", name, strerror(-r));
                        return r;
                }
                fputs(xml, stdout);
                return 1;
        }
        if (streq(name, "list"))
                return 1;
        fprintf(stderr, "No interface '%s' here; --bus-introspect=list names them.\n", name);
        return -ENOENT;
}
