/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's archive at its release: the storage agent's staging, the runner's archive, commit,
 * retries with backoff, discard, and the record of a release in progress. */
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

/* ---- archives: storage agent + runner ---- */


static const char *const archive_outcome_table[_ARCHIVE_OUTCOME_MAX] = {
        [ARCHIVE_OUTCOME_NONE] = "none",
        [ARCHIVE_OUTCOME_STORED] = "stored",
        [ARCHIVE_OUTCOME_PENDING] = "pending",
        [ARCHIVE_OUTCOME_SKIPPED] = "skipped",
        [ARCHIVE_OUTCOME_KEPT] = "kept",
        [ARCHIVE_OUTCOME_ABANDONED] = "abandoned",
        [ARCHIVE_OUTCOME_DISCARDED] = "discarded",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(archive_outcome, ArchiveOutcome)

/* Whether a storage block is effective (1) or not (0: then archives and restores are no-ops,
 * COMPAT.md). -ENOMEM: undecided, which is never taken for "not effective" (a release would
 * destroy the workspace unarchived, a discard keep the archive). */
int storage_block_effective(Session *s, const char *json) {
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_json_ json_object *o = NULL;
        const char *why;
        int r;

        if (!json)
                return 0;
        r = json_parse(json, strlen(json), JSON_DEPTH_MAX, &o);
        if (r >= 0 && json_object_is_type(o, json_type_object))
                r = storage_config_parse(o, &c, &why);
        if (r == -ENOMEM)
                return r;
        return r >= 0 && json_object_is_type(o, json_type_object) &&
               storage_config_effective(&c, s->manager->config.local_storage_dir);
}

/* The session's storage block (the one remembered at create, or the release's) if it is
 * effective, else NULL. Undecided (out of memory), the block itself: for the calls that the agent,
 * which checks it anew, may as well refuse (a deletion, a quarantine). */
const char *session_effective_storage(Session *s) {
        return storage_block_effective(s, s->storage_json) != 0 ? s->storage_json : NULL;
}

const char *session_archive_stem(Session *s, const char *override) {
        if (override && archive_stem_is_valid(override))
                return override;
        if (s->archive_key && archive_stem_is_valid(s->archive_key))
                return s->archive_key;
        return s->id;
}

const char *session_archive_stem_of(Session *s) {
        return session_archive_stem(s, NULL);
}

bool session_archive_pending(const Session *s) {
        return s->state == SESSION_ARCHIVING || s->state == SESSION_ARCHIVE_PENDING;
}

unsigned session_count_pending_archives(Manager *m) {
        unsigned n = 0;
        LIST_FOREACH(sessions, i, m->sessions)
                n += session_archive_pending(i);
        return n;
}

/* Between BeginArchive and the answer to CommitArchive (also of an attempt whose release a create
 * took over since): the stored object may change. (A discard's DeleteArchive is no attempt.) */
bool session_archive_in_flight(const Session *s) {
        return s->archive.orphaned ||
               (s->state != SESSION_DISCARDING && (s->archive.slot || s->archive.token));
}

/* Whether the session's archive is (stem, storage_json). */
static bool session_archives_to(Session *s, const char *stem, const char *storage_json) {
        return streq(session_archive_stem(s, NULL), stem) && streq_ptr(s->storage_json, storage_json);
}

bool session_same_archive(Session *a, Session *b) {
        return a != b && session_archives_to(a, session_archive_stem(b, NULL), b->storage_json);
}

Session *session_find_pending_archive(Manager *m, const char *stem, const char *storage_json) {
        Session *found = NULL;

        /* The newest release wins: its workspace is what the client saw last. Never one its client
         * discarded, nor one a newer release superseded. */
        LIST_FOREACH(sessions, i, m->sessions)
                if (session_archive_pending(i) && !i->archive.discard_stem && !i->archive.superseded &&
                    session_archives_to(i, stem, storage_json) &&
                    (!found || i->archive.release_realtime_usec >= found->archive.release_realtime_usec))
                        found = i;
        return found;
}

/* The call is owned by *ret_slot, which its reply callback clears first thing; freeing the
 * session cancels it. */
int storage_call(Session *s, sd_bus_slot **ret_slot, const char *method, sd_bus_message_handler_t cb,
                        uint64_t timeout_usec, const char *types, ...) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        va_list ap;
        int r;

        if (*ret_slot)
                return -EBUSY;  /* one at a time; the caller goes on without it */
        r = sd_bus_message_new_method_call(s->manager->bus, &m, STORAGE_AGENT_BUS_NAME,
                                           STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE, method);
        if (r >= 0) {
                va_start(ap, types);
                r = sd_bus_message_appendv(m, types, ap);
                va_end(ap);
        }
        if (r >= 0)
                r = sd_bus_call_async(s->manager->bus, ret_slot, m, cb, s, timeout_usec);
        return r;
}

