/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Small macros used everywhere: cleanup attributes, ownership transfer, array sizes. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _pure_ __attribute__((pure))
#define _fallthrough_ __attribute__((fallthrough))
#define _likely_(x) (__builtin_expect(!!(x), 1))
#define _unlikely_(x) (__builtin_expect(!!(x), 0))
#define _warn_unused_result_ __attribute__((warn_unused_result))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* Hand an owned pointer/fd out of a _cleanup_ variable. */
#define TAKE_PTR(p)                             \
        ({                                      \
                __typeof__(p) _ptr_ = (p);      \
                (p) = NULL;                     \
                _ptr_;                          \
        })
#define TAKE_FD(fd)                             \
        ({                                      \
                int _fd_ = (fd);                \
                (fd) = -EBADF;                  \
                _fd_;                           \
        })

/* Define a "freep"-style helper for a type whose destructor takes a pointer. */
#define DEFINE_CLEANUP_FUNC(type, func)                         \
        static inline void func##p(type *p) {                   \
                if (*p)                                         \
                        func(*p);                               \
        }

/* Same, for destructors that return NULL (our own object models). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                 \
        static inline void func##p(type *p) {                   \
                if (*p)                                         \
                        *p = func(*p);                          \
        }

static inline void *mfree(void *p) {
        free(p);
        return NULL;
}

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                (void) close(fd);
                errno = saved;
        }
        return -EBADF;
}

static inline void closep(int *fd) {
        *fd = safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline void fclosep(FILE **f) {
        if (*f)
                (void) fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Free a string after wiping it; for secrets. */
static inline void erase_and_freep(char **p) {
        if (*p) {
                explicit_bzero(*p, strlen(*p));
                free(*p);
        }
}
#define _cleanup_erase_free_ _cleanup_(erase_and_freep)

static inline void close_pairp(int (*p)[2]) {
        (*p)[0] = safe_close((*p)[0]);
        (*p)[1] = safe_close((*p)[1]);
}
#define _cleanup_close_pair_ _cleanup_(close_pairp)

#define streq(a, b) (strcmp((a), (b)) == 0)
#define strneq(a, b, n) (strncmp((a), (b), (n)) == 0)
static inline int streq_ptr(const char *a, const char *b) {
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}
#define isempty(s) (!(s) || (s)[0] == '\0')

static inline const char *strempty(const char *s) {
        return s ?: "";
}

static inline const char *strna(const char *s) {
        return s ?: "n/a";
}

static inline const char *yes_no(int b) {
        return b ? "yes" : "no";
}

/* Return a negative errno from the current errno, never 0. */
static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

#define RET_NERRNO(expr)                        \
        ({                                      \
                int _r_ = (expr);               \
                _r_ < 0 ? negative_errno() : _r_; \
        })

#define USEC_PER_SEC  ((uint64_t) 1000000ULL)
#define USEC_PER_MSEC ((uint64_t) 1000ULL)
#define NSEC_PER_USEC ((uint64_t) 1000ULL)
