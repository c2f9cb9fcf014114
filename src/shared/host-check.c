/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Host prerequisites of the sandbox (docs/security.md): the kernel settings worth checking, judged.
 * The sandbox works without them; the session manager logs the weak ones at start (an operator
 * learns from the journal which settings to raise) and scopeboxctl doctor lists them all. */
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/statfs.h>

#include "host-check.h"
#include "io-util.h"
#include "macro.h"
#include "parse-util.h"
#include "string-table.h"

/* Sysctl files and /proc/swaps are a few bytes; anything longer is not what we expect. */
#define HOST_FILE_MAX 4096

static const HostSysctl sysctl_table[] = {
        { "fs.protected_symlinks", HOST_CHECK_AT_LEAST, 1, "1",
          "symlinks in sticky directories are followed across owners" },
        { "fs.protected_hardlinks", HOST_CHECK_AT_LEAST, 1, "1",
          "users may hard-link files they cannot write" },
        { "fs.protected_fifos", HOST_CHECK_AT_LEAST, 1, ">=1",
          "O_CREAT opens other users' FIFOs in sticky directories" },
        { "fs.protected_regular", HOST_CHECK_AT_LEAST, 2, "2",
          "O_CREAT opens other users' files in sticky directories" },
        { "dev.tty.legacy_tiocsti", HOST_CHECK_AT_MOST, 0, "0",
          "TIOCSTI can push input into a terminal (the sandbox filter refuses it)" },
        { "kernel.io_uring_disabled", HOST_CHECK_AT_LEAST, 2, "2",
          "io_uring is open to every process (the sandbox filter refuses it)" },
        { "kernel.unprivileged_bpf_disabled", HOST_CHECK_AT_LEAST, 1, ">=1",
          "unprivileged processes may load BPF programs" },
        { "kernel.perf_event_paranoid", HOST_CHECK_AT_LEAST, 2, ">=2",
          "unprivileged processes may use kernel performance events" },
        { "vm.unprivileged_userfaultfd", HOST_CHECK_AT_MOST, 0, "0",
          "unprivileged userfaultfd makes kernel races easier to exploit" },
        { "kernel.dmesg_restrict", HOST_CHECK_AT_LEAST, 1, "1",
          "the kernel log is readable without privileges" },
        { "kernel.kptr_restrict", HOST_CHECK_AT_LEAST, 1, ">=1",
          "kernel addresses are shown to unprivileged processes" },
        { "fs.suid_dumpable", HOST_CHECK_AT_MOST, 0, "0",
          "set-id programs may dump core" },
};

static const char *const cgroup_mode_table[_CGROUP_MODE_MAX] = {
        [CGROUP_UNIFIED] = "unified",
        [CGROUP_HYBRID] = "hybrid",
        [CGROUP_LEGACY] = "legacy",
};

const HostSysctl *host_sysctls(size_t *ret_n) {
        *ret_n = ELEMENTSOF(sysctl_table);
        return sysctl_table;
}

int host_sysctl_evaluate(const HostSysctl *s, const char *value) {
        char buf[32];
        size_t len;
        int64_t v;

        len = strlen(value);
        if (len > 0 && value[len - 1] == '\n')
                len--;
        if (len == 0 || len >= sizeof(buf))
                return -EINVAL;
        memcpy(buf, value, len);
        buf[len] = 0;
        if (safe_atoi64(buf, &v) < 0)
                return -EINVAL;

        switch (s->rule) {
        case HOST_CHECK_AT_LEAST:
                return v >= s->want;
        case HOST_CHECK_AT_MOST:
                return v <= s->want;
        }
        return -EINVAL;
}

int host_sysctl_path(const char *name, char *buf, size_t size) {
        int n;

        n = snprintf(buf, size, "/proc/sys/%s", name);
        if (n < 0 || (size_t) n >= size)
                return -ENOBUFS;
        for (char *p = buf + strlen("/proc/sys/"); *p; p++)
                if (*p == '.')
                        *p = '/';
        return 0;
}

