/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An enum with one word for each value, systemd's way: a table name##_table indexed by the enum
 * (declared with its _MAX as size, entries may be NULL), and the lookups both ways. */
#pragma once

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>

#include "macro.h"

/* The index of 'key' in 'table', or -EINVAL (also for NULL). */
static inline ssize_t string_table_lookup(const char *const *table, size_t n, const char *key) {
        if (!key)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (table[i] && streq(table[i], key))
                        return (ssize_t) i;
        return -EINVAL;
}

/* type name##_to_string(type): the word, NULL for a value outside the table. */
#define DEFINE_STRING_TABLE_LOOKUP_TO_STRING(name, type)                                          \
        const char *name##_to_string(type i) {                                                    \
                return i >= 0 && (size_t) i < ELEMENTSOF(name##_table) ? name##_table[i] : NULL; \
        }

/* type name##_from_string(const char *): the value, or -EINVAL. */
#define DEFINE_STRING_TABLE_LOOKUP_FROM_STRING(name, type)                                    \
        type name##_from_string(const char *s) {                                              \
                return (type) string_table_lookup(name##_table, ELEMENTSOF(name##_table), s); \
        }
