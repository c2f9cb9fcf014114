/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's processes: the Exec call of each, the pipe its output comes on, and the streams of
 * the clients connected to it (envd's ProcessEvent envelopes). */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base64.h"
#include "bus-client.h"
#include "bus-contract.h"
#include "bus-util.h"
#include "connect-rpc.h"
#include "e2b-process.h"
#include "exec-reply.h"
#include "io-util.h"
#include "json-util.h"
#include "list.h"
#include "log.h"
#include "stream-frame.h"
#include "string-util.h"

typedef struct E2bSubscriber E2bSubscriber;

struct E2bSubscriber {
        unsigned n_ref;
        E2bProcess *process; /* NULL once the process is done with it */
        HttpRequest *req; /* NULL once the request is gone */
        LIST_FIELDS(E2bSubscriber, subscribers);
        JsonWriter out; /* envelopes; 'out_sent' of them are with libmicrohttpd */
        size_t out_sent;
        bool finished; /* the end-stream envelope is in 'out' */
        sd_event_source *keepalive;
        unsigned keepalive_sec;
};

struct E2bProcess {
        Server *server;
        LIST_FIELDS(E2bProcess, processes);
        char sandbox[SESSION_ID_LEN + 1];
        uint32_t pid;
        char *tag;
        char *config; /* what List shows of it, as JSON text */
        sd_bus_slot *slot; /* the Exec call, until its answer */
        int hangup_fd; /* closed: the manager cancels the call */
        int fd; /* the output's pipe */
        sd_event_source *source;
        StreamFrameReader frames;
        E2bSubscriber *subscribers;
        unsigned n_subscribers;
        int stdin_fd; /* the write end of its stdin, -EBADF without (or closed) */
        sd_event_source *stdin_source;
        char *stdin_buf; /* what waits for room in the pipe */
        size_t stdin_size;
        bool stdin_closing; /* closed once stdin_buf is written */
        bool draining; /* reading the rest of the pipe, however full the buffers */
};

static size_t subscriber_unsent(const E2bSubscriber *sub) {
        return sub->out.buf.len - sub->out_sent;
}

static void subscriber_wake(E2bSubscriber *sub) {
        if (sub->req && sub->req->state == HTTP_REQUEST_ANSWERED)
                http_request_resume(sub->req);
}

static E2bSubscriber *subscriber_unref(E2bSubscriber *sub) {
        if (!sub)
                return NULL;
        assert(sub->n_ref > 0);
        if (--sub->n_ref > 0)
                return NULL;
        assert(!sub->process);
        sub->keepalive = sd_event_source_disable_unref(sub->keepalive);
        json_writer_done(&sub->out);
        free(sub);
        return NULL;
}

/* The process is done with it: nothing more is appended. */
static void subscriber_unlink(E2bSubscriber *sub) {
        E2bProcess *p = sub->process;

        if (!p)
                return;
        LIST_REMOVE(subscribers, p->subscribers, sub);
        p->n_subscribers--;
        sub->process = NULL;
        sub->keepalive = sd_event_source_disable_unref(sub->keepalive);
        /* One reader less: the pipe may have room again. */
        if (p->source)
                (void) sd_event_source_set_enabled(p->source, SD_EVENT_ON);
        subscriber_unref(sub);
}

static bool process_buffers_full(E2bProcess *p) {
        LIST_FOREACH(subscribers, sub, p->subscribers)
        if (subscriber_unsent(sub) >= E2B_PROCESS_BUFFER_MAX)
                return true;
        return false;
}

/* One ProcessEvent to every connected client. */
static int process_broadcast(E2bProcess *p, const char *event, size_t n) {
        LIST_FOREACH_SAFE(subscribers, sub, next, p->subscribers) {
                if (!sub->req || sub->req->client_gone) {
                        subscriber_unlink(sub);
                        continue;
                }
                if (connect_envelope_append(&sub->out, 0, event, n) < 0) {
                        /* Out of memory for this one client: its stream ends in error. */
                        subscriber_unlink(sub);
                        continue;
                }
                subscriber_wake(sub);
        }
        return 0;
}

static int process_on_frame(unsigned stream, const uint8_t *data, size_t size, void *userdata) {
        E2bProcess *p = userdata;
        _cleanup_(json_writer_done) JsonWriter w = {};
        _cleanup_free_ char *b64 = NULL;

        if (stream != STREAM_FRAME_STDOUT && stream != STREAM_FRAME_STDERR)
                return -EBADMSG;
        if (!p->subscribers)
                return 0; /* nobody connected: the output goes, as envd's does */
        b64 = base64_encode(data, size);
        if (!b64 || json_writer_appendf(&w, "{\"event\":{\"data\":{\"%s\":\"%s\"}}}",
                                        stream == STREAM_FRAME_STDOUT ? "stdout" : "stderr", b64) < 0)
                return -ENOMEM;
        (void) process_broadcast(p, w.buf.s, w.buf.len);
        return !p->draining && process_buffers_full(p);
}

static void process_close_pipe(E2bProcess *p) {
        p->source = sd_event_source_disable_unref(p->source);
        p->fd = safe_close(p->fd);
}

/* Reads at most 'budget' bytes; stops when a client's buffer is full (the pipe waits for it),
 * unless 'drain' (the command is over: what the pipe holds is all there is). */
static void process_read_pipe(E2bProcess *p, size_t budget, bool drain) {
        int r;

        if (p->fd < 0)
                return;
        p->draining = drain;
        if (!drain && process_buffers_full(p)) {
                (void) sd_event_source_set_enabled(p->source, SD_EVENT_OFF);
                return;
        }
        r = stream_frame_read(&p->frames, p->fd, budget, process_on_frame, p);
        if (r != 0) {
                if (r < 0 && r != -EPIPE)
                        log_debug_errno(
                                r, "Failed to read the output of process %" PRIu32 ", ignoring the rest: %m",
                                p->pid);
                process_close_pipe(p);
                return;
        }
        if (!drain && process_buffers_full(p))
                (void) sd_event_source_set_enabled(p->source, SD_EVENT_OFF);
}

static int process_on_pipe(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        process_read_pipe(userdata, 128U * 1024U, false);
        return 0;
}

static void process_stdin_done(E2bProcess *p) {
        p->stdin_source = sd_event_source_disable_unref(p->stdin_source);
        p->stdin_fd = safe_close(p->stdin_fd);
        p->stdin_buf = mfree(p->stdin_buf);
        p->stdin_size = 0;
}

/* Writes what waits, as much as the pipe takes now; the rest when it has room. */
static int process_stdin_flush(E2bProcess *p) {
        while (p->stdin_size > 0) {
                ssize_t k = write(p->stdin_fd, p->stdin_buf, p->stdin_size);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return sd_event_source_set_enabled(p->stdin_source, SD_EVENT_ON);
                if (k < 0) {
                        /* The command closed its stdin (or ended): nothing more goes there. */
                        process_stdin_done(p);
                        return 0;
                }
                memmove(p->stdin_buf, p->stdin_buf + k, p->stdin_size - (size_t) k);
                p->stdin_size -= (size_t) k;
        }
        if (p->stdin_closing)
                process_stdin_done(p);
        else if (p->stdin_source)
                (void) sd_event_source_set_enabled(p->stdin_source, SD_EVENT_OFF);
        return 0;
}

static int process_on_stdin(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        (void) process_stdin_flush(userdata);
        return 0;
}

int e2b_process_write_stdin(E2bProcess *p, const void *data, size_t n) {
        char *b;

        if (p->stdin_fd < 0 || p->stdin_closing)
                return -ENOTCONN;
        if (n == 0)
                return 0;
        if (p->stdin_size + n > E2B_PROCESS_STDIN_MAX)
                return -ENOBUFS;
        b = realloc(p->stdin_buf, p->stdin_size + n);
        if (!b)
                return -ENOMEM;
        memcpy(b + p->stdin_size, data, n);
        p->stdin_buf = b;
        p->stdin_size += n;
        return process_stdin_flush(p);
}

int e2b_process_close_stdin(E2bProcess *p) {
        if (p->stdin_fd < 0 || p->stdin_closing)
                return -ENOTCONN;
        p->stdin_closing = true;
        return process_stdin_flush(p);
}

static E2bProcess *process_free(E2bProcess *p) {
        if (!p)
                return NULL;
        while (p->subscribers) {
                E2bSubscriber *sub = p->subscribers;

                subscriber_wake(sub);
                subscriber_unlink(sub);
        }
        LIST_REMOVE(processes, p->server->e2b_processes, p);
        p->server->n_e2b_processes--;
        p->slot = sd_bus_slot_unref(p->slot);
        p->hangup_fd = safe_close(p->hangup_fd);
        process_close_pipe(p);
        process_stdin_done(p);
        free(p->config);
        free(p->tag);
        free(p);
        return NULL;
}

/* Go's ProcessState.String() of a signal: "signal: killed". */
static void signal_status(int sig, char *buf, size_t size) {
        const char *name = strsignal(sig);
        size_t i;

        (void) snprintf(buf, size, "signal: %s", name ?: "unknown");
        for (i = strlen("signal: "); buf[i]; i++)
                buf[i] = (char) tolower((unsigned char) buf[i]);
}

/* The end event of an Exec's answer (envd's EndEvent), or the end-stream error of a failed call. */
static int process_end_event(sd_bus_message *reply, JsonWriter *w, const char **ret_code, char *message,
                             size_t message_size) {
        _cleanup_(exec_info_done) ExecInfo info = {};
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        char status[128];
        int32_t exit_code;
        int r, fd;

        *ret_code = NULL;
        if (e && sd_bus_error_has_name(e, BUS_ERROR_CANCELLED)) {
                /* Killed (SendSignal), before or while it ran. */
                signal_status(SIGKILL, status, sizeof(status));
                return json_writer_appendf(w,
                                           "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,"
                                           "\"status\":\"%s\",\"error\":\"%s\"}}}",
                                           status, status);
        }
        if (e) {
                /* Decided on the name: the sandbox is gone, it runs something else, or the call
                 * failed. */
                if (sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED)) {
                        *ret_code = "unavailable";
                        (void) snprintf(message, message_size,
                                        "the sandbox is not running (gone, or paused)");
                } else if (sd_bus_error_has_names(e, BUS_ERROR_BUSY, BUS_ERROR_LIMIT_EXCEEDED)) {
                        *ret_code = "resource_exhausted";
                        (void) snprintf(message, message_size,
                                        "the sandbox runs another command or cell: a sandbox runs one at a "
                                        "time (docs/e2b.md)");
                } else {
                        *ret_code = "internal";
                        (void) snprintf(message, message_size, "the command failed (%s)", e->name);
                }
                return 0;
        }
        r = sd_bus_message_read(reply, "i", &exit_code);
        if (r >= 0)
                r = sd_bus_message_skip(reply, "tta(stt)");
        if (r >= 0)
                r = exec_reply_read_info(reply, &info, &fd);
        if (r < 0)
                return r;
        if (info.signal > 0) {
                signal_status(info.signal, status, sizeof(status));
                return json_writer_appendf(w,
                                           "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,"
                                           "\"status\":\"%s\",\"error\":\"%s\"}}}",
                                           status, status);
        }
        (void) snprintf(status, sizeof(status), "exit status %" PRIi32, exit_code);
        if (exit_code == 0)
                return json_writer_appendf(w, "{\"event\":{\"end\":{\"exited\":true,\"status\":\"%s\"}}}",
                                           status);
        return json_writer_appendf(w,
                                   "{\"event\":{\"end\":{\"exitCode\":%" PRIi32 ",\"exited\":true,"
                                   "\"status\":\"%s\",\"error\":\"%s\"}}}",
                                   exit_code, status, status);
}

