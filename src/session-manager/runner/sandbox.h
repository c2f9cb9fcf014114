/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The per-exec sandbox: PID 1 of fresh namespaces builds the root, then runs the interpreter. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <seccomp.h>

#include "macro.h"
#include "pidref.h"
#include "seccomp-policy.h"

/* Namespaces every exec gets (the mount namespace is a copy of the runner's private one). An exec
 * with a network gets no new network namespace of its own: PID 1 joins the one the runner made
 * for it (SandboxExec.netns_fd), which belongs to slirp4netns's user namespace. */
#define SANDBOX_CLONE_FLAGS \
        (CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)

/* The sandbox's uid and gid as the code sees them, inside its user namespace; each session maps
 * them to its own host uid and gid. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000
#define SANDBOX_HOSTNAME "sandbox"
#define SANDBOX_PYTHON "/usr/bin/python3"
#define SANDBOX_NODE "/usr/bin/node"
#define SANDBOX_CELL_PATH "/exec/cell.py"
#define SANDBOX_CELL_PATH_JS "/exec/cell.js"
#define SANDBOX_PRELOAD_SCRIPT SCOPEBOX_DATA_DIR "/preload.py"
/* The operator's Python packages (scopeboxctl packages install), root's alone: bound read-only
 * at SANDBOX_SITE_PACKAGES, which our sitecustomize.py appends to sys.path. */
#define SCOPEBOX_SITE_PACKAGES_DIR SCOPEBOX_STATE_DIR "/site-packages"
#define SANDBOX_SITE_PACKAGES "/opt/scopebox/site-packages"
#define SANDBOX_SITECUSTOMIZE SCOPEBOX_DATA_DIR "/sitecustomize.py"
/* The dify profile's Python starts the cell through this (dify-sandbox's exception hook). */
#define SANDBOX_DIFY_RUN_SCRIPT SCOPEBOX_DATA_DIR "/dify-run.py"
/* Where the payload keeps its end of the socket to PID 1 until its filter is loaded. */
#define SANDBOX_SYNC_FD 3
/* A stateful session's kernel (sandbox-kernel.c): the driver that runs each cell in one
 * interpreter, and its socket to PID 1 (cells in, exit codes out). */
#define SANDBOX_KERNEL_SCRIPT SCOPEBOX_DATA_DIR "/kernel.py"
#define SANDBOX_KERNEL_FD 4
#define SANDBOX_SLIRP4NETNS "/usr/bin/slirp4netns"
/* slirp4netns's built-in DNS forwarder, as the sandbox sees it. */
#define SANDBOX_SLIRP_DNS "10.0.2.3"

typedef enum SandboxLanguage {
        SANDBOX_PYTHON3,
        SANDBOX_NODEJS,
        SANDBOX_COMMAND,                 /* argv, environment and cwd packed in the code
                                          * (exec-command.h): the E2B API's processes */
} SandboxLanguage;

/* The session's private tree (a tmpfs in the runner's mount namespace). */
#define SESSION_WORKSPACE_DIR "workspace"
#define SESSION_SCRATCH_DIR "scratch"    /* tmp/ and home/ of the sandbox */
#define SESSION_NEWROOT_DIR "newroot"    /* mount point of each exec's root */

/* Why a stateful cell never ran, in SandboxStatus.value with SANDBOX_STATUS_KERNEL_LOST. */
typedef enum SandboxKernelLoss {
        SANDBOX_KERNEL_LOSS_DIED = 0,    /* the kernel died while stopped (the OOM killer, say) */
        SANDBOX_KERNEL_LOSS_RAN = 1,     /* it ran between cells, when nothing may: PID 1 ended it */
} SandboxKernelLoss;

typedef enum SandboxStatusKind {
        SANDBOX_STATUS_EXITED = 0,       /* value: wait status of the payload */
        SANDBOX_STATUS_SETUP_FAILED = 1, /* value: errno; step names what failed */
        SANDBOX_STATUS_KERNEL_LOST = 2,  /* a stateful cell that never ran: its kernel had died
                                          * while stopped (PID 1 exits); the runner starts a new one */
        SANDBOX_STATUS_PREPARED_LOST = 3, /* a prepared sandbox's payload died before the code came
                                           * (value: its wait status): nothing of the exec ran, the
                                           * runner starts it in a new sandbox */
} SandboxStatusKind;

