/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The io.scopebox.SessionManager1 bus API (docs/dbus-api.md): parse, validate, act, reply. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "event-source-util.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "path-util.h"
#include "storage-config.h"
#include "log.h"
#include "message-ids.h"
#include "drain.h"
#include "manager.h"
#include "manager-fs.h"
#include "run.h"
#include "session.h"
#include "string-util.h"
#include "time-util.h"
#include "systemd-client.h"

#define SANDBOX_PYTHON_PATH "/usr/bin/python3"

static void reply_error(sd_bus_message *m, int error, const char *message) {
        int r = sd_bus_reply_method_errorf(m, bus_error_name_from_errno(error), "%s",
                                           message ?: strerror(abs(error)));
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
}

/* ---- the sessions a caller may name ---- */

/* A dify run's sandbox (ephemeral: in use by a run, or pooled for one that has not taken it yet)
 * is no sidecar session: it serves one run and nothing else. A session id is all a sidecar call
 * has, so every call that names one finds it through here, and such a sandbox answers exactly as
 * an unknown id does (NoSuchSession). The dify path keeps its own pointers (run.c) and never looks
 * a session up by id. */
static inline bool session_is_sidecar(const Session *s) {
        return s && !s->ephemeral;
}

static Session *manager_find_sidecar_session(Manager *mgr, const char *id) {
        Session *s = manager_find_session(mgr, id);

        if (s && !session_is_sidecar(s)) {
                log_debug("A call named run sandbox %s, which is no session: answered as unknown.", id);
                return NULL;
        }
        return s;
}

/* ---- callers that hang up (CreateSession, Exec, Run) ---- */

#define CANCELLED_MESSAGE "cancelled: the caller hung up"

/* A CreateSession, Exec or Run call being served: the message to answer and, if the caller gave
 * its "hangup" option, a watch on that pipe. The caller hanging up (closing every write end: on
 * purpose, or by dying) cancels the call; it is still answered, exactly once, with Cancelled. */
typedef struct BusCall {
        sd_bus_message *message;
        sd_event_source *hangup_source;  /* owns a duplicate of the caller's read end */
        ExecCall *exec;                  /* what to cancel, until it answers */
        Run *run;
        Session *create;                 /* the session being created, until its start answers */
        bool cancelled;                  /* (create) released for a caller that hung up */
        bool adopted;                    /* (create) of a session whose archive was pending */
} BusCall;

static BusCall *bus_call_free(BusCall *c) {
        if (!c)
                return NULL;
        sd_event_source_disable_unref(c->hangup_source);
        sd_bus_message_unref(c->message);
        return mfree(c);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(BusCall *, bus_call_free);

/* Nobody will ever know a session whose creator hung up: stopping it undoes its start, whatever
 * it is at (waiting for a create slot, its scope starting, its archive restoring), and gives its
 * create slot back. Not archived: its workspace holds only what was restored. */
static void release_abandoned_create(Session *s, bool adopted) {
        /* An adopted session's workspace is its own, newer than the stored archive: archived again. */
        (void) session_release_full(s, SESSION_END_HANGUP, &(ReleaseOptions) { .archive = adopted }, NULL,
                                    NULL);
}

static int on_caller_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        BusCall *c = userdata;
        ExecCall *exec = TAKE_PTR(c->exec);
        Run *run = TAKE_PTR(c->run);
        Session *create = TAKE_PTR(c->create);

        /* Level-triggered: once is enough. */
        c->hangup_source = sd_event_source_disable_unref(c->hangup_source);
        log_debug("The caller of %s hung up; cancelling the call.",
                  strna(sd_bus_message_get_member(c->message)));
        /* Any of them may answer at once, which frees c. */
        if (exec)
                session_exec_abandon(exec);
        else if (run)
                manager_cancel_run(run);
        else if (create) {
                /* on_session_started() hears of it and answers Cancelled. */
                c->cancelled = true;
                release_abandoned_create(create, c->adopted);
        }
        return 0;
}

/* A call object for 'm'; with hangup_fd (borrowed from the message, or -EBADF) the call watches it.
 * A caller that hung up already gets Cancelled (an Exec or Run counted as a cancelled exec) and
 * nothing is started for it; a bad fd gets InvalidArgs. */
static int bus_call_new(Manager *mgr, sd_bus_message *m, int hangup_fd, BusCall **ret, sd_bus_error *error) {
        _cleanup_(bus_call_freep) BusCall *c = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r;

        *ret = NULL;
        if (hangup_fd >= 0) {
                r = fd_is_pipe_read_end(hangup_fd);
                if (r < 0)
                        return r;
                if (r == 0)
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                                "hangup must be the read end of a pipe");
                r = pipe_hung_up(hangup_fd);
                if (r < 0)
                        return r;
                if (r > 0) {
                        if (!sd_bus_message_is_method_call(m, NULL, "CreateSession"))
                                metrics_count_exec(&mgr->metrics, -ECANCELED, NULL);
                        return sd_bus_error_set(error, BUS_ERROR_CANCELLED, CANCELLED_MESSAGE);
                }
                fd = fcntl(hangup_fd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0)
                        return -errno;
        }

        c = calloc(1, sizeof(BusCall));
        if (!c)
                return -ENOMEM;
        if (fd >= 0) {
                /* No events: only EPOLLHUP and EPOLLERR, which epoll always reports, wake us. */
                r = event_add_io_owned(mgr->event, &c->hangup_source, TAKE_FD(fd), 0, on_caller_hangup, c);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_description(c->hangup_source, "caller-hangup");
        }
        c->message = sd_bus_message_ref(m);
        *ret = TAKE_PTR(c);
        return 0;
}

/* ---- creates answered: did the answer reach the client? ---- */

/* A create answered with its session is not over for a caller that gave "hangup": it keeps the
 * pipe's write end until it knows whether the answer reached its own client, then writes one byte
 * into it (it did) and closes it. A pipe that loses its last writer without that byte — the client
 * was gone by the time the answer was there for it, or the caller died first (a gateway killed
 * between our answer and its own) — means that nobody knows the session: it is released as an
 * abandoned create, at once. */
typedef struct CreateDelivery {
        Manager *manager;
        char id[SESSION_ID_LEN + 1];
        bool adopted;
} CreateDelivery;

static int on_create_delivery(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        CreateDelivery *d = userdata;
        Session *s;
        ssize_t n;
        char b;

        n = read(fd, &b, 1);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n > 0)
                log_debug("The answer of the create of session %s reached its client.", d->id);
        else {
                /* Gone meanwhile (released, reaped): nothing to do. */
                s = manager_find_sidecar_session(d->manager, d->id);
                if (s && !session_state_is_ending(s->state)) {
                        log_struct(LOG_INFO, 0,
                                   LOG_FIELDS(LOG_SESSION_FIELD(d->id), "SCOPEBOX_EVENT=session-abandoned"),
                                   "Releasing session %s: its creator's client went away before it had the "
                                   "answer.",
                                   d->id);
                        release_abandoned_create(s, d->adopted);
                }
        }
        /* Once is enough: the loop lets go of the source (and frees d with it). */
        (void) sd_event_source_set_enabled(source, SD_EVENT_OFF);
        (void) sd_event_source_set_floating(source, false);
        return 0;
}

/* Moves the hang-up pipe of the create 'c', which answers with 's', to a watch of its own that
 * outlives the call. */