/* An answer from the storage agent came: the session no longer waits for that call (its slot is
 * dropped; sd-bus keeps it alive until the callback returns). */
void storage_call_ended(sd_bus_slot **slot) {
        *slot = sd_bus_slot_unref(*slot);
}

const char *storage_reply_message(sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        return e && e->message ? e->message : e && e->name ? e->name : "malformed reply";
}

StorageAnswer storage_answer(sd_bus_message *reply) {
        static const struct {
                const char *name;
                StorageAnswer answer;
        } answers[] = {
                { SD_BUS_ERROR_INVALID_ARGS, STORAGE_ANSWER_NOT_EFFECTIVE },
                { BUS_ERROR_STORAGE_NOT_CONFIGURED, STORAGE_ANSWER_NOT_EFFECTIVE },
                { BUS_ERROR_STORAGE_REFUSED, STORAGE_ANSWER_REFUSED },
                { BUS_ERROR_POLICY_UNAVAILABLE, STORAGE_ANSWER_POLICY_UNAVAILABLE },
                { BUS_ERROR_ARCHIVE_DAMAGED, STORAGE_ANSWER_DAMAGED },
                { BUS_ERROR_NOT_FOUND, STORAGE_ANSWER_NOT_FOUND },
        };

        if (!sd_bus_message_is_method_error(reply, NULL))
                return STORAGE_ANSWER_OK;
        for (size_t i = 0; i < ELEMENTSOF(answers); i++)
                if (sd_bus_message_is_method_error(reply, answers[i].name))
                        return answers[i].answer;
        return STORAGE_ANSWER_FAILED;
}

/* The release waiters hear the outcome now; the session goes on without them. */
void session_release_tell(Session *s) {
        s->archive.answer_timer = sd_event_source_disable_unref(s->archive.answer_timer);
        s->archive.answered = true;
        for (ReleaseWaiter *w; (w = s->release_waiters);) {
                LIST_REMOVE(waiters, s->release_waiters, w);
                w->callback(s, 0, NULL, w->userdata);
                free(w);
        }
}

void session_archive_clear(SessionArchive *a) {
        a->slot = sd_bus_slot_unref(a->slot);
        a->retry_timer = sd_event_source_disable_unref(a->retry_timer);
        a->answer_timer = sd_event_source_disable_unref(a->answer_timer);
        a->token = mfree(a->token);
        a->error = mfree(a->error);
        a->discard_stem = mfree(a->discard_stem);
}

void session_archive_stop_retrying(Session *s) {
        s->archive.retry_timer = sd_event_source_disable_unref(s->archive.retry_timer);
        s->archive.token = mfree(s->archive.token);
}

static int on_discard_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;

        storage_call_ended(&s->archive.slot);
        if (sd_bus_message_is_method_error(reply, NULL))
                log_struct(LOG_WARNING, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to delete the archive of %s: %s", s->id, storage_reply_message(reply));
        session_stop_scope(s, session_end_or(s, SESSION_END_DISCARDED));
        return 0;
}

/* Delete the stored archive (the stem is taken), then stop. */
static void session_discard(Session *s, const char *storage, char *stem) {
        _cleanup_free_ char *owned = stem;

        if (s->state != SESSION_DISCARDING && session_enter(s, SESSION_DISCARDING) < 0)
                return;
        s->archive.outcome = ARCHIVE_OUTCOME_DISCARDED;
        session_archive_stop_retrying(s);
        if (s->archive.orphaned) {
                /* The upload of the release a create took over may still store the archive: it is
                 * deleted after that (session_archive_orphan_ended()). */
                free(s->archive.discard_stem);
                s->archive.discard_stem = TAKE_PTR(owned);
                return;
        }
        if (!storage || storage_call(s, &s->archive.slot, "DeleteArchive", on_discard_reply,
                                     STORAGE_TRANSFER_TIMEOUT_USEC, "ss", storage, owned) < 0)
                session_stop_scope(s, session_end_or(s, SESSION_END_DISCARDED));
}

