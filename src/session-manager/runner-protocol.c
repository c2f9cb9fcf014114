/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Framing of the manager ⇄ runner control channel: one JSON object per SOCK_SEQPACKET message. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "io-util.h"
#include "json-util.h"
#include "macro.h"
#include "runner-protocol.h"
#include "string-util.h"

int runner_message_send(int fd, json_object *msg, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * RUNNER_MESSAGE_FDS_MAX)];
        } control = {};
        struct msghdr mh = {};
        struct iovec iov;
        const char *text;
        size_t len;

        if (n_fds > RUNNER_MESSAGE_FDS_MAX)
                return -E2BIG;

        text = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
        if (!text)
                return -ENOMEM;
        len = strlen(text);
        if (len > RUNNER_MESSAGE_MAX)
                return -EMSGSIZE;

        iov = (struct iovec) { .iov_base = (char *) text, .iov_len = len };
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        if (n_fds > 0) {
                struct cmsghdr *c;

                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }

        for (;;) {
                ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (k >= 0)
                        return (size_t) k == len ? 0 : -EIO;
                if (errno != EINTR)
                        return -errno;
        }
}

int runner_message_recv(int fd, json_object **ret, int *ret_fds, size_t *ret_n_fds) {
        _cleanup_free_ char *buf = NULL;
        int fds[RUNNER_MESSAGE_FDS_MAX + 1]; /* one more than allowed: a message with it is refused */
        size_t n_fds = 0;
        ssize_t k;
        int r;

        buf = malloc(RUNNER_MESSAGE_MAX + 1);
        if (!buf) {
                /* Taken off the socket all the same (and its fds closed): the caller learns that
                 * this message is lost, never that the connection is, and reads the next in turn. */
                char byte;

                k = fds_receive(fd, &byte, sizeof(byte), fds, ELEMENTSOF(fds), &n_fds);
                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                return k == -EAGAIN ? -EAGAIN : k == 0 ? -ECONNRESET : -ENOMEM;
        }

        k = fds_receive(fd, buf, RUNNER_MESSAGE_MAX + 1, fds, ELEMENTSOF(fds), &n_fds);
        if (k == -EMSGSIZE)
                return -EBADMSG;
        if (k < 0)
                return (int) k;

        if (k == 0) {
                r = -ECONNRESET;
                goto fail;
        }
        if ((size_t) k > RUNNER_MESSAGE_MAX || n_fds > (ret_fds ? RUNNER_MESSAGE_FDS_MAX : 0)) {
                r = -EBADMSG;
                goto fail;
        }

        json_object *o = NULL;
        r = json_parse(buf, (size_t) k, JSON_DEPTH_MAX, &o);
        if (r < 0 || !json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                r = r == -ENOMEM ? -ENOMEM : -EBADMSG;
                goto fail;
        }

        *ret = o;
        if (ret_fds) {
                memcpy(ret_fds, fds, sizeof(int) * n_fds);
                *ret_n_fds = n_fds;
        }
        return 0;

fail:
        for (size_t i = 0; i < n_fds; i++)
                safe_close(fds[i]);
        return r;
}

/* ---- the messages, declared once ---- */

/* clang-format off: one member a line, as a table. */

#define U64(name, type, member, flags, lo, hi) \
        { name, SCHEMA_U64, flags, offsetof(type, member), 0, lo, hi, NULL }
#define INT(name, type, member, flags, lo, hi) \
        { name, SCHEMA_INT, flags, offsetof(type, member), 0, lo, hi, NULL }
#define BOOL(name, type, member, flags) { name, SCHEMA_BOOL, flags, offsetof(type, member), 0, 0, 0, NULL }
#define STR(name, type, member, flags, max) \
        { name, SCHEMA_STRING, flags, offsetof(type, member), 0, 0, max, NULL }
#define OPTIONAL_U64(name, type, member, present) \
        { name, SCHEMA_U64, SCHEMA_PRESENCE, offsetof(type, member), offsetof(type, present), 0, 0, NULL }
