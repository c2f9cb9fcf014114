/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session: its runner in a transient scope, the control connection, the request queue, the TTL. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-contract.h"
#include "id.h"
#include "list.h"
#include "macro.h"
#include "pidref.h"
#include "session-archive.h"
#include "session-pause.h"
#include "session-usage.h"

typedef struct Manager Manager;
typedef struct Session Session;
typedef struct SystemdJob SystemdJob;
/* A session's start or end is over: 'error' says how it went. */
typedef void (*SessionDoneCallback)(Session *s, int error, const char *message, void *userdata);

/* A session's stage (docs/architecture.md has the diagram). It changes only through
 * session_enter(), which refuses what its table of transitions does not allow and runs the new
 * stage's entry actions. */
typedef enum SessionState {
        SESSION_CREATING,        /* a create slot, its scope, its runner and workspace coming up */
        SESSION_RESTORING,       /* its stored archive restored, or (adopted) its inputs reset */
        SESSION_RUNNING,         /* takes calls */
        SESSION_ARCHIVING,       /* released: an attempt to store its archive under way, or its turn */
        SESSION_ARCHIVE_PENDING, /* released: the last attempt failed, the next one is scheduled */
        SESSION_DISCARDING,      /* released with discard: its stored archive being deleted */
        SESSION_STOPPING,        /* its scope asked to stop; finalized once no call of it is left */
        SESSION_GONE,            /* out of every lookup, freed by the manager's GC */
        _SESSION_STATE_MAX,
        _SESSION_STATE_INVALID = -EINVAL,
} SessionState;

/* The stage's own name (logs, tests). */
const char *session_state_to_string(SessionState s);
/* The word of the bus contract (docs/dbus-api.md): "starting", "running" or "stopping". */
const char *session_state_to_word(SessionState s);
/* Whether 'to' may follow 'from' (the table session_enter() keeps to). */
bool session_state_transition_is_legal(SessionState from, SessionState to);

/* Coming up: it has taken no call yet. */
static inline bool session_state_is_starting(SessionState s) {
        return s == SESSION_CREATING || s == SESSION_RESTORING;
}

/* On its way out (released, stopped or gone): it takes no calls, clients see it as gone. */
static inline bool session_state_is_ending(SessionState s) {
        return s >= SESSION_ARCHIVING;
}

/* Why a session ended: one word each, in the journal (SCOPEBOX_SESSION_END=) and in the record of
 * a session whose release a restarted manager goes on with ("release_reason"). The details (which
 * message a lost runner sent, why a record was stale) are in the entries that lead to it. */
typedef enum SessionEnd {
        SESSION_END_RELEASED,      /* ReleaseSession */
        SESSION_END_DISCARDED,     /* ReleaseSession with discard */
        SESSION_END_IDLE,          /* its idle TTL passed */
        SESSION_END_HANGUP,        /* the caller of its CreateSession hung up before the answer */
        SESSION_END_RUN_FINISHED,  /* a dify run's session, after its one exec */
        SESSION_END_RUN_CANCELLED, /* a dify run's session, its run cancelled */
        SESSION_END_START_FAILED,  /* its scope, runner or workspace did not come up */
        SESSION_END_RUNNER_LOST,   /* the control connection closed, broke or could not be written */
        SESSION_END_UNRESPONSIVE,  /* its runner did not answer a request in time */
        SESSION_END_STALE,         /* found after a restart, and could not be taken over */
        SESSION_END_DEADLINE,      /* its deadline (CreateSession "deadline_usec") passed */
        _SESSION_END_MAX,
        _SESSION_END_INVALID = -EINVAL,
} SessionEnd;

const char *session_end_to_string(SessionEnd e);
/* Also the phrases recorded by earlier versions; -EINVAL for anything else. */
SessionEnd session_end_from_string(const char *s);

