/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* sd-event sources that own what they watch. */
#pragma once

#include <stdint.h>

#include <systemd/sd-event.h>

#include "macro.h"

/* An io source for fd that owns it from now on: fd is closed with the source, or here when the
 * source can't be added (then *ret is left as it was). */
static inline int event_add_io_owned(sd_event *e, sd_event_source **ret, int fd, uint32_t events,
                                     sd_event_io_handler_t callback, void *userdata) {
        sd_event_source *s = NULL;
        int r;

        r = sd_event_add_io(e, &s, fd, events, callback, userdata);
        if (r >= 0)
                r = sd_event_source_set_io_fd_own(s, true);
        if (r < 0) {
                sd_event_source_disable_unref(s);
                safe_close(fd);
                return r;
        }
        *ret = s;
        return 0;
}
