/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager: owns the sessions, the bus connection and the event loop. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "address-policy.h"
#include "config.h"
#include "macro.h"
#include "metrics.h"
#include "pidref.h"

typedef struct Session Session;
/* A session's start or end is over: 'error' says how it went (the same type in session.h). */
typedef void (*SessionDoneCallback)(Session *s, int error, const char *message, void *userdata);
typedef struct SystemdJob SystemdJob;
typedef struct ChildWatch ChildWatch;
typedef struct NetFilter NetFilter;

/* Exit after this long without sessions (bus activation starts us again); $SCOPEBOX_IDLE_EXIT_SEC
 * overrides it (daemon-util.h). */
#define MANAGER_IDLE_EXIT_USEC (60 * USEC_PER_SEC)
/* A recorded session that could not be taken over for want of resources is tried again after this. */
#define MANAGER_RECOVER_RETRY_USEC (1 * USEC_PER_SEC)
#define MANAGER_SLICE "scopebox.slice"

typedef struct Manager Manager;

/* What the bus layer (manager-dbus.c) hears of the model: set when it attaches, so the model never
 * calls into it (model → hook → bus layer). */
typedef struct ManagerHooks {
        void (*state_changed)(Manager *m);    /* sessions or running execs changed */
        void (*draining_changed)(Manager *m);
} ManagerHooks;

struct Manager {
        sd_event *event;
        sd_bus *bus;
        Config config;
        AddressPolicy dify_network_allow; /* SANDBOX_DIFY_NETWORK_ALLOW */
        sd_event_source *route_watch_source;   /* routes to this host: the dify network filter follows */
        NetFilter *net_filter;                 /* dify runs' network filter; NULL if it failed */
        int seccomp_filters_fd;                /* every sandbox profile's filter, compiled once and
                                                * given to each runner (seccomp_filter_set_new()) */

        Session *sessions;     /* linked list */
        unsigned n_sessions;
        unsigned n_ephemeral;  /* of them, runs' sessions */

        /* dify runs: at most config.dify_max_workers at once, the rest wait (FIFO). */
        unsigned n_runs_running;
        unsigned n_runs_queued;
        struct Run *runs_queue;
        uint64_t run_pool_failed_usec; /* CLOCK_MONOTONIC of the last pooled start that failed */
        bool run_pool_network;         /* the last run's network: the profile pooled sessions prepare */
        unsigned n_execs_running;
        SystemdJob *job_waits; /* systemd-client.c's jobs whose JobRemoved we wait for */
        sd_bus_slot *job_removed_slot; /* the match for JobRemoved, which finds them */

        /* Sessions that are over (finalized) or never started, freed from the event loop
         * (gc_source), never inside a call chain that may still use them. */
        Session *session_gc_queue;
        sd_event_source *gc_source;

        /* Runners of freed sessions that have not exited yet: reaped when they do. */
        ChildWatch *child_watches;
        unsigned n_child_watches;

        sd_event_source *recover_retry_source; /* sessions whose take-over failed: tried again */
        sd_event_source *idle_exit_source;
        uint64_t idle_exit_usec;   /* MANAGER_IDLE_EXIT_USEC, or what the environment says */
        struct BusIdleExit *idle_exit; /* idle: the name given back, queued calls being answered */
        uint64_t exec_counter;
        uint32_t uid_cursor;   /* next slot of the session uid pool to try */

        /* Sessions whose next exec waits for one of config.max_concurrent_execs slots (FIFO). */
        Session **exec_waiters;
        size_t n_exec_waiters;

        /* Sessions being started (at most config.max_concurrent_creates) and waiting to be. */
        unsigned n_creating;
        struct PendingCreate *pending_creates;

        Metrics metrics;

        bool draining;         /* SetDraining(): CreateSession refused (drain.c) */
        ManagerHooks hooks;
};

int manager_new(Manager **ret);
/* host-watch.c: loads the dify network filter and keeps its DENY maps in step with the routes. */
int manager_watch_host_routes(Manager *m);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Connects to the bus, where 'attach_bus' serves the interface (manager_dbus_attach()), recovers
 * the recorded sessions and takes the bus name last. */
int manager_startup(Manager *m, int (*attach_bus)(Manager *m));
int manager_run(Manager *m);

Session *manager_find_session(Manager *m, const char *id);
void manager_add_session(Manager *m, Session *s);
void manager_remove_session(Manager *m, Session *s);

/* Free the sessions in the GC queue (session_add_to_gc_queue()); normally from gc_source. */
void manager_gc(Manager *m);
int manager_arm_gc(Manager *m);

/* Reap 'ref', a child of ours held by its pidfd (which this takes: *ref is emptied, also on
 * failure, when the fd is closed), when it exits; it is not killed, not even when the manager goes. */
int manager_watch_child(Manager *m, PidRef *ref);

/* Global exec slots. take() returns false and queues the session when none is free. */
bool manager_take_exec_slot(Manager *m, Session *s);
void manager_release_exec_slot(Manager *m);
void manager_forget_exec_waiter(Manager *m, Session *s);

/* Start a new session as soon as one of config.max_concurrent_creates slots is free, or fail
 * it with -EUSERS after the queue timeout. */
int manager_start_session(Manager *m, Session *s, SessionDoneCallback cb, void *userdata);
void manager_create_finished(Manager *m);
/* A session that waits for a create slot stops waiting: its callback gets -EHOSTDOWN. */
void manager_cancel_pending_create(Manager *m, Session *s);
/* Session creates waiting for a slot. */
unsigned manager_count_pending_creates(Manager *m);

/* Sessions that survived a restart of the manager: found again, or cleaned up. */
int manager_recover_sessions(Manager *m);

/* Host uids (and gids, same numbers) for sessions: config.uid_base + [0, MANAGER_UID_POOL_SIZE). */
#define MANAGER_UID_POOL_SIZE 65536U
/* A pool id no live session holds. Ids go round the pool rather than being reused at once; a
 * session holds its id until its scope is gone. */
int manager_allocate_uid(Manager *m, uid_t *ret);

/* STATUS= alone: sessions, and execs and dify runs running and waiting. */
void manager_send_status(Manager *m);
/* Re-evaluate STATUS=, property changes and the idle exit timer. */
void manager_state_changed(Manager *m);

/* manager-dbus.c: serves the interface on m->bus and sets m->hooks. */
int manager_dbus_attach(Manager *m);
const sd_bus_vtable *manager_get_vtable(void);
