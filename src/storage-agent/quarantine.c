/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Quarantined archives' names (quarantine.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarantine.h"
#include "string-util.h"

#define ARCHIVE_SUFFIX ".tgz"

int quarantine_key(const char *key, time_t when, char **ret) {
        char stamp[QUARANTINE_TIME_LEN + 1];
        struct tm tm;

        if (!gmtime_r(&when, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999)
                return -ERANGE;
        if (strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) != QUARANTINE_TIME_LEN)
                return -ERANGE;
        if (asprintf(ret, "%s" QUARANTINE_INFIX "%s", key, stamp) < 0)
                return -ENOMEM;
        return 0;
}

static bool digits(const char *s, size_t n, int *ret) {
        int v = 0;

        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (s[i] - '0');
        }
        *ret = v;
        return true;
}

bool quarantine_key_parse(const char *name, int64_t *ret_when, size_t *ret_stem_len) {
        const char *last = strrchr(name, '/'), *t;
        size_t n, stem_len;
        int year, month, day, hour, minute, second;
        struct tm tm;
        time_t when;

        last = last ? last + 1 : name;
        n = strlen(last);
        /* At least one character of a stem, ".tgz", ".damaged-", the time. */
        if (n < 1 + strlen(ARCHIVE_SUFFIX) + QUARANTINE_SUFFIX_LEN)
                return false;
        stem_len = n - QUARANTINE_SUFFIX_LEN - strlen(ARCHIVE_SUFFIX);
        t = last + n - QUARANTINE_TIME_LEN;
        if (!strneq(last + stem_len, ARCHIVE_SUFFIX QUARANTINE_INFIX,
                    QUARANTINE_SUFFIX_LEN - QUARANTINE_TIME_LEN + strlen(ARCHIVE_SUFFIX)))
                return false;
        if (!digits(t, 4, &year) || !digits(t + 4, 2, &month) || !digits(t + 6, 2, &day) || t[8] != 'T' ||
            !digits(t + 9, 2, &hour) || !digits(t + 11, 2, &minute) || !digits(t + 13, 2, &second) ||
            t[15] != 'Z')
                return false;
        tm = (struct tm) { .tm_year = year - 1900,
                           .tm_mon = month - 1,
                           .tm_mday = day,
                           .tm_hour = hour,
                           .tm_min = minute,
                           .tm_sec = second };
        when = timegm(&tm);
        /* Only a time that exists: timegm() normalizes the 31st of February into March. */
        if (when == (time_t) -1 || tm.tm_year != year - 1900 || tm.tm_mon != month - 1 ||
            tm.tm_mday != day || tm.tm_hour != hour || tm.tm_min != minute || tm.tm_sec != second)
                return false;
        if (ret_when)
                *ret_when = (int64_t) when;
        if (ret_stem_len)
                *ret_stem_len = stem_len;
        return true;
}
