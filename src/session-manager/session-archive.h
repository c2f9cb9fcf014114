/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The archive half of a session (session-archive.c): the attempts to store its workspace at its
 * release, their retries, a discard, and what became of it. It tells the session one thing when it
 * is done: session_stop_scope() (stored, skipped, abandoned or discarded). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "macro.h"

/* What became of a released session's workspace (ReleaseSession's answer, docs/dbus-api.md). */
typedef enum ArchiveOutcome {
        ARCHIVE_OUTCOME_NONE,       /* no effective storage: nothing to archive */
        ARCHIVE_OUTCOME_STORED,     /* stored and verified */
        ARCHIVE_OUTCOME_PENDING,    /* not stored yet: the workspace is kept, archiving is retried */
        /* can never be stored (too large, storage block refused): the stored one stays */
        ARCHIVE_OUTCOME_SKIPPED,
        ARCHIVE_OUTCOME_KEPT,       /* not archived on purpose: its restore failed, the stored one stays */
        ARCHIVE_OUTCOME_ABANDONED,  /* given up (deadline passed, runner gone, superseded) */
        ARCHIVE_OUTCOME_DISCARDED,  /* the client said discard */
        _ARCHIVE_OUTCOME_MAX,
        _ARCHIVE_OUTCOME_INVALID = -EINVAL,
} ArchiveOutcome;

const char *archive_outcome_to_string(ArchiveOutcome o);

/* Backoff of archive retries: doubling from the first, up to the last. */
#define SESSION_ARCHIVE_RETRY_FIRST_USEC (1 * USEC_PER_SEC)
#define SESSION_ARCHIVE_RETRY_MAX_USEC (60 * USEC_PER_SEC)

typedef struct SessionArchive {
        ArchiveOutcome outcome;
        unsigned attempts;
        uint64_t release_realtime_usec;
        uint64_t first_failure_realtime_usec;
        char *error;                /* why the last attempt failed */
        char *token;                /* the storage agent's staging of our archive, while it runs */
        sd_bus_slot *slot;          /* BeginArchive, CommitArchive, AbortArchive, DeleteArchive */
        sd_event_source *retry_timer;
        sd_event_source *answer_timer; /* the release is answered "pending" by then at the latest */
        char *discard_stem;         /* discarded while an attempt was in flight: done after it */
        bool superseded;            /* a newer release of the same archive: no retry after this attempt */
        bool answered;              /* the release's waiters heard the outcome already */
        /* A create took the session over while an attempt of its release was under way: that
         * attempt goes on to its end (an upload) or is aborted (staging), and the next one waits
         * for it. */
        bool orphaned;
} SessionArchive;

/* Its bus call cancelled (the reply never comes), its timers off, its strings freed. */
void session_archive_clear(SessionArchive *a);