/* Most requests (execs, file operations) waiting behind the one in flight. */
#define SESSION_QUEUE_MAX 16
/* Slack on top of an exec's own timeout before we consider the runner hung. */
#define SESSION_EXEC_SLACK_USEC (30 * USEC_PER_SEC)
#define SESSION_CONTROL_TIMEOUT_USEC (30 * USEC_PER_SEC)
/* A runner ends its session by itself this long after its idle TTL, should the manager be gone. */
#define SESSION_BACKSTOP_SLACK_USEC (10 * 60 * USEC_PER_SEC)
/* Where sessions are recorded so that a restarted manager finds them again. */
#define SESSION_STATE_DIR SCOPEBOX_STATE_DIR "/sessions"
#define SESSION_STATE_SAVE_INTERVAL_USEC (10 * USEC_PER_SEC)


typedef struct ExecResult {
        int exit_code;
        int signal;
        bool timed_out;
        bool oom_killed;      /* the OOM killer struck in the session's scope during the exec */
        bool pids_limited;    /* a fork or thread was refused at the tasks limit */
        uint64_t duration_usec;
        uint64_t stdout_size;
        uint64_t stderr_size;
        bool stdout_truncated;
        bool stderr_truncated;
        ExecFile *files;
        size_t n_files;
        uint64_t files_skipped;
        ExecBlocked *blocked;
        size_t n_blocked;
        int data_fd;       /* borrowed; stdout, stderr, then the files */
        const char *exit_reason;  /* bus_exit_reason_is_valid(); owned by the reply */
        const char *kernel;       /* a stateful cell's: "new", "running", "ended"; NULL otherwise */
        /* What the exec's processes used (the runner's "resources"); a has_ flag per figure. */
        bool has_usage, has_written, has_processes;
        uint64_t cpu_usec;
        uint64_t max_rss_bytes;
        uint64_t written_bytes;
        uint64_t processes;
} ExecResult;

typedef void (*ExecCallback)(Session *s, int error, const char *message, const ExecResult *result,
                             void *userdata);

typedef struct ExecParameters {
        uint64_t timeout_ms;
        uint64_t output_limit;
        const char *language;      /* NULL: python3 */
        bool no_processes;         /* the dify profile: threads only, no new programs */
        bool network;
        const char *http_proxy;    /* handed to the code when it has a network */
        const char *https_proxy;
        int stream_fd;             /* borrowed, or -EBADF: the write end for the output as produced */
        bool display;              /* a stateful cell's values, displays and error as result records */
        int stdin_fd;              /* borrowed, or -EBADF: a command's stdin (the read end of a pipe) */
        bool interrupt;            /* a stateful cell's timeout or cancel interrupts it first */
} ExecParameters;

typedef struct RunnerRequest RunnerRequest;


struct Session {
        Manager *manager;
        LIST_FIELDS(Session, sessions);   /* in manager->sessions */

        char id[SESSION_ID_LEN + 1];
        char *unit;
        char *runtime_dir;
        char *socket_path;
        char *session_root;
        uid_t uid;                /* host uid and gid of the sandbox; 0 until allocated */
        bool ephemeral;           /* a dify run's: not recorded, not counted as a session */
        bool stateful;            /* its python cells share one interpreter (CreateSession "stateful") */
        bool pooled;              /* ephemeral, started in advance for a run that has not taken it yet */
        bool counted;             /* counted in metrics.sessions_started: its end is counted too */
        uint64_t restore_size;    /* bytes of the archive being restored into it */
        SessionState state;

        PidRef runner;            /* our child until reaped or handed off (manager_watch_child()) */
        bool runner_cancels;      /* the runner knows "cancel" (older ones, recovered, may not) */
        sd_event_source *runner_child_source;
        int control_fd;
        sd_event_source *control_source;

        RunnerRequest *queue_head;  /* in order, the control requests first */
        unsigned n_queued;
        RunnerRequest *in_flight;
        sd_event_source *request_timer;

