/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Framing of the manager ⇄ runner control channel: one JSON object per SOCK_SEQPACKET message. */
#pragma once

#include <stddef.h>

#include <json-c/json.h>

/* The largest control message: requests and replies carry metadata only; bulk data goes in fds. */
#define RUNNER_MESSAGE_MAX (256U * 1024U)
#define RUNNER_MESSAGE_FDS_MAX 4

/* Sends 'msg' with up to RUNNER_MESSAGE_FDS_MAX fds (not closed). */
int runner_message_send(int fd, json_object *msg, const int *fds, size_t n_fds);

/* Receives one message. Returns -EAGAIN if none is queued, -ECONNRESET on EOF, -EBADMSG on a
 * truncated or malformed message. Received fds are O_CLOEXEC and owned by the caller; on failure
 * none are left open. */
int runner_message_recv(int fd, json_object **ret, int *ret_fds, size_t *ret_n_fds);

/* Path of a session's runner control socket and private mount point under the runtime dir. */
#define SCOPEBOX_RUNTIME_DIR "/run/scopebox"
#define SCOPEBOX_SESSIONS_RUNTIME_DIR SCOPEBOX_RUNTIME_DIR "/sessions"