/* The Exec's answer: the rest of the output (every frame came before it), the end, and the
 * process is gone. */
static int process_on_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        E2bProcess *p = userdata;
        _cleanup_(json_writer_done) JsonWriter end = {};
        const char *code = NULL;
        char message[256] = "";
        int r;

        p->slot = sd_bus_slot_unref(p->slot);
        process_read_pipe(p, SIZE_MAX, true);
        /* A client slower than the command: the rest of the pipe waits for nobody now. */
        process_close_pipe(p);

        r = process_end_event(reply, &end, &code, message, sizeof(message));
        if (r < 0) {
                code = "internal";
                (void) snprintf(message, sizeof(message), "the command's answer could not be read");
        }
        log_debug("Process %" PRIu32 " of sandbox %s ended%s%s.", p->pid, p->sandbox, code ? ": " : "",
                  code ? message : "");
        LIST_FOREACH_SAFE(subscribers, sub, next, p->subscribers) {
                if (end.buf.len > 0)
                        (void) connect_envelope_append(&sub->out, 0, end.buf.s, end.buf.len);
                (void) connect_end_stream_append(&sub->out, code, message);
                sub->finished = true;
        }
        process_free(p);
        return 0;
}

int e2b_process_start(Server *s, const char *sandbox, int code_fd, json_object *config, const char *tag,
                      uint64_t timeout_ms, bool with_stdin, E2bProcess **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ char *cfg = NULL;
        _cleanup_close_ int write_fd = -EBADF, hangup_read = -EBADF, stdin_read = -EBADF;
        int pipe_fds[2], hangup_fds[2], stdin_fds[2], r;
        E2bProcess *p;

        if (s->n_e2b_processes >= E2B_PROCESSES_MAX ||
            e2b_process_count(s, sandbox) >= E2B_PROCESSES_PER_SANDBOX_MAX)
                return -EMFILE;
        /* Kept as text: a few bytes per byte of it, where json-c takes a hundred per value. */
        cfg = strdup(json_object_to_json_string_ext(config,
                                                    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
                             ?: "");
        if (!cfg || !cfg[0])
                return -ENOMEM;

        p = calloc(1, sizeof(E2bProcess));
        if (!p)
                return -ENOMEM;
        *p = (E2bProcess) {
                .server = s, .hangup_fd = -EBADF, .fd = -EBADF, .stdin_fd = -EBADF, .config = TAKE_PTR(cfg)
        };
        LIST_PREPEND(processes, s->e2b_processes, p);
        s->n_e2b_processes++;
        memcpy(p->sandbox, sandbox, SESSION_ID_LEN);
        /* Never 0 (the SDKs' "no pid"); a counter of the gateway's, so never one of a process
         * that ended (until it wraps, after 2^32 processes). */
        do
                p->pid = ++s->e2b_last_pid;
        while (p->pid == 0);
        r = tag ? ((p->tag = strdup(tag)) ? 0 : -ENOMEM) : 0;
        if (r >= 0 && pipe2(pipe_fds, O_CLOEXEC) < 0)
                r = -errno;
        if (r >= 0) {
                p->fd = pipe_fds[0];
                write_fd = pipe_fds[1];
                if (pipe2(hangup_fds, O_CLOEXEC) < 0)
                        r = -errno;
        }
        if (r < 0) {
                process_free(p);
                return r;
        }
        hangup_read = hangup_fds[0];
        p->hangup_fd = hangup_fds[1];
        if (with_stdin) {
                if (pipe2(stdin_fds, O_CLOEXEC) < 0) {
                        r = -errno;
                        process_free(p);
                        return r;
                }
                stdin_read = stdin_fds[0];
                p->stdin_fd = stdin_fds[1];
                r = fd_nonblock(p->stdin_fd, true);
                if (r >= 0)
                        r = sd_event_add_io(s->event, &p->stdin_source, p->stdin_fd, EPOLLOUT,
                                            process_on_stdin, p);
                if (r >= 0)
                        r = sd_event_source_set_enabled(p->stdin_source, SD_EVENT_OFF);
                if (r < 0) {
                        process_free(p);
                        return r;
                }
        }

        r = fd_nonblock(p->fd, true);
        if (r >= 0)
                r = sd_event_add_io(s->event, &p->source, p->fd, EPOLLIN, process_on_pipe, p);
        if (r >= 0)
                (void) sd_event_source_set_description(p->source, "e2b-process");
        if (r >= 0)
                r = session_manager_new_call(s->bus, "Exec", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sh", sandbox, code_fd);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}", "timeout_ms", "t", timeout_ms,
                                          "language", "s", "command", "output_limit", "t",
                                          (uint64_t) E2B_PROCESS_OUTPUT_MAX, "stream", "h", write_fd,
                                          "hangup", "h", hangup_read);
        if (r >= 0 && stdin_read >= 0)
                r = sd_bus_message_append(m, "{sv}", "stdin", "h", stdin_read);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_call_async(s->bus, &p->slot, m, process_on_reply, p,
                                      bus_timeout_exec_usec(&s->config, timeout_ms));
        if (r < 0) {
                process_free(p);
                return r;
        }
        log_debug("Process %" PRIu32 " of sandbox %s started.", p->pid, p->sandbox);
        *ret = p;
        return 0;
}

static ssize_t subscriber_read(void *userdata, uint64_t pos, char *buf, size_t max) {
        E2bSubscriber *sub = userdata;
        size_t n;

        if (subscriber_unsent(sub) > 0) {
                n = MIN(max, subscriber_unsent(sub));
                memcpy(buf, sub->out.buf.s + sub->out_sent, n);
                sub->out_sent += n;
                if (sub->out_sent == sub->out.buf.len)
                        sub->out.buf.len = sub->out_sent = 0;
                else if (sub->out_sent >= E2B_PROCESS_BUFFER_MAX / 4) {
                        memmove(sub->out.buf.s, sub->out.buf.s + sub->out_sent, subscriber_unsent(sub));
                        sub->out.buf.len -= sub->out_sent;
                        sub->out_sent = 0;
                }
                /* Room again: the pipe is read on. */
                if (sub->process && sub->process->source &&
                    subscriber_unsent(sub) < E2B_PROCESS_BUFFER_MAX / 2)
                        (void) sd_event_source_set_enabled(sub->process->source, SD_EVENT_ON);
                return (ssize_t) n;
        }
        if (sub->finished)
                return MHD_CONTENT_READER_END_OF_STREAM;
        if (!sub->process || !sub->req || sub->req->client_gone)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        http_request_suspend(sub->req);
        return 0;
}

static void subscriber_release(void *userdata) {
        subscriber_unref(userdata);
}

/* The request's hold on its subscriber: gone with the request. */
typedef struct E2bSubscription {
        E2bSubscriber *sub;
} E2bSubscription;

static void subscription_free(void *userdata) {
        E2bSubscription *x = userdata;

        if (x->sub) {
                x->sub->req = NULL;
                subscriber_unlink(x->sub);
                subscriber_unref(x->sub);
        }
        free(x);
}

/* Nothing sent for the client's keepalive interval: a keepalive event (envd's), and again. */
static int subscriber_on_keepalive(sd_event_source *source, uint64_t usec, void *userdata) {
        E2bSubscriber *sub = userdata;
        static const char event[] = "{\"event\":{\"keepalive\":{}}}";

        if (sub->finished || !sub->process)
                return 0;
        if (subscriber_unsent(sub) == 0 &&
            connect_envelope_append(&sub->out, 0, event, sizeof(event) - 1) >= 0)
                subscriber_wake(sub);
        (void) sd_event_source_set_time_relative(source, sub->keepalive_sec * USEC_PER_SEC);
        return sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
}

int e2b_process_subscribe(E2bProcess *p, HttpRequest *req, unsigned keepalive_sec) {
        HttpBodySource source = { .read = subscriber_read,
                                  .free = subscriber_release,
                                  .footprint = E2B_PROCESS_BUFFER_MAX };
        _cleanup_(json_writer_done) JsonWriter start = {};
        E2bSubscription *x;
        E2bSubscriber *sub;
        HttpResponse *resp;
        int r;

        if (p->n_subscribers >= E2B_PROCESS_SUBSCRIBERS_MAX)
                return -EMFILE;
        x = http_request_new_userdata(req, sizeof(E2bSubscription), subscription_free);
        if (!x)
                return -ENOMEM;
        sub = calloc(1, sizeof(E2bSubscriber));
        if (!sub)
                return -ENOMEM;
        /* One reference for the process's list, one for the request, one for the response. */
        *sub = (E2bSubscriber) { .n_ref = 2, .process = p, .req = req, .keepalive_sec = keepalive_sec };
        x->sub = sub;
        LIST_PREPEND(subscribers, p->subscribers, sub);
        p->n_subscribers++;

        r = json_writer_appendf(&start, "{\"event\":{\"start\":{\"pid\":%" PRIu32 "}}}", p->pid);
        if (r >= 0)
                r = connect_envelope_append(&sub->out, 0, start.buf.s, start.buf.len);
        if (r >= 0 && keepalive_sec > 0)
                r = sd_event_add_time_relative(p->server->event, &sub->keepalive, CLOCK_MONOTONIC,
                                               keepalive_sec * USEC_PER_SEC, USEC_PER_SEC / 4,
                                               subscriber_on_keepalive, sub);
        if (r < 0)
                return r;
        source.userdata = sub;
        r = http_response_new_source(HTTP_OK, CONNECT_STREAM_CONTENT_TYPE, &source, &resp);
        if (r < 0)
                return r;
        sub->n_ref++;
        resp->cache_control = "no-cache";
        return http_request_reply(req, resp);
}

void e2b_process_kill(E2bProcess *p) {
        /* The manager ends the call: a Cancelled answer, then the end event. */
        p->hangup_fd = safe_close(p->hangup_fd);
}

E2bProcess *e2b_process_find(Server *s, const char *sandbox, uint32_t pid, const char *tag) {
        LIST_FOREACH(processes, p, s->e2b_processes)
        if (streq(p->sandbox, sandbox) && (tag ? p->tag && streq(p->tag, tag) : p->pid == pid))
                return p;
        return NULL;
}

unsigned e2b_process_count(Server *s, const char *sandbox) {
        unsigned n = 0;

        LIST_FOREACH(processes, p, s->e2b_processes)
        n += streq(p->sandbox, sandbox);
        return n;
}

int e2b_process_list_append(Server *s, const char *sandbox, JsonWriter *w) {
        bool first = true;
        int r = 0;

        LIST_FOREACH(processes, p, s->e2b_processes) {
                if (!streq(p->sandbox, sandbox))
                        continue;
                r = json_writer_appendf(w, "%s{\"config\":%s,\"pid\":%" PRIu32, first ? "" : ",", p->config,
                                        p->pid);
                if (r >= 0 && p->tag) {
                        r = json_writer_append_str(w, ",\"tag\":");
                        if (r >= 0)
                                r = json_writer_append_string_lossy(w, p->tag, strlen(p->tag));
                }
                if (r >= 0)
                        r = json_writer_append_str(w, "}");
                if (r < 0)
                        return r;
                first = false;
        }
        return r;
}

void e2b_process_free_all(Server *s) {
        while (s->e2b_processes)
                process_free(s->e2b_processes);
}
