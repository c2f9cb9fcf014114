/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's start from its stored archive (restore, damaged archives quarantined, a pending
 * archive's session adopted), and its recovery after a restart of the manager. */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "log.h"
#include "message-ids.h"
#include "manager.h"
#include "runner-protocol.h"
#include "session.h"
#include "signal-util.h"
#include "bus-util.h"
#include "storage-config.h"
#include "string-table.h"
#include "string-util.h"
#include "systemd-client.h"
#include "time-util.h"
#include "session-private.h"

/* ---- adoption: a create for an archive still pending takes its session over ---- */

int session_adopt(Session *s, uint64_t idle_ttl_usec, SessionDoneCallback cb, void *userdata) {
        bool under_way;

        if (!session_archive_pending(s) || s->archive.discard_stem || s->archive.superseded ||
            s->control_fd < 0 || s->start_callback)
                return -EBUSY;

        /* Its workspace is here, newer than anything stored: the create never waits for storage.
         * An attempt under way goes on by itself (an upload to its end, the runner's archive
         * aborted once written); the session's own next attempt waits for it. */
        under_way = session_archive_in_flight(s);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-adopted"),
                   "Session %s, whose archive was pending (%u attempts%s), is taken over by a new create "
                   "for the same archive: its workspace is newer than the stored one.",
                   s->id, s->archive.attempts, under_way ? ", one under way" : "");
        if (under_way && !s->archive.slot) {
                /* The runner is writing the archive: nothing of it will be committed. */
                storage_abort(s, s->archive.token);
                s->archive.token = mfree(s->archive.token);
        }
        /* Whoever released it hears "pending" now: the workspace is kept, and taken over. */
        if (!s->archive.answered) {
                s->archive.outcome = ARCHIVE_OUTCOME_PENDING;
                session_release_tell(s);
        }
        session_archive_stop_retrying(s);
        s->archive.orphaned = under_way;
        s->adopted = true;
        /* Its workspace is the newest there is, whatever its own create restored. */
        s->restore_failed = false;
        s->archive.superseded = false;
        s->archive.answered = false;
        s->archive.answer_timer = sd_event_source_disable_unref(s->archive.answer_timer);
        s->archive.outcome = ARCHIVE_OUTCOME_NONE;
        s->archive.attempts = 0;
        s->archive.first_failure_realtime_usec = s->archive.release_realtime_usec = 0;
        s->archive.error = mfree(s->archive.error);
        s->end = _SESSION_END_INVALID;
        s->idle_ttl_usec = idle_ttl_usec;
        (void) session_enter(s, SESSION_RESTORING);
        s->start_callback = cb;
        s->start_userdata = userdata;
        /* As after a restore: the client syncs its inputs anew. */
        session_reset_inputs_then_ready(s);
        return 0;
}

/* ---- restore at create ---- */

