/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File-descriptor helpers: bounded reads, full writes, sealed memfds. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

int fd_nonblock(int fd, bool nonblock);
int write_all(int fd, const void *buf, size_t len);
/* Read until EOF. Fails with -EFBIG when more than 'max' bytes arrive. Result is NUL-terminated. */
int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size);
/* Same, starting at offset 0 with pread (for memfds). */
int read_full_memfd(int fd, size_t max, char **ret, size_t *ret_size);
/* A memfd holding 'data', sealed against writes, shrinking and growing. */
int memfd_new_data(const char *name, const void *data, size_t len);
int memfd_new_empty(const char *name);
int memfd_seal(int fd);
/* The size of the regular file fd refers to, when it holds at most 'max' bytes: -EBADFD when fd is
 * no regular file (a directory, a FIFO, a device...), -EFBIG when it is larger than max. */
int fd_regular_size(int fd, uint64_t max, uint64_t *ret_size);

/* Passes one fd over a unix socket (one byte of payload), and receives it (O_CLOEXEC).
 * fd_receive_one() fails with -EPIPE at EOF and -EBADMSG when no fd came along. */
int fd_send_one(int sock, int fd);
int fd_receive_one(int sock);

/* Takes the fds that came with a received message (SCM_RIGHTS): the first 'max' into fds, the
 * others are closed. Returns how many it took. */
size_t cmsg_take_fds(struct msghdr *mh, int *fds, size_t max);

/* One message of 'size' bytes with up to FDS_SEND_MAX fds (SCM_RIGHTS), and its receipt, never
 * blocking (O_CLOEXEC): fds beyond 'n_fds' are closed, a truncated message or fd list fails
 * with -EMSGSIZE and closes what came. Returns the bytes received (0 at EOF). */
#define FDS_SEND_MAX 32
int fds_send(int sock, const void *data, size_t size, const int *fds, size_t n_fds);
ssize_t fds_receive(int sock, void *data, size_t size, int *fds, size_t n_fds, size_t *ret_n_fds);

/* Whether 'fd' is the read end of a pipe (or FIFO): 1, 0 if it is anything else, -errno. */
int fd_is_pipe_read_end(int fd);
/* Whether 'fd' is the write end of a pipe (or FIFO): 1, 0 if it is anything else, -errno. */
int fd_is_pipe_write_end(int fd);
/* Whether the pipe 'fd' reads from has no writer any more (or an error): 1, 0 while some process
 * holds a write end open, -errno. Never blocks, reads nothing. */
int pipe_hung_up(int fd);
