/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Minimal assertion macros for the unit tests: a failed check prints where and aborts. */
#pragma once

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ASSERT_TRUE(expr)                                                                       \
        do {                                                                                    \
                if (!(expr)) {                                                                  \
                        fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", __FILE__, __LINE__, \
                                __func__, #expr);                                               \
                        abort();                                                                \
                }                                                                               \
        } while (0)

#define ASSERT_EQ(a, b)                                                                         \
        do {                                                                                    \
                intmax_t _a_ = (intmax_t) (a), _b_ = (intmax_t) (b);                            \
                if (_a_ != _b_) {                                                               \
                        fprintf(stderr, "%s:%d: %s: %s == %s failed: %jd != %jd\n", __FILE__,    \
                                __LINE__, __func__, #a, #b, _a_, _b_);                          \
                        abort();                                                                \
                }                                                                               \
        } while (0)

#define ASSERT_STREQ(a, b)                                                                      \
        do {                                                                                    \
                const char *_a_ = (a), *_b_ = (b);                                              \
                if (!_a_ || !_b_ || strcmp(_a_, _b_) != 0) {                                    \
                        fprintf(stderr, "%s:%d: %s: %s == %s failed: \"%s\" != \"%s\"\n",       \
                                __FILE__, __LINE__, __func__, #a, #b, _a_ ?: "(null)",          \
                                _b_ ?: "(null)");                                               \
                        abort();                                                                \
                }                                                                               \
        } while (0)

#define RUN(test)                                               \
        do {                                                    \
                test();                                         \
                printf("ok - %s\n", #test);                     \
        } while (0)