static void on_inputs_reset(Session *s, int error, const char *message, json_object *reply, int fd,
                            void *userdata) {
        if (error < 0)
                log_struct(LOG_WARNING, error, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to clear the inputs of session %s: %s", s->id, strempty(message));
        session_start_done(s, 0, NULL);
}

/* Inputs that can't be cleared are logged and the session starts, as when the runner fails to
 * (on_inputs_reset()): a session never stays STARTING for it. */
void session_reset_inputs_then_ready(Session *s) {
        int r = session_enqueue_op(s, &runner_reset_inputs_request, on_inputs_reset);
        if (r < 0)
                on_inputs_reset(s, r, "failed to ask the runner", NULL, -EBADF, NULL);
}

/* The create fails for now: the archive stays where it is, and the same create may succeed later. */
static void session_restore_fail_create(Session *s, const char *why) {
        _cleanup_free_ char *message = NULL;

        if (asprintf(&message,
                     "failed to restore the workspace from its archive: %s; the stored archive is kept, "
                     "retry later",
                     why) < 0)
                message = NULL;
        session_start_done(s, -ENOLINK, message ?: "failed to restore the workspace from its archive");
}

/* The stored archive could not be restored. The create fails (the archive stays as it is, a retry
 * once storage is back succeeds) or, if the operator chose so and nothing was unpacked yet, the
 * session starts empty and never archives over the stored one. */
static void session_restore_failed(Session *s, bool unpacked, const char *why) {
        const char *stem = session_archive_stem(s, NULL);
        bool start_empty = s->manager->config.start_empty_on_restore_failure && !unpacked;

        s->manager->metrics.restore_failures++;
        log_struct(LOG_ERR, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Failed to restore session %s from archive '%s': %s. %s", s->id, stem, why,
                   start_empty ? "It starts empty and will not archive over the stored archive."
                               : "The create fails; the stored archive is kept.");
        if (start_empty) {
                s->archive_kept = s->restore_failed = true;
                session_reset_inputs_then_ready(s);
                return;
        }
        session_restore_fail_create(s, why);
}

/* ---- damaged archives: quarantined ---- */

/* The damaged archive stays where it was: the create fails, saying why it counts as damaged. */
static void session_restore_fail_quarantine(Session *s) {
        _cleanup_free_ char *why = NULL;

        if (!s->restore_damage || asprintf(&why, "the archive is damaged (%s) and could not be moved aside",
                                           s->restore_damage) < 0)
                why = NULL;
        session_restore_fail_create(s, why ?: "the archive is damaged and could not be moved aside");
}

static int on_quarantine_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        const char *stem = session_archive_stem(s, NULL), *key = NULL;
        StorageAnswer answer = storage_answer(reply);

        storage_call_ended(&s->restore_slot);
        if (session_state_is_ending(s->state)) {
                session_finalize(s);
                return 0;
        }
        if (answer == STORAGE_ANSWER_OK && sd_bus_message_read(reply, "s", &key) < 0)
                answer = STORAGE_ANSWER_FAILED;
        if (answer == STORAGE_ANSWER_OK) {
                s->manager->metrics.archives_quarantined++;
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-quarantined",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                      strjoina("SCOPEBOX_QUARANTINE_KEY=", key),
                                      SCOPEBOX_MESSAGE_RESTORE_QUARANTINED),
                           "Moved the damaged archive '%s' aside to '%s'; session %s starts empty and "
                           "archives there as usual.",
                           stem, key, s->id);
        } else if (answer == STORAGE_ANSWER_NOT_FOUND)
                /* Moved or deleted meanwhile (another create of the same archive): nothing to obey. */
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-quarantined",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem)),
                           "The damaged archive '%s' is gone already; session %s starts empty.", stem,
                           s->id);
        else {
                /* Not moved: it stays where it is, untouched, and the next create tries again.
                 * Never restored, never deleted. */
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                                      strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                      SCOPEBOX_MESSAGE_RESTORE_FAILED),
                           "Failed to move the damaged archive '%s' of session %s aside: %s. The create "
                           "fails.",
                           stem, s->id, storage_reply_message(reply));
                session_restore_fail_quarantine(s);
                return 0;
        }
        s->restore_failed = true;
        session_reset_inputs_then_ready(s);
        return 0;
}

/* The stored archive can never be restored as it is (ArchiveDamaged from the agent, or what the
 * runner's unpacking found: runner-protocol.h). It is moved aside to a quarantine key next to it,
 * never deleted, and the session starts empty ("restored": false); its releases archive to the key
 * as usual, so one bad archive never locks a conversation out. */
static void session_restore_damaged(Session *s, const char *why) {
        const char *stem = session_archive_stem(s, NULL), *storage = session_effective_storage(s);
        int r;

        s->manager->metrics.restore_failures++;
        log_struct(LOG_WARNING, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Failed to restore session %s from archive '%s': %s. The archive is damaged; moving it "
                   "aside.",
                   s->id, stem, why);
        /* For the answer, should the move fail (without memory, an answer without the reason). */
        free(s->restore_damage);
        s->restore_damage = strdup(why);
        /* A release of the same archive under way may store a good one at the key any moment:
         * never move that aside. The next create finds whichever is there then. */
        LIST_FOREACH(sessions, i, s->manager->sessions)
                if (session_same_archive(s, i) &&
                    (session_archive_pending(i) || session_archive_in_flight(i))) {
                        session_restore_fail_create(s, "the archive is damaged and is being replaced");
                        return;
                }
        /* Bounded like the restore itself: the gateway waits for the create no longer. */
        r = storage ? storage_call(s, &s->restore_slot, "QuarantineArchive", on_quarantine_reply,
                                   s->manager->config.archive_timeout_sec * USEC_PER_SEC +
                                           STORAGE_CALL_SLACK_USEC,
                                   "ss", storage, stem)
                    : -ENOMEDIUM;
        if (r < 0)
                session_restore_fail_quarantine(s);
}

/* The client's storage block may not be used now (our endpoint policy refuses it, or can't tell):
 * the create fails with that error, by name, rather than start empty over the client's archive. */
