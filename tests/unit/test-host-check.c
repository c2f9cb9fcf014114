/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the host check's pure parts: judging sysctl values, their paths, the cgroup
 * hierarchy from filesystem magics, counting swap areas. */
#include <errno.h>
#include <linux/magic.h>

#include "host-check.h"
#include "tests.h"

static const HostSysctl *find(const char *name) {
        const HostSysctl *table;
        size_t n;

        table = host_sysctls(&n);
        for (size_t i = 0; i < n; i++)
                if (strcmp(table[i].name, name) == 0)
                        return table + i;
        return NULL;
}

static void test_table(void) {
        const HostSysctl *table;
        size_t n;

        /* docs/security.md §1.5: all twelve, each with a recommendation and a reason. */
        table = host_sysctls(&n);
        ASSERT_EQ(n, 12);
        for (size_t i = 0; i < n; i++) {
                ASSERT_TRUE(table[i].recommended && table[i].recommended[0]);
                ASSERT_TRUE(table[i].risk && table[i].risk[0]);
                /* The recommendation itself passes, one step weaker fails. */
                const char *want = table[i].recommended + strspn(table[i].recommended, "<>=");
                char weaker[32];
                ASSERT_EQ(host_sysctl_evaluate(table + i, want), 1);
                snprintf(weaker, sizeof(weaker), "%lld",
                         (long long) (table[i].rule == HOST_CHECK_AT_LEAST ? table[i].want - 1
                                                                           : table[i].want + 1));
                ASSERT_EQ(host_sysctl_evaluate(table + i, weaker), 0);
        }
}

static void test_evaluate(void) {
        const HostSysctl *regular = find("fs.protected_regular"),
                         *paranoid = find("kernel.perf_event_paranoid"),
                         *tiocsti = find("dev.tty.legacy_tiocsti"), *dumpable = find("fs.suid_dumpable");

        ASSERT_TRUE(regular && paranoid && tiocsti && dumpable);
        /* As read from /proc/sys: with the newline. */
        ASSERT_EQ(host_sysctl_evaluate(regular, "2\n"), 1);
        ASSERT_EQ(host_sysctl_evaluate(regular, "1\n"), 0);
        ASSERT_EQ(host_sysctl_evaluate(regular, "0"), 0);
        ASSERT_EQ(host_sysctl_evaluate(paranoid, "3\n"), 1);  /* Debian's stricter level */
        ASSERT_EQ(host_sysctl_evaluate(paranoid, "-1\n"), 0);
        ASSERT_EQ(host_sysctl_evaluate(tiocsti, "0\n"), 1);
        ASSERT_EQ(host_sysctl_evaluate(tiocsti, "1\n"), 0);
        ASSERT_EQ(host_sysctl_evaluate(dumpable, "2\n"), 0);

        ASSERT_EQ(host_sysctl_evaluate(regular, ""), -EINVAL);
        ASSERT_EQ(host_sysctl_evaluate(regular, "\n"), -EINVAL);
        ASSERT_EQ(host_sysctl_evaluate(regular, "2 \n"), -EINVAL);
        ASSERT_EQ(host_sysctl_evaluate(regular, "two\n"), -EINVAL);
        ASSERT_EQ(host_sysctl_evaluate(regular, "2\n\n"), -EINVAL);
        ASSERT_EQ(host_sysctl_evaluate(regular, "99999999999999999999999999999999999\n"), -EINVAL);
}

static void test_path(void) {
        char buf[64];

        ASSERT_EQ(host_sysctl_path("fs.protected_regular", buf, sizeof(buf)), 0);
        ASSERT_STREQ(buf, "/proc/sys/fs/protected_regular");
        ASSERT_EQ(host_sysctl_path("dev.tty.legacy_tiocsti", buf, sizeof(buf)), 0);
        ASSERT_STREQ(buf, "/proc/sys/dev/tty/legacy_tiocsti");
        ASSERT_EQ(host_sysctl_path("kernel.unprivileged_bpf_disabled", buf, 20), -ENOBUFS);
}

static void test_cgroup_mode(void) {
        ASSERT_EQ(cgroup_mode_from_magic(CGROUP2_SUPER_MAGIC, 0), CGROUP_UNIFIED);
        ASSERT_EQ(cgroup_mode_from_magic(TMPFS_MAGIC, CGROUP2_SUPER_MAGIC), CGROUP_HYBRID);
        ASSERT_EQ(cgroup_mode_from_magic(TMPFS_MAGIC, 0), CGROUP_LEGACY);
        ASSERT_EQ(cgroup_mode_from_magic(0x9fa0 /* proc */, 0), _CGROUP_MODE_INVALID);
        ASSERT_STREQ(cgroup_mode_to_string(CGROUP_HYBRID), "hybrid");
        ASSERT_TRUE(cgroup_mode_to_string(_CGROUP_MODE_INVALID) == NULL);
}

static void test_swaps(void) {
        static const char header[] = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

        ASSERT_EQ(host_swaps_count(header), 0);
        ASSERT_EQ(host_swaps_count(""), 0);
        ASSERT_EQ(host_swaps_count("Filename Type Size Used Priority"), 0);
        ASSERT_EQ(host_swaps_count("Filename\n/dev/vda2 partition 4194300 0 -2\n"), 1);
        ASSERT_EQ(host_swaps_count("Filename\n/dev/vda2 partition 4194300 0 -2\n/swapfile file 1024 0 -3"),
                  2);
        ASSERT_EQ(host_swaps_count("Filename\n\n/swapfile file 1024 0 -3\n\n"), 1);
}

typedef struct Seen {
        unsigned n, weak;
        char settings[16][64];
} Seen;

static void on_finding(const HostFinding *f, void *userdata) {
        Seen *seen = userdata;

        ASSERT_TRUE(seen->n < 16);
        ASSERT_TRUE(f->setting && f->recommended && f->risk);
        snprintf(seen->settings[seen->n++], sizeof(seen->settings[0]), "%s", f->setting);
        if (f->verdict == HOST_UNKNOWN)
                ASSERT_TRUE(f->error < 0);
        else
                ASSERT_EQ(f->error, 0);
        seen->weak += f->verdict == HOST_WEAK;
        /* A sysctl's verdict is the rule applied to the value reported. */
        const HostSysctl *s = find(f->setting);
        if (s && f->verdict != HOST_UNKNOWN)
                ASSERT_EQ(host_sysctl_evaluate(s, f->value), f->verdict == HOST_OK);
}

static void test_run(void) {
        const HostSysctl *table;
        Seen seen = {};
        size_t n;

        /* This host's real settings: every sysctl in table order, then cgroup and swap, once. */
        table = host_sysctls(&n);
        ASSERT_EQ(host_check_run(on_finding, &seen), seen.weak);
        ASSERT_EQ(seen.n, n + 2);
        for (size_t i = 0; i < n; i++)
                ASSERT_STREQ(seen.settings[i], table[i].name);
        ASSERT_STREQ(seen.settings[n], "cgroup");
        ASSERT_STREQ(seen.settings[n + 1], "swap");
}

int main(void) {
        RUN(test_table);
        RUN(test_evaluate);
        RUN(test_path);
        RUN(test_cgroup_mode);
        RUN(test_swaps);
        RUN(test_run);
        return 0;
}