static int create_delivery_watch(BusCall *c, Session *s) {
        _cleanup_free_ CreateDelivery *d = NULL;
        sd_event_source *source = NULL;
        int fd, r;

        d = calloc(1, sizeof(CreateDelivery));
        if (!d)
                return -ENOMEM;
        *d = (CreateDelivery) { .manager = s->manager, .adopted = c->adopted };
        strcpy(d->id, s->id);

        fd = sd_event_source_get_io_fd(c->hangup_source);
        if (fd < 0)
                return fd;
        r = sd_event_source_set_io_fd_own(c->hangup_source, false);
        if (r < 0)
                return r;
        c->hangup_source = sd_event_source_disable_unref(c->hangup_source);

        /* The byte, or the end of the pipe. */
        r = event_add_io_owned(s->manager->event, &source, fd, EPOLLIN, on_create_delivery, d);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(source, "create-delivery");
        r = sd_event_source_set_destroy_callback(source, free);
        if (r >= 0) {
                TAKE_PTR(d);
                r = sd_event_source_set_floating(source, true);
        }
        if (r < 0) {
                sd_event_source_disable_unref(source);
                return r;
        }
        sd_event_source_unref(source);
        return 0;
}

/* ---- CreateSession ---- */

typedef struct CreateOptions {
        uint64_t idle_ttl_sec;
        const char *archive_key;
        const char *storage;
        bool stateful;
        int hangup;
        const char *record;
        uint64_t deadline_usec;
} CreateOptions;

static const BusDictField create_options[] = {
        { "idle_ttl_sec", 't', offsetof(CreateOptions, idle_ttl_sec) },
        { "archive_key",  's', offsetof(CreateOptions, archive_key)  },
        { "storage",      's', offsetof(CreateOptions, storage)      },
        { "stateful",     'b', offsetof(CreateOptions, stateful)     },
        { "hangup",       'h', offsetof(CreateOptions, hangup)       },
        { "record",       's', offsetof(CreateOptions, record)       },
        { "deadline_usec", 't', offsetof(CreateOptions, deadline_usec) },
        {}
};

static void on_session_started(Session *s, int error, const char *message, void *userdata) {
        _cleanup_(bus_call_freep) BusCall *c = userdata;
        sd_bus_message *m = c->message;
        int r;

        c->create = NULL;
        if (c->cancelled) {
                /* Released for a caller that hung up. A start that got through all the same (its last
                 * step answered before the stop took effect) is undone as well. */
                if (error >= 0)
                        release_abandoned_create(s, c->adopted);
                reply_error(m, -ECANCELED, CANCELLED_MESSAGE);
                return;
        }
        if (error < 0) {
                /* By the name the start failed with: a refused storage block is no backend failure. */
                r = sd_bus_reply_method_errorf(m, session_start_error_name(s, error), "%s",
                                               message ?: BUS_MESSAGE_START_FAILED);
                if (r < 0)
                        log_debug_errno(r, "Failed to send error reply, ignoring: %m");
                return;
        }
        if (c->hangup_source) {
                /* Before the answer: no answer a caller could take for its client's without it. */
                r = create_delivery_watch(c, s);
                if (r < 0) {
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to watch whether session %s reaches its client, releasing it: %m",
                                   s->id);
                        release_abandoned_create(s, c->adopted);
                        reply_error(m, -EHOSTDOWN, BUS_MESSAGE_START_FAILED);
                        return;
                }
        }
        r = sd_bus_reply_method_return(m, "sb", s->id, (int) s->restore_failed);
        if (r < 0)
                log_debug_errno(r, "Failed to reply to CreateSession, ignoring: %m");
}

/* The sessions SANDBOX_MAX_SESSIONS counts: not a dify run's, and not one released because its
 * creator's client went away, which no longer counts from that moment on (its scope is on its way
 * out) — unless it is archiving a workspace of its own (an adopted one), as any release does. */
static unsigned sessions_counted(Manager *mgr) {
        unsigned n = mgr->n_sessions - mgr->n_ephemeral;

        LIST_FOREACH(sessions, s, mgr->sessions)
                if (!s->ephemeral && session_state_is_ending(s->state) && s->end == SESSION_END_HANGUP &&
                    !session_archive_pending(s) && n > 0)
                        n--;
        return n;
}

static int method_create_session(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        _cleanup_(bus_call_freep) BusCall *c = NULL;
        CreateOptions o = { .hangup = -EBADF };
        uint64_t ttl_usec;
        Session *s;
        int r;

        r = bus_message_read_options(m, create_options, &o, error);
        if (r < 0)
                return r;
        /* An archive key that can't be a valid stem means "use the session id" (COMPAT.md), which is
         * what leaving it out does; so nothing a client chose beyond a stem is ever kept or shown. */
        if (o.archive_key && !archive_stem_is_valid(o.archive_key))
                o.archive_key = NULL;
        if (o.storage && strlen(o.storage) > BUS_STORAGE_JSON_MAX)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_STORAGE_TOO_LARGE);
        if (o.record && strlen(o.record) > BUS_SESSION_RECORD_MAX)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "record too large");
        /* A session with a deadline ends there; idle, it lasts as long as the longest TTL. */
        ttl_usec = (o.deadline_usec > 0   ? mgr->config.idle_ttl_cap_sec
                    : o.idle_ttl_sec == 0 ? mgr->config.idle_ttl_sec
                                          : MIN(o.idle_ttl_sec, mgr->config.idle_ttl_cap_sec)) *
                   USEC_PER_SEC;

        /* Not even a pending archive's session is taken back: the balancer sends the client to
         * another node, which restores the archive once this one has stored it. */
        if (mgr->draining) {
                log_debug("Refused a session: draining.");
                return sd_bus_error_set(error, BUS_ERROR_DRAINING, "node is draining");
        }

        r = bus_call_new(mgr, m, o.hangup, &c, error);
        if (r < 0)
                return r;

        /* The archive of this key not stored yet: that session, whose workspace is the newest, is
         * the client's again (it holds its place under the cap already). A caller that hangs up
         * meanwhile releases it anew, archived again as any release. */
        s = o.archive_key ? session_find_pending_archive(mgr, o.archive_key, o.storage) : NULL;
        if (s) {
                c->create = s;
                c->adopted = true;
                if (session_adopt(s, ttl_usec, on_session_started, c) >= 0) {
                        /* As this create asks (its kernel, if any, ended with the archive). */
                        s->stateful = o.stateful;
                        TAKE_PTR(c); /* on_session_started() frees it */
                        return 1;
                }
                c->create = NULL;
                c->adopted = false;
        }

        if (mgr->config.max_sessions > 0 && sessions_counted(mgr) >= (uint64_t) mgr->config.max_sessions) {
                /* A client can ask at will: info, not a warning. */
                log_struct(LOG_INFO, 0,
                           LOG_FIELDS("SCOPEBOX_LIMIT=SANDBOX_MAX_SESSIONS", SCOPEBOX_MESSAGE_LIMIT_REACHED),
                           "Refused a session: SANDBOX_MAX_SESSIONS=%" PRIi64 " sessions are running.",
                           (int64_t) mgr->config.max_sessions);
                return sd_bus_error_set(error, BUS_ERROR_LIMIT_EXCEEDED, "too many active sessions");
        }

        r = session_new(mgr, &s);
        if (r < 0)
                return r;
        /* 0 means the default; anything else is clamped to [1, cap]. */
        s->idle_ttl_usec = ttl_usec;
        s->stateful = o.stateful;
        if ((o.archive_key && !(s->archive_key = strdup(o.archive_key))) ||
            (o.storage && !(s->storage_json = strdup(o.storage))) ||
            (o.record && !(s->record = strdup(o.record)))) {
                session_free(s);
                return -ENOMEM;
        }
        manager_add_session(mgr, s);
        s->deadline_realtime_usec = o.deadline_usec == 0 ? 0
                                    : MIN(o.deadline_usec, now_usec(CLOCK_REALTIME) + ttl_usec);
        session_arm_deadline(s);

        c->create = s;
        r = manager_start_session(mgr, s, on_session_started, c);
        if (r < 0) {
                session_free(s);
                return sd_bus_error_set(error, BUS_ERROR_BACKEND_FAILED, BUS_MESSAGE_START_FAILED);
        }
        TAKE_PTR(c); /* on_session_started() frees it */
        return 1;
}

/* ---- ReleaseSession ---- */