        uint64_t idle_ttl_usec;
        sd_event_source *idle_timer;
        /* A client's record of the session (CreateSession "record", opaque here: the E2B API's
         * sandbox) and its deadline (CLOCK_REALTIME, 0: none), when it is released as at its idle
         * TTL whether or not it is busy (session-deadline.c). */
        char *record;
        uint64_t deadline_realtime_usec;
        sd_event_source *deadline_timer;
        SessionPause pause;       /* PauseSession: its sandboxes frozen (session-pause.c) */
        SessionUsage usage;       /* GetSessionUsage's last sample (session-usage.c) */
        uint64_t created_realtime_usec;
        uint64_t last_active_realtime_usec;
        uint64_t state_saved_realtime_usec;
        uint64_t n_execs;         /* execs queued since the session started (or was recovered) */

        char *archive_key;
        char *storage_json;
        SessionEnd end;           /* why it is stopping; _SESSION_END_INVALID until then */
        SessionArchive archive;   /* its archive at release (session-archive.c) */

        /* started without its stored archive: the create answers "restored": false (after a
         * failed restore with SANDBOX_START_EMPTY_ON_RESTORE_FAILURE=1, or a damaged archive moved
         * aside) */
        bool restore_failed;
        /* ... and never archived over the stored one (the former case: the archive is still there) */
        bool archive_kept;
        /* A fact, not a stage: a create took it over while its archive was pending, so its
         * workspace is its own (archived at any release, never "only what was restored"). */
        bool adopted;
        /* A failed start's bus error name when its errno can't say it (those set by name only,
         * bus-contract.h: StorageRefused, PolicyUnavailable); NULL otherwise. */
        const char *start_error_name;
        char *restore_damage;       /* why the stored archive counts as damaged, while it is moved aside */
        sd_event_source *restore_wait_timer;  /* an archive of the same stem is being stored */
        uint64_t restore_wait_until_usec;     /* CLOCK_MONOTONIC: waited for no longer */

        /* Bus calls on the session's behalf, owned: freeing the session cancels them, so no
         * reply ever reaches a freed session. */
        SystemdJob *start_job;      /* StartTransientUnit and its job */
        SystemdJob *stop_job;       /* StopUnit and its job */
        sd_bus_slot *restore_slot;  /* OpenArchive */
        bool holds_create_slot;     /* one of the manager's create slots (scope start and init) */
        bool in_gc_queue;           /* bookkeeping of manager->session_gc_queue */
        LIST_FIELDS(Session, gc_queue);   /* in manager->session_gc_queue until freed */

        SessionDoneCallback start_callback;
        void *start_userdata;
        struct ReleaseWaiter *release_waiters;
};

/* The one way a session changes its stage: -EINVAL (logged, nothing done) for a transition the
 * table does not allow; otherwise the state is set and the entry actions run (leaving the live
 * stages: no more calls; STOPPING: the scope's stop; GONE: out of the lookups, into the GC
 * queue; ARCHIVE_PENDING after an attempt: the record, PropertiesChanged, the release's waiters). */
int session_enter(Session *s, SessionState state);

int session_new(Manager *m, Session **ret);

/* session-deadline.c: sets the deadline (CLOCK_REALTIME µs, > 0) and arms its timer. */
int session_set_deadline(Session *s, uint64_t realtime_usec);
void session_arm_deadline(Session *s);
/* A session object for an id found on disk (recovery, cleanup). */
int session_new_with_id(Manager *m, const char *id, Session **ret);
/* Reattach to the runner of a session recorded by an earlier manager. */
int session_recover(Session *s);
/* Tear down a session found on disk that can't be recovered. */
void session_cleanup_stale(Session *s, const char *why);
/* Frees at once: only for a session no call chain is using (the manager's GC, its shutdown, a
 * session that never got to start). A gone session's waiters hear here that it is gone. */
Session *session_free(Session *s);
/* Out of the manager's lookups now, freed from the event loop (manager_gc()). */
void session_add_to_gc_queue(Session *s);

/* Spawn the runner, put it in its scope, initialize the workspace. cb runs once. */
int session_start(Session *s, SessionDoneCallback cb, void *userdata);
/* The bus error name for a start that failed with 'error' (its callback's): the name it was set
 * with (the client's storage block refused by our endpoint policy, or the policy unavailable), or
 * bus_error_name_from_errno(). */
