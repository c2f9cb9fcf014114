/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl exec: run a file's code in a session through the manager's Exec, like POST /exec. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "exec-reply.h"
#include "io-util.h"
#include "json-util.h"
#include "string-util.h"

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

/* What the exec used, where the manager measured it (docs/dbus-api.md, Exec's info). */
static void ctl_exec_add_usage(json_object *o, const char *name, uint64_t v) {
        if (v != EXEC_USAGE_UNKNOWN)
                json_object_object_add(o, name, json_object_new_uint64(v));
}

int verb_exec(Ctl *c) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *config_error = NULL, *code = NULL;
        _cleanup_free_ ExecFile *files = NULL;
        _cleanup_(config_done) Config cfg = {};
        _cleanup_(bus_data_done) BusData data = {};
        _cleanup_close_ int code_fd = -EBADF;
        const char *id = c->args[0], *path = c->args[1];
        uint64_t timeout_ms, stdout_size, stderr_size;
        _cleanup_(exec_info_done) ExecInfo info = {};
        size_t code_size, n_files = 0;
        int32_t exit_code;
        sd_bus *bus;
        int data_fd, r;

        r = ctl_check_session_id(id);
        if (r < 0)
                return r;
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
        r = session_manager_new_call(bus, "Exec", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sha{sv}", id, code_fd, 2, "timeout_ms", "t", timeout_ms,
                                          "language", "s", "python3");
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, bus_timeout_exec_usec(&cfg, timeout_ms), &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, id);

        r = sd_bus_message_read(reply, "itt", &exit_code, &stdout_size, &stderr_size);
        if (r >= 0)
                r = exec_reply_read_files(reply, &files, &n_files);
        if (r >= 0)
                r = exec_reply_read_info(reply, &info, &data_fd);
        if (r >= 0)
                r = bus_data_load(data_fd, exec_reply_data_max(&cfg), &data);
        if (r < 0)
                return ctl_error(r, "Failed to read the exec's result: %m");
        if (stdout_size > data.size || stderr_size > data.size - stdout_size)
                return ctl_error(EBADMSG, "The exec's result is malformed.");

        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object *list = json_object_new_array();

                json_object_object_add(o, "exit_code", json_object_new_int(exit_code));
                json_object_object_add(o, "stdout", json_object_new_string_len_safe((const char *) data.data,
                                                                                    stdout_size));
                json_object_object_add(o, "stderr", json_object_new_string_len_safe(
                                                            (const char *) data.data + stdout_size, stderr_size));
                json_object_object_add(o, "timed_out", json_object_new_boolean(info.timed_out));
                json_object_object_add(o, "signal", json_object_new_int(info.signal));
                json_object_object_add(o, "oom_killed", json_object_new_boolean(info.oom_killed));
                json_object_object_add(o, "pids_limited", json_object_new_boolean(info.pids_limited));
                json_object_object_add(o, "duration_usec", json_object_new_uint64(info.duration_usec));
                json_object_object_add(o, "stdout_truncated", json_object_new_boolean(info.stdout_truncated));
                json_object_object_add(o, "stderr_truncated", json_object_new_boolean(info.stderr_truncated));
                for (size_t i = 0; i < n_files; i++) {
                        json_object *f = json_object_new_object();
                        json_object_object_add(f, "path", json_object_new_string(files[i].path));
                        json_object_object_add(f, "size", json_object_new_uint64(files[i].size));
                        json_object_array_add(list, f);
                }
                json_object_object_add(o, "files", list);
                json_object_object_add(o, "files_skipped", json_object_new_uint64(info.files_skipped));
                list = json_object_new_array();
                for (size_t i = 0; i < info.blocked.n; i++) {
                        json_object *b = json_object_new_object();
                        json_object_object_add(b, "name", json_object_new_string(info.blocked.items[i].name));
                        json_object_object_add(b, "verdict", json_object_new_string(info.blocked.items[i].verdict));
                        json_object_object_add(b, "count", json_object_new_uint64(info.blocked.items[i].count));
                        json_object_array_add(list, b);
                }
                json_object_object_add(o, "blocked_syscalls", list);
                if (info.exit_reason)
                        json_object_object_add(o, "exit_reason", json_object_new_string(info.exit_reason));
                ctl_exec_add_usage(o, "cpu_usec", info.cpu_usec);
                ctl_exec_add_usage(o, "max_rss_bytes", info.max_rss_bytes);
                ctl_exec_add_usage(o, "written_bytes", info.written_bytes);
                ctl_exec_add_usage(o, "processes", info.processes);
                json_print(o);
        } else {
                (void) write_all(STDOUT_FILENO, data.data, stdout_size);
                (void) write_all(STDERR_FILENO, data.data + stdout_size, stderr_size);
                for (size_t i = 0; i < n_files; i++)
                        fprintf(stderr, "scopeboxctl: artifact /workspace/outputs/%s (%" PRIu64 " bytes)\n",
                                string_is_printable_line(files[i].path, PATH_MAX) ? files[i].path : "(name not printable)",
                                files[i].size);
                if (info.files_skipped > 0)
                        fprintf(stderr, "scopeboxctl: %" PRIu32 " artifacts left out by the limits\n",
                                info.files_skipped);
                if (info.stdout_truncated || info.stderr_truncated)
                        fprintf(stderr, "scopeboxctl: output truncated at SANDBOX_MAX_OUTPUT_BYTES\n");
                if (info.timed_out)
                        fprintf(stderr, "scopeboxctl: timed out after %" PRIu64 " ms\n", timeout_ms);
                else if (info.signal > 0)
                        fprintf(stderr, "scopeboxctl: killed by signal %s\n", strsignal(info.signal));
                if (info.oom_killed)
                        fprintf(stderr, "scopeboxctl: the session's memory limit was reached (OOM kill)\n");
                if (info.pids_limited)
                        fprintf(stderr, "scopeboxctl: the session's tasks limit refused a process or thread\n");
                for (size_t i = 0; i < info.blocked.n; i++)
                        fprintf(stderr, "scopeboxctl: the sandbox refused %s (%s) %" PRIu32 "x\n",
                                info.blocked.items[i].name, info.blocked.items[i].verdict, info.blocked.items[i].count);
        }
        /* The code's status, as a shell would see it. */
        return exit_code < 0 ? EXIT_FAILURE : exit_code & 0xff;
}