/* The archive is stored, or never will be: the session goes. */
static void session_archive_done(Session *s, ArchiveOutcome outcome) {
        if (s->archive.discard_stem) {
                session_discard(s, session_effective_storage(s), TAKE_PTR(s->archive.discard_stem));
                return;
        }
        s->archive.outcome = outcome;
        session_archive_stop_retrying(s);
        manager_state_changed(s->manager);
        session_stop_scope(s, session_end_or(s, SESSION_END_RELEASED));
}

static void session_archive_attempt(Session *s);

/* The attempt that was under way when a create took the session over (session_adopt()) has
 * ended: what waited for it goes on. */
static void session_archive_orphan_ended(Session *s) {
        s->archive.orphaned = false;
        if (s->archive.discard_stem)
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
        else if (session_archive_pending(s))
                session_archive_attempt(s);
        else
                session_finalize(s);
}

/* An attempt whose release a create took over, or whose client discarded it meanwhile, goes no
 * further: its staging ('token') is aborted. Returns whether it was dropped. */
static bool session_archive_attempt_dropped(Session *s, const char *token);

static int on_archive_retry(sd_event_source *source, uint64_t usec, void *userdata);

static int session_arm_archive_retry(Session *s, uint64_t usec) {
        if (s->archive.retry_timer) {
                int r = sd_event_source_set_time_relative(s->archive.retry_timer, usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->archive.retry_timer, SD_EVENT_ONESHOT);
                return r;
        }
        return sd_event_add_time_relative(s->manager->event, &s->archive.retry_timer, CLOCK_BOOTTIME, usec,
                                          10 * USEC_PER_MSEC, on_archive_retry, s);
}

static uint64_t archive_retry_delay(unsigned failures) {
        uint64_t d = SESSION_ARCHIVE_RETRY_FIRST_USEC;
        for (unsigned i = 1; i < failures && d < SESSION_ARCHIVE_RETRY_MAX_USEC; i++)
                d *= 2;
        return MIN(d, SESSION_ARCHIVE_RETRY_MAX_USEC);
}

/* What a failed attempt means for the next one. */
typedef enum ArchiveFailure {
        /* Storage down or full, the endpoint refused or unjudged now, the agent gone: retried with
         * backoff until stored or SANDBOX_ARCHIVE_RETRY_DEADLINE_SECONDS passed. */
        ARCHIVE_FAILURE_RETRY,
        /* The workspace is larger than SANDBOX_MAX_ARCHIVE_BYTES: it can't shrink while pending, so
         * it is kept as it is (a create of its archive_key takes it over; the operator may raise
         * the limit and restart the manager), tried once more at the deadline, then given up. */
        ARCHIVE_FAILURE_TOO_LARGE,
        /* The storage block is not effective by the contract's own rules: nothing to archive to. */
        ARCHIVE_FAILURE_NO_STORAGE,
} ArchiveFailure;

