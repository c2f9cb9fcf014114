/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the quarantined archives' names: made, recognized, and nothing else taken for one. */
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "quarantine.h"
#include "tests.h"

static void test_key(void) {
        char *k = NULL;
        int64_t when = 0;
        size_t stem = 0;

        /* 2025-03-04 05:06:07 UTC */
        ASSERT_EQ(quarantine_key("aivory/workspaces/conv-1.tgz", 1741064767, &k), 0);
        ASSERT_STREQ(k, "aivory/workspaces/conv-1.tgz.damaged-20250304T050607Z");
        ASSERT_TRUE(quarantine_key_parse(k, &when, &stem));
        ASSERT_EQ(when, 1741064767);
        ASSERT_EQ(stem, strlen("conv-1"));
        ASSERT_TRUE(quarantine_key_is(k));
        /* The last component alone, as a directory listing gives it. */
        ASSERT_TRUE(quarantine_key_is("conv-1.tgz.damaged-20250304T050607Z"));
        free(k);

        ASSERT_EQ(quarantine_key("w/a.tgz", 0, &k), 0);
        ASSERT_STREQ(k, "w/a.tgz.damaged-19700101T000000Z");
        free(k);
}

static void test_not_quarantined(void) {
        static const char *const names[] = {
                "workspaces/conv-1.tgz", /* a live archive */
                "conv-1.tgz.damaged-", /* no time */
                "conv-1.tgz.damaged-20250304T050607", /* no Z */
                "conv-1.tgz.damaged-20250304T050607Z.tgz", /* something after it */
                "conv-1.tgz.damaged-20250304 050607Z", /* no T */
                "conv-1.tgz.damaged-2025030AT050607Z", /* not digits */
                "conv-1.tgz.damaged-20250231T050607Z", /* no 31st of February */
                "conv-1.tgz.damaged-20251304T050607Z", /* month 13 */
                "conv-1.tgz.damaged-20250304T250607Z", /* hour 25 */
                "conv-1.zip.damaged-20250304T050607Z", /* not an archive's */
                ".tgz.damaged-20250304T050607Z", /* no stem */
                "conv-1.tgz.broken-20250304T050607Z",
                "conv-1.tgz.damaged-20250304T050607Z/x.tgz", /* a directory of that name: its content */
                "",
        };

        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                if (quarantine_key_is(names[i]))
                        fprintf(stderr, "taken for quarantined: '%s'\n", names[i]);
                ASSERT_TRUE(!quarantine_key_is(names[i]));
        }
}

int main(void) {
        RUN(test_key);
        RUN(test_not_quarantined);
        return 0;
}
