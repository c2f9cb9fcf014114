/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl exec: run a file's code in a session through the manager's Exec, like POST /exec. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "exec-reply.h"
#include "io-util.h"
#include "json-util.h"
#include "stream-frame.h"
#include "string-util.h"
#include "time-util.h"

/* The manager's default when no timeout is given (docs/dbus-api.md). */
#define EXEC_DEFAULT_TIMEOUT_MS 120000ULL
#define EXEC_MIN_TIMEOUT_MS 1000ULL

static int read_code(const char *path, size_t max, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -EBADF;
        int r;

        if (streq(path, "-"))
                r = read_full_fd(STDIN_FILENO, max, ret, ret_size);
        else {
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (fd < 0)
                        return ctl_error(errno, "Failed to open '%s': %m", path);
                r = read_full_fd(fd, max, ret, ret_size);
        }
        if (r == -EFBIG)
                return ctl_error(r, "'%s' is larger than SANDBOX_MAX_CODE_BYTES (%zu bytes).", path, max);
        if (r < 0)
                return ctl_error(r, "Failed to read '%s': %m", path);
        return 0;
}

/* --stream: the runner's frames (stream-frame.h), each written to our stdout or stderr as it comes. */
typedef struct CtlStream {
        int fd;
        StreamFrameReader reader;
} CtlStream;

static int ctl_stream_write(unsigned stream, const uint8_t *data, size_t size, void *userdata) {
        (void) write_all(stream == STREAM_FRAME_STDOUT ? STDOUT_FILENO : STDERR_FILENO, data, size);
        return 0;
}

/* Copies what the pipe has; 1 at its end, or at a frame that makes no sense. */
static int ctl_stream_pump(CtlStream *s) {
        int r = stream_frame_read(&s->reader, s->fd, SIZE_MAX, ctl_stream_write, NULL);

        return r == -EBADMSG || r == -EPIPE ? 1 : r;
}

static int on_stream_exec_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        sd_bus_message **reply = userdata;

        *reply = sd_bus_message_ref(m);
        return 0;
}

/* sd_bus_call(), copying the output stream meanwhile; once the answer is there, the rest of the
 * pipe (the runner wrote every frame before it answered). */
static int ctl_exec_call_streamed(sd_bus *bus, sd_bus_message *m, uint64_t timeout_usec, int stream_fd,
                                  sd_bus_error *e, sd_bus_message **ret) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_free_ CtlStream *s = NULL;
        int r;

        s = calloc(1, sizeof(CtlStream));
        if (!s)
                return -ENOMEM;
        s->fd = stream_fd;
        r = fd_nonblock(stream_fd, true);
        if (r < 0)
                return r;
        r = sd_bus_call_async(bus, &slot, m, on_stream_exec_reply, &reply, timeout_usec);
        if (r < 0)
                return r;
        while (!reply) {
                struct pollfd p[2] = {
                        { .fd = sd_bus_get_fd(bus), .events = (short) sd_bus_get_events(bus) },
                        { .fd = s->fd, .events = POLLIN },
                };
                uint64_t until;
                int wait_ms = -1;

                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        return r;
                if (r > 0 || reply)
                        continue;
                if (sd_bus_get_timeout(bus, &until) >= 0 && until != UINT64_MAX) {
                        uint64_t now = now_usec(CLOCK_MONOTONIC);

                        wait_ms = until <= now ? 0
                                               : (int) MIN((until - now + 999) / 1000, (uint64_t) INT32_MAX);
                }
                if (poll(p, s->fd >= 0 ? 2 : 1, wait_ms) < 0 && errno != EINTR)
                        return -errno;
                if (s->fd >= 0 && p[1].revents) {
                        r = ctl_stream_pump(s);
                        if (r != 0)
                                s->fd = -EBADF; /* still the caller's to close */
                }
        }
        if (s->fd >= 0)
                (void) ctl_stream_pump(s);
        if (sd_bus_message_is_method_error(reply, NULL)) {
                r = sd_bus_error_copy(e, sd_bus_message_get_error(reply));
                return r < 0 ? r : -EIO;
        }
        *ret = TAKE_PTR(reply);
        return 0;
}

/* What the exec used, where the manager measured it (docs/dbus-api.md, Exec's info). */
static void ctl_exec_add_usage(json_object *o, const char *name, uint64_t v) {
        if (v != EXEC_USAGE_UNKNOWN)
                json_object_object_add(o, name, json_object_new_uint64(v));
}