typedef struct ReleaseArgs {
        bool discard;
        bool archive;           /* default true; false: the gateway's release of an abandoned create */
        const char *archive_key;
        const char *storage;
} ReleaseArgs;

static const BusDictField release_options[] = {
        { "discard",     'b', offsetof(ReleaseArgs, discard)     },
        { "archive",     'b', offsetof(ReleaseArgs, archive)     },
        { "archive_key", 's', offsetof(ReleaseArgs, archive_key) },
        { "storage",     's', offsetof(ReleaseArgs, storage)     },
        {}
};

static void on_session_released(Session *s, int error, const char *message, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = userdata;
        int r;

        if (error < 0) {
                reply_error(m, error, message);
                return;
        }
        r = sd_bus_reply_method_return(m, "s", archive_outcome_to_string(s->archive.outcome));
        if (r < 0)
                log_debug_errno(r, "Failed to reply to ReleaseSession, ignoring: %m");
}

static int on_orphan_archive_deleted(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = userdata;

        if (sd_bus_message_is_method_error(reply, NULL))
                log_warning("Failed to delete the archive of a released session: %s",
                            sd_bus_message_get_error(reply)->message);
        reply_error(m, -ENXIO, BUS_MESSAGE_NO_SUCH_SESSION);
        return 0;
}

static int method_release_session(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        ReleaseArgs o = { .archive = true };
        const char *id;
        Session *s;
        int r;

        r = sd_bus_message_read(m, "s", &id);
        if (r < 0)
                return r;
        if (!session_id_is_valid(id))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_INVALID_SESSION_ID);
        r = bus_message_read_options(m, release_options, &o, error);
        if (r < 0)
                return r;

        if (o.storage && strlen(o.storage) > BUS_STORAGE_JSON_MAX)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_STORAGE_TOO_LARGE);

        s = manager_find_sidecar_session(mgr, id);
        if (!s) {
                /* Gone already (reaped, or an earlier release): a discard still deletes the archive
                 * the client names. The answer stays "no such session", which the gateway turns into
                 * the contract's idempotent {"ok":true}. */
                if (o.discard && o.archive_key && archive_stem_is_valid(o.archive_key) &&
                    storage_json_effective(o.storage, mgr->config.local_storage_dir)) {
                        r = sd_bus_call_method_async(mgr->bus, NULL, STORAGE_AGENT_BUS_NAME,
                                                     STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                                     "DeleteArchive", on_orphan_archive_deleted,
                                                     sd_bus_message_ref(m), "ss", o.storage, o.archive_key);
                        if (r >= 0)
                                return 1;
                        sd_bus_message_unref(m);
                }
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION,
                                        BUS_MESSAGE_NO_SUCH_SESSION);
        }

        /* "Nothing but what was restored" can't be true of an adopted session. */
        ReleaseOptions ro = { .archive = (o.archive || s->adopted) && !o.discard, .discard = o.discard,
                              .archive_key = o.archive_key, .storage_json = o.storage };
        r = session_release_full(s, o.discard ? SESSION_END_DISCARDED : SESSION_END_RELEASED, &ro,
                                 on_session_released, sd_bus_message_ref(m));
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        return 1;
}

/* ---- Exec ---- */

typedef struct ExecOptions {
        uint64_t timeout_ms;
        uint64_t output_limit;
        const char *language;
        int hangup;
        int stream;
        int display;
        int stdin_fd;
        int interrupt;
} ExecOptions;

static const BusDictField exec_options[] = {
        { "timeout_ms",   't', offsetof(ExecOptions, timeout_ms)   },
        { "output_limit", 't', offsetof(ExecOptions, output_limit) },
        { "language",     's', offsetof(ExecOptions, language)     },
        { "hangup",       'h', offsetof(ExecOptions, hangup)       },
        { "stream",       'h', offsetof(ExecOptions, stream)       },
        { "display",      'b', offsetof(ExecOptions, display)      },
        { "stdin",        'h', offsetof(ExecOptions, stdin_fd)     },
        { "interrupt",    'b', offsetof(ExecOptions, interrupt)    },
        {}
};

/* The a{sv} info of Exec and Run. */
static int append_exec_info(sd_bus_message *reply, const ExecResult *res) {
        int r;

        r = sd_bus_message_open_container(reply, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(
                        reply, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "timed_out", "b", (int) res->timed_out,
                        "oom_killed", "b", (int) res->oom_killed, "pids_limited", "b",
                        (int) res->pids_limited, "duration_usec", "t", res->duration_usec,
                        "stdout_truncated", "b", (int) res->stdout_truncated, "stderr_truncated", "b",
                        (int) res->stderr_truncated, "files_skipped", "u",
                        (uint32_t) MIN(res->files_skipped, UINT32_MAX), "signal", "i", res->signal);
        /* Newer members, each only when the runner measured it. */
        if (r >= 0 && res->exit_reason)
                r = sd_bus_message_append(reply, "{sv}", "exit_reason", "s", res->exit_reason);
        if (r >= 0 && res->kernel)
                r = sd_bus_message_append(reply, "{sv}", "kernel", "s", res->kernel);
        if (r >= 0 && res->has_usage)
                r = sd_bus_message_append(reply, "{sv}{sv}", "cpu_usec", "t", res->cpu_usec,
                                          "max_rss_bytes", "t", res->max_rss_bytes);
        if (r >= 0 && res->has_written)
                r = sd_bus_message_append(reply, "{sv}", "written_bytes", "t", res->written_bytes);
        if (r >= 0 && res->has_processes)
                r = sd_bus_message_append(reply, "{sv}", "processes", "t", res->processes);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'e', "sv");
        if (r >= 0)
                r = sd_bus_message_append(reply, "s", "blocked_syscalls");
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'v', "a(ssu)");
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssu)");
        for (size_t i = 0; r >= 0 && i < res->n_blocked; i++)
                r = sd_bus_message_append(reply, "(ssu)", res->blocked[i].name, res->blocked[i].verdict,
                                          res->blocked[i].count);
        for (unsigned i = 0; r >= 0 && i < 4; i++) /* array, variant, dict entry, dict */
                r = sd_bus_message_close_container(reply);
        return r;
}

/* The answer to Exec ("itta(stt)a{sv}h") or, without the files, to Run ("itta{sv}h"). */
static int send_exec_result(sd_bus_message *m, const ExecResult *res, bool with_files) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "itt", res->exit_code, res->stdout_size, res->stderr_size);
        if (r >= 0 && with_files) {
                r = sd_bus_message_open_container(reply, 'a', "(stt)");
                for (size_t i = 0; r >= 0 && i < res->n_files; i++)
                        r = sd_bus_message_append(reply, "(stt)", res->files[i].path, res->files[i].offset,
                                                  res->files[i].size);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = append_exec_info(reply, res);
        if (r >= 0)
                r = sd_bus_message_append(reply, "h", res->data_fd);
        if (r >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        return r;
}

static void on_exec_done(Session *s, int error, const char *message, const ExecResult *res, void *userdata) {
        _cleanup_(bus_call_freep) BusCall *c = userdata;
        sd_bus_message *m = c->message;
        int r;

        c->exec = NULL;
        if (error < 0) {
                if (error == -ENXIO)
                        message = BUS_MESSAGE_NO_SUCH_SESSION;
                reply_error(m, error, message);
                return;
        }

        r = send_exec_result(m, res, true);
        if (r < 0) {
                log_warning_errno(r, "Failed to send the exec result of session %s: %m", s->id);
                reply_error(m, r, "failed to send the result");
        }
}

/* Payloads (code, uploaded files) must be sealed memfds: what we check is what the sandbox gets.
 * 'what' names the argument in the error, 'too_large' is the message past 'max' bytes. Returns 1
 * with a duplicate in *ret, or 0/-errno with the error set. */
static int take_sealed_memfd(int fd, uint64_t max, const char *what, const char *too_large, int *ret,
                             sd_bus_error *error) {
        _cleanup_close_ int dup_fd = -EBADF;
        struct stat st;
        int seals;

        dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dup_fd < 0)
                return -errno;
        seals = fcntl(dup_fd, F_GET_SEALS);
        if (fstat(dup_fd, &st) < 0 || !S_ISREG(st.st_mode) || seals < 0 ||
            (seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW)) !=
                    (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW))
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "%s must be a sealed memfd",
                                         what);
        if ((uint64_t) st.st_size > max)
                return sd_bus_error_set(error, BUS_ERROR_TOO_LARGE, too_large);
        *ret = TAKE_FD(dup_fd);
        return 1;
}

