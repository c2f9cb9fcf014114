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
        if (!buf)
                return -ENOMEM;

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
                r = -EBADMSG;
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
