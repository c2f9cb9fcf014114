/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Quarantined archives: the names a damaged archive is moved aside to ("<key>.damaged-<UTC time>"),
 * next to where it was, so that it is kept and listed but never restored nor collected. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define QUARANTINE_INFIX ".damaged-"
/* YYYYMMDDTHHMMSSZ */
#define QUARANTINE_TIME_LEN 16
#define QUARANTINE_SUFFIX_LEN (sizeof(QUARANTINE_INFIX) - 1 + QUARANTINE_TIME_LEN)

/* "<key>.damaged-<YYYYMMDDTHHMMSSZ>" of the UTC time 'when'. -ERANGE for a time gmtime() can't
 * break down or a year of more than 4 digits, -ENOMEM. */
int quarantine_key(const char *key, time_t when, char **ret);

/* Whether 'name' (a key or its last component) is a quarantined archive's: it ends in ".tgz", then
 * ".damaged-" and a well-formed time. When it is, *ret_when (optional) gets that time (Unix seconds)
 * and *ret_stem_len (optional) the length of what comes before ".tgz" in the last component. */
bool quarantine_key_parse(const char *name, int64_t *ret_when, size_t *ret_stem_len);

/* What garbage collection never deletes, whatever its prefix: anything quarantined (the service
 * deletes no archive it moved aside; an operator does, knowingly). */
static inline bool quarantine_key_is(const char *name) {
        return quarantine_key_parse(name, NULL, NULL);
}
