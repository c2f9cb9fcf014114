/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Host prerequisites of the sandbox (docs/security.md): the kernel settings worth checking, how to
 * judge them, and reading them. The session manager logs the weak ones; scopeboxctl doctor shows all. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum HostCheckRule {
        HOST_CHECK_AT_LEAST,
        HOST_CHECK_AT_MOST,
} HostCheckRule;

typedef struct HostSysctl {
        const char *name;        /* as sysctl(8) names it: "fs.protected_regular" */
        HostCheckRule rule;
        int64_t want;
        const char *recommended; /* the same, for people and SCOPEBOX_RECOMMENDED= */
        const char *risk;        /* what a weaker value allows */
} HostSysctl;

typedef enum CgroupMode {
        CGROUP_UNIFIED,          /* cgroup v2 only */
        CGROUP_HYBRID,           /* v1 controllers, cgroup2 at /sys/fs/cgroup/unified */
        CGROUP_LEGACY,           /* v1 only */
        _CGROUP_MODE_MAX,
        _CGROUP_MODE_INVALID = -EINVAL,
} CgroupMode;

/* The sysctls worth checking, in the order they are logged. */
const HostSysctl *host_sysctls(size_t *ret_n);

/* 1 when the value (text of a /proc/sys file, trailing newline allowed) meets the rule, 0 when it
 * is weaker, -EINVAL when it is not a number. */
int host_sysctl_evaluate(const HostSysctl *s, const char *value);

/* "fs.protected_regular" → "/proc/sys/fs/protected_regular". -ENOBUFS if it doesn't fit. */
int host_sysctl_path(const char *name, char *buf, size_t size);

/* From the filesystem magic of /sys/fs/cgroup and of /sys/fs/cgroup/unified (0 if absent). */
CgroupMode cgroup_mode_from_magic(int64_t root_magic, int64_t unified_magic);
const char *cgroup_mode_to_string(CgroupMode m);

/* Number of active swap areas listed in the text of /proc/swaps. */
size_t host_swaps_count(const char *proc_swaps);

typedef enum HostVerdict {
        HOST_OK,
        HOST_WEAK,
        HOST_UNKNOWN,            /* not checked: see 'error' (-ENOENT: the knob is not on this kernel) */
} HostVerdict;

/* One setting as found on this host. */
typedef struct HostFinding {
        const char *setting;     /* a sysctl name, "cgroup" or "swap" */
        char value[64];          /* as read, without the newline; "" when unknown */
        const char *recommended;
        const char *risk;        /* what a weaker value allows */
        HostVerdict verdict;
        int error;               /* negative errno when HOST_UNKNOWN */
} HostFinding;

typedef void (*HostFindingFunc)(const HostFinding *f, void *userdata);

/* Reads every sysctl of host_sysctls(), the cgroup hierarchy and swap, and hands each finding to
 * 'f' in that order. Never fails: returns the number of weak settings. */
unsigned host_check_run(HostFindingFunc f, void *userdata);
