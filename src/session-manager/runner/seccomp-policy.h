/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The seccomp filter loaded as the last step before the sandboxed interpreter is executed, and
 * the supervisor side that answers (and records) the calls the filter refuses. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/seccomp.h>

#include <json-c/json.h>
#include <seccomp.h>

#include "bus-contract.h"
#include "macro.h"

DEFINE_CLEANUP_FUNC(scmp_filter_ctx, seccomp_release);

typedef struct SeccompOptions {
        bool allow_inet;      /* AF_INET/AF_INET6 sockets (networking enabled) */
        bool no_processes;    /* threads only: no fork, no new programs (the dify profile); the
                               * supervisor lets the payload's own first execve() through */
} SeccompOptions;

/* Distinct refused calls remembered per exec; more are counted in `overflow`. */
#define SECCOMP_REPORT_MAX 16

typedef struct SeccompBlocked {
        int32_t nr;           /* native syscall number */
        int32_t verdict;      /* errno answered */
        uint32_t count;
} SeccompBlocked;

/* Plain data: it crosses a pipe from the sandbox's PID 1 to the runner. */
typedef struct SeccompReport {
        uint32_t n_calls;
        uint32_t overflow;
        SeccompBlocked calls[SECCOMP_REPORT_MAX];
} SeccompReport;

/* Builds the filter for the native architecture: an allow-list. Calls with no legitimate use kill
 * the process (SIGSYS) right in the kernel; every other refused call except the expected probes
 * (clone3, io_uring, AIO, openat2: plain ENOSYS) is handed to a supervisor
 * through a seccomp user-notification listener (libseccomp asks for one because the default
 * action notifies; after
 * seccomp_load(), seccomp_notify_fd() returns the listener). Does not load it. */
int seccomp_policy_build(const SeccompOptions *options, scmp_filter_ctx *ret);

/* The sandbox profiles, each a filter of its own: compiled once by the session manager
 * (seccomp_filter_set_new()) into one sealed memfd, which every runner gets with its init and
 * splits (seccomp_filter_set_split()) into one sealed memfd of BPF per profile; each sandbox's
 * payload loads its profile's program as it is (no libseccomp at exec time). */
typedef enum SeccompProfile {
        SECCOMP_PROFILE_SIDECAR,        /* a session's execs */
        SECCOMP_PROFILE_SIDECAR_INET,   /* … with a network */
        SECCOMP_PROFILE_DIFY,           /* no_processes */
        SECCOMP_PROFILE_DIFY_INET,
        _SECCOMP_PROFILE_MAX,
} SeccompProfile;

static inline SeccompProfile seccomp_profile_of(bool allow_inet, bool no_processes) {
        return (no_processes ? SECCOMP_PROFILE_DIFY : SECCOMP_PROFILE_SIDECAR) + (allow_inet ? 1 : 0);
}

#define SECCOMP_FILTER_SET_MAGIC 0x53425346u /* "SBSF" */
typedef struct SeccompFilterSetHeader {
        uint32_t magic;
        uint32_t n_programs;                    /* _SECCOMP_PROFILE_MAX */
        uint32_t n_insns[_SECCOMP_PROFILE_MAX]; /* then the programs, in profile order */
} SeccompFilterSetHeader;

int seccomp_filter_set_new(int *ret_fd);
/* One sealed memfd per profile out of the set 'set_fd' (checked: sizes, bounds); all or none. */
int seccomp_filter_set_split(int set_fd, int ret_fds[_SECCOMP_PROFILE_MAX]);

/* The archive helper's filter: an allow-list of file, memory and exit calls; anything else
 * fails with EPERM (the kill list kills). Does not load it. */
int seccomp_policy_build_archive(scmp_filter_ctx *ret);

/* The answer to a call the filter handed to the supervisor. */
int seccomp_policy_verdict(const struct seccomp_data *call);

void seccomp_report_init(SeccompReport *report);
void seccomp_report_add(SeccompReport *report, int nr, int verdict);

/* What PID 1 knows while it answers: the record, and in the no_processes profile the payload
 * whose first execve() (of the interpreter, before any user code) is let through. */
typedef struct SeccompSupervisor {
        SeccompReport report;
        pid_t first_exec_pid;  /* 0: none (any more) */
} SeccompSupervisor;

/* Receives one notification from the listener, answers it and records it. Returns 0, or -errno
 * when the listener failed; a caller that died meanwhile is not an error. */
int seccomp_notify_handle_one(int listener_fd, SeccompSupervisor *supervisor);

/* "EPERM", "ENOSYS", "ENOTTY" or "EAFNOSUPPORT", the only answers seccomp_policy_verdict() gives
 * (and so the only ones the docs list); "refused" for any other value. */
const char *seccomp_verdict_to_string(int verdict);

/* The report as the exec result's "blocked_syscalls" (runner-protocol.h): names and verdicts point
 * into 'calls' itself. */
typedef struct SeccompReportCalls {
        ExecBlocked items[SECCOMP_REPORT_MAX];
        char names[SECCOMP_REPORT_MAX][64];
        size_t n;
} SeccompReportCalls;
void seccomp_report_calls(const SeccompReport *report, SeccompReportCalls *ret);

/* "mount (EPERM), socket (EAFNOSUPPORT, 2 times)", for log messages; NULL on OOM. */
char *seccomp_report_format(const SeccompReport *report);