/* An attempt failed. */
static void session_archive_failed(Session *s, ArchiveFailure kind, const char *why) {
        Config *c = &s->manager->config;
        uint64_t now = (uint64_t) time(NULL) * USEC_PER_SEC, deadline, delay;
        const char *stem = session_archive_stem(s, NULL);
        int r;

        s->archive.token = mfree(s->archive.token);
        if (s->archive.discard_stem) {
                /* Its client discarded it meanwhile. */
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
                return;
        }
        s->manager->metrics.archive_failures++;
        /* Out of memory, the reason of the attempt before stays. */
        char *error = strdup(why);
        if (error) {
                free(s->archive.error);
                s->archive.error = error;
        }
        if (s->archive.first_failure_realtime_usec == 0)
                s->archive.first_failure_realtime_usec = now;
        deadline = s->archive.first_failure_realtime_usec + c->archive_retry_deadline_sec * USEC_PER_SEC;

        if (kind == ARCHIVE_FAILURE_NO_STORAGE) {
                s->manager->metrics.archives_skipped++;
                log_struct(
                        LOG_WARNING, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-skipped",
                                   strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                   SCOPEBOX_MESSAGE_ARCHIVE_FAILED),
                        "Archive of session %s can't be stored: %s. The stored archive '%s', if any, stays "
                        "as it was.",
                        s->id, why, stem);
                session_archive_done(s, ARCHIVE_OUTCOME_SKIPPED);
                return;
        }
        if (s->archive.superseded || s->control_fd < 0 || s->state != SESSION_ARCHIVING ||
            now >= deadline) {
                const char *reason =
                        s->archive.superseded           ? "a newer release of the same archive superseded it"
                        : s->control_fd < 0             ? "the session's runner is gone"
                        : s->state != SESSION_ARCHIVING ? "the session ended first"
                                                        : "SANDBOX_ARCHIVE_RETRY_DEADLINE_SECONDS passed";
                s->manager->metrics.archives_abandoned++;
                log_struct(
                        s->archive.superseded ? LOG_INFO : LOG_ERR, 0,
                        LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-abandoned",
                                   strjoina("SCOPEBOX_ARCHIVE_STEM=", stem),
                                   SCOPEBOX_MESSAGE_ARCHIVE_ABANDONED),
                        "Gave up archiving session %s after %u attempts (%s); last error: %s. Its workspace "
                        "is lost.",
                        s->id, s->archive.attempts, reason, why);
                session_archive_done(s, ARCHIVE_OUTCOME_ABANDONED);
                return;
        }

        delay = deadline - now;
        if (kind == ARCHIVE_FAILURE_RETRY)
                delay = MIN(archive_retry_delay(s->archive.attempts), delay);
        log_struct(
                LOG_WARNING, 0,
                LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-failed",
                           strjoina("SCOPEBOX_ARCHIVE_STEM=", stem), SCOPEBOX_MESSAGE_ARCHIVE_FAILED),
                "Failed to store the archive of session %s (attempt %u): %s. The workspace is kept%s; next "
                "attempt in %llus.",
                s->id, s->archive.attempts, why,
                kind == ARCHIVE_FAILURE_TOO_LARGE ? " until a create of its archive_key takes it over" : "",
                (unsigned long long) ((delay + USEC_PER_SEC - 1) / USEC_PER_SEC));
        s->archive.outcome = ARCHIVE_OUTCOME_PENDING;
        r = session_arm_archive_retry(s, delay);
        if (r < 0)
                /* Never a workspace given up for want of a timer: it stays pending and listed. */
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to schedule the next archive attempt of session %s; it stays pending "
                           "until scopeboxctl archives retry, a create of its archive_key or a restart: %m",
                           s->id);
        (void) session_enter(s, SESSION_ARCHIVE_PENDING);
}

void session_archive_now_pending(Session *s) {
        (void) session_save_state(s);
        manager_state_changed(s->manager);
        session_release_tell(s);
}

static void session_archive_failed_errno(Session *s, int error, const char *what) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s: %s", what, strerror(abs(error)));
        session_archive_failed(s, ARCHIVE_FAILURE_RETRY, buf);
}

static int on_commit_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        uint64_t size = 0;
        bool ok;

        storage_call_ended(&s->archive.slot);
        s->archive.token = mfree(s->archive.token);
        ok = storage_answer(reply) == STORAGE_ANSWER_OK && sd_bus_message_read(reply, "t", &size) >= 0;
        if (s->archive.orphaned) {
                /* The upload of a release a create took over: stored or not, the workspace is the
                 * new session's, archived at its own release. */
                if (ok)
                        s->manager->metrics.archive_bytes_written += size;
                else
                        s->manager->metrics.archive_failures++;
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), ok ? "SCOPEBOX_EVENT=session-archived"
                                                                   : "SCOPEBOX_EVENT=archive-failed"),
                           "The upload of session %s's release, which a create took over, %s%s.", s->id,
                           ok ? "is stored" : "failed: ", ok ? "" : storage_reply_message(reply));
                session_archive_orphan_ended(s);
                return 0;
        }
        if (!ok) {
                /* The block was taken at BeginArchive: whatever fails now (an unknown token: the
                 * agent restarted in between; the endpoint refused or unreachable at the upload)
                 * keeps the workspace, and a new attempt stages anew. */
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, storage_reply_message(reply));
                return 0;
        }
        s->manager->metrics.archive_bytes_written += size;
        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=session-archived"),
                   "Archived session %s (%llu bytes, attempt %u).", s->id, (unsigned long long) size,
                   s->archive.attempts);
        session_archive_done(s, ARCHIVE_OUTCOME_STORED);
        return 0;
}

