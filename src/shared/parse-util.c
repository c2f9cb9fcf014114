/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Parsing of integers, sizes and booleans from configuration and protocol text. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "macro.h"
#include "parse-util.h"

typedef struct Suffix {
        const char *suffix;
        uint64_t factor;
} Suffix;

/* Decimal digits (neither sign nor space may lead), then one of the suffixes (matched ignoring
 * case), which scales them. */
static int parse_u64_suffixed(const char *s, const Suffix *table, size_t n_table, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (isempty(s) || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        for (size_t i = 0; i < n_table; i++)
                if (strcasecmp(end, table[i].suffix) == 0) {
                        if (v > UINT64_MAX / table[i].factor)
                                return -ERANGE;
                        *ret = v * table[i].factor;
                        return 0;
                }
        return -EINVAL;
}

int safe_atou64(const char *s, uint64_t *ret) {
        static const Suffix none[] = { { "", 1 } };

        return parse_u64_suffixed(s, none, ELEMENTSOF(none), ret);
}

int safe_atoi64(const char *s, int64_t *ret) {
        bool negative = s && s[0] == '-';
        uint64_t v;
        int r;

        r = safe_atou64(negative ? s + 1 : s, &v);
        if (r < 0)
                return r;
        if (v > (uint64_t) INT64_MAX + negative)
                return -ERANGE;
        /* -(v - 1) - 1: v may be 2^63, which int64_t cannot hold before it is negated. */
        *ret = negative ? -(int64_t) (v - 1) - 1 : (int64_t) v;
        return 0;
}

int parse_size(const char *s, uint64_t *ret) {
        static const Suffix table[] = {
                { "", 1 },         { "b", 1 },          { "k", 1ULL << 10 }, { "kb", 1ULL << 10 },
                { "kib", 1ULL << 10 }, { "m", 1ULL << 20 }, { "mb", 1ULL << 20 }, { "mib", 1ULL << 20 },
                { "g", 1ULL << 30 }, { "gb", 1ULL << 30 }, { "gib", 1ULL << 30 }, { "t", 1ULL << 40 },
                { "tb", 1ULL << 40 }, { "tib", 1ULL << 40 },
        };

        return parse_u64_suffixed(s, table, ELEMENTSOF(table), ret);
}

int parse_boolean(const char *s) {
        static const char *const yes[] = { "1", "true", "yes", "on", "y", "t" };
        static const char *const no[] = { "0", "false", "no", "off", "n", "f" };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0)
                        return 1;
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0)
                        return 0;
        return -EINVAL;
}

int parse_cpus(const char *s, uint64_t *ret_percent) {
        uint64_t whole = 0, frac = 0, scale = 1;
        const char *p = s;

        if (isempty(s) || !isdigit((unsigned char) *p))
                return -EINVAL;
        for (; isdigit((unsigned char) *p); p++) {
                whole = whole * 10 + (uint64_t) (*p - '0');
                if (whole > 100000)
                        return -ERANGE;
        }
        if (*p == '.') {
                p++;
                for (; isdigit((unsigned char) *p) && scale < 100; p++) {
                        frac = frac * 10 + (uint64_t) (*p - '0');
                        scale *= 10;
                }
                while (isdigit((unsigned char) *p))
                        p++;
        }
        if (*p != 0)
                return -EINVAL;
        *ret_percent = whole * 100 + frac * 100 / scale;
        if (*ret_percent == 0)
                return -ERANGE;
        return 0;
}

int parse_proc_field(const char *text, size_t size, const char *field, uint64_t *ret) {
        size_t l = strlen(field);
        const char *p = text, *end = text + size;

        while (p < end) {
                const char *eol = memchr(p, '\n', (size_t) (end - p)) ?: end;

                if ((size_t) (eol - p) > l + 1 && memcmp(p, field, l) == 0 && p[l] == ':') {
                        char buf[32];
                        const char *v = p + l + 1;
                        size_t n;

                        while (v < eol && *v == ' ')
                                v++;
                        n = (size_t) (eol - v);
                        if (n == 0 || n >= sizeof(buf))
                                return -EINVAL;
                        memcpy(buf, v, n);
                        buf[n] = 0;
                        return safe_atou64(buf, ret);
                }
                p = eol + 1;
        }
        return -ENOENT;
}

int proc_io_read_wchar(int fd, uint64_t *ret) {
        char buf[1024];
        ssize_t k;

        if (fd < 0)
                return -EBADF;
        do
                k = pread(fd, buf, sizeof(buf), 0);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        return parse_proc_field(buf, (size_t) k, "wchar", ret);
}