const char *session_start_error_name(const Session *s, int error);
/* Stop the scope and forget the session. cb (optional) runs when it is gone. Safe from inside
 * the session's own callbacks: nothing is freed before the event loop gets back to the manager. */
int session_release(Session *s, SessionEnd end, SessionDoneCallback cb, void *userdata);
/* Release waiters hear when the session is gone, or earlier when its archive is pending; they
 * find the outcome in s->archive.outcome. */
/* Release with the client's options: archive the workspace first (default, when storage is
 * effective and no call is running), or delete the archive instead (discard). */
typedef struct ReleaseOptions {
        bool archive;
        bool discard;
        const char *archive_key;   /* for discard */
        const char *storage_json;  /* overrides the remembered block */
} ReleaseOptions;
int session_release_full(Session *s, SessionEnd end, const ReleaseOptions *o, SessionDoneCallback cb,
                         void *userdata);

/* An exec queued by session_exec(), valid until its callback has run. */
typedef struct ExecCall ExecCall;

/* Queue an exec. code_fd is taken over. *ret_call (optional) is set before anything runs, also
 * when the callback comes at once (then it is not valid any more when this returns). */
int session_exec(Session *s, int code_fd, const ExecParameters *p, ExecCallback cb, void *userdata,
                 ExecCall **ret_call);
/* Its caller no longer wants the exec (it hung up). Still waiting (behind the session's other
 * calls or for an exec slot): out of the queue, the callback gets -ECANCELED now. Running: the
 * runner kills it as its timeout would (no process of it is left), and the callback gets
 * -ECANCELED once it has — whatever the exec's own outcome was by then. The session stays usable.
 * Idempotent. */
void session_exec_abandon(ExecCall *c);
/* CancelExec(): the runner ends the session's running exec the way its timeout does, and its
 * caller gets the result (exit_reason "cancelled"). -ENOENT when no exec runs; idempotent. */
int session_exec_cancel_running(Session *s);

/* Workspace file operations, queued behind the session's other calls. The callback gets an fd
 * (borrowed) for reads (the file) and lists (JSON array of {path,size}), -EBADF otherwise.
 * Runner errors arrive as -EXDEV (outside the workspace), -ENOENT, -EFBIG, -EISDIR, -ENOSPC. */
typedef void (*FileCallback)(Session *s, int error, const char *message, int fd, void *userdata);
int session_write_file(Session *s, const char *relative, int data_fd, FileCallback cb, void *userdata);
int session_read_file(Session *s, const char *relative, uint64_t max, FileCallback cb, void *userdata);
int session_list_files(Session *s, FileCallback cb, void *userdata);
int session_reset_inputs(Session *s, FileCallback cb, void *userdata);
/* A stateful session's interpreter ends; the next cell starts a fresh one. */
int session_reset_kernel(Session *s, FileCallback cb, void *userdata);

/* Archives not stored yet: the session's archive is tried again now (RetryArchives). */
void session_archive_retry_now(Session *s);
/* The newest session releasing (stem, storage) whose archive is not stored yet, or NULL. */
Session *session_find_pending_archive(Manager *m, const char *stem, const char *storage_json);
/* Sessions whose archive is not stored yet. */
unsigned session_count_pending_archives(Manager *m);
/* Whether the session waits for its archive to be stored (held, retried). */
bool session_archive_pending(const Session *s);
/* The stem its archive is stored under. */
const char *session_archive_stem_of(Session *s);
/* A session whose archive is pending becomes a running session again for a new create with the
 * same archive: its workspace is newer than anything stored. */
int session_adopt(Session *s, uint64_t idle_ttl_usec, SessionDoneCallback cb, void *userdata);
/* From a recorded session's state file (session_save_state()'s): what the session was. Members
 * missing or of another type are left at their defaults. */
int session_load_state(Session *s, json_object *o);
/* After recovery: go on archiving a session that was being released. */
void session_resume_release(Session *s);

/* Dispatch the next queued request if the session and a slot are free. */
void session_kick(Session *s);

/* Whether the runner is executing code for the session right now. */
bool session_exec_running(const Session *s);

/* Any successful call resets the idle timer. */
void session_touch(Session *s);