/* After the runner's SIGTERM (the exec's timeout, a cancel) PID 1 kills every process of the
 * sandbox and waits this long for the template's child to report the payload; the runner kills
 * PID 1 itself SANDBOX_END_GRACE_MS later than that. */
#define SANDBOX_END_GRACE_MS 1000

/* What the exec's processes used, measured by the kernel's process accounting: the rusage and
 * I/O counters of every process of the sandbox once reaped (the payload, what it started, what
 * was left and killed at its end), and the PID namespace's last PID. */
typedef struct SandboxUsage {
        uint64_t cpu_usec;               /* user + system time */
        uint64_t max_rss_bytes;          /* the largest resident set of one process */
        uint64_t written_bytes;          /* bytes passed to write(2) and friends (files, pipes) */
        uint64_t tasks;                  /* processes and threads created in the namespace */
        bool valid;
        bool written_valid;              /* /proc/<pid>/io was readable */
        bool tasks_valid;
} SandboxUsage;

/* Written by the sandbox's PID 1 to the status pipe, once. */
typedef struct SandboxStatus {
        int32_t kind;
        int32_t value;
        char step[64];
        int32_t start;                   /* SandboxStart */
        int32_t template_error;          /* why the template was not used (errno), 0 if it was */
        SeccompReport seccomp;           /* the calls the filter refused */
        SandboxUsage usage;
        int32_t kernel;                  /* SandboxKernelState */
} SandboxStatus;

/* What became of a stateful session's kernel, in SandboxStatus.kernel. */
typedef enum SandboxKernelState {
        SANDBOX_KERNEL_NONE = 0,         /* no kernel: a stateless exec */
        SANDBOX_KERNEL_KEPT = 1,         /* stopped, waiting for the next cell */
        SANDBOX_KERNEL_ENDED = 2,        /* gone with everything of its sandbox; PID 1 exits */
} SandboxKernelState;

typedef struct SandboxExec {
        const char *session_root;
        int code_fd;
        int stdout_fd;
        int stderr_fd;
        int status_fd;
        uid_t uid;                       /* host ids the sandbox's SANDBOX_UID/GID map to */
        gid_t gid;
        uint64_t timeout_ms;
        uint64_t fsize_limit;
        uint64_t cpus_percent;
        uint64_t memory_limit;           /* the scope's MemoryMax=, sizes Node's heap; 0: unknown */
        SandboxLanguage language;
        bool no_processes;               /* the filter was built with no_processes */
        char *const *extra_env;          /* NULL-terminated "NAME=value" list, or NULL */
        int network_ready_fd;            /* with a network: slirp4netns says "1" here once the
                                          * namespace's interface is up; -EBADF without */
        int netns_fd;                    /* with a network: the network namespace PID 1 joins
                                          * (setns) instead of a new one; -EBADF without */
        /* The template (template-protocol.h): a connection to the fork server whose child becomes
         * this sandbox's payload, or -EBADF (a cold start). With it, the session's cgroup (v2
         * directory); PID 1 falls back to a cold start when the template does not answer. */
        int template_fd;
        const int *cgroup_fds;           /* n_cgroup_fds directories */
        size_t n_cgroup_fds;
        /* The profile's seccomp filter as BPF (a sealed memfd, seccomp_filter_set_split()): every
         * payload loads it, from the template or cold. */
        int filter_fd;
        struct stat site;                /* the operator's site directory as the runner sees it */
        /* A stateful session's sandbox: PID 1 stays for many cells and runs them in one
         * interpreter (sandbox-kernel.c). code_fd, stdout_fd, stderr_fd and status_fd are the
         * first cell's; the next ones come over kernel_fd (PID 1's end of the runner's socket). */
        bool kernel;
        int kernel_fd;
        int kernel_payload_fd;           /* inside: the payload's end of PID 1's socket to it */
        /* A prepared sandbox (sandbox-prepared.c): built, and its payload made, before the exec
         * exists; PID 1's end of the runner's socket over which the exec's SandboxGo and code come
         * (code_fd is -EBADF until then), or -EBADF. In the payload: keep SANDBOX_SYNC_FD, over
         * which PID 1 releases it (TemplateGo) once the code is in place. */
        int prepared_fd;
        bool prepared;
        /* The session's sandboxes' cgroup (its cgroup.procs, opened by the runner): PID 1 moves
         * itself in first, with in_payload; everything of the sandbox is born there. */
        bool in_payload;
        int payload_procs_fd;
        /* A command's stdin (the E2B API's sendStdin): the read end of a pipe of the gateway's,
         * with has_stdin; /dev/null otherwise. */
        bool has_stdin;
        int stdin_fd;
} SandboxExec;

