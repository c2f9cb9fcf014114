/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session's stages: every (from, to) pair of the transition table, entered through
 * session_enter() on a session of a manager without a bus. A legal one sets the stage and runs its
 * entry actions; an illegal one is refused and changes nothing. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-event.h>

#include "macro.h"
#include "manager.h"
#include "session.h"
#include "manager-fixture.h"
#include "tests.h"

#define S(x) SESSION_##x

/* The diagram of docs/architecture.md, written out again: the table in session.c must say the
 * same, pair by pair. */
static const struct {
        SessionState from, to;
} legal[] = {
        { S(CREATING), S(RESTORING) },         { S(CREATING), S(RUNNING) },
        { S(CREATING), S(ARCHIVE_PENDING) },   { S(CREATING), S(DISCARDING) },
        { S(CREATING), S(STOPPING) },          { S(RESTORING), S(RUNNING) },
        { S(RESTORING), S(ARCHIVING) },        { S(RESTORING), S(DISCARDING) },
        { S(RESTORING), S(STOPPING) },         { S(RUNNING), S(ARCHIVING) },
        { S(RUNNING), S(DISCARDING) },         { S(RUNNING), S(STOPPING) },
        { S(ARCHIVING), S(ARCHIVE_PENDING) },  { S(ARCHIVING), S(RESTORING) },
        { S(ARCHIVING), S(DISCARDING) },       { S(ARCHIVING), S(STOPPING) },
        { S(ARCHIVE_PENDING), S(ARCHIVING) },  { S(ARCHIVE_PENDING), S(RESTORING) },
        { S(ARCHIVE_PENDING), S(DISCARDING) }, { S(ARCHIVE_PENDING), S(STOPPING) },
        { S(DISCARDING), S(STOPPING) },        { S(STOPPING), S(GONE) },
};

static bool expected_legal(SessionState from, SessionState to) {
        for (size_t i = 0; i < ELEMENTSOF(legal); i++)
                if (legal[i].from == from && legal[i].to == to)
                        return true;
        return false;
}

static int on_never(sd_event_source *source, uint64_t usec, void *userdata) {
        return 0;
}

typedef struct Heard {
        unsigned calls;
        SessionState state;
} Heard;

static void on_heard(Session *s, int error, const char *message, void *userdata) {
        Heard *h = userdata;

        h->calls++;
        h->state = s->state;
}