#define ARRAY(name, type, member, count, flags, sub) \
        { name, SCHEMA_ARRAY, flags, offsetof(type, member), offsetof(type, count), 0, 0, &(sub) }
#define MESSAGE(var, op, k, type, ...) \
        const SchemaMessage var = { op, k, sizeof(type), (const SchemaField[]) { __VA_ARGS__, {} } }
#define M SCHEMA_MANDATORY

MESSAGE(runner_init_request, "init", SCHEMA_REQUEST, RunnerInitRequest,
        U64("uid", RunnerInitRequest, uid, M, 1, 0xfffffffe),
        U64("gid", RunnerInitRequest, gid, M, 1, 0xfffffffe),
        U64("workspace_size", RunnerInitRequest, workspace_size, M, 1, INT64_MAX),
        U64("tmp_size", RunnerInitRequest, tmp_size, M, 1, INT64_MAX),
        U64("cpus_percent", RunnerInitRequest, cpus_percent, M, 1, INT64_MAX),
        STR("preload_modules", RunnerInitRequest, preload_modules, 0, 4096),
        BOOL("prepare", RunnerInitRequest, prepare, 0),
        BOOL("prepare_no_processes", RunnerInitRequest, prepare_no_processes, 0),
        BOOL("prepare_network", RunnerInitRequest, prepare_network, 0),
        STR("http_proxy", RunnerInitRequest, http_proxy, SCHEMA_PRINTABLE, RUNNER_ENV_VALUE_MAX),
        STR("https_proxy", RunnerInitRequest, https_proxy, SCHEMA_PRINTABLE, RUNNER_ENV_VALUE_MAX),
        U64("idle_backstop_sec", RunnerInitRequest, idle_backstop_sec, SCHEMA_ALWAYS, 0, 0));

MESSAGE(runner_exec_request, "exec", SCHEMA_REQUEST, RunnerExecRequest,
        STR("exec_id", RunnerExecRequest, exec_id, M | SCHEMA_PRINTABLE, RUNNER_EXEC_ID_MAX),
        U64("timeout_ms", RunnerExecRequest, timeout_ms, M, 1, RUNNER_TIMEOUT_SEC_MAX * 1000),
        U64("output_limit", RunnerExecRequest, output_limit, M, 1, RUNNER_OUTPUT_LIMIT_MAX),
        U64("max_artifact_bytes", RunnerExecRequest, max_artifact_bytes, M, 0, 0),
        U64("max_files", RunnerExecRequest, max_files, M, 0, 0),
        U64("max_total_artifact_bytes", RunnerExecRequest, max_total_artifact_bytes, M, 0, 0),
        U64("memory_limit", RunnerExecRequest, memory_limit, SCHEMA_ALWAYS, 0, 0),
        STR("language", RunnerExecRequest, language, SCHEMA_PRINTABLE, 16),
        BOOL("no_processes", RunnerExecRequest, no_processes, 0),
        BOOL("cold", RunnerExecRequest, cold, 0),
        BOOL("stateful", RunnerExecRequest, stateful, 0),
        BOOL("network", RunnerExecRequest, network, 0),
        BOOL("display", RunnerExecRequest, display, 0),
        BOOL("stdin", RunnerExecRequest, stdin, 0),
        BOOL("interrupt", RunnerExecRequest, interrupt, 0),
        STR("http_proxy", RunnerExecRequest, http_proxy, SCHEMA_PRINTABLE, RUNNER_ENV_VALUE_MAX),
        STR("https_proxy", RunnerExecRequest, https_proxy, SCHEMA_PRINTABLE, RUNNER_ENV_VALUE_MAX));

MESSAGE(runner_cancel_request, "cancel", SCHEMA_REQUEST, RunnerCancelRequest,
        STR("exec_id", RunnerCancelRequest, exec_id, M | SCHEMA_PRINTABLE, RUNNER_EXEC_ID_MAX));

