/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's deadline (CreateSession "deadline_usec", SetDeadline): an absolute time at which the
 * session is released, busy or not, as its idle TTL would release it (archived where storage says
 * so). It is the E2B API's sandbox timeout (docs/e2b.md): a point in wall-clock time the client
 * sets and reads back as "endAt", so the timer runs on CLOCK_REALTIME and a restarted manager arms
 * it again from the record. */
#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "log.h"
#include "manager.h"
#include "message-ids.h"
#include "session-private.h"
#include "session.h"
#include "time-util.h"

static int on_deadline(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        s->deadline_timer = sd_event_source_disable_unref(s->deadline_timer);
        /* Still starting: released all the same (its create fails). */
        if (session_state_is_ending(s->state))
                return 0;
        log_struct(LOG_INFO, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-deadline",
                              SCOPEBOX_MESSAGE_SESSION_REAPED),
                   "Session %s reached its deadline.", s->id);
        if (s->counted)
                s->manager->metrics.sessions_reaped++;
        (void) session_release_full(s, SESSION_END_DEADLINE, &(ReleaseOptions) { .archive = true }, NULL,
                                    NULL);
        return 0;
}

void session_arm_deadline(Session *s) {
        int r;

        if (s->deadline_realtime_usec == 0)
                return;
        if (s->deadline_timer) {
                (void) sd_event_source_set_time(s->deadline_timer, s->deadline_realtime_usec);
                (void) sd_event_source_set_enabled(s->deadline_timer, SD_EVENT_ONESHOT);
                return;
        }
        r = sd_event_add_time(s->manager->event, &s->deadline_timer, CLOCK_REALTIME,
                              s->deadline_realtime_usec, USEC_PER_SEC / 10, on_deadline, s);
        if (r < 0)
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to arm the deadline timer: %m");
}

int session_set_deadline(Session *s, uint64_t realtime_usec) {
        if (realtime_usec == 0)
                return -EINVAL;
        s->deadline_realtime_usec = realtime_usec;
        session_arm_deadline(s);
        /* A restarted manager must not bring back an earlier deadline. */
        return session_save_state(s);
}