static int take_code_fd(Manager *mgr, int fd, int *ret, sd_bus_error *error) {
        return take_sealed_memfd(fd, mgr->config.max_code_bytes, "code", "code too large", ret, error);
}

static int method_exec(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        _cleanup_close_ int code_fd = -EBADF;
        _cleanup_(bus_call_freep) BusCall *c = NULL;
        ExecOptions o = { .hangup = -EBADF, .stream = -EBADF, .stdin_fd = -EBADF };
        ExecParameters p = { .stream_fd = -EBADF, .stdin_fd = -EBADF };
        const char *id;
        Session *s;
        int fd, r;

        r = sd_bus_message_read(m, "sh", &id, &fd);
        if (r < 0)
                return r;
        if (!session_id_is_valid(id))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_INVALID_SESSION_ID);
        r = bus_message_read_options(m, exec_options, &o, error);
        if (r < 0)
                return r;
        /* "command": the E2B API's processes (exec-command.h), run as the session's other execs. */
        if (o.language && !streq(o.language, "python3") && !streq(o.language, "command"))
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_UNSUPPORTED_LANGUAGE);

        r = take_code_fd(mgr, fd, &code_fd, error);
        if (r <= 0)
                return r;
        if (o.stream >= 0) {
                r = fd_is_pipe_write_end(o.stream);
                if (r < 0)
                        return r;
                if (r == 0)
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                                "stream must be the write end of a pipe");
        }

        s = manager_find_sidecar_session(mgr, id);
        if (!s || s->state != SESSION_RUNNING)
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION,
                                        BUS_MESSAGE_NO_SUCH_SESSION);

        if (s->pause.paused)
                return sd_bus_error_set(error, BUS_ERROR_PAUSED, BUS_MESSAGE_SESSION_PAUSED);

        if (o.display && (o.stream < 0 || !s->stateful))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                        "display needs a stateful session and a stream");
        /* A command's stdin: the read end of a pipe, beside its stream. */
        if (o.stdin_fd >= 0) {
                if (!o.language || !streq(o.language, "command") || o.stream < 0)
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                                "stdin needs a command and a stream");
                r = fd_is_pipe_read_end(o.stdin_fd);
                if (r < 0)
                        return r;
                if (r == 0)
                        return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                                "stdin must be the read end of a pipe");
        }

        p.timeout_ms = o.timeout_ms == 0 ? BUS_EXEC_TIMEOUT_DEFAULT_MS
                                         : CLAMP(o.timeout_ms, (uint64_t) BUS_EXEC_TIMEOUT_MIN_MS,
                                                 mgr->config.exec_timeout_cap_ms);
        p.output_limit = o.output_limit == 0 ? mgr->config.max_output_bytes
                                             : MIN(o.output_limit, (uint64_t) BUS_OUTPUT_LIMIT_MAX);

        r = bus_call_new(mgr, m, o.hangup, &c, error);
        if (r < 0)
                return r;

        /* Borrowed from the message, which outlives the call: session_exec() sends a copy. */
        p.stream_fd = o.stream;
        p.display = o.display;
        p.language = o.language;
        p.stdin_fd = o.stdin_fd;
        p.interrupt = o.interrupt;
        r = session_exec(s, TAKE_FD(code_fd), &p, on_exec_done, c, &c->exec);
        if (r == -EBUSY)
                return sd_bus_error_set(error, BUS_ERROR_BUSY, BUS_MESSAGE_SESSION_BUSY);
        if (r == -ENXIO)
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION,
                                        BUS_MESSAGE_NO_SUCH_SESSION);
        if (r < 0)
                return r;
        TAKE_PTR(c); /* the callback frees it, maybe already has */
        return 1;
}

/* ---- Run (the dify API) ---- */

/* Longest user id, user type or traceparent we record. */
#define RUN_FIELD_MAX 256

typedef struct RunOptions {
        bool enable_network;
        const char *traceparent;
        const char *user_id;
        const char *user_type;
        int hangup;
} RunOptions;

static const BusDictField run_options[] = {
        { "enable_network", 'b', offsetof(RunOptions, enable_network) },
        { "traceparent",    's', offsetof(RunOptions, traceparent)    },
        { "user_id",        's', offsetof(RunOptions, user_id)        },
        { "user_type",      's', offsetof(RunOptions, user_type)      },
        { "hangup",         'h', offsetof(RunOptions, hangup)         },
        {}
};


static void on_run_done(int error, const char *message, const ExecResult *res, void *userdata) {
        _cleanup_(bus_call_freep) BusCall *c = userdata;
        sd_bus_message *m = c->message;
        int r;

        c->run = NULL;
        if (error < 0) {
                reply_error(m, error, message);
                return;
        }
        r = send_exec_result(m, res, false);
        if (r < 0) {
                log_warning_errno(r, "Failed to send the result of a run: %m");
                reply_error(m, r, "failed to send the result");
        }
}

static int method_run(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        _cleanup_close_ int code_fd = -EBADF;
        _cleanup_(bus_call_freep) BusCall *c = NULL;
        char trace_id[33] = "", span_id[17] = "";
        RunOptions o = { .hangup = -EBADF };
        const char *language;
        int fd, r;

        r = sd_bus_message_read(m, "sh", &language, &fd);
        if (r < 0)
                return r;
        if (!streq(language, "python3") && !streq(language, "nodejs"))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_UNSUPPORTED_LANGUAGE);
        r = bus_message_read_options(m, run_options, &o, error);
        if (r < 0)
                return r;
        if (o.enable_network && !mgr->config.dify_enable_network)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "network is disabled");
        /* Journal field values from the caller: short, printable. */
        if (!string_is_printable_line(o.user_id, RUN_FIELD_MAX) ||
            !string_is_printable_line(o.user_type, RUN_FIELD_MAX) ||
            !string_is_printable_line(o.traceparent, RUN_FIELD_MAX))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid trace context");
        /* W3C traceparent "00-<trace id>-<span id>-<flags>": the ids go to the journal. */
        if (o.traceparent && strlen(o.traceparent) == 55 && o.traceparent[2] == '-' &&
            o.traceparent[35] == '-') {
                memcpy(trace_id, o.traceparent + 3, 32);
                memcpy(span_id, o.traceparent + 36, 16);
        }
        /* Dify puts a node's inputs into the code: its own, larger bound. */
        r = take_sealed_memfd(fd, mgr->config.dify_max_code_bytes, "code",
                              "code too large (SANDBOX_DIFY_MAX_CODE_BYTES)", &code_fd, error);
        if (r <= 0)
                return r;

        r = bus_call_new(mgr, m, o.hangup, &c, error);
        if (r < 0)
                return r;

        r = manager_queue_run(mgr, TAKE_FD(code_fd),
                        &(RunRequest) {
                                .language = language,
                                .network = o.enable_network,
                                .trace_id = trace_id[0] ? trace_id : NULL,
                                .span_id = span_id[0] ? span_id : NULL,
                                .user_id = o.user_id,
                                .user_type = o.user_type,
                        },
                        on_run_done, c, &c->run);
        if (r < 0) {
                if (r == -EBUSY)
                        return sd_bus_error_set(error, BUS_ERROR_LIMIT_EXCEEDED, "too many runs waiting");
                return r;
        }
        TAKE_PTR(c); /* the callback frees it, maybe already has */
        return 1;
}