MESSAGE(runner_write_request, "write", SCHEMA_REQUEST, RunnerFileRequest,
        STR("path", RunnerFileRequest, path, M, RUNNER_PATH_MAX));
MESSAGE(runner_read_request, "read", SCHEMA_REQUEST, RunnerFileRequest,
        STR("path", RunnerFileRequest, path, M, RUNNER_PATH_MAX),
        U64("max", RunnerFileRequest, max, M, 1, INT64_MAX));

#define ARCHIVE_FIELDS \
        U64("max_bytes", RunnerArchiveRequest, max_bytes, M, 1, INT64_MAX), \
        U64("timeout_sec", RunnerArchiveRequest, timeout_sec, M, 1, RUNNER_TIMEOUT_SEC_MAX)
MESSAGE(runner_archive_request, "archive", SCHEMA_REQUEST, RunnerArchiveRequest, ARCHIVE_FIELDS);
MESSAGE(runner_restore_request, "restore", SCHEMA_REQUEST, RunnerArchiveRequest, ARCHIVE_FIELDS);

/* Requests that are only their op. */
#define EMPTY_MESSAGE(var, op, k) \
        const SchemaMessage var = { op, k, sizeof(RunnerNoParameters), (const SchemaField[]) { {} } }
EMPTY_MESSAGE(runner_ping_request, "ping", SCHEMA_REQUEST);
EMPTY_MESSAGE(runner_list_request, "list", SCHEMA_REQUEST);
EMPTY_MESSAGE(runner_reset_inputs_request, "reset-inputs", SCHEMA_REQUEST);
EMPTY_MESSAGE(runner_reset_kernel_request, "reset-kernel", SCHEMA_REQUEST);

MESSAGE(runner_init_reply, NULL, SCHEMA_REPLY, RunnerInitReply,
        INT("pid", RunnerInitReply, pid, 0, 1, INT32_MAX),
        BOOL("cancel", RunnerInitReply, cancel, 0));

MESSAGE(runner_ping_reply, NULL, SCHEMA_REPLY, RunnerPingReply,
        BOOL("initialized", RunnerPingReply, initialized, SCHEMA_ALWAYS),
        BOOL("busy", RunnerPingReply, busy, SCHEMA_ALWAYS),
        BOOL("cancel", RunnerPingReply, cancel, 0));

MESSAGE(runner_archive_reply, NULL, SCHEMA_REPLY, RunnerArchiveReply,
        U64("bytes", RunnerArchiveReply, bytes, M, 0, 0),
        INT("refused", RunnerArchiveReply, refused, SCHEMA_ALWAYS, 0, INT32_MAX));

/* A reply that is only "ok": true (write, read, list, reset-*: their data, if any, in the fd). */
EMPTY_MESSAGE(runner_ok_reply, NULL, SCHEMA_REPLY);

MESSAGE(runner_error_reply, NULL, SCHEMA_ERROR, RunnerErrorReply,
        INT("errno", RunnerErrorReply, error_number, M, 1, 4095),
        STR("error", RunnerErrorReply, error, 0, 0));

static MESSAGE(exec_file, NULL, SCHEMA_NESTED, ExecFile,
        STR("path", ExecFile, path, M, RUNNER_PATH_MAX),
        U64("offset", ExecFile, offset, M, 0, 0),
        U64("size", ExecFile, size, M, 0, 0));

static MESSAGE(exec_blocked, NULL, SCHEMA_NESTED, ExecBlocked,
        STR("name", ExecBlocked, name, M | SCHEMA_PRINTABLE, 64),
        STR("verdict", ExecBlocked, verdict, M | SCHEMA_PRINTABLE, 64),
        { "count", SCHEMA_U32, M, offsetof(ExecBlocked, count), 0, 0, 0, NULL });