CgroupMode cgroup_mode_from_magic(int64_t root_magic, int64_t unified_magic) {
        if (root_magic == CGROUP2_SUPER_MAGIC)
                return CGROUP_UNIFIED;
        if (root_magic != TMPFS_MAGIC)
                return _CGROUP_MODE_INVALID;
        return unified_magic == CGROUP2_SUPER_MAGIC ? CGROUP_HYBRID : CGROUP_LEGACY;
}

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(cgroup_mode, CgroupMode)

size_t host_swaps_count(const char *proc_swaps) {
        const char *p = strchr(proc_swaps, '\n'); /* the first line is the header */
        size_t n = 0;

        while (p && *++p) {
                if (*p != '\n')
                        n++;
                p = strchr(p, '\n');
        }
        return n;
}

static int read_small_file(const char *path, char **ret) {
        _cleanup_close_ int fd = -EBADF;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return read_full_fd(fd, HOST_FILE_MAX, ret, NULL);
}

static void finding_set_value(HostFinding *f, const char *value) {
        (void) snprintf(f->value, sizeof(f->value), "%.*s", (int) strcspn(value, "\n"), value);
}

static unsigned check_sysctls(HostFindingFunc f, void *userdata) {
        unsigned weak = 0;

        for (size_t i = 0; i < ELEMENTSOF(sysctl_table); i++) {
                const HostSysctl *s = sysctl_table + i;
                _cleanup_free_ char *value = NULL;
                HostFinding finding = {
                        .setting = s->name,
                        .recommended = s->recommended,
                        .risk = s->risk,
                        .verdict = HOST_UNKNOWN,
                };
                char path[128];
                int r;

                r = host_sysctl_path(s->name, path, sizeof(path));
                if (r >= 0)
                        r = read_small_file(path, &value);
                if (r >= 0) {
                        finding_set_value(&finding, value);
                        r = host_sysctl_evaluate(s, value);
                }
                if (r < 0)
                        finding.error = r;  /* -ENOENT: older kernels lack some knobs */
                else {
                        finding.verdict = r > 0 ? HOST_OK : HOST_WEAK;
                        weak += r == 0;
                }
                f(&finding, userdata);
        }
        return weak;
}

static CgroupMode cgroup_mode(void) {
        struct statfs root, unified;

        if (statfs("/sys/fs/cgroup", &root) < 0)
                return -errno;
        if (statfs("/sys/fs/cgroup/unified", &unified) < 0)
                unified.f_type = 0;
        return cgroup_mode_from_magic((int64_t) root.f_type, (int64_t) unified.f_type);
}

unsigned host_check_run(HostFindingFunc f, void *userdata) {
        _cleanup_free_ char *swaps = NULL;
        CgroupMode mode;
        unsigned weak;
        int r;

        weak = check_sysctls(f, userdata);

        mode = cgroup_mode();
        HostFinding cgroup = {
                .setting = "cgroup",
                .recommended = "unified",
                .risk = "the session scopes' MemoryMax, MemorySwapMax, cgroup.kill and memory.oom.group "
                        "need cgroup v2",
                .verdict = mode < 0 ? HOST_UNKNOWN : mode == CGROUP_UNIFIED ? HOST_OK : HOST_WEAK,
                .error = mode < 0 ? (int) mode : 0,
        };
        if (mode >= 0)
                finding_set_value(&cgroup, cgroup_mode_to_string(mode));
        weak += cgroup.verdict == HOST_WEAK;
        f(&cgroup, userdata);

        /* Memory limits don't cover swapped-out pages; MemorySwapMax=0 of the scopes and the slice
         * only works with cgroup v2. */
        HostFinding swap = {
                .setting = "swap",
                .recommended = "off",
                .risk = "sandboxes can swap beyond their memory limit",
                .verdict = HOST_UNKNOWN,
        };
        r = read_small_file("/proc/swaps", &swaps);
        if (r < 0)
                swap.error = r;
        else {
                size_t n = host_swaps_count(swaps);

                if (n == 0)
                        finding_set_value(&swap, "off");
                else
                        (void) snprintf(swap.value, sizeof(swap.value), "on (%zu areas)", n);
                swap.verdict = mode != CGROUP_UNIFIED && n > 0 ? HOST_WEAK : HOST_OK;
        }
        weak += swap.verdict == HOST_WEAK;
        f(&swap, userdata);

        return weak;
}