/* Nobody waits for the answer: a staging the agent no longer knows is fine, and one it still has
 * expires by itself. */
void storage_abort(Session *s, const char *token) {
        if (token)
                (void) sd_bus_call_method_async(s->manager->bus, NULL, STORAGE_AGENT_BUS_NAME,
                                                STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                                "AbortArchive", NULL, NULL, "s", token);
}

static bool session_archive_attempt_dropped(Session *s, const char *token) {
        if (!s->archive.orphaned && !s->archive.discard_stem)
                return false;
        storage_abort(s, token);
        s->archive.token = mfree(s->archive.token);
        if (s->archive.orphaned)
                session_archive_orphan_ended(s);
        else
                session_archive_done(s, ARCHIVE_OUTCOME_DISCARDED);
        return true;
}

static void on_runner_archived(Session *s, int error, const char *message, json_object *reply, int fd,
                               void *userdata) {
        RunnerArchiveReply answer;
        int r;

        if (session_archive_attempt_dropped(s, s->archive.token))
                return;
        if (error < 0) {
                storage_abort(s, s->archive.token);
                s->archive.token = mfree(s->archive.token);
                if (error == -EFBIG)
                        session_archive_failed(s, ARCHIVE_FAILURE_TOO_LARGE,
                                               "the workspace is larger than SANDBOX_MAX_ARCHIVE_BYTES");
                else
                        session_archive_failed(s, ARCHIVE_FAILURE_RETRY, strempty(message));
                return;
        }
        if (schema_parse(&runner_archive_reply, reply, &answer, NULL) < 0) {
                storage_abort(s, s->archive.token);
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY,
                                       "the runner did not say how many bytes it wrote");
                return;
        }
        r = storage_call(s, &s->archive.slot, "CommitArchive", on_commit_reply,
                         STORAGE_TRANSFER_TIMEOUT_USEC, "st", s->archive.token, answer.bytes);
        if (r < 0) {
                storage_abort(s, s->archive.token);
                session_archive_failed_errno(s, r, "failed to call the storage agent");
        }
}

static int on_begin_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Session *s = userdata;
        Config *c = &s->manager->config;
        json_object *msg = NULL;
        const char *token;
        int fd, r;

        storage_call_ended(&s->archive.slot);
        if (s->archive.orphaned || s->archive.discard_stem) {
                token = NULL;
                if (!sd_bus_message_is_method_error(reply, NULL))
                        (void) sd_bus_message_read(reply, "sh", &token, &fd);
                (void) session_archive_attempt_dropped(s, token);
                return 0;
        }
        if (sd_bus_message_is_method_error(reply, NULL)) {
                /* Only a block that is not effective by the contract's rules has nothing to archive
                 * to. One our endpoint policy refuses, or can't judge now, is the client's storage
                 * all the same: the workspace is kept and retried, as for storage down. */
                session_archive_failed(s,
                                       storage_answer(reply) == STORAGE_ANSWER_NOT_EFFECTIVE
                                               ? ARCHIVE_FAILURE_NO_STORAGE
                                               : ARCHIVE_FAILURE_RETRY,
                                       storage_reply_message(reply));
                return 0;
        }
        if (sd_bus_message_read(reply, "sh", &token, &fd) < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "malformed reply from the storage agent");
                return 0;
        }
        s->archive.token = strdup(token);
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        r = runner_request_archive(false, c->max_archive_bytes, c->archive_timeout_sec, &msg);
        if (!s->archive.token || fd < 0 || r < 0) {
                safe_close(fd);
                json_object_put(msg);
                storage_abort(s, token);
                session_archive_failed_errno(s, ENOMEM, "failed to stage the archive");
                return 0;
        }
        r = session_enqueue(s, msg, fd, c->archive_timeout_sec * USEC_PER_SEC + STORAGE_CALL_SLACK_USEC,
                            false, true, on_runner_archived, NULL);
        if (r < 0) {
                storage_abort(s, s->archive.token);
                session_archive_failed_errno(s, r, "failed to ask the runner for the archive");
        }
        return 0;
}

