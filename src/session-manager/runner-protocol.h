/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Framing of the manager ⇄ runner control channel: one JSON object per SOCK_SEQPACKET message. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <json-c/json.h>

#include "bus-contract.h"
#include "runner-schema.h"

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

/* ---- the messages ----
 * Every message of the channel is declared once, in runner-protocol.c: its members, their types
 * and bounds (runner-schema.h). The manager builds its requests and parses the runner's replies
 * from these declarations; the runner parses the requests and builds its replies from the same. A
 * request is built whole or not at all (-ENOMEM), so none ever goes out with a member missing (a
 * "discard" that lost its member is not a store). */

/* The longest exec id and proxy setting an exec request may carry. */
#define RUNNER_EXEC_ID_MAX 31
#define RUNNER_ENV_VALUE_MAX 1024
/* The longest workspace path of a file request (relative, normalised by the manager). */
#define RUNNER_PATH_MAX 4096
/* The most output an exec keeps per stream. */
#define RUNNER_OUTPUT_LIMIT_MAX (64U << 20)
/* The longest timeout of an exec or archive job: ten years, far from any overflow. */
#define RUNNER_TIMEOUT_SEC_MAX (INT64_C(10) * 365 * 24 * 3600)

/* Requests that are only their op, and replies that are only "ok": true. */
typedef struct RunnerNoParameters {
        char unused;
} RunnerNoParameters;

typedef struct RunnerInitRequest {
        uint64_t uid, gid;
        uint64_t workspace_size, tmp_size;
        uint64_t cpus_percent;
        const char *preload_modules;     /* NULL: no template (SANDBOX_PRELOAD=0) */
        bool prepare;                    /* make each next exec's sandbox in advance
                                          * (runner-prepared.c): a sidecar session's, or a
                                          * pooled dify run's in the profile its run most
                                          * likely asks for: */
        bool prepare_no_processes, prepare_network;
        const char *http_proxy, *https_proxy; /* with prepare_network; NULL: none */
        uint64_t idle_backstop_sec;
} RunnerInitRequest;

typedef struct RunnerExecRequest {
        const char *exec_id;
        uint64_t timeout_ms, output_limit;
        uint64_t max_artifact_bytes, max_files, max_total_artifact_bytes;
        uint64_t memory_limit;
        const char *language;            /* NULL: python3 */
        bool no_processes, cold, stateful, network;
        bool display;                    /* a stateful cell's results as records, onto its stream */
        bool stdin;                      /* a command's stdin: the fd after the stream's */
        bool interrupt;                  /* a cell's timeout or cancel interrupts it first */
        const char *http_proxy, *https_proxy; /* only with network; NULL: none */
} RunnerExecRequest;

typedef struct RunnerCancelRequest {
        const char *exec_id;
} RunnerCancelRequest;

/* "write" (the data in the fd sent with it) and "read" (at most 'max' bytes) of a workspace path. */
typedef struct RunnerFileRequest {
        const char *path;
        uint64_t max; /* read only */
} RunnerFileRequest;

/* "archive" into, or "restore" from, the fd sent with it. */
typedef struct RunnerArchiveRequest {
        uint64_t max_bytes, timeout_sec;
} RunnerArchiveRequest;

/* The answer to init, and to ping (which is answered while a job runs, too). */
typedef struct RunnerInitReply {
        int pid;
        bool cancel; /* it can cancel an exec (runners of old versions can't) */
} RunnerInitReply;

typedef struct RunnerPingReply {
        bool initialized, busy, cancel;
} RunnerPingReply;

typedef struct RunnerArchiveReply {
        uint64_t bytes;
        int refused; /* entries a restore left out */
} RunnerArchiveReply;

/* What the exec's processes used: each figure there or not. */
typedef struct RunnerExecUsage {
        bool has_cpu, has_rss, has_written, has_processes;
        uint64_t cpu_usec, max_rss_bytes, written_bytes, processes;
} RunnerExecUsage;

