/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File-descriptor helpers: bounded reads, full writes, sealed memfds. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io-util.h"
#include "macro.h"

int fd_nonblock(int fd, bool nonblock) {
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0)
                return -errno;
        flags = nonblock ? flags | O_NONBLOCK : flags & ~O_NONBLOCK;
        return fcntl(fd, F_SETFL, flags) < 0 ? -errno : 0;
}

int write_all(int fd, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EIO;
                p += k;
                len -= (size_t) k;
        }
        return 0;
}

static int read_full_internal(int fd, size_t max, bool use_pread, char **ret, size_t *ret_size) {
        _cleanup_free_ char *buf = NULL;
        size_t size = 0, allocated = 0;
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISREG(st.st_mode) && (uint64_t) st.st_size > max)
                return -EFBIG;
        allocated = S_ISREG(st.st_mode) ? (size_t) st.st_size + 1 : 4096;

        buf = malloc(allocated + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t k;

                if (size >= allocated) {
                        size_t n = MIN(allocated * 2, max + 1);
                        char *nb;
                        if (n <= allocated)
                                return -EFBIG;
                        nb = realloc(buf, n + 1);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                        allocated = n;
                }
                k = use_pread ? pread(fd, buf + size, allocated - size, (off_t) size)
                              : read(fd, buf + size, allocated - size);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                size += (size_t) k;
                if (size > max)
                        return -EFBIG;
        }
        buf[size] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = size;
        return 0;
}

int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size) {
        return read_full_internal(fd, max, false, ret, ret_size);
}

int read_full_memfd(int fd, size_t max, char **ret, size_t *ret_size) {
        return read_full_internal(fd, max, true, ret, ret_size);
}

int memfd_new_empty(const char *name) {
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        return fd < 0 ? -errno : fd;
}

int memfd_seal(int fd) {
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return -errno;
        return 0;
}

int memfd_new_data(const char *name, const void *data, size_t len) {
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = memfd_new_empty(name);
        if (fd < 0)
                return fd;
        r = write_all(fd, data, len);
        if (r < 0)
                return r;
        r = memfd_seal(fd);
        if (r < 0)
                return r;
        return TAKE_FD(fd);
}

int fd_send_one(int sock, int fd) {
        char buf[CMSG_SPACE(sizeof(int))] = {};
        char byte = 'L';
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        struct msghdr mh = {
                .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf)
        };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
        return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

int fd_receive_one(int sock) {
        char buf[CMSG_SPACE(sizeof(int))] = {};
        char byte;
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        struct msghdr mh = {
                .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf)
        };
        ssize_t k;
        int fds[2];
        size_t n;

        do
                k = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        n = cmsg_take_fds(&mh, fds, ELEMENTSOF(fds));
        if (k == 0 || n != 1 || (mh.msg_flags & MSG_CTRUNC)) {
                for (size_t i = 0; i < n; i++)
                        (void) close(fds[i]);
                return k == 0 ? -EPIPE : -EBADMSG;
        }
        return fds[0];
}

size_t cmsg_take_fds(struct msghdr *mh, int *fds, size_t max) {
        size_t n = 0;

        for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (n < max)
                                fds[n++] = fd;
                        else
                                (void) close(fd);
                }
        }
        return n;
}

int fds_send(int sock, const void *data, size_t size, const int *fds, size_t n_fds) {
        char buf[CMSG_SPACE(sizeof(int) * FDS_SEND_MAX)] = {};
        struct iovec iov = { .iov_base = (void *) data, .iov_len = size };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * n_fds) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        ssize_t k;

        if (n_fds == 0 || n_fds > FDS_SEND_MAX || size == 0)
                return -EINVAL;
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        k = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (k < 0)
                return -errno;
        return (size_t) k == size ? 0 : -EMSGSIZE;
}

ssize_t fds_receive(int sock, void *data, size_t size, int *fds, size_t n_fds, size_t *ret_n_fds) {
        char buf[CMSG_SPACE(sizeof(int) * FDS_SEND_MAX)] = {};
        struct iovec iov = { .iov_base = data, .iov_len = size };
        struct msghdr mh = {
                .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof(buf)
        };
        size_t n;
        ssize_t k;

        assert(n_fds <= FDS_SEND_MAX);
        do
                k = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        /* Whatever came along is ours to close, also when it is more than asked for. */
        n = cmsg_take_fds(&mh, fds, n_fds);
        *ret_n_fds = n;
        if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
                for (size_t i = 0; i < n; i++)
                        (void) close(fds[i]);
                *ret_n_fds = 0;
                return -EMSGSIZE;
        }
        return k;
}

static int fd_is_pipe_end(int fd, int accmode) {
        struct stat st;
        int flags;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISFIFO(st.st_mode))
                return 0;
        flags = fcntl(fd, F_GETFL);
        if (flags < 0)
                return -errno;
        return (flags & O_ACCMODE) == accmode;
}

int fd_is_pipe_read_end(int fd) {
        return fd_is_pipe_end(fd, O_RDONLY);
}

int fd_is_pipe_write_end(int fd) {
        return fd_is_pipe_end(fd, O_WRONLY);
}

int fd_regular_size(int fd, uint64_t max, uint64_t *ret_size) {
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        if ((uint64_t) st.st_size > max)
                return -EFBIG;
        *ret_size = (uint64_t) st.st_size;
        return 0;
}

int pipe_hung_up(int fd) {
        /* No events asked for: poll() reports POLLHUP and POLLERR regardless, and data waiting in
         * the pipe (POLLIN) is not what we look at. */
        struct pollfd p = { .fd = fd };
        int n;

        do
                n = poll(&p, 1, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        if (p.revents & POLLNVAL)
                return -EBADF;
        return !!(p.revents & (POLLHUP | POLLERR));
}