static void session_archive_attempt(Session *s) {
        const char *storage = s->storage_json;
        int r;

        r = storage_block_effective(s, storage);
        if (r < 0) {
                session_archive_failed_errno(s, r, "failed to check the storage block");
                return;
        }
        if (r == 0) {
                session_archive_done(s, ARCHIVE_OUTCOME_NONE);
                return;
        }
        /* An attempt of its own under way (a retry's ping that answered late), or the one of the
         * release a create took over: the next goes once that has ended. */
        if (s->archive.orphaned || s->archive.slot || s->archive.token)
                return;
        /* Superseded while it waited: its workspace is older than the newer release's. */
        if (s->archive.superseded) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "superseded");
                return;
        }
        if (s->control_fd < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "the session's runner is gone");
                return;
        }
        /* Archives of one stem are stored one after the other, in the order of their releases. */
        LIST_FOREACH(sessions, i, s->manager->sessions)
                if (session_same_archive(s, i) && session_archive_in_flight(i)) {
                        r = session_arm_archive_retry(s, ARCHIVE_WAIT_USEC);
                        if (r >= 0)
                                return;
                        break;
                }
        s->archive.attempts++;
        if (s->archive.attempts > 1)
                s->manager->metrics.archive_retries++;
        r = storage_call(s, &s->archive.slot, "BeginArchive", on_begin_reply, STORAGE_CALL_SLACK_USEC, "ss",
                         storage, session_archive_stem(s, NULL));
        if (r < 0)
                session_archive_failed_errno(s, r, "failed to call the storage agent");
}

static void on_retry_ping(Session *s, int error, const char *message, json_object *reply, int fd,
                          void *userdata) {
        if (s->state != SESSION_ARCHIVING)
                return;
        if (error < 0) {
                session_archive_failed(s, ARCHIVE_FAILURE_RETRY, "the session's runner is gone");
                return;
        }
        session_archive_attempt(s);
}

static int on_archive_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        if (!session_archive_pending(s))
                return 0;
        if (s->state == SESSION_ARCHIVE_PENDING)
                (void) session_enter(s, SESSION_ARCHIVING);
        /* The runner first: it is alive, and its idle backstop hears of us, however long storage
         * takes to come back. (Without the ping, the attempt finds out by itself.) */
        if (session_enqueue_op(s, &runner_ping_request, on_retry_ping) < 0)
                session_archive_attempt(s);
        return 0;
}

void session_archive_retry_now(Session *s) {
        if (session_archive_pending(s) && !session_archive_in_flight(s))
                (void) session_arm_archive_retry(s, 1);
}

/* A newer release of the same archive: older pending ones are superseded (their workspace is
 * older); one in flight finishes its attempt first, and the new one waits for it. */
static void session_supersede_older(Session *s) {
        LIST_FOREACH_SAFE(sessions, i, next, s->manager->sessions) {
                if (!session_archive_pending(i) || !session_same_archive(s, i))
                        continue;
                i->archive.superseded = true;
                if (!session_archive_in_flight(i))
                        session_archive_failed(i, ARCHIVE_FAILURE_RETRY, "superseded");
        }
}

static int on_release_answer_due(sd_event_source *source, uint64_t usec, void *userdata) {
        Session *s = userdata;

        if (session_archive_pending(s) && !s->archive.answered) {
                log_struct(
                        LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                        "The archive of session %s is still being stored; its release is answered as "
                        "pending.",
                        s->id);
                session_release_tell(s);
        }
        return 0;
}

/* An exec that runs when its session is released is stopped as its timeout would stop it; its
 * caller hears that the session is gone. The archive request waits behind it. */