/* The answer to exec; stdout, stderr and the files' bytes are in the memfd sent with it. */
typedef struct RunnerExecResult {
        int exit_code, signal;
        bool timed_out, cancelled;
        uint64_t duration_usec;
        uint64_t stdout_size, stderr_size;
        bool stdout_truncated, stderr_truncated;
        ExecFile *files;
        size_t n_files;
        uint64_t files_skipped;
        bool oom_killed, pids_limited;
        const char *exit_reason;
        const char *kernel; /* a stateful cell's: "new", "running", "ended" */
        RunnerExecUsage resources;
        ExecBlocked *blocked;
        size_t n_blocked;
} RunnerExecResult;

/* The filesystem calls of E2B's envd (runner-fs.c): "fs-stat", "fs-list" (to 'depth' levels),
 * "fs-mkdir" (with its parents), "fs-move" (to 'destination') and "fs-remove" of a workspace
 * path (relative, normalised by the manager). Answered "ok" with a RunnerFsListing in the memfd
 * sent with it (fs-remove: nothing). */
typedef struct RunnerFsRequest {
        const char *path;
        const char *destination;
        uint64_t depth;
} RunnerFsRequest;

/* The most a listing holds, and how deep it goes. */
#define RUNNER_FS_ENTRIES_MAX 3000U /* its answer stays within json_parse()'s JSON_TOKENS_MAX */
#define RUNNER_FS_DEPTH_MAX 32U

/* One entry as the runner saw it, never through a symlink. */
typedef struct RunnerFsEntry {
        const char *path;       /* relative to the workspace; "" is its root */
        const char *type;       /* "file", "dir", "symlink" or "other" */
        uint64_t size;
        uint32_t mode;          /* st_mode, with the type's bits */
        const char *owner;      /* "user" (the sandbox user), "root", or the uid in decimal */
        const char *group;
        int64_t mtime_nsec;     /* since the epoch */
        const char *target;     /* a symlink's text, as it is written; NULL for others */
} RunnerFsEntry;

typedef struct RunnerFsListing {
        RunnerFsEntry *entries;
        size_t n_entries;
        bool truncated;         /* a bound of the listing was reached: entries, time or size */
        bool existed;           /* fs-mkdir: the directory was there already */
} RunnerFsListing;

/* Any request that failed: "ok": false. */
typedef struct RunnerErrorReply {
        int error_number; /* errno, 1…4095 */
        const char *error;
} RunnerErrorReply;

extern const SchemaMessage runner_init_request, runner_exec_request, runner_cancel_request,
        runner_write_request, runner_read_request, runner_archive_request, runner_restore_request,
        runner_ping_request, runner_list_request, runner_reset_inputs_request, runner_reset_kernel_request;
extern const SchemaMessage runner_fs_stat_request, runner_fs_list_request, runner_fs_mkdir_request,
        runner_fs_move_request, runner_fs_remove_request, runner_fs_listing;
extern const SchemaMessage runner_init_reply, runner_ping_reply, runner_archive_reply, runner_exec_result,
        runner_ok_reply, runner_error_reply;

static inline void runner_exec_result_done(RunnerExecResult *p) {
        schema_done(&runner_exec_result, p);
}

/* The manager's builders (the caller owns *ret). */
int runner_request_init(const RunnerInitRequest *p, json_object **ret);
int runner_request_exec(const RunnerExecRequest *p, json_object **ret);
/* A request that is only its op: "ping", "list", "reset-inputs", "reset-kernel". */
int runner_request_plain(const SchemaMessage *m, json_object **ret);
/* "cancel" of the exec 'exec_id' (answered by that exec's own reply). */
int runner_request_cancel(const char *exec_id, json_object **ret);
int runner_request_write(const char *path, json_object **ret);
int runner_request_read(const char *path, uint64_t max, json_object **ret);
int runner_request_archive(bool restore, uint64_t max_bytes, uint64_t timeout_sec, json_object **ret);
/* One of the fs-* requests (runner_fs_*_request). */
int runner_request_fs(const SchemaMessage *op, const RunnerFsRequest *p, json_object **ret);

static inline void runner_fs_listing_done(RunnerFsListing *p) {
        schema_done(&runner_fs_listing, p);
}

/* The declaration of the request named by the message's "op"; NULL for an unknown one. */
const SchemaMessage *runner_request_lookup(json_object *msg);

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