static MESSAGE(exec_usage, NULL, SCHEMA_NESTED, RunnerExecUsage,
        OPTIONAL_U64("cpu_usec", RunnerExecUsage, cpu_usec, has_cpu),
        OPTIONAL_U64("max_rss_bytes", RunnerExecUsage, max_rss_bytes, has_rss),
        OPTIONAL_U64("written_bytes", RunnerExecUsage, written_bytes, has_written),
        OPTIONAL_U64("processes", RunnerExecUsage, processes, has_processes));

MESSAGE(runner_exec_result, NULL, SCHEMA_REPLY, RunnerExecResult,
        INT("exit_code", RunnerExecResult, exit_code, M, 0, 255),
        INT("signal", RunnerExecResult, signal, SCHEMA_ALWAYS, 0, 64),
        BOOL("timed_out", RunnerExecResult, timed_out, SCHEMA_ALWAYS),
        BOOL("cancelled", RunnerExecResult, cancelled, 0),
        U64("duration_usec", RunnerExecResult, duration_usec, SCHEMA_ALWAYS, 0, 0),
        U64("stdout_size", RunnerExecResult, stdout_size, M, 0, 0),
        U64("stderr_size", RunnerExecResult, stderr_size, M, 0, 0),
        BOOL("stdout_truncated", RunnerExecResult, stdout_truncated, SCHEMA_ALWAYS),
        BOOL("stderr_truncated", RunnerExecResult, stderr_truncated, SCHEMA_ALWAYS),
        ARRAY("files", RunnerExecResult, files, n_files, M, exec_file),
        U64("files_skipped", RunnerExecResult, files_skipped, SCHEMA_ALWAYS, 0, 0),
        BOOL("oom_killed", RunnerExecResult, oom_killed, SCHEMA_ALWAYS),
        BOOL("pids_limited", RunnerExecResult, pids_limited, SCHEMA_ALWAYS),
        STR("exit_reason", RunnerExecResult, exit_reason, SCHEMA_PRINTABLE, 32),
        STR("kernel", RunnerExecResult, kernel, SCHEMA_PRINTABLE, 16),
        { "resources", SCHEMA_OBJECT, SCHEMA_ALWAYS, offsetof(RunnerExecResult, resources), 0, 0, 0,
          &exec_usage },
        ARRAY("blocked_syscalls", RunnerExecResult, blocked, n_blocked, 0, exec_blocked));

#define FS_PATH(flags) STR("path", RunnerFsRequest, path, flags, RUNNER_PATH_MAX)
MESSAGE(runner_fs_stat_request, "fs-stat", SCHEMA_REQUEST, RunnerFsRequest, FS_PATH(SCHEMA_ALWAYS | M));
MESSAGE(runner_fs_list_request, "fs-list", SCHEMA_REQUEST, RunnerFsRequest, FS_PATH(SCHEMA_ALWAYS | M),
        U64("depth", RunnerFsRequest, depth, M, 1, RUNNER_FS_DEPTH_MAX));
MESSAGE(runner_fs_mkdir_request, "fs-mkdir", SCHEMA_REQUEST, RunnerFsRequest, FS_PATH(M));
MESSAGE(runner_fs_move_request, "fs-move", SCHEMA_REQUEST, RunnerFsRequest, FS_PATH(M),
        STR("destination", RunnerFsRequest, destination, M, RUNNER_PATH_MAX));
MESSAGE(runner_fs_remove_request, "fs-remove", SCHEMA_REQUEST, RunnerFsRequest, FS_PATH(M));

static MESSAGE(runner_fs_entry, NULL, SCHEMA_NESTED, RunnerFsEntry,
        STR("path", RunnerFsEntry, path, SCHEMA_ALWAYS | M, RUNNER_PATH_MAX),
        STR("type", RunnerFsEntry, type, M | SCHEMA_PRINTABLE, 16),
        U64("size", RunnerFsEntry, size, M, 0, 0),
        { "mode", SCHEMA_U32, M, offsetof(RunnerFsEntry, mode), 0, 0, 0, NULL },
        STR("owner", RunnerFsEntry, owner, M | SCHEMA_PRINTABLE, 32),
        STR("group", RunnerFsEntry, group, M | SCHEMA_PRINTABLE, 32),
        { "mtime_nsec", SCHEMA_I64, M, offsetof(RunnerFsEntry, mtime_nsec), 0, 0, 0, NULL },
        STR("target", RunnerFsEntry, target, 0, RUNNER_PATH_MAX));