int session_release_full(Session *s, SessionEnd end, const ReleaseOptions *o, SessionDoneCallback cb,
                         void *userdata) {
        _cleanup_free_ char *storage_override = NULL, *discard_stem = NULL;
        bool archive, starting, stopping = session_state_is_ending(s->state);
        int effective, r;

        /* Everything that can fail for want of memory first, with nothing changed yet: a discard
         * may have to wait for an attempt under way, which without the stem would end as a store;
         * a block that could not be judged would be taken for no storage. */
        if (o && o->discard && !(discard_stem = strdup(session_archive_stem(s, o->archive_key))))
                return -ENOMEM;
        if (!stopping && o && o->storage_json && !(storage_override = strdup(o->storage_json)))
                return -ENOMEM;
        effective = storage_block_effective(s, storage_override ?: s->storage_json);
        if (effective < 0)
                return effective;
        if (stopping) {
                /* Already on its way out: the waiter hears when it is gone, or now when its archive
                 * is pending (then after what this release does to it). */
                if (!s->archive.answered) {
                        r = session_add_release_waiter(s, cb, userdata);
                        if (r < 0)
                                return r;
                }
                /* A discard of one whose archive is pending drops the workspace and the stored
                 * archive now. */
                if (session_archive_pending(s) && o && o->discard) {
                        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Session %s, whose archive was pending, is discarded by its client.",
                                   s->id);
                        if (!session_archive_in_flight(s))
                                session_discard(s, effective ? s->storage_json : NULL,
                                                TAKE_PTR(discard_stem));
                        else {
                                /* After the attempt that is under way, whatever its outcome. */
                                free(s->archive.discard_stem);
                                s->archive.discard_stem = TAKE_PTR(discard_stem);
                                s->archive.superseded = true;
                                s->archive.outcome = ARCHIVE_OUTCOME_DISCARDED;
                        }
                }
                if (s->archive.answered && cb)
                        cb(s, 0, NULL, userdata);
                return 0;
        }
        /* Not started yet, nobody has used its workspace: it holds at most part of what is being
         * restored, which must never be archived over the whole. (An adopted one is its own.) */
        starting = session_state_is_starting(s->state) && !s->adopted;
        archive = effective && (!o || o->archive) && !starting;
        r = session_add_release_waiter(s, cb, userdata);
        if (r < 0)
                return r;

        s->end = end;
        /* The release's storage block is the one its archive goes to, also on every retry. */
        if (storage_override) {
                free(s->storage_json);
                s->storage_json = TAKE_PTR(storage_override);
        }

        if (effective && o && o->discard) {
                session_discard(s, s->storage_json, TAKE_PTR(discard_stem));
                return 0;
        }
        if (archive && s->archive_kept) {
                s->archive.outcome = ARCHIVE_OUTCOME_KEPT;
                log_struct(LOG_WARNING, 0,
                           LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-kept"),
                           "Not archiving session %s: its archive could not be restored, the stored one is "
                           "kept.",
                           s->id);
        } else if (archive && session_enter(s, SESSION_ARCHIVING) >= 0) {
                s->archive.outcome = ARCHIVE_OUTCOME_PENDING;
                s->archive.release_realtime_usec = (uint64_t) time(NULL) * USEC_PER_SEC;
                session_supersede_older(s);
                session_stop_running_exec(s);
                /* A restarted manager goes on with it. */
                r = session_save_state(s);
                if (r < 0)
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to record the release of session %s, ignoring: %m", s->id);
                manager_state_changed(s->manager);
                /* The first attempt may take as long as the agent's transfers do (a server that
                 * stalls mid-upload): the client hears "pending" well before its call times out. */
                r = sd_event_add_time_relative(s->manager->event, &s->archive.answer_timer, CLOCK_MONOTONIC,
                                               s->manager->config.archive_timeout_sec * USEC_PER_SEC +
                                                       STORAGE_CALL_SLACK_USEC,
                                               USEC_PER_SEC, on_release_answer_due, s);
                if (r < 0)
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to arm the release answer timer, ignoring: %m");
                session_archive_attempt(s);
                return 0;
        }
        session_stop_scope(s, end);
        return 0;
}

