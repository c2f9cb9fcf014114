/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Framing of the manager ⇄ runner control channel: one JSON object per SOCK_SEQPACKET message. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <json-c/json.h>

/* The largest control message: requests and replies carry metadata only; bulk data goes in fds. */
#define RUNNER_MESSAGE_MAX (256U * 1024U)
#define RUNNER_MESSAGE_FDS_MAX 4

/* Sends 'msg' with up to RUNNER_MESSAGE_FDS_MAX fds (not closed). */
int runner_message_send(int fd, json_object *msg, const int *fds, size_t n_fds);

/* Receives one message. Returns -EAGAIN if none is queued, -ECONNRESET on EOF, -EBADMSG on a
 * truncated or malformed message, -ENOMEM when one arrived but could not be kept (it is lost, the
 * connection is fine). Received fds are O_CLOEXEC and owned by the caller; on failure none are
 * left open. */
int runner_message_recv(int fd, json_object **ret, int *ret_fds, size_t *ret_n_fds);

/* The manager's requests, one builder each: a request is built whole or not at all (-ENOMEM), so
 * none ever goes out with a member missing (a "discard" that lost its member is not a store). The
 * caller owns *ret. */
typedef struct RunnerInitRequest {
        uint64_t uid, gid;
        uint64_t workspace_size, tmp_size;
        uint64_t cpus_percent;
        const char *preload_modules;     /* NULL: no template (SANDBOX_PRELOAD=0) */
        uint64_t idle_backstop_sec;
} RunnerInitRequest;
int runner_request_init(const RunnerInitRequest *p, json_object **ret);

typedef struct RunnerExecRequest {
        const char *exec_id;
        uint64_t timeout_ms, output_limit;
        uint64_t max_artifact_bytes, max_files, max_total_artifact_bytes;
        uint64_t memory_limit;
        const char *language;            /* NULL: python3 */
        bool no_processes, cold, stateful, network;
        const char *http_proxy, *https_proxy;  /* only with network; NULL or "": none */
} RunnerExecRequest;
int runner_request_exec(const RunnerExecRequest *p, json_object **ret);

/* A request that is only its op: "ping", "list", "reset-inputs", "reset-kernel". */
int runner_request_op(const char *op, json_object **ret);
/* "cancel" of the exec 'exec_id' (answered by that exec's own reply). */
int runner_request_cancel(const char *exec_id, json_object **ret);
/* "write" (the data in the fd sent with it) and "read" (at most 'max' bytes) of a workspace path. */
int runner_request_write(const char *path, json_object **ret);
int runner_request_read(const char *path, uint64_t max, json_object **ret);
/* "archive" into, or "restore" from, the fd sent with it. */
int runner_request_archive(bool restore, uint64_t max_bytes, uint64_t timeout_sec, json_object **ret);

/* Why a restore failed, as the errno of the runner's answer. These three say that the archive
 * itself can never be restored as it is (the manager quarantines it, docs/storage.md); the runner
 * answers them only for what unpacking found. Any other failure of a restore (the helper could not
 * start, a timeout, the runner out of memory) comes with another errno, and a retry may succeed. */
#define RUNNER_RESTORE_CORRUPT   EBADMSG /* not a complete gzip'd tar: torn, corrupt, not an archive;
                                          * also the unpacking helper killed by a crash signal */
#define RUNNER_RESTORE_TOO_LARGE EFBIG   /* more bytes than the workspace holds (a decompression bomb,
                                          * a huge sparse entry) or more than ARCHIVE_ENTRIES_MAX entries */
#define RUNNER_RESTORE_HOSTILE   EPERM   /* an entry no workspace's archive holds: "..", an absolute name,
                                          * a device, an entry below a symlink (ArchiveLimits) */

static inline bool runner_restore_error_is_damage(int error) {
        error = abs(error);
        return error == RUNNER_RESTORE_CORRUPT || error == RUNNER_RESTORE_TOO_LARGE ||
               error == RUNNER_RESTORE_HOSTILE;
}

/* Path of a session's runner control socket and private mount point under the runtime dir. */
#define SCOPEBOX_RUNTIME_DIR "/run/scopebox"
#define SCOPEBOX_SESSIONS_RUNTIME_DIR SCOPEBOX_RUNTIME_DIR "/sessions"
