/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the parts of a session share among themselves (session.c: its life, control connection and
 * start; session-exec.c; session-archive.c; session-restore.c). Nothing outside them includes it. */
#pragma once

#include "runner-protocol.h"
#include "session.h"

#define RUNNER_SOCKET_NAME "runner.sock"
#define RUNNER_ROOT_NAME "root"

typedef void (*RunnerReplyCallback)(Session *s, int error, const char *message, json_object *reply, int fd,
                                    void *userdata);

struct RunnerRequest {
        LIST_FIELDS(RunnerRequest, queue); /* in session->queue_head until sent */
        Session *session;
        sd_event_source *queue_timer; /* how long it may wait for the session or a slot */
        json_object *message;
        int fd; /* sent with the message, owned */
        int fd2; /* sent after it (an exec's stream), owned, or -EBADF */
        int fd3; /* sent after fd2 (a command's stdin), owned, or -EBADF */
        uint64_t timeout_usec;
        bool is_exec;
        RunnerReplyCallback callback;
        void *userdata;
};

typedef struct ReleaseWaiter {
        LIST_FIELDS(struct ReleaseWaiter, waiters);
        SessionDoneCallback callback;
        void *userdata;
} ReleaseWaiter;

/* Calls that only stage or look something up; transfers get as long as the agent may take for
 * one (three attempts of S3_TOTAL_TIMEOUT_SEC each, plus hashing). */
#define STORAGE_CALL_SLACK_USEC (30 * USEC_PER_SEC)
#define STORAGE_TRANSFER_TIMEOUT_USEC (7 * 60 * USEC_PER_SEC)
/* An archive of the same stem in flight elsewhere: look again this often. */
#define ARCHIVE_WAIT_USEC (500 * USEC_PER_MSEC)

/* What an answer of the storage agent means, by its error name (bus-contract.h). */
typedef enum StorageAnswer {
        STORAGE_ANSWER_OK,
        /* InvalidArgs, StorageNotConfigured: the block is not usable by the contract's own rules
         * (invalid, or not effective where the agent runs): archives and restores are no-ops. */
        STORAGE_ANSWER_NOT_EFFECTIVE,
        STORAGE_ANSWER_REFUSED, /* StorageRefused: our endpoint policy refuses it */
        STORAGE_ANSWER_POLICY_UNAVAILABLE, /* PolicyUnavailable: the agent can't tell; may pass later */
        STORAGE_ANSWER_DAMAGED, /* ArchiveDamaged: the stored archive can't be restored */
        STORAGE_ANSWER_NOT_FOUND, /* NotFound */
        /* Anything else (StorageFailed, UnknownToken, no reply, no agent): a retry may succeed. */
        STORAGE_ANSWER_FAILED,
} StorageAnswer;

/* session-archive.c */
/* For logs and messages only: no decision is taken on it. */
const char *storage_reply_message(sd_bus_message *reply);
bool session_archive_in_flight(const Session *s);
const char *session_archive_stem(Session *s, const char *override);
void session_archive_stop_retrying(Session *s);
/* Entry action of ARCHIVE_PENDING after a failed attempt: the record, PropertiesChanged, the waiters. */
void session_archive_now_pending(Session *s);
const char *session_effective_storage(Session *s);
void session_release_tell(Session *s);
bool session_same_archive(Session *a, Session *b);
void storage_abort(Session *s, const char *token);
StorageAnswer storage_answer(sd_bus_message *reply);
int storage_block_effective(Session *s, const char *json);
int storage_call(Session *s, sd_bus_slot **ret_slot, const char *method, sd_bus_message_handler_t cb,
                 uint64_t timeout_usec, const char *types, ...);
void storage_call_ended(sd_bus_slot **slot);

/* session-exec.c */
void session_stop_running_exec(Session *s);

/* session-restore.c */
void session_reset_inputs_then_ready(Session *s);
void session_restore_then_ready(Session *s);

/* session.c */
RunnerRequest *runner_request_free(RunnerRequest *q);
int session_add_release_waiter(Session *s, SessionDoneCallback cb, void *userdata);
void session_arm_idle(Session *s, uint64_t usec);
int session_connect(Session *s);
int session_dispatch_next(Session *s);
SessionEnd session_end_or(const Session *s, SessionEnd fallback);
int session_enqueue(Session *s, json_object *message, int fd, uint64_t timeout_usec, bool is_exec,
                    bool front, RunnerReplyCallback cb, void *userdata);
int session_enqueue_full(Session *s, json_object *message, int fd, int fd2, int fd3, uint64_t timeout_usec,
                         bool is_exec, bool front, RunnerReplyCallback cb, void *userdata,
                         RunnerRequest **ret_request);
int session_enqueue_op(Session *s, const SchemaMessage *op, RunnerReplyCallback cb);
void session_finalize(Session *s);
void session_learn_runner(Session *s, bool cancels);
void session_release_create_slot(Session *s);
int session_save_state(Session *s);
void session_start_done(Session *s, int error, const char *message);
void session_stop_scope(Session *s, SessionEnd end);
void session_teardown(Session *s, SessionEnd end);
bool session_unqueue(Session *s, RunnerRequest *q);