/* What Exec answered (docs/dbus-api.md), its bytes loaded from the memfd. */
typedef struct CtlExecResult {
        int32_t exit_code;
        uint64_t stdout_size, stderr_size;
        ExecFile *files;
        size_t n_files;
        ExecInfo info;
        BusData data;
} CtlExecResult;

static void ctl_exec_result_done(CtlExecResult *r) {
        r->files = mfree(r->files);
        exec_info_done(&r->info);
        bus_data_done(&r->data);
}

static int ctl_exec_result_read(sd_bus_message *reply, const Config *cfg, CtlExecResult *ret) {
        int data_fd, r;

        r = sd_bus_message_read(reply, "itt", &ret->exit_code, &ret->stdout_size, &ret->stderr_size);
        if (r >= 0)
                r = exec_reply_read_files(reply, &ret->files, &ret->n_files);
        if (r >= 0)
                r = exec_reply_read_info(reply, &ret->info, &data_fd);
        if (r >= 0)
                r = bus_data_load(data_fd, exec_reply_data_max(cfg), &ret->data);
        if (r < 0)
                return ctl_error(r, "Failed to read the exec's result: %m");
        if (ret->stdout_size > ret->data.size || ret->stderr_size > ret->data.size - ret->stdout_size)
                return ctl_error(EBADMSG, "The exec's result is malformed.");
        return 0;
}

static void ctl_exec_print_json(const CtlExecResult *res) {
        _cleanup_json_ json_object *o = json_object_new_object();
        const ExecInfo *info = &res->info;
        const char *data = (const char *) res->data.data;
        json_object *list = json_object_new_array();

        json_object_object_add(o, "exit_code", json_object_new_int(res->exit_code));
        json_object_object_add(o, "stdout", json_object_new_string_len_safe(data, res->stdout_size));
        json_object_object_add(o, "stderr",
                               json_object_new_string_len_safe(data + res->stdout_size, res->stderr_size));
        json_object_object_add(o, "timed_out", json_object_new_boolean(info->timed_out));
        json_object_object_add(o, "signal", json_object_new_int(info->signal));
        json_object_object_add(o, "oom_killed", json_object_new_boolean(info->oom_killed));
        json_object_object_add(o, "pids_limited", json_object_new_boolean(info->pids_limited));
        json_object_object_add(o, "duration_usec", json_object_new_uint64(info->duration_usec));
        json_object_object_add(o, "stdout_truncated", json_object_new_boolean(info->stdout_truncated));
        json_object_object_add(o, "stderr_truncated", json_object_new_boolean(info->stderr_truncated));
        for (size_t i = 0; i < res->n_files; i++) {
                json_object *f = json_object_new_object();
                json_object_object_add(f, "path", json_object_new_string(res->files[i].path));
                json_object_object_add(f, "size", json_object_new_uint64(res->files[i].size));
                json_object_array_add(list, f);
        }
        json_object_object_add(o, "files", list);
        json_object_object_add(o, "files_skipped", json_object_new_uint64(info->files_skipped));
        list = json_object_new_array();
        for (size_t i = 0; i < info->blocked.n; i++) {
                json_object *b = json_object_new_object();
                json_object_object_add(b, "name", json_object_new_string(info->blocked.items[i].name));
                json_object_object_add(b, "verdict", json_object_new_string(info->blocked.items[i].verdict));
                json_object_object_add(b, "count", json_object_new_uint64(info->blocked.items[i].count));
                json_object_array_add(list, b);
        }
        json_object_object_add(o, "blocked_syscalls", list);
        if (info->exit_reason)
                json_object_object_add(o, "exit_reason", json_object_new_string(info->exit_reason));
        ctl_exec_add_usage(o, "cpu_usec", info->cpu_usec);
        ctl_exec_add_usage(o, "max_rss_bytes", info->max_rss_bytes);
        ctl_exec_add_usage(o, "written_bytes", info->written_bytes);
        ctl_exec_add_usage(o, "processes", info->processes);
        json_print(o);
}