/* A member of the record: a string copied to *ret (-ENOMEM), a number at least 'min'. */
static int record_string(json_object *o, const char *key, char **ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return 0;
        free(*ret);
        *ret = strdup(json_object_get_string(v));
        return *ret ? 0 : -ENOMEM;
}

static void record_usec(json_object *o, const char *key, int64_t min, uint64_t *ret) {
        json_object *v;

        if (json_object_object_get_ex(o, key, &v))
                *ret = (uint64_t) MAX(json_object_get_int64(v), min);
}

/* Of a recorded session's state, a release that was in progress. */
static int session_load_release_state(Session *s, json_object *o) {
        json_object *v;
        uint64_t attempts = s->archive.attempts;
        int r;

        if (json_object_object_get_ex(o, "restore_failed", &v))
                s->archive_kept = s->restore_failed = json_object_get_boolean(v);
        if (!json_object_object_get_ex(o, "releasing", &v) || !json_object_get_boolean(v))
                return 0;
        r = session_enter(s, SESSION_ARCHIVE_PENDING);
        if (r < 0)
                return r;
        s->archive.outcome = ARCHIVE_OUTCOME_PENDING;
        s->archive.answered = true; /* whoever asked heard from the earlier manager, or not at all */
        record_usec(o, "archive_attempts", 0, &attempts);
        s->archive.attempts = (unsigned) MIN(attempts, (uint64_t) UINT_MAX);
        record_usec(o, "release_realtime_usec", 0, &s->archive.release_realtime_usec);
        record_usec(o, "archive_first_failure_realtime_usec", 0, &s->archive.first_failure_realtime_usec);
        r = record_string(o, "archive_error", &s->archive.error);
        if (r < 0)
                return r;
        /* A word we don't know (a newer version's) only loses the word: the release goes on. */
        if (json_object_object_get_ex(o, "release_reason", &v) && json_object_is_type(v, json_type_string)) {
                s->end = session_end_from_string(json_object_get_string(v));
                if (s->end < 0)
                        log_struct(LOG_DEBUG, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Session %s was released for a reason we don't know, ignoring it.",
                                   s->id);
        }
        return 0;
}

int session_load_state(Session *s, json_object *o) {
        json_object *v;
        int r;

        record_usec(o, "idle_ttl_usec", (int64_t) USEC_PER_SEC, &s->idle_ttl_usec);
        record_usec(o, "created_realtime_usec", 0, &s->created_realtime_usec);
        record_usec(o, "last_active_realtime_usec", 0, &s->last_active_realtime_usec);
        r = record_string(o, "archive_key", &s->archive_key);
        if (r < 0)
                return r;
        if (json_object_object_get_ex(o, "stateful", &v) && json_object_is_type(v, json_type_boolean))
                s->stateful = json_object_get_boolean(v);
        r = record_string(o, "storage", &s->storage_json);
        if (r < 0)
                return r;
        r = record_string(o, "record", &s->record);
        if (r < 0)
                return r;
        record_usec(o, "deadline_realtime_usec", 0, &s->deadline_realtime_usec);
        session_pause_load(s, o);
        /* The runner keeps its ids; we only need to know them so the pool doesn't hand them out. */
        if (json_object_object_get_ex(o, "uid", &v) && json_object_is_type(v, json_type_int))
                s->uid = (uid_t) MIN(MAX(json_object_get_int64(v), 0), (int64_t) UINT32_MAX - 1);
        if (s->idle_ttl_usec == 0)
                s->idle_ttl_usec = s->manager->config.idle_ttl_sec * USEC_PER_SEC;
        s->state_saved_realtime_usec = s->last_active_realtime_usec;
        return session_load_release_state(s, o);
}


void session_resume_release(Session *s) {
        int r;

        log_struct(LOG_INFO, 0, LOG_FIELDS(LOG_SESSION_FIELD(s->id), "SCOPEBOX_EVENT=archive-resumed"),
                   "Session %s was being released by an earlier instance; archiving it (attempt %u).", s->id,
                   s->archive.attempts + 1);
        r = session_arm_archive_retry(s, 1);
        if (r < 0 && session_enter(s, SESSION_ARCHIVING) >= 0)
                session_archive_attempt(s);
        manager_state_changed(s->manager);
}
