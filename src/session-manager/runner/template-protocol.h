/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How a sandbox's PID 1 asks the template (scopebox-template(8), docs/security.md "The template")
 * for its payload: one SOCK_SEQPACKET connection per exec, opened by the runner, over which PID 1
 * sends one TemplateRequest with the fds below, and the template's child answers one
 * TemplateReply once the payload exists (or why not). */
#pragma once

#include <stdint.h>

#define TEMPLATE_SOCKET_DIR "/run/scopebox-template"
#define TEMPLATE_SOCKET_PATH TEMPLATE_SOCKET_DIR "/python.sock"
#define TEMPLATE_MAGIC 0x53425450u /* "SBTP" */
#define TEMPLATE_PROTOCOL_VERSION 3u
/* The extra environment of an exec (proxies): NUL-terminated "NAME=value" strings. */
#define TEMPLATE_ENV_MAX 4096
/* How long PID 1 waits for the answer before it starts the payload cold. */
#define TEMPLATE_REPLY_TIMEOUT_MS 2000

typedef enum TemplateProfile {
        TEMPLATE_PROFILE_SIDECAR = 0, /* runs as `python3 /exec/cell.py` */
        TEMPLATE_PROFILE_DIFY = 1,    /* as dify-run.py: upstream's exception hook */
        _TEMPLATE_PROFILE_MAX,
} TemplateProfile;

/* The fds of a request, in this order. */
enum {
        TEMPLATE_FD_MNT,       /* PID 1's namespaces (/proc/self/ns/...) */
        TEMPLATE_FD_PID,
        TEMPLATE_FD_NET,
        TEMPLATE_FD_IPC,
        TEMPLATE_FD_UTS,
        TEMPLATE_FD_CGROUPNS,
        TEMPLATE_FD_STDOUT,    /* the exec's pipes */
        TEMPLATE_FD_STDERR,
        TEMPLATE_FD_SYNC,      /* the payload's end of its socket to PID 1 */
        TEMPLATE_FD_FILTER,    /* memfd: the seccomp filter as BPF */
        TEMPLATE_FD_STATUS,    /* pipe: the payload's TemplateStatus is written here */
        _TEMPLATE_FD_MAX,
        /* Then n_cgroups directories: the session scope's cgroup in each hierarchy the runner
         * is in (one on a unified host; the v1 controllers and the unified one on a hybrid). */
};
#define TEMPLATE_CGROUPS_MAX 16

typedef struct TemplateRequest {
        uint32_t magic;
        uint32_t version;
        uint32_t profile;
        uint32_t env_size;     /* bytes of env[] used */
        uint32_t n_cgroups;    /* cgroup directory fds after the fixed ones */
        uint32_t flags;        /* TEMPLATE_REQUEST_* */
        uint64_t timeout_ms;
        uint64_t fsize_limit;
        uint64_t cpus_percent;
        /* The operator's site directory as the runner sees it now: a template built before it
         * changed refuses (ESTALE) and restarts. */
        uint64_t site_dev;
        uint64_t site_ino;
        uint32_t site_mode;
        uint32_t site_uid;
        char env[TEMPLATE_ENV_MAX];
} TemplateRequest;

/* A prepared sandbox's payload (sandbox-prepared.c): it keeps its socket to PID 1 and waits on it,
 * once pristine (its environment set, its random state reseeded: nothing of the session seen),
 * for a TemplateGo; then the code is in /exec. */
#define TEMPLATE_REQUEST_PREPARED (1u << 0)

typedef struct TemplateGo {
        uint32_t magic;        /* TEMPLATE_MAGIC */
        uint32_t reserved;
        uint64_t cpu_limit_sec; /* the exec's RLIMIT_CPU (lowered to it) */
} TemplateGo;

typedef struct TemplateReply {
        int32_t error;         /* 0, or a positive errno */
        int32_t reserved;
} TemplateReply;

/* The template's child, once it has reaped the payload: its wait status and what it used (its
 * rusage, which includes the children it waited for, and the write counter of /proc/<pid>/io). */
typedef struct TemplateStatus {
        int32_t wait_status;
        uint32_t flags;        /* TEMPLATE_STATUS_* */
        uint64_t cpu_usec;
        uint64_t max_rss_bytes;
        uint64_t written_bytes;
} TemplateStatus;
/* scopebox-template-waiter: the template's child once the payload is forked executes it, with
 * these fds and no other; it reaps the payload and writes its TemplateStatus. */
#define TEMPLATE_WAITER_NAME "scopebox-template-waiter"
#define TEMPLATE_WAITER_FD_PAYLOAD 3 /* the payload's pidfd */
#define TEMPLATE_WAITER_FD_STATUS  4 /* the pipe to PID 1 */
#define TEMPLATE_WAITER_FD_IO      5 /* the child's own /proc/<pid>/io, opened before it left the
                                      * template's namespaces (absent if it could not be) */
#define TEMPLATE_STATUS_USAGE   (1u << 0)  /* cpu_usec and max_rss_bytes are set */
#define TEMPLATE_STATUS_WRITTEN (1u << 1)  /* written_bytes is set */