/* The output (unless it was streamed), then what happened to the exec, on stderr. */
static void ctl_exec_print_text(const CtlExecResult *res, bool streamed, uint64_t timeout_ms) {
        const ExecInfo *info = &res->info;

        if (!streamed) {
                (void) write_all(STDOUT_FILENO, res->data.data, res->stdout_size);
                (void) write_all(STDERR_FILENO, res->data.data + res->stdout_size, res->stderr_size);
        }
        for (size_t i = 0; i < res->n_files; i++)
                fprintf(stderr, "scopeboxctl: artifact /workspace/outputs/%s (%" PRIu64 " bytes)\n",
                        string_is_printable_line(res->files[i].path, PATH_MAX) ? res->files[i].path
                                                                               : "(name not printable)",
                        res->files[i].size);
        if (info->files_skipped > 0)
                fprintf(stderr, "scopeboxctl: %" PRIu32 " artifacts left out by the limits\n",
                        info->files_skipped);
        if (info->stdout_truncated || info->stderr_truncated)
                fprintf(stderr, "scopeboxctl: output truncated at SANDBOX_MAX_OUTPUT_BYTES\n");
        if (info->timed_out)
                fprintf(stderr, "scopeboxctl: timed out after %" PRIu64 " ms\n", timeout_ms);
        else if (info->signal > 0)
                fprintf(stderr, "scopeboxctl: killed by signal %s\n", strsignal(info->signal));
        if (info->oom_killed)
                fprintf(stderr, "scopeboxctl: the session's memory limit was reached (OOM kill)\n");
        if (info->pids_limited)
                fprintf(stderr, "scopeboxctl: the session's tasks limit refused a process or thread\n");
        for (size_t i = 0; i < info->blocked.n; i++)
                fprintf(stderr, "scopeboxctl: the sandbox refused %s (%s) %" PRIu32 "x\n",
                        info->blocked.items[i].name, info->blocked.items[i].verdict,
                        info->blocked.items[i].count);
}

/* Exec(id, code, {timeout_ms, language, stream?}). */
static int ctl_exec_build_call(sd_bus *bus, const char *id, int code_fd, uint64_t timeout_ms, int stream_fd,
                               sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(bus, "Exec", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sh", id, code_fd);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}", "timeout_ms", "t", timeout_ms, "language", "s",
                                          "python3");
        if (r >= 0 && stream_fd >= 0)
                r = sd_bus_message_append(m, "{sv}", "stream", "h", stream_fd);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        *ret = TAKE_PTR(m);
        return 0;
}

int verb_exec(Ctl *c) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *config_error = NULL, *code = NULL;
        _cleanup_(config_done) Config cfg = {};
        _cleanup_(ctl_exec_result_done) CtlExecResult res = {};
        _cleanup_close_ int code_fd = -EBADF, stream_read = -EBADF, stream_write = -EBADF;
        const char *id = c->args[0], *path = c->args[1];
        uint64_t timeout_ms;
        size_t code_size;
        sd_bus *bus;
        int r;

        r = ctl_check_session_id(id);
        if (r < 0)
                return r;
        if (c->stream && c->json)
                return ctl_error(EINVAL, "--stream and --json cannot be combined.");
        r = ctl_load_config(&cfg, &config_error);
        if (r < 0)
                return ctl_error(r, "Invalid configuration: %s", strempty(config_error));
        r = read_code(path, cfg.max_code_bytes, &code, &code_size);
        if (r < 0)
                return r;
        /* What the manager does with it: at least a second, at most the cap. */
        timeout_ms = CLAMP(c->timeout_ms ?: EXEC_DEFAULT_TIMEOUT_MS, EXEC_MIN_TIMEOUT_MS,
                           MAX(cfg.exec_timeout_cap_ms, EXEC_MIN_TIMEOUT_MS));

        code_fd = memfd_new_data("scopeboxctl-exec-code", code, code_size);
        if (code_fd < 0)
                return ctl_error(code_fd, "Failed to create the code's memfd: %m");

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        if (c->stream) {
                int fds[2];

                if (pipe2(fds, O_CLOEXEC) < 0)
                        return ctl_error(errno, "Failed to create a pipe: %m");
                stream_read = fds[0];
                stream_write = fds[1];
        }
        r = ctl_exec_build_call(bus, id, code_fd, timeout_ms, stream_write, &m);
        if (r < 0)
                return r;
        /* The message has its own copy: ours must go, or the pipe never ends. */
        stream_write = safe_close(stream_write);
        if (c->stream)
                r = ctl_exec_call_streamed(bus, m, bus_timeout_exec_usec(&cfg, timeout_ms), stream_read, &e,
                                           &reply);
        else
                r = sd_bus_call(bus, m, bus_timeout_exec_usec(&cfg, timeout_ms), &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, id);

        r = ctl_exec_result_read(reply, &cfg, &res);
        if (r < 0)
                return r;
        if (c->json)
                ctl_exec_print_json(&res);
        else
                ctl_exec_print_text(&res, c->stream, timeout_ms);
        /* The code's status, as a shell would see it. */
        return res.exit_code < 0 ? EXIT_FAILURE : res.exit_code & 0xff;
}
