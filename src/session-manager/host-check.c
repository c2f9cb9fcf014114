/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Host prerequisites of the sandbox (docs/security.md): checked once at start, weak ones logged.
 * The sandbox works without them, so nothing here stops the manager; an operator learns from the
 * journal which kernel settings to raise. */
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/statfs.h>

#include "host-check.h"
#include "io-util.h"
#include "log.h"
#include "parse-util.h"

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

const char *cgroup_mode_to_string(CgroupMode m) {
        if (m < 0 || m >= _CGROUP_MODE_MAX)
                return NULL;
        return cgroup_mode_table[m];
}

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

static void log_weak(const char *setting, const char *value, const char *recommended, const char *risk) {
        char f_setting[96], f_value[64], f_recommended[128];
        size_t len = strcspn(value, "\n");

        (void) snprintf(f_setting, sizeof(f_setting), "SCOPEBOX_SYSCTL=%s", setting);
        (void) snprintf(f_value, sizeof(f_value), "SCOPEBOX_VALUE=%.*s", (int) len, value);
        (void) snprintf(f_recommended, sizeof(f_recommended), "SCOPEBOX_RECOMMENDED=%s", recommended);
        log_struct(LOG_WARNING, 0, LOG_FIELDS(f_setting, f_value, f_recommended),
                   "Host setting %s is %.*s, recommended %s: %s.", setting, (int) len, value, recommended,
                   risk);
}

static unsigned check_sysctls(void) {
        unsigned weak = 0;

        for (size_t i = 0; i < ELEMENTSOF(sysctl_table); i++) {
                const HostSysctl *s = sysctl_table + i;
                _cleanup_free_ char *value = NULL;
                char path[128];
                int r;

                r = host_sysctl_path(s->name, path, sizeof(path));
                if (r < 0)
                        continue;
                r = read_small_file(path, &value);
                if (r == -ENOENT) {
                        /* Older kernels lack some knobs (legacy_tiocsti, io_uring_disabled). */
                        log_debug("Host setting %s does not exist on this kernel, skipping.", s->name);
                        continue;
                }
                if (r < 0) {
                        log_warning_errno(r, "Failed to read %s, not checking it: %m", path);
                        continue;
                }
                r = host_sysctl_evaluate(s, value);
                if (r < 0) {
                        log_warning("Host setting %s has an unexpected value, not checking it.", s->name);
                        continue;
                }
                if (r == 0) {
                        log_weak(s->name, value, s->recommended, s->risk);
                        weak++;
                }
        }
        return weak;
}

static CgroupMode cgroup_mode(void) {
        struct statfs root, unified;

        if (statfs("/sys/fs/cgroup", &root) < 0)
                return log_warning_errno(errno, "Failed to look at /sys/fs/cgroup, not checking it: %m");
        if (statfs("/sys/fs/cgroup/unified", &unified) < 0)
                unified.f_type = 0;
        return cgroup_mode_from_magic((int64_t) root.f_type, (int64_t) unified.f_type);
}

unsigned host_check(void) {
        _cleanup_free_ char *swaps = NULL;
        unsigned weak;
        CgroupMode mode;
        int r;

        weak = check_sysctls();

        mode = cgroup_mode();
        if (mode >= 0 && mode != CGROUP_UNIFIED) {
                log_weak("cgroup", cgroup_mode_to_string(mode), "unified",
                         "the session scopes' MemoryMax, MemorySwapMax, cgroup.kill and memory.oom.group "
                         "need cgroup v2");
                weak++;
        }

        /* Memory limits don't cover swapped-out pages; MemorySwapMax=0 of the scopes and the slice
         * only works with cgroup v2. */
        r = read_small_file("/proc/swaps", &swaps);
        if (r < 0)
                log_warning_errno(r, "Failed to read /proc/swaps, not checking swap: %m");
        else if (mode != CGROUP_UNIFIED && host_swaps_count(swaps) > 0) {
                char value[32];

                (void) snprintf(value, sizeof(value), "on (%zu areas)", host_swaps_count(swaps));
                log_weak("swap", value, "off", "sandboxes can swap beyond their memory limit");
                weak++;
        }

        if (weak == 0)
                log_debug("Host prerequisites met.");
        return weak;
}
