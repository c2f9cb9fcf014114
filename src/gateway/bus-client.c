/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Talking to io.scopebox.SessionManager1 (docs/dbus-api.md): method calls and reply decoding. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "bus-client.h"
#include "bus-util.h"

int session_manager_new_call(sd_bus *bus, const char *member, sd_bus_message **ret) {
        assert(member);
        assert(ret);

        if (!bus)
                return -ENOTCONN;
        return sd_bus_message_new_method_call(bus, ret,
                                              SESSION_MANAGER_BUS_NAME,
                                              SESSION_MANAGER_OBJECT_PATH,
                                              SESSION_MANAGER_INTERFACE,
                                              member);
}

static int bus_dict_read_value(sd_bus_message *m, const BusDictField *f, void *base) {
        char sig[2] = { f->type, 0 };
        void *p = (uint8_t *) base + f->offset;
        int r;

        r = sd_bus_message_enter_container(m, 'v', sig);
        if (r == -ENXIO)
                return -EBADMSG; /* the variant holds another type */
        if (r < 0)
                return r;

        switch (f->type) {
        case 'b': {
                int b;

                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r >= 0)
                        *(bool *) p = b;
                break;
        }
        case 'u':
        case 'i':
        case 't':
        case 's':
                r = sd_bus_message_read_basic(m, f->type, p);
                break;
        default:
                return -EINVAL;
        }
        if (r < 0)
                return r;

        return sd_bus_message_exit_container(m);
}

int bus_message_read_dict(sd_bus_message *m, const BusDictField fields[], void *base) {
        int r;

        assert(m);
        assert(fields);

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;

        for (;;) {
                const BusDictField *f = NULL;
                const char *name;

                r = sd_bus_message_enter_container(m, 'e', "sv");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;

                r = sd_bus_message_read_basic(m, 's', &name);
                if (r < 0)
                        return r;

                for (const BusDictField *i = fields; i->name; i++)
                        if (streq(i->name, name)) {
                                f = i;
                                break;
                        }

                r = f ? bus_dict_read_value(m, f, base) : sd_bus_message_skip(m, "v");
                if (r < 0)
                        return r;

                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }

        return sd_bus_message_exit_container(m);
}
