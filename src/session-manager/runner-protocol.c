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

/* ---- the manager's requests ---- */

/* A new request: its op, then the members the caller adds with json_add_checked() on *error. */
static json_object *request_new(const char *op, int *error) {
        json_object *o = json_object_new_object();

        *error = o ? 0 : -ENOMEM;
        if (o)
                json_add_checked(o, "op", json_object_new_string(op), error);
        return o;
}

/* Hands out the request if every member made it in. */
static int request_finish(json_object *o, int error, json_object **ret) {
        if (!o || error < 0) {
                json_object_put(o);
                return error < 0 ? error : -ENOMEM;
        }
        *ret = o;
        return 0;
}

static void add_u64(json_object *o, const char *key, uint64_t v, int *error) {
        json_add_checked(o, key, json_object_new_int64((int64_t) v), error);
}

static void add_true(json_object *o, const char *key, bool v, int *error) {
        if (v)
                json_add_checked(o, key, json_object_new_boolean(true), error);
}

int runner_request_init(const RunnerInitRequest *p, json_object **ret) {
        int jr;
        json_object *o = request_new("init", &jr);

        add_u64(o, "uid", p->uid, &jr);
        add_u64(o, "gid", p->gid, &jr);
        add_u64(o, "workspace_size", p->workspace_size, &jr);
        add_u64(o, "tmp_size", p->tmp_size, &jr);
        add_u64(o, "cpus_percent", p->cpus_percent, &jr);
        if (p->preload_modules)
                json_add_checked(o, "preload_modules", json_object_new_string(p->preload_modules), &jr);
        add_u64(o, "idle_backstop_sec", p->idle_backstop_sec, &jr);
        return request_finish(o, jr, ret);
}

int runner_request_exec(const RunnerExecRequest *p, json_object **ret) {
        int jr;
        json_object *o = request_new("exec", &jr);

        json_add_checked(o, "exec_id", json_object_new_string(p->exec_id), &jr);
        add_u64(o, "timeout_ms", p->timeout_ms, &jr);
        add_u64(o, "output_limit", p->output_limit, &jr);
        add_u64(o, "max_artifact_bytes", p->max_artifact_bytes, &jr);
        add_u64(o, "max_files", p->max_files, &jr);
        add_u64(o, "max_total_artifact_bytes", p->max_total_artifact_bytes, &jr);
        add_u64(o, "memory_limit", p->memory_limit, &jr);
        if (p->language)
                json_add_checked(o, "language", json_object_new_string(p->language), &jr);
        add_true(o, "no_processes", p->no_processes, &jr);
        add_true(o, "cold", p->cold, &jr);
        add_true(o, "stateful", p->stateful, &jr);
        if (p->network) {
                add_true(o, "network", true, &jr);
                if (p->http_proxy && p->http_proxy[0])
                        json_add_checked(o, "http_proxy", json_object_new_string(p->http_proxy), &jr);
                if (p->https_proxy && p->https_proxy[0])
                        json_add_checked(o, "https_proxy", json_object_new_string(p->https_proxy), &jr);
        }
        return request_finish(o, jr, ret);
}

int runner_request_op(const char *op, json_object **ret) {
        int jr;
        json_object *o = request_new(op, &jr);

        return request_finish(o, jr, ret);
}

int runner_request_cancel(const char *exec_id, json_object **ret) {
        int jr;
        json_object *o = request_new("cancel", &jr);

        json_add_checked(o, "exec_id", json_object_new_string(exec_id), &jr);
        return request_finish(o, jr, ret);
}

int runner_request_write(const char *path, json_object **ret) {
        int jr;
        json_object *o = request_new("write", &jr);

        json_add_checked(o, "path", json_object_new_string(path), &jr);
        return request_finish(o, jr, ret);
}

int runner_request_read(const char *path, uint64_t max, json_object **ret) {
        int jr;
        json_object *o = request_new("read", &jr);

        json_add_checked(o, "path", json_object_new_string(path), &jr);
        add_u64(o, "max", max, &jr);
        return request_finish(o, jr, ret);
}

int runner_request_archive(bool restore, uint64_t max_bytes, uint64_t timeout_sec, json_object **ret) {
        int jr;
        json_object *o = request_new(restore ? "restore" : "archive", &jr);

        add_u64(o, "max_bytes", max_bytes, &jr);
        add_u64(o, "timeout_sec", timeout_sec, &jr);
        return request_finish(o, jr, ret);
}