/* ---- workspace files ---- */

/* The session named by a call (when 'running': if it can take requests); otherwise an error is set. */
static Session *bus_find_session(Manager *mgr, const char *id, bool running, sd_bus_error *error) {
        Session *s;

        if (!session_id_is_valid(id)) {
                sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, BUS_MESSAGE_INVALID_SESSION_ID);
                return NULL;
        }
        s = manager_find_sidecar_session(mgr, id);
        if (!s || (running && s->state != SESSION_RUNNING)) {
                sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION, BUS_MESSAGE_NO_SUCH_SESSION);
                return NULL;
        }
        return s;
}

static Session *bus_find_running_session(Manager *mgr, const char *id, sd_bus_error *error) {
        return bus_find_session(mgr, id, true, error);
}

static int bus_normalize_path(const char *path, char **ret, sd_bus_error *error) {
        int r = workspace_path_normalize(path, ret);
        if (r == -ENOMEM)
                return r;
        if (r == -ENAMETOOLONG)
                return sd_bus_error_set(error, BUS_ERROR_INVALID_PATH, "path too long");
        if (r < 0)
                return sd_bus_error_set(error, BUS_ERROR_INVALID_PATH, "path must be under /workspace");
        return 0;
}

static Session *bus_refuse_paused(Session *s, sd_bus_error *error);

/* For the filesystem calls of manager-fs.c: the same lookup and path rules as the file calls', a
 * paused session refused as theirs is. */
Session *manager_bus_find_running_session(Manager *mgr, const char *id, sd_bus_error *error) {
        return bus_refuse_paused(bus_find_running_session(mgr, id, error), error);
}

int manager_bus_normalize_path(const char *path, char **ret, sd_bus_error *error) {
        return bus_normalize_path(path, ret, error);
}

/* Runner errors of file operations, in the contract's words: the error and message the caller
 * gets (a NULL message: the one that came with it, of the queue). */
static const struct {
        int error;
        int reply;
        const char *message;
} file_errors[] = {
        { EXDEV, EXDEV, "path resolves outside /workspace" },
        { ELOOP, EXDEV, "path resolves outside /workspace" },
        { EISDIR, EXDEV, "path is a directory" },
        { ENOENT, ENOENT, BUS_MESSAGE_FILE_NOT_FOUND },
        { ENOTDIR, ENOENT, BUS_MESSAGE_FILE_NOT_FOUND },
        { EFBIG, EFBIG, BUS_MESSAGE_FILE_TOO_LARGE },
        { ENOSPC, EFBIG, BUS_MESSAGE_WORKSPACE_FULL },
        { EDQUOT, EFBIG, BUS_MESSAGE_WORKSPACE_FULL },
        { ENXIO, ENXIO, BUS_MESSAGE_NO_SUCH_SESSION },
        { EBUSY, EBUSY, NULL },
        { EUSERS, EUSERS, NULL },
        { ESTRPIPE, ESTRPIPE, BUS_MESSAGE_SESSION_PAUSED },
};

static void reply_file_error(sd_bus_message *m, int error, const char *message) {
        for (size_t i = 0; i < ELEMENTSOF(file_errors); i++)
                if (-error == file_errors[i].error) {
                        reply_error(m, -file_errors[i].reply, file_errors[i].message ?: message);
                        return;
                }
        log_warning_errno(error, "Workspace operation failed: %s", strempty(message));
        reply_error(m, -EHOSTDOWN, "workspace operation failed");
}

static void on_file_done(Session *s, int error, const char *message, int fd, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = userdata;
        int r;

        if (error < 0) {
                reply_file_error(m, error, message);
                return;
        }
        if (sd_bus_message_is_method_call(m, NULL, "ReadFile"))
                r = sd_bus_reply_method_return(m, "h", fd);
        else if (sd_bus_message_is_method_call(m, NULL, "ListFiles")) {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
                _cleanup_free_ char *text = NULL;
                _cleanup_json_ json_object *list = NULL;

                r = read_full_memfd(fd, 16 << 20, &text, NULL);
                if (r >= 0)
                        r = json_parse(text, strlen(text), JSON_DEPTH_MAX, &list);
                if (r < 0 || !json_object_is_type(list, json_type_array)) {
                        reply_error(m, -EHOSTDOWN, "malformed list from the runner");
                        return;
                }
                r = sd_bus_message_new_method_return(m, &reply);
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'a', "(st)");
                for (size_t i = 0; r >= 0 && i < json_object_array_length(list); i++) {
                        json_object *e = json_object_array_get_idx(list, i), *p, *sz;
                        if (!json_object_object_get_ex(e, "path", &p) ||
                            !json_object_object_get_ex(e, "size", &sz))
                                continue;
                        r = sd_bus_message_append(reply, "(st)", json_object_get_string(p),
                                                  (uint64_t) json_object_get_int64(sz));
                }
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                if (r >= 0)
                        r = sd_bus_send(NULL, reply, NULL);
        } else
                r = sd_bus_reply_method_return(m, NULL);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
}

/* Queue a file operation and answer later; maps synchronous failures. */
static int queue_file_call(sd_bus_message *m, int r, sd_bus_error *error) {
        if (r >= 0)
                return 1;
        sd_bus_message_unref(m);
        if (r == -EBUSY)
                return sd_bus_error_set(error, BUS_ERROR_BUSY, BUS_MESSAGE_SESSION_BUSY);
        if (r == -ENXIO)
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION,
                                        BUS_MESSAGE_NO_SUCH_SESSION);
        return r;
}

/* A paused session takes no call that needs its processes (or the runner's queue) until it is
 * resumed: Paused, never a silent resume. */
static Session *bus_refuse_paused(Session *s, sd_bus_error *error) {
        if (s && s->pause.paused) {
                sd_bus_error_set(error, BUS_ERROR_PAUSED, BUS_MESSAGE_SESSION_PAUSED);
                return NULL;
        }
        return s;
}

/* The running session a call names (its first argument); NULL with 'error' set, or *ret_r < 0. */
static Session *bus_read_running_session(sd_bus_message *m, Manager *mgr, sd_bus_error *error, int *ret_r) {
        const char *id;

        *ret_r = sd_bus_message_read(m, "s", &id);
        if (*ret_r < 0)
                return NULL;
        *ret_r = -EINVAL;
        return bus_refuse_paused(bus_find_running_session(mgr, id, error), error);
}

/* The running session and the path in it a file call names first ("ss"), the path normalized into
 * *ret_rel: NULL, with 'error' set or *ret_r < 0, if there is none. */
static Session *bus_read_session_path(sd_bus_message *m, Manager *mgr, char **ret_rel, sd_bus_error *error,
                                      int *ret_r) {
        const char *path;
        Session *s;

        s = bus_read_running_session(m, mgr, error, ret_r);
        if (!s)
                return NULL;
        *ret_r = sd_bus_message_read(m, "s", &path);
        if (*ret_r < 0)
                return NULL;
        *ret_r = bus_normalize_path(path, ret_rel, error);
        return *ret_r == 0 ? s : NULL;
}

static int method_write_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        _cleanup_free_ char *rel = NULL;
        _cleanup_close_ int data_fd = -EBADF;
        Session *s;
        int fd, r;

        s = bus_read_session_path(m, mgr, &rel, error, &r);
        if (!s)
                return r;
        r = sd_bus_message_read(m, "h", &fd);
        if (r < 0)
                return r;
        r = take_sealed_memfd(fd, mgr->config.max_upload_bytes, "data", BUS_MESSAGE_FILE_TOO_LARGE, &data_fd,
                              error);
        if (r <= 0)
                return r;
        if (*rel == 0)
                return sd_bus_error_set(error, BUS_ERROR_INVALID_PATH, "path is a directory");

        r = session_write_file(s, rel, TAKE_FD(data_fd), on_file_done, sd_bus_message_ref(m));
        return queue_file_call(m, r, error);
}