/* The runner hands a prepared sandbox its exec: this, with the code's fd (SCM_RIGHTS). */
#define SANDBOX_GO_MAGIC 0x53424f47u /* "SBGO" */
typedef struct SandboxGo {
        uint32_t magic;
        uint32_t reserved;
        uint64_t timeout_ms;
} SandboxGo;

/* How the payload started, in SandboxStatus.start. */
typedef enum SandboxStart {
        SANDBOX_START_COLD = 0,          /* a new interpreter was executed */
        SANDBOX_START_TEMPLATE = 1,      /* a child of the template */
} SandboxStart;

/* Maps the user namespace of 'pid' (a child in a new one): SANDBOX_UID/GID there are the host's
 * uid/gid, nothing else (in particular not uid 0) is mapped; setgroups() is denied. */
int sandbox_map_ids(pid_t pid, uid_t uid, gid_t gid);
/* The same with other ids inside: 'inside_uid'/'inside_gid' there are the host's uid/gid. */
int sandbox_map_ids_as(pid_t pid, uid_t inside_uid, gid_t inside_gid, uid_t uid, gid_t gid);

/* In a user namespace mapped by sandbox_map_ids(), while still holding its capabilities: lock
 * the securebits, empty the bounding set, become SANDBOX_UID/GID, empty every capability set and
 * set no_new_privs. On failure *ret_step names the step. */
int sandbox_become_user(const char **ret_step);

/* The payload's part of the sandbox, as root in the sandbox's namespaces: a new session and
 * signal mask, the exec's stdio and rlimits (with 'from_template', a child of the template: its
 * Python keeps its handlers, and gets the cold interpreter's command line and environment in
 * /proc), /workspace, its own user namespace mapped by PID 1 over sync_fd (which
 * moves to SANDBOX_SYNC_FD), the sandbox user without capabilities and with no_new_privs, only
 * fds 0-2 left, and the seccomp filter last (e->filter_fd's BPF when set, else e->seccomp), its
 * listener handed to PID 1. 'envp' gets the interpreter's environment. On failure *ret_step
 * names the step and errno says why; then the caller reports and exits. */
int sandbox_payload_specialize(const SandboxExec *e, int sync_fd, bool from_template, char **envp,
                               size_t n_envp, char *env_buf, size_t env_buf_size, const char **ret_step);

/* The interpreter's environment (docs/runtime.md) into envp (n_max ≥ 16 entries; 'buf', about
 * 160 bytes, holds the formatted ones). 'base_only': the template's, without PYTHONPATH and the
 * exec's extras. Returns the number of entries. */
size_t sandbox_build_env(const SandboxExec *e, bool base_only, char *buf, size_t buf_size, char **envp,
                         size_t n_max);

/* matplotlib's font list, built once at install (tools/build-font-cache), copied into
 * <scratch>/tmp/matplotlib (the sandbox's MPLCONFIGDIR, created here, owned by uid/gid like the
 * copies: matplotlib rewrites it when fonts change), so that the first chart needs no scan of all
 * fonts. Called before anything of the sandbox exists to race it. No cache: nothing copied. */
#define SANDBOX_FONT_CACHE_DIR SCOPEBOX_CACHE_DIR "/matplotlib"
int sandbox_seed_font_cache(int scratch_fd, uid_t uid, gid_t gid);

/* Builds a sandbox's root under e->session_root as PID 1 does, and pivots into it (the
 * template's own root: its workspace, tmp and home are empty). In a new mount, UTS and network
 * namespace. On failure *ret_step names the step. */
int sandbox_build_root(const SandboxExec *e, const char **ret_step);

/* Kills every other process of the caller's PID namespace and reaps them (PID 1 only). */
void sandbox_end_all_processes(void);

/* PID 1 of a sandbox (sandbox_run_init()) is a prologue every start mode shares, then one step per
 * start mode (cold, from the template, a stateful session's kernel), then the supervision of the
 * payload. What the prologue leaves it: the socket to the payload (sync[0] ours, sync[1] the
 * payload's), the signalfd of its signals, and for the usage report its /proc/self/io and its PID
 * namespace's ns_last_pid (each -EBADF when it could not be opened). */