static void session_restore_refused(Session *s, bool refused, const char *why) {
        if (!refused)
                s->manager->metrics.restore_failures++;
        /* A client chooses its endpoint (info); the policy that can't decide is the host's. */
        log_struct(refused ? LOG_INFO : LOG_WARNING, 0,
                   LOG_FIELDS(LOG_SESSION_FIELD(s->id),
                              refused ? "SCOPEBOX_EVENT=restore-refused" : "SCOPEBOX_EVENT=restore-failed",
                              strjoina("SCOPEBOX_ARCHIVE_STEM=", session_archive_stem(s, NULL)),
                              refused ? NULL : SCOPEBOX_MESSAGE_RESTORE_FAILED),
                   "Not creating session %s: the storage agent %s its storage block (%s).", s->id,
                   refused ? "refuses" : "can't judge", why);
        s->start_error_name = refused ? BUS_ERROR_STORAGE_REFUSED : BUS_ERROR_POLICY_UNAVAILABLE;
        session_start_done(s, refused ? -EADDRNOTAVAIL : -ENETDOWN, why);
}

static void on_runner_restored(Session *s, int error, const char *message, json_object *reply, int fd,
                               void *userdata) {
        RunnerArchiveReply answer;

        if (session_state_is_ending(s->state))
                return;
        if (runner_restore_error_is_damage(error)) {
                session_restore_damaged(s, strempty(message));
                return;
        }
        if (error < 0) {
                session_restore_failed(s, true, strempty(message));
                return;
        }
        s->manager->metrics.archive_bytes_restored += s->restore_size;
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-restored"),
                   "Restored session %s from its archive (%llu bytes).", s->id,
                   schema_parse(&runner_archive_reply, reply, &answer, NULL) >= 0
                           ? (unsigned long long) answer.bytes
                           : 0ULL);
        session_reset_inputs_then_ready(s);
}

static int on_open_archive_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        Config *c = &s->manager->config;
        json_object *msg = NULL;
        struct stat st;
        int found = 0, fd, r;

        storage_call_ended(&s->restore_slot);
        if (session_state_is_ending(s->state)) {
                session_finalize(s);
                return 0;
        }
        switch (storage_answer(reply)) {
        case STORAGE_ANSWER_OK:
                break;
        case STORAGE_ANSWER_NOT_EFFECTIVE:
                /* Not effective by the contract's own rules (invalid, or not configured where the
                 * agent runs): as without storage, nothing is restored, nothing will be archived. */
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-skipped"),
                           "Not restoring session %s, starting empty: %s", s->id,
                           storage_reply_message(reply));
                session_reset_inputs_then_ready(s);
                return 0;
        case STORAGE_ANSWER_REFUSED:
        case STORAGE_ANSWER_POLICY_UNAVAILABLE:
                session_restore_refused(s, storage_answer(reply) == STORAGE_ANSWER_REFUSED,
                                        storage_reply_message(reply));
                return 0;
        case STORAGE_ANSWER_DAMAGED:
                session_restore_damaged(s, storage_reply_message(reply));
                return 0;
        default:
                session_restore_failed(s, false, storage_reply_message(reply));
                return 0;
        }
        if (sd_bus_message_read(reply, "bh", &found, &fd) < 0) {
                session_restore_failed(s, false, "malformed reply from the storage agent");
                return 0;
        }
        if (!found) {
                session_reset_inputs_then_ready(s);
                return 0;
        }
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        /* Expansion is bounded like the workspace itself. */
        r = runner_request_archive(true, c->workspace_size, c->archive_timeout_sec, &msg);
        if (fd < 0 || r < 0) {
                safe_close(fd);
                json_object_put(msg);
                session_restore_failed(s, false, "out of memory");
                return 0;
        }
        /* Counted as restored once the runner unpacked it. */
        s->restore_size = fstat(fd, &st) >= 0 && S_ISREG(st.st_mode) ? (uint64_t) st.st_size : 0;
        r = session_enqueue(s, msg, fd, c->archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                            false, true, on_runner_restored, NULL);
        if (r < 0)
                session_restore_failed(s, false, "failed to ask the runner to unpack it");
        return 0;
}

const char *session_start_error_name(const Session *s, int error) {
        return s->start_error_name ?: bus_error_name_from_errno(error);
}

static int on_restore_wait(sd_event_source *source, uint64_t usec, void *userdata);