static void check_pair(SessionState from, SessionState to) {
        Manager *m = test_manager_new();
        Heard heard = {};
        bool legal_now = expected_legal(from, to);
        char id[SESSION_ID_LEN + 1];
        Session *s;
        int r;

        ASSERT_TRUE(session_id_generate(id) >= 0);
        ASSERT_TRUE(session_new_with_id(m, id, &s) >= 0);
        manager_add_session(m, s);
        s->ephemeral = true;
        s->state = from; /* the test's own shortcut: the code never assigns a stage */
        s->end = SESSION_END_RELEASED;
        if (!session_state_is_ending(from))
                ASSERT_TRUE(sd_event_add_time_relative(m->event, &s->idle_timer, CLOCK_MONOTONIC,
                                                       3600 * USEC_PER_SEC, 0, on_never, s) >= 0);
        else
                /* An ending session's release only adds a waiter: it hears when the session is gone
                 * (or, pending, when its archive is). */
                ASSERT_EQ(session_release(s, SESSION_END_RELEASED, on_heard, &heard), 0);

        ASSERT_EQ(session_state_transition_is_legal(from, to), legal_now);
        r = session_enter(s, to);
        if (!legal_now) {
                ASSERT_EQ(r, -EINVAL);
                ASSERT_EQ(s->state, from);
                ASSERT_TRUE(manager_find_session(m, id) == s);
                ASSERT_TRUE(!m->session_gc_queue);
                ASSERT_EQ(!!s->idle_timer, !session_state_is_ending(from));
                ASSERT_EQ(heard.calls, 0U);
        } else {
                ASSERT_EQ(r, 0);
                if (to == SESSION_STOPPING) {
                        /* Without a bus the scope's stop fails at once: nothing is left to wait for,
                         * the session is gone. */
                        ASSERT_EQ(s->state, SESSION_GONE);
                } else
                        ASSERT_EQ(s->state, to);
                /* Leaving the live stages: no more idle timer. */
                if (session_state_is_ending(to))
                        ASSERT_TRUE(!s->idle_timer);
                else
                        ASSERT_TRUE(s->idle_timer || session_state_is_ending(from));
                /* GONE: out of every lookup, in the GC queue; otherwise still found. */
                if (s->state == SESSION_GONE) {
                        ASSERT_TRUE(!manager_find_session(m, id));
                        ASSERT_TRUE(m->session_gc_queue == s);
                } else {
                        ASSERT_TRUE(manager_find_session(m, id) == s);
                        ASSERT_TRUE(!m->session_gc_queue);
                }
                /* ARCHIVE_PENDING after an attempt: the release's waiters hear "pending" now. */
                if (from == SESSION_ARCHIVING && to == SESSION_ARCHIVE_PENDING) {
                        ASSERT_EQ(heard.calls, 1U);
                        ASSERT_EQ(heard.state, SESSION_ARCHIVE_PENDING);
                } else
                        ASSERT_EQ(heard.calls, 0U);
        }

        /* The manager's GC frees it; a waiter still there hears that the session is gone. */
        if (s->state == SESSION_GONE && from != SESSION_GONE) {
                for (int i = 0; i < 10 && m->session_gc_queue; i++)
                        ASSERT_TRUE(sd_event_run(m->event, 0) >= 0);
                ASSERT_TRUE(!m->session_gc_queue);
                ASSERT_EQ(heard.calls, session_state_is_ending(from) ? 1U : 0U);
                ASSERT_EQ(heard.state, session_state_is_ending(from) ? SESSION_GONE : (SessionState) 0);
        } else
                session_free(s);
        manager_free(m);
}

static void test_every_pair(void) {
        unsigned n_legal = 0;

        for (SessionState from = 0; from < _SESSION_STATE_MAX; from++)
                for (SessionState to = 0; to < _SESSION_STATE_MAX; to++) {
                        check_pair(from, to);
                        n_legal += session_state_transition_is_legal(from, to);
                }
        ASSERT_EQ(n_legal, (unsigned) ELEMENTSOF(legal));
        /* Out of range: never legal. */
        ASSERT_TRUE(!session_state_transition_is_legal(_SESSION_STATE_INVALID, SESSION_RUNNING));
        ASSERT_TRUE(!session_state_transition_is_legal(SESSION_RUNNING, _SESSION_STATE_MAX));
}

/* The bus contract's three words and every stage's own name. */
static void test_words(void) {
        static const char *const words[_SESSION_STATE_MAX] = {
                [SESSION_CREATING] = "starting",    [SESSION_RESTORING] = "starting",
                [SESSION_RUNNING] = "running",      [SESSION_ARCHIVING] = "stopping",
                [SESSION_ARCHIVE_PENDING] = "stopping", [SESSION_DISCARDING] = "stopping",
                [SESSION_STOPPING] = "stopping",    [SESSION_GONE] = "stopping",
        };

        for (SessionState s = 0; s < _SESSION_STATE_MAX; s++) {
                ASSERT_STREQ(session_state_to_word(s), words[s]);
                ASSERT_TRUE(session_state_to_string(s));
                ASSERT_EQ(session_state_is_starting(s), s == SESSION_CREATING || s == SESSION_RESTORING);
        }
        ASSERT_TRUE(!session_state_to_word(_SESSION_STATE_MAX));
        ASSERT_STREQ(session_state_to_string(SESSION_ARCHIVE_PENDING), "archive-pending");
}

int main(void) {
        test_every_pair();
        test_words();
        return 0;
}
