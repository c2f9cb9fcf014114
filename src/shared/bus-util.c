/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.freedesktop.LogControl1, as every daemon of ours serves it, and the idle exit of the
 * bus-activated ones. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "bus-util.h"
#include "log.h"
#include "macro.h"
#include "string-util.h"

static int property_get_log_level(sd_bus *bus, const char *path, const char *interface,
                                  const char *property, sd_bus_message *reply, void *userdata,
                                  sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", log_level_to_string(log_get_max_level()));
}

static int property_set_log_level(sd_bus *bus, const char *path, const char *interface,
                                  const char *property, sd_bus_message *value, void *userdata,
                                  sd_bus_error *error) {
        const char *t;
        int r, level;

        r = sd_bus_message_read(value, "s", &t);
        if (r < 0)
                return r;
        level = log_level_from_string(t);
        if (level < 0)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "Invalid log level '%s'", t);
        log_info("Setting log level to %s.", t);
        log_set_max_level(level);
        return sd_bus_emit_properties_changed(bus, path, interface, property, NULL);
}

static int property_get_log_target(sd_bus *bus, const char *path, const char *interface,
                                   const char *property, sd_bus_message *reply, void *userdata,
                                   sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", "journal");
}

static int property_get_identifier(sd_bus *bus, const char *path, const char *interface,
                                   const char *property, sd_bus_message *reply, void *userdata,
                                   sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", log_get_identifier());
}

static const sd_bus_vtable log_control_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_WRITABLE_PROPERTY("LogLevel", "s", property_get_log_level, property_set_log_level, 0,
                                 SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LogTarget", "s", property_get_log_target, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("SyslogIdentifier", "s", property_get_identifier, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_VTABLE_END,
};

int bus_add_log_control(sd_bus *bus) {
        return sd_bus_add_object_vtable(bus, NULL, "/org/freedesktop/LogControl1",
                                        "org.freedesktop.LogControl1", log_control_vtable, NULL);
}

/* ---- idle exit ---- */

struct BusIdleExit {
        sd_event *event;
        sd_bus *bus;
        BusCallsAnswered answered;
        void *userdata;
        sd_bus_slot *release_slot;      /* ReleaseName, until the bus daemon answers it */
        sd_event_source *post_source;   /* after every round of the loop: done yet? */
        sd_event_source *timer_source;  /* pushes systemd's stop timeout out; gives up at the deadline */
        uint64_t deadline_usec;         /* CLOCK_MONOTONIC */
        bool released;
        bool gave_up;
};

/* Whether the daemon may go: every call routed to us under the name has been read, and answered. */
static bool bus_idle_exit_done(BusIdleExit *x) {
        uint64_t n = 0, t = 0;

        if (!x->released)
                return false;
        if (sd_bus_get_n_queued_read(x->bus, &n) < 0 || n > 0)
                return false;
        /* The earliest deadline of our own calls waiting for an answer: none, none waits. */
        if (sd_bus_get_timeout(x->bus, &t) < 0 || t != UINT64_MAX)
                return false;
        return !x->answered || x->answered(x->userdata);
}

static void bus_idle_exit_check(BusIdleExit *x) {
        if (sd_event_get_state(x->event) == SD_EVENT_FINISHED || !bus_idle_exit_done(x))
                return;
        log_debug("Every queued call is answered; exiting.");
        (void) sd_event_exit(x->event, 0);
}

static int on_name_released(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        BusIdleExit *x = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        x->release_slot = sd_bus_slot_unref(x->release_slot);
        /* Not released: calls that arrive from now on stay unanswered, as they always did. */
        if (e)
                log_debug("Failed to release the bus name, exiting anyway: %s", strna(e->message));
        x->released = true;
        bus_idle_exit_check(x);
        return 0;
}

static int on_idle_exit_post(sd_event_source *source, void *userdata) {
        bus_idle_exit_check(userdata);
        return 0;
}

static int on_idle_exit_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        BusIdleExit *x = userdata;

        if (usec >= x->deadline_usec) {
                x->gave_up = true;
                return sd_event_exit(x->event, 0);
        }
        (void) sd_notifyf(false, "EXTEND_TIMEOUT_USEC=%" PRIu64, (uint64_t) BUS_IDLE_EXIT_EXTEND_USEC);
        (void) sd_event_source_set_time(source,
                                        MIN(usec + BUS_IDLE_EXIT_EXTEND_INTERVAL_USEC, x->deadline_usec));
        return sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
}

int bus_idle_exit_start(sd_event *e, sd_bus *bus, const char *name, uint64_t max_usec,
                        BusCallsAnswered answered, void *userdata, BusIdleExit **ret) {
        _cleanup_(bus_idle_exit_freep) BusIdleExit *x = NULL;
        uint64_t now;
        int r;

        assert(e);
        assert(bus);
        assert(name);
        assert(ret);

        r = sd_event_now(e, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return r;
        x = calloc(1, sizeof(BusIdleExit));
        if (!x)
                return -ENOMEM;
        *x = (BusIdleExit) {
                .event = e,
                .bus = bus,
                .answered = answered,
                .userdata = userdata,
                .deadline_usec = max_usec < UINT64_MAX - now ? now + max_usec : UINT64_MAX - 1,
        };

        r = sd_event_add_post(e, &x->post_source, on_idle_exit_post, x);
        if (r < 0)
                return r;
        r = sd_event_add_time(e, &x->timer_source, CLOCK_MONOTONIC,
                              MIN(now + BUS_IDLE_EXIT_EXTEND_INTERVAL_USEC, x->deadline_usec),
                              USEC_PER_SEC, on_idle_exit_timer, x);
        if (r < 0)
                return r;

        /* Before the name goes: from now on, a call for it queues a start of the next instance. */
        (void) sd_notifyf(false, "STOPPING=1\nSTATUS=Idle: gave up %s, answering the calls queued before "
                          "that, then exiting.", name);
        r = sd_bus_release_name_async(bus, &x->release_slot, name, on_name_released, x);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(x);
        return 0;
}

bool bus_idle_exit_gave_up(const BusIdleExit *x) {
        return x && x->gave_up;
}

BusIdleExit *bus_idle_exit_free(BusIdleExit *x) {
        if (!x)
                return NULL;
        x->release_slot = sd_bus_slot_unref(x->release_slot);
        x->post_source = sd_event_source_disable_unref(x->post_source);
        x->timer_source = sd_event_source_disable_unref(x->timer_source);
        free(x);
        return NULL;
}