/* After the runner is up: restore the archive if there is one, then clear the inputs. */
void session_restore_then_ready(Session *s) {
        const char *storage = s->storage_json, *stem = session_archive_stem(s, NULL);
        int r;

        r = s->archive_key ? storage_block_effective(s, storage) : 0;
        if (r < 0) {
                session_restore_failed(s, false, "out of memory");
                return;
        }
        if (r == 0) {
                session_start_done(s, 0, NULL);
                return;
        }
        if (s->state == SESSION_CREATING)
                (void) session_enter(s, SESSION_RESTORING);
        /* The archive of a session released moments ago may not be stored yet: never restore what
         * it is about to replace. One being stored now is waited for; one that failed and waits for
         * its next attempt is the client's to take over (a new create adopts it). */
        LIST_FOREACH(sessions, i, s->manager->sessions) {
                uint64_t now = now_usec(CLOCK_MONOTONIC);

                if ((!session_archive_pending(i) && !i->archive.orphaned) || !session_same_archive(s, i))
                        continue;
                /* Waited for as long as a restore may take: the create's answer comes in time. */
                if (s->restore_wait_until_usec == 0)
                        s->restore_wait_until_usec =
                                now + s->manager->config.archive_timeout_sec * USEC_PER_SEC;
                if (session_archive_in_flight(i) && now < s->restore_wait_until_usec) {
                        r = sd_event_add_time_relative(s->manager->event, &s->restore_wait_timer,
                                                       CLOCK_MONOTONIC, ARCHIVE_WAIT_USEC,
                                                       10 * USEC_PER_MSEC, on_restore_wait, s);
                        if (r >= 0) {
                                session_release_create_slot(s);
                                return;
                        }
                }
                session_restore_failed(s, true,
                                       "the previous workspace of this archive_key is still being archived");
                return;
        }
        /* Bounded like the create itself: the gateway waits for it no longer. */
        r = storage_call(s, &s->restore_slot, "OpenArchive", on_open_archive_reply,
                         s->manager->config.archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                         "ss", storage, stem);
        if (r < 0) {
                session_restore_failed(s, false, "failed to call the storage agent");
                return;
        }
        session_release_create_slot(s);
}

static int on_restore_wait(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        s->restore_wait_timer = sd_event_source_disable_unref(s->restore_wait_timer);
        if (session_state_is_ending(s->state)) {
                session_finalize(s);
                return 0;
        }
        session_restore_then_ready(s);
        return 0;
}

/* ---- recovery after a restart of the manager ---- */

static void on_recover_ping_again(Session *s, int error, const char *message, json_object *reply, int fd,
                                  void *userdata);

static void session_recovered(Session *s, int error, json_object *reply, bool again) {
        RunnerPingReply p;
        uint64_t now, idle, remaining;

        /* Its answer lost for want of memory: asked once more before anything is given up. */
        if (error == -ENOMEM && !again &&
            session_enqueue_op(s, &runner_ping_request, on_recover_ping_again) >= 0)
                return;
        if (error < 0 || schema_parse(&runner_ping_reply, reply, &p, NULL) < 0 || !p.initialized) {
                session_cleanup_stale(s, "runner did not answer after a restart");
                return;
        }
        session_learn_runner(s, p.cancel);
        if (session_archive_pending(s)) {
                session_resume_release(s);
                return;
        }
        now = (uint64_t) time(NULL) * USEC_PER_SEC;
        idle = now > s->last_active_realtime_usec ? now - s->last_active_realtime_usec : 0;
        remaining = idle < s->idle_ttl_usec ? s->idle_ttl_usec - idle : 1;
        session_arm_idle(s, remaining);
        session_arm_deadline(s);
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-recovered"),
                   "Recovered session %s; idle for %llus of %llus.", s->id,
                   (unsigned long long) (idle / USEC_PER_SEC),
                   (unsigned long long) (s->idle_ttl_usec / USEC_PER_SEC));
}

static void on_recover_ping(Session *s, int error, const char *message, json_object *reply, int fd,
                            void *userdata) {
        session_recovered(s, error, reply, false);
}

static void on_recover_ping_again(Session *s, int error, const char *message, json_object *reply, int fd,
                                  void *userdata) {
        session_recovered(s, error, reply, true);
}

int session_recover(Session *s) {
        json_object *ping;
        int r;

        /* Built first: a recovery that can't even ask fails with the session as it was. */
        r = runner_request_plain(&runner_ping_request, &ping);
        if (r < 0)
                return r;
        if (s->state == SESSION_CREATING)
                (void) session_enter(s, SESSION_RUNNING);
        r = session_connect(s);
        if (r < 0) {
                json_object_put(ping);
                session_cleanup_stale(s, "runner unreachable after a restart");
                return 0;
        }
        return session_enqueue(s, ping, -EBADF, SESSION_CONTROL_TIMEOUT_USEC, false, true, on_recover_ping,
                               NULL);
}

void session_cleanup_stale(Session *s, const char *why) {
        log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-stale"),
                   "Cleaning up session %s: %s.", s->id, why);
        session_teardown(s, SESSION_END_STALE);
}