static int method_read_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        _cleanup_free_ char *rel = NULL;
        Session *s;
        int r;

        s = bus_read_session_path(m, mgr, &rel, error, &r);
        if (!s)
                return r;
        r = session_read_file(s, rel, mgr->config.max_upload_bytes, on_file_done, sd_bus_message_ref(m));
        return queue_file_call(m, r, error);
}

/* Calls that name only a session: ListFiles, ResetInputs. */
static int session_only_call(sd_bus_message *m, Manager *mgr, sd_bus_error *error,
                             int (*op)(Session *s, FileCallback cb, void *userdata)) {
        Session *s;
        int r;

        s = bus_read_running_session(m, mgr, error, &r);
        if (!s)
                return r;
        r = op(s, on_file_done, sd_bus_message_ref(m));
        return queue_file_call(m, r, error);
}

static int method_list_files(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return session_only_call(m, userdata, error, session_list_files);
}

static int method_reset_inputs(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return session_only_call(m, userdata, error, session_reset_inputs);
}

static int method_reset_kernel(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return session_only_call(m, userdata, error, session_reset_kernel);
}

/* ---- CancelExec ---- */

static int method_cancel_exec(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Session *s;
        int r;

        s = bus_read_running_session(m, userdata, error, &r);
        if (!s)
                return r;
        r = session_exec_cancel_running(s);
        if (r == -ENOENT)
                return sd_bus_error_set(error, BUS_ERROR_NOT_RUNNING, "no exec is running");
        if (r < 0)
                return sd_bus_error_set(error, BUS_ERROR_BACKEND_FAILED, "failed to cancel the exec");
        return sd_bus_reply_method_return(m, NULL);
}

/* ---- GetHealth ---- */

static void on_health_version(Manager *mgr, const char *version, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = userdata;
        const char *reason = NULL;
        int r;

        if (!version)
                reason = "systemd is not reachable";
        else if (access(RUNNER_PATH, X_OK) < 0)
                reason = "the runner binary is missing";
        else if (access(SANDBOX_PYTHON_PATH, X_OK) < 0)
                reason = "python3 is not installed";

        /* What a balancer weighs nodes by: the sessions counted against SANDBOX_MAX_SESSIONS (dify
         * runs' are not), the limit, and whether new ones are taken at all. */
        r = sd_bus_reply_method_return(m, "ba{sv}", reason == NULL, 8,
                                       "systemd_version", "s", strempty(version),
                                       "runner", "s", RUNNER_PATH,
                                       "python", "s", SANDBOX_PYTHON_PATH,
                                       "reason", "s", strempty(reason),
                                       "sessions", "u", mgr->n_sessions,
                                       "counted_sessions", "u", sessions_counted(mgr),
                                       "max_sessions", "x", mgr->config.max_sessions,
                                       "draining", "b", (int) mgr->draining);
        if (r < 0)
                log_debug_errno(r, "Failed to reply to GetHealth, ignoring: %m");
}

static int method_get_health(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        int r;

        r = systemd_get_version(mgr, on_health_version, sd_bus_message_ref(m), NULL);
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        return 1;
}

/* ---- GetMetrics ---- */

/* Opens the {sv} entry 'key' of an a{sv} with an array of 'element' in its variant, ready for the
 * elements; close_array_entry() closes all three. */
static int open_array_entry(sd_bus_message *reply, const char *key, const char *element) {
        char sig[16];
        int r;

        (void) snprintf(sig, sizeof(sig), "a%s", element);
        r = sd_bus_message_open_container(reply, 'e', "sv");
        if (r >= 0)
                r = sd_bus_message_append(reply, "s", key);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'v', sig);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', element);
        return r;
}

static int close_array_entry(sd_bus_message *reply) {
        int r = 0;

        for (unsigned i = 0; r >= 0 && i < 3; i++) /* array, variant, dict entry */
                r = sd_bus_message_close_container(reply);
        return r;
}

/* A counter per label value, as a{st}. */
static int append_labeled(sd_bus_message *reply, const char *key, const uint64_t *values, unsigned n,
                          const char *(*label)(int)) {
        int r = open_array_entry(reply, key, "{st}");

        for (unsigned i = 0; r >= 0 && i < n; i++)
                r = sd_bus_message_append(reply, "{st}", label((int) i), values[i]);
        return r < 0 ? r : close_array_entry(reply);
}

static const char *exec_outcome_label(int i) {
        return exec_outcome_to_string((ExecOutcome) i);
}

static const char *kill_reason_label(int i) {
        return kill_reason_to_string((KillReason) i);
}

