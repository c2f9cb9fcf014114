/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of scopeboxctl's pure helpers: sizes, durations and "unknown" (UINT64_MAX) as people
 * read them, JSON null for unknown numbers. */
#include <stdint.h>

#include "ctl.h"
#include "tests.h"

static void test_format_bytes(void) {
        char buf[32];

        ASSERT_STREQ(format_bytes(buf, sizeof(buf), UINT64_MAX), "-");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 0), "0B");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 1023), "1023B");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 1024), "1.0K");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 12288), "12K");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 1536ULL << 20), "1.5G");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 2ULL << 30), "2.0G");
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), 512ULL << 20), "512M");
        /* whole units from 10 on, rounded down */
        ASSERT_STREQ(format_bytes(buf, sizeof(buf), UINT64_MAX - 1), "15E");
}

static void test_format_duration(void) {
        char buf[32];

        ASSERT_STREQ(format_duration(buf, sizeof(buf), UINT64_MAX), "-");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 0), "0s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 59 * USEC_PER_SEC + 999999), "59s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 1800 * USEC_PER_SEC), "30min 0s");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 3 * 3600 * USEC_PER_SEC + 125 * USEC_PER_SEC),
                     "3h 2min");
        ASSERT_STREQ(format_duration(buf, sizeof(buf), 7 * 86400 * USEC_PER_SEC), "7d 0h");
}

static void test_format_u64(void) {
        char buf[32];

        ASSERT_STREQ(format_u64(buf, sizeof(buf), UINT64_MAX), "-");
        ASSERT_STREQ(format_u64(buf, sizeof(buf), 256), "256");
}

static void test_json_unknown(void) {
        json_object *o = json_uint64_or_null(UINT64_MAX);

        ASSERT_TRUE(o == NULL);
        o = json_uint64_or_null(5);
        ASSERT_TRUE(o && json_object_get_uint64(o) == 5);
        json_object_put(o);
}

static void test_session_id(void) {
        ASSERT_EQ(ctl_check_session_id("0123456789abcdef0123456789abcdef"), 0);
        ASSERT_EQ(ctl_check_session_id("0123456789ABCDEF0123456789ABCDEF"), -ENXIO);
        ASSERT_EQ(ctl_check_session_id("../../etc"), -ENXIO);
        ASSERT_EQ(ctl_check_session_id(""), -ENXIO);
}

static void assert_printed(Table *t, bool header, bool footer, const char *want) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        ASSERT_TRUE(f);
        table_print(t, f, header, footer);
        ASSERT_EQ(fclose(f), 0);
        ASSERT_STREQ(text, want);
        free(text);
}

static void test_table(void) {
        _cleanup_(table_freep) Table *t = NULL;

        ASSERT_EQ(table_new(&t, "A", "BB", NULL), 0);
        ASSERT_EQ(table_add_row(t, "long cell", (const char *) NULL), 0); /* NULL prints empty */
        ASSERT_EQ(table_add_row(t, "x", "y"), 0);
        /* Columns as wide as their widest cell, headers included; the last one not padded. */
        assert_printed(t, true, true, "A         BB\nlong cell \nx         y\n\n2 entries listed.\n");
        assert_printed(t, false, false, "long cell \nx         y\n");
}

static void test_parse_time_span(void) {
        static const struct {
                const char *text;
                uint64_t default_unit, want;
        } good[] = {
                { "1500",  USEC_PER_MSEC, 1500 * USEC_PER_MSEC },
                { "90",    USEC_PER_SEC,  90 * USEC_PER_SEC },
                { "500ms", USEC_PER_SEC,  500 * USEC_PER_MSEC },
                { "30s",   USEC_PER_MSEC, 30 * USEC_PER_SEC },
                { "5min",  USEC_PER_SEC,  300 * USEC_PER_SEC },
                { "5m",    USEC_PER_SEC,  300 * USEC_PER_SEC },
                { "2h",    USEC_PER_SEC,  7200 * USEC_PER_SEC },
                { "7d",    USEC_PER_SEC,  7 * 86400 * USEC_PER_SEC },
                { "1w",    USEC_PER_SEC,  7 * 86400 * USEC_PER_SEC },
        };
        static const struct {
                const char *text;
                int error;
        } bad[] = {
                { "", -EINVAL }, { "d", -EINVAL }, { "-5", -EINVAL }, { "5 d", -EINVAL }, { "5y", -EINVAL },
                { "1.5h", -EINVAL }, { "99999999999999999999", -ERANGE }, { "99999999999999w", -ERANGE },
        };
        uint64_t u;

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                ASSERT_EQ(parse_time_span(good[i].text, good[i].default_unit, &u), 0);
                ASSERT_EQ(u, good[i].want);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                u = 42;
                ASSERT_EQ(parse_time_span(bad[i].text, USEC_PER_SEC, &u), bad[i].error);
                ASSERT_EQ(u, 42); /* untouched on failure */
        }
}

int main(void) {
        RUN(test_format_bytes);
        RUN(test_format_duration);
        RUN(test_format_u64);
        RUN(test_json_unknown);
        RUN(test_session_id);
        RUN(test_table);
        RUN(test_parse_time_span);
        return 0;
}