MESSAGE(runner_fs_listing, NULL, SCHEMA_NESTED, RunnerFsListing,
        ARRAY("entries", RunnerFsListing, entries, n_entries, SCHEMA_ALWAYS, runner_fs_entry),
        BOOL("truncated", RunnerFsListing, truncated, 0),
        BOOL("existed", RunnerFsListing, existed, 0));

/* clang-format on */

static const SchemaMessage *const runner_requests[] = {
        &runner_init_request,   &runner_exec_request,         &runner_cancel_request,
        &runner_write_request,  &runner_read_request,         &runner_archive_request,
        &runner_restore_request, &runner_ping_request,        &runner_list_request,
        &runner_reset_inputs_request, &runner_reset_kernel_request,
        &runner_fs_stat_request, &runner_fs_list_request, &runner_fs_mkdir_request,
        &runner_fs_move_request, &runner_fs_remove_request,
};

const SchemaMessage *runner_request_lookup(json_object *msg) {
        json_object *op;

        if (!json_object_object_get_ex(msg, "op", &op) || !json_object_is_type(op, json_type_string))
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(runner_requests); i++)
                if (streq(json_object_get_string(op), runner_requests[i]->name))
                        return runner_requests[i];
        return NULL;
}

/* ---- the manager's requests ---- */

int runner_request_init(const RunnerInitRequest *p, json_object **ret) {
        return schema_build(&runner_init_request, p, ret);
}

int runner_request_exec(const RunnerExecRequest *p, json_object **ret) {
        RunnerExecRequest q = *p;

        /* Proxies only with a network; an empty one is none. */
        if (!q.network || isempty(q.http_proxy))
                q.http_proxy = NULL;
        if (!q.network || isempty(q.https_proxy))
                q.https_proxy = NULL;
        return schema_build(&runner_exec_request, &q, ret);
}

int runner_request_plain(const SchemaMessage *m, json_object **ret) {
        /* Only a request that is its "op" alone: anything else has its own builder. */
        if (m->kind != SCHEMA_REQUEST || (m->fields && m->fields[0].name))
                return -EINVAL;
        return schema_build(m, &(RunnerNoParameters) {}, ret);
}

int runner_request_cancel(const char *exec_id, json_object **ret) {
        return schema_build(&runner_cancel_request, &(RunnerCancelRequest) { .exec_id = exec_id }, ret);
}

int runner_request_write(const char *path, json_object **ret) {
        return schema_build(&runner_write_request, &(RunnerFileRequest) { .path = path }, ret);
}

int runner_request_read(const char *path, uint64_t max, json_object **ret) {
        return schema_build(&runner_read_request, &(RunnerFileRequest) { .path = path, .max = max }, ret);
}

int runner_request_archive(bool restore, uint64_t max_bytes, uint64_t timeout_sec, json_object **ret) {
        return schema_build(restore ? &runner_restore_request : &runner_archive_request,
                            &(RunnerArchiveRequest) { .max_bytes = max_bytes, .timeout_sec = timeout_sec },
                            ret);
}

int runner_request_fs(const SchemaMessage *op, const RunnerFsRequest *p, json_object **ret) {
        static const SchemaMessage *const fs_requests[] = {
                &runner_fs_stat_request, &runner_fs_list_request,   &runner_fs_mkdir_request,
                &runner_fs_move_request, &runner_fs_remove_request,
        };

        /* Only these: the others have their own builders. */
        for (size_t i = 0; i < ELEMENTSOF(fs_requests); i++)
                if (op == fs_requests[i])
                        return schema_build(op, p, ret);
        return -EINVAL;
}