static int method_get_metrics(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *mgr = userdata;
        const Metrics *mt = &mgr->metrics;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(
                        reply,
                        "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}"
                        "{sv}{sv}{sv}{sv}{sv}{sv}",
                        "start_time_usec", "t", mt->start_realtime_usec, "sessions", "u",
                        mgr->n_sessions - mgr->n_ephemeral, "sessions_started", "t", mt->sessions_started,
                        "sessions_ended", "t", mt->sessions_ended, "sessions_reaped", "t",
                        mt->sessions_reaped, "execs_running", "u", mgr->n_execs_running, "execs_waiting",
                        "u", (uint32_t) mgr->n_exec_waiters, "creates_running", "u", mgr->n_creating,
                        "creates_waiting", "u", manager_count_pending_creates(mgr), "runs_running", "u",
                        mgr->n_runs_running, "runs_waiting", "u", mgr->n_runs_queued, "runs", "t", mt->runs,
                        "exec_duration_sum_usec", "t", mt->exec_duration_sum_usec, "exec_duration_count",
                        "t", mt->exec_duration_count, "archive_bytes_written", "t",
                        mt->archive_bytes_written, "archive_bytes_restored", "t", mt->archive_bytes_restored,
                        "archive_failures", "t", mt->archive_failures, "archive_retries", "t",
                        mt->archive_retries, "archives_skipped", "t", mt->archives_skipped,
                        "archives_abandoned", "t", mt->archives_abandoned, "restore_failures", "t",
                        mt->restore_failures, "archives_pending", "u", session_count_pending_archives(mgr),
                        "archives_quarantined", "t", mt->archives_quarantined);
        if (r >= 0)
                r = append_labeled(reply, "execs", mt->execs, _EXEC_OUTCOME_MAX, exec_outcome_label);
        if (r >= 0)
                r = append_labeled(reply, "kills", mt->kills, _KILL_REASON_MAX, kill_reason_label);

        /* The histogram: (upper bound in µs, execs that took at most that), ascending. */
        if (r >= 0)
                r = open_array_entry(reply, "exec_duration_buckets", "(tt)");
        for (unsigned i = 0; r >= 0 && i < METRICS_EXEC_BUCKETS; i++)
                r = sd_bus_message_append(reply, "(tt)", metrics_exec_bucket_usec[i],
                                          metrics_exec_cumulative(mt, i));
        if (r >= 0)
                r = close_array_entry(reply);
        if (r >= 0)
                r = sd_bus_message_close_container(reply); /* the a{sv} */
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* ---- ListSessions, ListRunSandboxes, GetSession (scopeboxctl) ---- */

/* What we know of a session, as the a{sv} of ListSessions and GetSession. Never the storage block:
 * it may carry credentials. */
static int append_session_info(sd_bus_message *reply, const Session *s) {
        int r;

        r = sd_bus_message_open_container(reply, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(
                        reply, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "state", "s",
                        session_state_to_word(s->state), "archive_pending", "b",
                        (int) session_archive_pending(s), "restore_failed", "b", (int) s->restore_failed,
                        "unit", "s", strempty(s->unit), "created_usec", "t", s->created_realtime_usec,
                        "last_active_usec", "t", s->last_active_realtime_usec, "idle_ttl_usec", "t",
                        s->idle_ttl_usec, "uid", "u", (uint32_t) s->uid, "runner_pid", "u",
                        (uint32_t) MAX(s->runner.pid, 0), "execs", "t", s->n_execs, "exec_running", "b",
                        (int) session_exec_running(s), "queued", "u", (uint32_t) s->n_queued, "ephemeral",
                        "b", (int) s->ephemeral, "pooled", "b", (int) s->pooled, "archive_key", "s",
                        strempty(s->archive_key));
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        return r;
}

/* ---- records: the sessions a client made with a record (the E2B API's sandboxes) ---- */

/* What a record's owner may know of its session: "(s record, a{sv} info)". */
static int append_record(sd_bus_message *reply, const Session *s) {
        int r;

        r = sd_bus_message_append(reply, "s", s->record);
        if (r >= 0)
                r = sd_bus_message_append(reply, "a{sv}", 5, "created_usec", "t", s->created_realtime_usec,
                                          "deadline_usec", "t", s->deadline_realtime_usec, "stateful", "b",
                                          (int) s->stateful, "execs", "t", s->n_execs, "paused", "b",
                                          (int) s->pause.paused);
        return r;
}

static Session *bus_find_record(Manager *mgr, const char *id, sd_bus_error *error) {
        Session *s = bus_find_running_session(mgr, id, error);

        if (s && !s->record) {
                sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION, BUS_MESSAGE_NO_SUCH_SESSION);
                return NULL;
        }
        return s;
}

static int method_get_record(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *id;
        Session *s;
        int r;

        r = sd_bus_message_read(m, "s", &id);
        if (r < 0)
                return r;
        s = bus_find_record(userdata, id, error);
        if (!s)
                return -EINVAL;
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = append_record(reply, s);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* Every running session with a record, in no particular order. */
static int method_list_records(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *mgr = userdata;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssa{sv})");
        for (Session *s = mgr->sessions; r >= 0 && s; s = s->sessions_next) {
                if (!s->record || s->state != SESSION_RUNNING || !session_is_sidecar(s))
                        continue;
                r = sd_bus_message_open_container(reply, 'r', "ssa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "s", s->id);
                if (r >= 0)
                        r = append_record(reply, s);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* SetDeadline(s id, t deadline_usec, b extend_only) -> (s record, a{sv} info): moves the
 * deadline of a session that has one (extend_only: only later). Answers as GetRecord, whose info
 * holds the deadline in force. */
static int method_set_deadline(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *mgr = userdata;
        const char *id;
        uint64_t deadline;
        int extend_only, r;
        Session *s;

        r = sd_bus_message_read(m, "stb", &id, &deadline, &extend_only);
        if (r < 0)
                return r;
        s = bus_find_record(mgr, id, error);
        if (!s)
                return -EINVAL;
        if (s->deadline_realtime_usec == 0 || deadline == 0)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "the session has no deadline");
        /* No further than an idle session may live; and the idle timer starts again, so that an
         * idle session is not released before the deadline it was just given. */
        deadline = MIN(deadline, now_usec(CLOCK_REALTIME) + mgr->config.idle_ttl_cap_sec * USEC_PER_SEC);
        session_touch(s);
        if (!extend_only || deadline > s->deadline_realtime_usec) {
                r = session_set_deadline(s, deadline);
                if (r < 0)
                        log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                                   "Failed to record the deadline of session %s: %m", s->id);
        }
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = append_record(reply, s);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* ---- PauseSession, ResumeSession (session-pause.c) ---- */

/* The running session a call names first, paused or not; NULL with 'error' set, or *ret_r < 0. */
static Session *bus_read_session_paused_or_not(sd_bus_message *m, Manager *mgr, sd_bus_error *error,
                                               int *ret_r) {
        const char *id;

        *ret_r = sd_bus_message_read(m, "s", &id);
        if (*ret_r < 0)
                return NULL;
        *ret_r = -EINVAL;
        return bus_find_running_session(mgr, id, error);
}

/* Both freeze or thaw the session's processes where they are; ResumeSession says whether it did. */
static int pause_call(sd_bus_message *m, Manager *mgr, bool pause, sd_bus_error *error) {
        const char *verb = pause ? "pause" : "resume";
        Session *s;
        int r;

        s = bus_read_session_paused_or_not(m, mgr, error, &r);
        if (!s)
                return r;
        r = pause ? session_pause(s) : session_resume(s);
        if (r == -EALREADY)
                return sd_bus_error_set(error, BUS_ERROR_PAUSED, "session is paused already");
        if (r == -EOPNOTSUPP)
                return sd_bus_error_set(error, BUS_ERROR_BACKEND_FAILED,
                                        "pausing needs the unified cgroup hierarchy");
        if (r < 0) {
                log_struct(LOG_ERR, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)), "Failed to %s session %s: %m",
                           verb, s->id);
                return sd_bus_error_setf(error, BUS_ERROR_BACKEND_FAILED, "failed to %s the session", verb);
        }
        return pause ? sd_bus_reply_method_return(m, NULL) : sd_bus_reply_method_return(m, "b", r > 0);
}

static int method_pause_session(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return pause_call(m, userdata, true, error);
}

static int method_resume_session(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return pause_call(m, userdata, false, error);
}

/* ---- GetSessionUsage (session-usage.c) ---- */

static int method_get_session_usage(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        SessionUsage now, previous;
        Session *s;
        int r;

        s = bus_read_session_paused_or_not(m, userdata, error, &r);
        if (!s)
                return r;
        r = session_usage(s, &now, &previous);
        if (r < 0) {
                log_struct(LOG_WARNING, r, LOG_FIELDS(LOG_SESSION_FIELD(s->id)),
                           "Failed to read the usage of session %s: %m", s->id);
                return sd_bus_error_set(error, BUS_ERROR_BACKEND_FAILED,
                                        "failed to read the session's usage");
        }
        return sd_bus_reply_method_return(
                m, "a{sv}", 7, "sampled_usec", "t", now.sampled_usec, "cpu_usec", "t", now.cpu_usec,
                "previous_sampled_usec", "t", previous.sampled_usec, "previous_cpu_usec", "t",
                previous.cpu_usec,
                "memory_bytes", "t", now.memory_bytes, "memory_cache_bytes", "t", now.memory_cache_bytes,
                "files_bytes", "t", now.files_bytes);
}

/* ListSessions, ListRunSandboxes and GetSession are for the operator (scopeboxctl as root): the bus
 * policy denies them to the gateway's user, which never needs to enumerate the session ids that are
 * clients' handles. (Not re-checked here: learning a caller's uid on dbus-daemon is a synchronous
 * call.) The sessions and the run sandboxes are separate lists: a run sandbox's id is no session's,
 * and a list of sessions that named it would say otherwise. */
static int reply_session_list(sd_bus_message *m, Manager *mgr, bool sidecar) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(sa{sv})");
        for (Session *s = mgr->sessions; r >= 0 && s; s = s->sessions_next) {
                if (session_is_sidecar(s) != sidecar)
                        continue;
                r = sd_bus_message_open_container(reply, 'r', "sa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "s", s->id);
                if (r >= 0)
                        r = append_session_info(reply, s);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_list_sessions(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_session_list(m, userdata, true);
}

static int method_list_run_sandboxes(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_session_list(m, userdata, false);
}

static int method_get_session(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *mgr = userdata;
        const char *id;
        Session *s;
        int r;

        r = sd_bus_message_read(m, "s", &id);
        if (r < 0)
                return r;
        s = bus_find_session(mgr, id, false, error);
        if (!s)
                return -EINVAL;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = append_session_info(reply, s);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* ---- ListPendingArchives, RetryArchives (scopeboxctl archives) ---- */

static int method_list_pending_archives(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *mgr = userdata;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssutts)");
        for (Session *s = mgr->sessions; r >= 0 && s; s = s->sessions_next) {
                if (!session_archive_pending(s))
                        continue;
                r = sd_bus_message_append(reply, "(ssutts)", s->id, session_archive_stem_of(s),
                                          s->archive.attempts, s->archive.release_realtime_usec,
                                          s->archive.first_failure_realtime_usec,
                                          strempty(s->archive.error));
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_retry_archives(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        uint32_t n = 0;

        LIST_FOREACH(sessions, s, mgr->sessions)
                if (session_archive_pending(s)) {
                        session_archive_retry_now(s);
                        n++;
                }
        log_info("Retrying %" PRIu32 " pending archive%s now, as asked.", n, n == 1 ? "" : "s");
        return sd_bus_reply_method_return(m, "u", n);
}

/* ---- SetDraining ---- */

static int method_set_draining(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        int draining, r;

        r = sd_bus_message_read(m, "b", &draining);
        if (r < 0)
                return r;
        r = manager_set_draining(mgr, draining);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Failed to save the drain state: %m");
        return sd_bus_reply_method_return(m, NULL);
}

/* ---- properties ---- */

static int property_get_draining(sd_bus *bus, const char *path, const char *interface, const char *property,
                                 sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        return sd_bus_message_append(reply, "b", (int) mgr->draining);
}

static int property_get_sessions(sd_bus *bus, const char *path, const char *interface, const char *property,
                                 sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *mgr = userdata;
        return sd_bus_message_append(reply, "u", mgr->n_sessions);
}

static int property_get_running_execs(sd_bus *bus, const char *path, const char *interface,
                                      const char *property, sd_bus_message *reply, void *userdata,
                                      sd_bus_error *error) {
        Manager *mgr = userdata;
        return sd_bus_message_append(reply, "u", mgr->n_execs_running);
}

static int property_get_version(sd_bus *bus, const char *path, const char *interface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", PROJECT_VERSION);
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Sessions", "u", property_get_sessions, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RunningExecs", "u", property_get_running_execs, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Draining", "b", property_get_draining, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("CreateSession", SD_BUS_ARGS("a{sv}", options),
                                SD_BUS_RESULT("s", session_id, "b", restore_failed), method_create_session,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ReleaseSession", SD_BUS_ARGS("s", session_id, "a{sv}", options),
                                SD_BUS_RESULT("s", archive), method_release_session,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Exec", SD_BUS_ARGS("s", session_id, "h", code, "a{sv}", options),
                                SD_BUS_RESULT("i", exit_code, "t", stdout_size, "t", stderr_size, "a(stt)",
                                              files, "a{sv}", info, "h", data),
                                method_exec, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS(
                "Run", SD_BUS_ARGS("s", language, "h", code, "a{sv}", options),
                SD_BUS_RESULT("i", exit_code, "t", stdout_size, "t", stderr_size, "a{sv}", info, "h", data),
                method_run, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("WriteFile", SD_BUS_ARGS("s", session_id, "s", path, "h", data),
                                SD_BUS_NO_RESULT, method_write_file, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ReadFile", SD_BUS_ARGS("s", session_id, "s", path),
                                SD_BUS_RESULT("h", data), method_read_file, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListFiles", SD_BUS_ARGS("s", session_id), SD_BUS_RESULT("a(st)", files),
                                method_list_files, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetInputs", SD_BUS_ARGS("s", session_id), SD_BUS_NO_RESULT,
                                method_reset_inputs, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetKernel", SD_BUS_ARGS("s", session_id), SD_BUS_NO_RESULT,
                                method_reset_kernel, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CancelExec", SD_BUS_ARGS("s", session_id), SD_BUS_NO_RESULT,
                                method_cancel_exec, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetHealth", SD_BUS_NO_ARGS, SD_BUS_RESULT("b", ok, "a{sv}", info),
                                method_get_health, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetMetrics", SD_BUS_NO_ARGS, SD_BUS_RESULT("a{sv}", metrics),
                                method_get_metrics, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListSessions", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(sa{sv})", sessions),
                                method_list_sessions, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetRecord", SD_BUS_ARGS("s", session_id),
                                SD_BUS_RESULT("s", record, "a{sv}", info), method_get_record,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListRecords", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssa{sv})", records),
                                method_list_records, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetDeadline",
                                SD_BUS_ARGS("s", session_id, "t", deadline_usec, "b", extend_only),
                                SD_BUS_RESULT("s", record, "a{sv}", info),
                                method_set_deadline, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListRunSandboxes", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(sa{sv})", sandboxes),
                                method_list_run_sandboxes, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSession", SD_BUS_ARGS("s", session_id), SD_BUS_RESULT("a{sv}", info),
                                method_get_session, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListPendingArchives", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssutts)", archives),
                                method_list_pending_archives, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("RetryArchives", SD_BUS_NO_ARGS, SD_BUS_RESULT("u", n_archives),
                                method_retry_archives, SD_BUS_VTABLE_UNPRIVILEGED),
        /* E2B's filesystem calls (manager-fs.c). */
        SD_BUS_METHOD_WITH_ARGS("StatPath", SD_BUS_ARGS("s", session_id, "s", path),
                                SD_BUS_RESULT("(sstussxs)", entry), method_stat_path,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListDirectory", SD_BUS_ARGS("s", session_id, "s", path, "u", depth),
                                SD_BUS_RESULT("a(sstussxs)", entries, "b", truncated), method_list_directory,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("MakeDirectory", SD_BUS_ARGS("s", session_id, "s", path),
                                SD_BUS_RESULT("b", created, "(sstussxs)", entry), method_make_directory,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("MovePath", SD_BUS_ARGS("s", session_id, "s", source, "s", destination),
                                SD_BUS_RESULT("(sstussxs)", entry), method_move_path,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("RemovePath", SD_BUS_ARGS("s", session_id, "s", path), SD_BUS_NO_RESULT,
                                method_remove_path, SD_BUS_VTABLE_UNPRIVILEGED),
        /* E2B's pause and metrics (session-pause.c, session-usage.c). */
        SD_BUS_METHOD_WITH_ARGS("PauseSession", SD_BUS_ARGS("s", session_id), SD_BUS_NO_RESULT,
                                method_pause_session, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResumeSession", SD_BUS_ARGS("s", session_id), SD_BUS_RESULT("b", resumed),
                                method_resume_session, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSessionUsage", SD_BUS_ARGS("s", session_id),
                                SD_BUS_RESULT("a{sv}", usage), method_get_session_usage,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        /* Root only, by the bus policy (scopeboxctl drain/undrain). */
        SD_BUS_METHOD_WITH_ARGS("SetDraining", SD_BUS_ARGS("b", draining), SD_BUS_NO_RESULT,
                                method_set_draining, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

const sd_bus_vtable *manager_get_vtable(void) {
        return manager_vtable;
}

static void manager_emit_properties_changed(Manager *m) {
        if (!m->bus)
                return;
        (void) sd_bus_emit_properties_changed(m->bus, SESSION_MANAGER_OBJECT_PATH, SESSION_MANAGER_INTERFACE,
                                              "Sessions", "RunningExecs", NULL);
}

static void manager_emit_draining_changed(Manager *m) {
        if (!m->bus)
                return;
        (void) sd_bus_emit_properties_changed(m->bus, SESSION_MANAGER_OBJECT_PATH, SESSION_MANAGER_INTERFACE,
                                              "Draining", NULL);
}

int manager_dbus_attach(Manager *m) {
        int r;

        r = sd_bus_add_object_vtable(m->bus, NULL, SESSION_MANAGER_OBJECT_PATH, SESSION_MANAGER_INTERFACE,
                                     manager_vtable, m);
        if (r < 0)
                return r;
        m->hooks = (ManagerHooks) {
                .state_changed = manager_emit_properties_changed,
                .draining_changed = manager_emit_draining_changed,
        };
        return 0;
}