typedef struct SandboxInit {
        int sync[2];
        int signal_fd;
        int io_fd;
        int last_pid_fd;
        int exec_dir_fd;                 /* a prepared sandbox's /exec, where the code goes */
        bool attached;                   /* a prepared sandbox's payload: mapped, listener taken */
        int listener;                    /* then its seccomp listener (or -EBADF) */
} SandboxInit;

/* Blocks SIGCHLD and SIGTERM and returns a signalfd (non-blocking) for them, or a negative errno. */
int sandbox_init_signals(void);

/* PID 1, when the payload's seccomp listener *listener polled 'revents': a refused call is answered
 * and recorded in sup->report, which goes to *report; a listener that fails is closed (the calls
 * then fail with ENOSYS), as is one that hung up (no process uses the filter any more). */
void sandbox_listener_event(int *listener, short revents, SeccompSupervisor *sup, SeccompReport *report);

/* Reads every signal pending on 'signal_fd'; returns whether the runner's SIGTERM (the exec's
 * timeout, a cancel) was among them: a SIGTERM from outside our PID namespace only. */
bool sandbox_sigterm_from_outside(int signal_fd);
/* The runner's requests among the signals read: SIGTERM (end everything) and SIGINT (interrupt a
 * kernel's cell), sent from outside the PID namespace. */
#define SANDBOX_OUTSIDE_TERM 1U
#define SANDBOX_OUTSIDE_INT 2U
unsigned sandbox_signals_from_outside(int signal_fd);

/* PID 1 once the payload started, sandbox_run_init()'s last step: closes what only the payload
 * needed, attaches the payload over init->sync[0] (maps its user namespace, takes its seccomp
 * listener), answers its refused calls and reaps until it ends (after the runner's SIGTERM: kills
 * everything first), then kills and reaps whatever it left in the namespace, measures what all of
 * them used, and writes *st to e->status_fd. 'payload': our child (a cold start), or 0: a child of
 * the template, whose wait status its parent writes to 'payload_status_fd'. Returns 0, or a
 * negative errno when the payload could not be attached (then nothing was written). */
int sandbox_supervise_payload(const SandboxExec *e, SandboxInit *init, pid_t payload, int payload_status_fd,
                              SandboxStatus *st);

/* sandbox-kernel.c: PID 1 of a stateful session's sandbox once its kernel ('kernel', our child,
 * started from SANDBOX_KERNEL_SCRIPT with 'ksock' at SANDBOX_KERNEL_FD) exists and 'listener' is
 * its seccomp listener (or -EBADF): runs the first cell and every one the runner sends. */
_noreturn_ void sandbox_kernel_run(const SandboxExec *e, const PidRef *kernel, int ksock, int listener,
                                   int signal_fd, int io_fd, int last_pid_fd);

/* PID 1's reports on e->status_fd: how the payload started (once, as soon as that is decided), and
 * a failure (with its step) before the payload ran, after which it exits with 'code'. */
void sandbox_report_start(int status_fd, SandboxStart start);
_noreturn_ void sandbox_report_and_exit(int status_fd, SandboxStatusKind kind, int value, const char *step,
                                        int code);

/* PID 1: the payload's user namespace mapped and its seccomp listener taken (payload_attach). */
int sandbox_payload_attach(const SandboxExec *e, pid_t payload, int sync_fd);

/* Writes the code of 'code_fd' as the exec's cell file (cell.py, cell.js) into the directory
 * 'dir_fd', never through a link. */
int sandbox_write_cell(const SandboxExec *e, int dir_fd, int code_fd);

/* The RLIMIT_CPU of an exec with this timeout (a backstop above it). */
uint64_t sandbox_cpu_limit_sec(uint64_t timeout_ms, uint64_t cpus_percent);

/* sandbox-prepared.c: PID 1 of a prepared sandbox, once its payload exists (a child of the
 * template waiting for its release, payload_status_fd its parent's report; or none yet,
 * -EBADF: a cold one starts after the code came). Waits for the runner's SandboxGo and code on
 * e->prepared_fd, puts the code in /exec, sets e->code_fd and e->timeout_ms, and releases the
 * payload. Exits when the runner gives the sandbox up (closes its socket, SIGTERM) and reports
 * SANDBOX_STATUS_PREPARED_LOST when the payload died waiting. */
void sandbox_prepared_wait(SandboxExec *e, SandboxInit *init, int payload_status_fd, SandboxStatus *st);

/* Runs in the child created with SANDBOX_CLONE_FLAGS; never returns. */
_noreturn_ void sandbox_run_init(const SandboxExec *e);
