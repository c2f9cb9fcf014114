/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Talking to io.scopebox.SessionManager1 and io.scopebox.StorageAgent1 (docs/dbus-api.md): method calls
 * and reply decoding. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "bus-client.h"
#include "bus-util.h"
#include "io-util.h"

uint64_t bus_timeout_session_usec(const Config *c) {
        assert(c);
        return (c->queue_timeout_sec + c->archive_timeout_sec) * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC;
}

uint64_t bus_timeout_exec_usec(const Config *c, uint64_t timeout_ms) {
        assert(c);
        return 2 * c->queue_timeout_sec * USEC_PER_SEC + timeout_ms * USEC_PER_MSEC + BUS_TIMEOUT_SLACK_USEC;
}

uint64_t bus_timeout_files_usec(const Config *c) {
        assert(c);
        return c->queue_timeout_sec * USEC_PER_SEC + c->exec_timeout_cap_ms * USEC_PER_MSEC +
               BUS_TIMEOUT_SLACK_USEC;
}

uint64_t bus_timeout_run_usec(const Config *c) {
        uint64_t rounds;

        assert(c);
        /* Every run ahead of this one in the manager's queue, MAX_WORKERS at a time, then this one.
         * Twice MAX_REQUESTS: runs whose clients went away still run in the manager. */
        rounds = 2 * c->dify_max_requests / MAX(c->dify_max_workers, (uint64_t) 1) + 2;
        return rounds * c->dify_worker_timeout_sec * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC;
}

static int bus_new_call(sd_bus *bus, const char *destination, const char *path, const char *interface,
                        const char *member, sd_bus_message **ret) {
        assert(member);
        assert(ret);

        if (!bus)
                return -ENOTCONN;
        return sd_bus_message_new_method_call(bus, ret, destination, path, interface, member);
}

int session_manager_new_call(sd_bus *bus, const char *member, sd_bus_message **ret) {
        return bus_new_call(bus, SESSION_MANAGER_BUS_NAME, SESSION_MANAGER_OBJECT_PATH,
                            SESSION_MANAGER_INTERFACE, member, ret);
}

uint64_t bus_timeout_storage_usec(const Config *c) {
        assert(c);
        return c->archive_timeout_sec * USEC_PER_SEC + BUS_TIMEOUT_SLACK_USEC;
}

uint64_t bus_timeout_storage_gc_usec(const Config *c) {
        assert(c);
        return bus_timeout_storage_usec(c) + BUS_TIMEOUT_STORAGE_GC_EXTRA_USEC;
}

int storage_agent_new_call(sd_bus *bus, const char *member, sd_bus_message **ret) {
        return bus_new_call(bus, STORAGE_AGENT_BUS_NAME, STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                            member, ret);
}

static int bus_read_basic_value(sd_bus_message *m, char type, void *p) {
        int b, r;

        switch (type) {
        case 'b':
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r >= 0)
                        *(bool *) p = b;
                return r;
        case 'u':
        case 'i':
        case 't':
        case 'x':
        case 's':
        case 'h':
                return sd_bus_message_read_basic(m, type, p);
        default:
                return -EINVAL;
        }
}

/* A known key whose variant holds another type: -EBADMSG, or for options (an 'error' to fill) the
 * error that names it. */
static int bus_dict_read_value(sd_bus_message *m, const BusDictField *f, void *base, sd_bus_error *error) {
        char sig[2] = { f->type, 0 };
        void *p = (uint8_t *) base + f->offset;
        int r;

        r = sd_bus_message_enter_container(m, 'v', f->read ? f->signature : sig);
        if (r == -ENXIO)
                return error ? sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
                                                 "Option '%s' must be of type '%s'.", f->name,
                                                 f->read ? f->signature : sig)
                             : -EBADMSG;
        if (r < 0)
                return r;

        r = f->read ? f->read(m, p) : bus_read_basic_value(m, f->type, p);
        if (r < 0)
                return r;

        return sd_bus_message_exit_container(m);
}

int bus_message_read_array(sd_bus_message *m, const char *contents, size_t max, BusArrayElement element,
                           void *userdata) {
        int r;

        assert(m);
        assert(contents);
        assert(element);

        r = sd_bus_message_enter_container(m, 'a', contents);
        if (r < 0)
                return r;
        for (size_t n = 0;; n++) {
                r = sd_bus_message_at_end(m, false);
                if (r < 0)
                        return r;
                if (r > 0)
                        break;
                if (n >= max)
                        return -EBADMSG;
                r = element(m, userdata);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_exit_container(m);
}

typedef struct DictRead {
        const BusDictField *fields;
        void *base;
        sd_bus_error *error;   /* options: unknown keys and other types are errors */
} DictRead;

static int bus_dict_read_entry(sd_bus_message *m, void *userdata) {
        const DictRead *d = userdata;
        const BusDictField *f = NULL;
        const char *name;
        int r;

        r = sd_bus_message_enter_container(m, 'e', "sv");
        if (r < 0)
                return r;

        r = sd_bus_message_read_basic(m, 's', &name);
        if (r < 0)
                return r;
        for (const BusDictField *i = d->fields; i->name && !f; i++)
                if (streq(i->name, name))
                        f = i;
        if (!f && d->error)
                return sd_bus_error_setf(d->error, SD_BUS_ERROR_INVALID_ARGS, "Unknown option '%s'.", name);
        r = f ? bus_dict_read_value(m, f, d->base, d->error) : sd_bus_message_skip(m, "v");
        if (r < 0)
                return r;

        return sd_bus_message_exit_container(m);
}

int bus_message_read_dict(sd_bus_message *m, const BusDictField fields[], void *base) {
        assert(m);
        assert(fields);

        return bus_message_read_array(m, "{sv}", SIZE_MAX, bus_dict_read_entry,
                                      &(DictRead) { fields, base, NULL });
}

int bus_message_read_options(sd_bus_message *m, const BusDictField fields[], void *base,
                             sd_bus_error *error) {
        assert(m);
        assert(fields);
        assert(error);

        return bus_message_read_array(m, "{sv}", SIZE_MAX, bus_dict_read_entry,
                                      &(DictRead) { fields, base, error });
}

void bus_data_done(BusData *d) {
        assert(d);

        if (d->map)
                (void) munmap(d->map, d->map_size);
        free(d->copy);
        *d = (BusData) {};
}

int bus_data_load(int fd, uint64_t max, BusData *ret) {
        uint64_t size;
        int seals, r;

        assert(ret);

        r = fd_regular_size(fd, max, &size);
        if (r < 0)
                return r == -EBADFD ? -EBADMSG : r;
        if (size == 0) {
                *ret = (BusData) { .data = (const uint8_t *) "" };
                return 0;
        }

        seals = fcntl(fd, F_GET_SEALS);
        if (seals >= 0 && (seals & F_SEAL_SHRINK)) {
                void *p = mmap(NULL, (size_t) size, PROT_READ, MAP_PRIVATE, fd, 0);
                if (p == MAP_FAILED)
                        return -errno;
                *ret = (BusData) {
                        .map = p,
                        .map_size = (size_t) size,
                        .data = p,
                        .size = (size_t) size,
                };
                return 0;
        }

        /* Bounded again while reading: the file may have grown since fstat(). */
        *ret = (BusData) {};
        r = read_full_memfd(fd, (size_t) max, &ret->copy, &ret->size);
        if (r < 0)
                return r;
        ret->data = (const uint8_t *) ret->copy;
        return 0;
}
