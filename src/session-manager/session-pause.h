/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's pause (PauseSession, ResumeSession): its sandboxes frozen in a cgroup below its scope. */
#pragma once

#include <stdbool.h>

#include <json-c/json.h>
#include <systemd/sd-event.h>

typedef struct Session Session;

/* The cgroup below a session's scope, in the unified hierarchy, in which its runner starts every
 * sandbox (RUNNER_PAYLOAD_CGROUP, runner.h). The runner stays in the scope itself. */
#define SESSION_PAUSE_CGROUP "payload"

/* What a session keeps of its pause. 'paused' is a fact of a RUNNING session, not a stage: it
 * takes no client calls while it is set (BUS_ERROR_PAUSED) and ends with the session. */
typedef struct SessionPause {
        bool paused;
        int scope_fd;                 /* the scope's directory in the unified hierarchy, or -EBADF */
        int payload_fd;               /* its SESSION_PAUSE_CGROUP directory, or -EBADF */
} SessionPause;

#define SESSION_PAUSE_NULL { .scope_fd = -EBADF, .payload_fd = -EBADF }

/* A new fd of the session's scope directory in the hierarchy that has 'controller' (NULL: the
 * unified one), walked from the hierarchy's root by names only, O_NOFOLLOW, each level a root-owned
 * directory of a cgroup file system. -EOPNOTSUPP when there is no such hierarchy. */
int session_scope_cgroup_open(Session *s, const char *controller);

/* Freezes every sandbox of the session (not its runner): -EALREADY when it is paused already,
 * -EOPNOTSUPP for a session whose runner made no sandboxes' cgroup (no unified hierarchy). Queued
 * client calls hear BUS_ERROR_PAUSED. */
int session_pause(Session *s);
/* Thaws it: 1 when it was paused, 0 when it was not. */
int session_resume(Session *s);
/* The session ends: what is frozen is killed where it is (never thawed first). */
void session_pause_end(Session *s);
void session_pause_done(SessionPause *p);
/* From a session's record: "paused" (the cgroup stayed frozen across the restart). */
void session_pause_load(Session *s, json_object *o);
