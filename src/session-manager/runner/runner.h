/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The runner's objects and what its files (runner.c, runner-session.c, runner-exec.c,
 * runner-template.c, runner-files.c, runner-archive.c) call of each other. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <systemd/sd-event.h>
#include <json-c/json.h>

#include "cgroup-events.h"
#include "id.h"
#include "macro.h"
#include "net-filter-bpf.h"
#include "outputs.h"
#include "pidref.h"
#include "runner-protocol.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "stream-frame.h"
#include "workspace.h"

typedef struct Runner Runner;
typedef struct RunnerPrepared RunnerPrepared;

/* A stateful session's kernel: PID 1 of its sandbox, kept between cells, and the socket over
 * which it gets each cell's fds. */
typedef struct RunnerKernel {
        Runner *runner;
        PidRef init;
        int ctl_fd;
        sd_event_source *child_source;
} RunnerKernel;

typedef struct OutputBuffer {
        char *data;
        size_t size;      /* bytes kept (≤ limit) */
        uint64_t total;   /* bytes seen */
        size_t limit;
        int fd;
        sd_event_source *source;
} OutputBuffer;

typedef struct ExecStream ExecStream;

/* A display cell's result records (runner-exec.c): the pipe the kernel writes them to, framed as
 * whole lines onto the exec's stream, never parsed here. */
typedef struct ResultPipe {
        int fd;
        sd_event_source *source;
        StreamLines lines;
        unsigned noted;           /* the drops said on stderr so far (bits) */
} ResultPipe;

/* The sandboxes' cgroup below the scope (Runner.payload_cgroup_fd). */
#define RUNNER_PAYLOAD_CGROUP "payload"

/* How long an interrupted cell (the Exec option "interrupt") has to end before it is ended. */
#define RUNNER_INTERRUPT_GRACE_MS 2000U

typedef struct RunnerExec {
        Runner *runner;
        uint64_t connection_generation;
        char exec_id[64];

        /* PID 1 of the sandbox (for a cell: of the kernel's, a pidfd of its own), signalled
         * through the pidfd only: its number may be another process's once it is reaped. */
        PidRef init;
        sd_event_source *child_source;
        sd_event_source *timer_source;
        int status_fd;
        OutputBuffer out, err;
        bool display;             /* a stateful cell whose results are records */
        ResultPipe results;       /* with display */
        bool interrupt;           /* a cell's timeout or cancel interrupts it first (SIGINT) */
        bool interrupted;         /* it was: ended as usual if it goes on past the grace */

        uint64_t timeout_ms;
        ArtifactLimits limits;
        OutputSet before;
        uint64_t started_usec;

        bool exited;
        bool draining;            /* its pipes are read to their end: not finished meanwhile */
        bool timed_out;
        bool cancelled;           /* the manager's caller hung up: killed as at a timeout */
        bool orphaned;            /* the manager that asked went away: killed the same way */
        siginfo_t init_info;
        struct rusage init_rusage;  /* PID 1's, when it ended without a report */
        bool init_rusage_valid;
        /* The scope's limit event counters when the exec started. */
        uint64_t oom_kills_before;
        uint64_t pids_max_before;

        ExecStream *stream;       /* its output as produced, if asked for (runner-stream.c) */
        bool output_paused;       /* the stream's reader lags: stdout and stderr wait */
        sd_event_source *stream_timer;  /* how long the ended exec waits for the stream */

        PidRef slirp;             /* the network of this exec, if it has one */
        int slirp_exit_fd;        /* its --exit-fd: slirp4netns ends when this closes */
        /* A cell of a stateful session: pid is PID 1 of the kernel's sandbox (runner-kernel.c),
         * which outlives the cell; the cell is over when its status pipe closes. */
        bool stateful;
        bool kernel_new;          /* the kernel was started for this cell */
        bool kernel_retried;      /* its first kernel was found dead: it runs in a new one */
        int code_fd;              /* a cell's code (dup), to hand to a new kernel if need be */
        uint64_t memory_limit;
        sd_event_source *status_source;
        int template_error;       /* why it did not start from the template (0: it did) */
        bool from_template;
        /* A stateless sandbox's report, read as it comes (how it started, then how it ended): the
         * exec is answered on it, PID 1's own end (its namespaces torn down) is reaped behind. */
        bool start_known, status_known;
        SandboxStatus status;
        bool retry_if_lost;       /* it took a prepared sandbox of the session's own profile */
} RunnerExec;

struct Runner {
        sd_event *event;
        char session_id[SESSION_ID_LEN + 1];
        char *session_root;

        int listen_fd;
        sd_event_source *listen_source;
        int conn_fd;
        sd_event_source *conn_source;
        uint64_t connection_generation;

        bool initialized;
        Workspace workspace;
        sd_event_source *backstop_source;
        uint64_t backstop_usec;
        uid_t uid;
        gid_t gid;
        uint64_t workspace_size;
        uint64_t tmp_size;
        uint64_t cpus_percent;
        /* Each sandbox profile's filter as BPF (sealed memfds), from the manager's init. */
        int filter_fds[_SECCOMP_PROFILE_MAX];
        CgroupEvents cgroup_events;   /* of the session's scope, opened at init */

        RunnerExec *exec;
        RunnerKernel *kernel;     /* of a stateful session, between its first cell and its end */
        struct ArchiveJob *archive_job;
        /* outputs/ as the last exec left it: the next exec's "before". Nothing of the session
         * runs between execs, so only our own file operations can change it. */
        OutputSet outputs_snapshot;
        bool outputs_snapshot_valid;

        char *preload_modules;    /* what the manager's init named (execs say "cold" themselves) */
        /* The scope's cgroup in each hierarchy (runner-template.c): for execs from the template,
         * which also need the filter's BPF, and for a run's network filter (runner-network.c). */
        int scope_cgroup_fds[16];
        size_t n_scope_cgroup_fds;
        /* The cgroup below the scope, in the unified hierarchy, in which every sandbox of the
         * session lives (RUNNER_PAYLOAD_CGROUP): PID 1 moves itself in before anything, a template
         * child joins it instead of the scope (template_cgroup_fds: scope_cgroup_fds with it in
         * the unified hierarchy's place, borrowed). The manager's pause freezes it, never the
         * runner (docs/dbus-api.md PauseSession). -EBADF without a unified hierarchy. */
        int payload_cgroup_fd;
        int payload_procs_fd;
        int template_cgroup_fds[16];
        /* A dify run's network filter (runner-network.c): the manager's programs (-EBADF: none
         * given), and the cgroup.procs of the cgroup they are attached to, once made. */
        int net_filter_fds[_NET_FILTER_PROGRAM_MAX];
        int net_cgroup_procs_fd;
        /* The next exec's sandbox, made in advance (runner-prepared.c), if the manager's init asked
         * for them ('prepare': a sidecar session's python execs, or a pooled dify run's in the
         * dify profile, with the network and proxies Dify's runs ask for by default). */
        bool prepare, prepare_no_processes, prepare_network;
        char *prepare_http_proxy, *prepare_https_proxy;
        RunnerPrepared *prepared;
        sd_event_source *prepare_source;
};

/* Archive and restore run in the archive helper (archive-sandbox.c): libarchive parses hostile
 * input there, isolated like an exec. */
typedef struct ArchiveJob {
        Runner *runner;
        uint64_t connection_generation;
        bool restore;
        PidRef init;                   /* the helper, held by its pidfd until reaped */
        int result_fd;                 /* pipe: the helper's ArchiveResult */
        sd_event_source *child_source;
        sd_event_source *timer_source;
        bool timed_out;
        bool orphaned;                 /* the manager that asked went away: killed */
} ArchiveJob;

/* The read ends of a sandbox's pipes, and its PID 1 (owned). */
typedef struct SandboxProcess {
        PidRef init;
        int out_fd, err_fd, status_fd;
} SandboxProcess;

/* The pipes of a sandbox, or of a cell of the kernel: its stdout, stderr and status; [0] the
 * runner's read end, [1] the sandbox's write end. */
typedef struct SandboxPipes {
        int out[2], err[2], status[2];
} SandboxPipes;
#define SANDBOX_PIPES_NULL                                                                           \
        (SandboxPipes) { { -EBADF, -EBADF }, { -EBADF, -EBADF }, { -EBADF, -EBADF } }


/* runner.c: replies on the control connection, the idle backstop, the connection's flow. */
int runner_send(Runner *r, uint64_t generation, json_object *msg, const int *fds, size_t n_fds);
/* A reply of 'm' (runner-protocol.c) made from the struct 'data'; nothing goes if it can't be made. */
int runner_send_reply(Runner *r, uint64_t generation, const SchemaMessage *m, const void *data,
                      const int *fds, size_t n_fds);
int runner_send_error(Runner *r, uint64_t generation, int error, const char *fmt, ...) _printf_(4, 5);
/* A success reply without members. */
int runner_send_ok(Runner *r, uint64_t generation, const int *fds, size_t n_fds);

/* The handlers of requests (runner.c's table): 'params' is the request parsed by its declaration
 * (RunnerExecRequest and so on, in runner-protocol.h), 'fds' came with it (closed by the caller).
 * Each answers its request, or starts a job that will. */
void runner_touch(Runner *r);
void runner_resume_connection(Runner *r);

/* runner-session.c */
int runner_handle_init(Runner *r, const void *params, const int *fds, size_t n_fds);

/* runner-spawn.c */
/* All or none: on failure '*p' stays as it was (SANDBOX_PIPES_NULL). */
int sandbox_pipes_open(SandboxPipes *p);
void sandbox_pipes_close(SandboxPipes *p);
/* The read ends, taken out of 'p', with the PID 1 that writes them (taken out of 'init'). */
SandboxProcess sandbox_pipes_take(SandboxPipes *p, PidRef *init);
int runner_spawn_sandbox(Runner *r, SandboxExec *se, int parent_only_fd, SandboxProcess *ret);

/* runner-prepared.c */
/* Makes the next exec's sandbox once the loop is idle, unless one exists or is not wanted. */
void runner_prepare_soon(Runner *r);
/* Hands the prepared sandbox the exec 'req' and its code, if it fits the exec: 1 and its PID 1 and
 * pipes in *ret (and its network's slirp4netns, if it has one); 0 if there is none or it does not
 * fit (the exec starts its own). */
int runner_prepared_take(Runner *r, const RunnerExecRequest *req, SandboxLanguage language, int code_fd,
                         SandboxProcess *ret, PidRef *ret_slirp, int *ret_slirp_exit_fd);
void runner_prepared_drop(Runner *r);
/* PID 1 of a sandbox whose exec was answered: reaped when it ends, behind the answer. */
void runner_reap_later(Runner *r, PidRef *init);

/* runner-exec.c */
RunnerExec *runner_exec_free(RunnerExec *e);
/* fds: the code, then (optional) the write end of a pipe for the output as it is produced. */
int runner_handle_exec(Runner *r, const void *params, const int *fds, size_t n_fds);
/* The stream wrote or failed: the exec may resume reading its output, or finish. */
void runner_exec_stream_progress(RunnerExec *e);
/* Reaps 'init' (PID 1 of a sandbox) through its pidfd if it ended; how it ended and its rusage
 * (which holds what it reaped in dying: all there is of a PID 1 killed before it could report)
 * go to 'e', if not NULL. Returns 1 if it was reaped, 0 if it runs on, or -errno (gone already). */
int runner_exec_reap_init(RunnerExec *e, const PidRef *init);

/* runner-stream.c. Frames are read from the exec's OutputBuffers, which must outlive the stream. */
int exec_stream_new(RunnerExec *e, int fd, ExecStream **ret);
ExecStream *exec_stream_free(ExecStream *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(ExecStream *, exec_stream_free);
/* 'n' more kept bytes of stream 'which' (STREAM_FRAME_*), following those pushed before. */
int exec_stream_push(ExecStream *s, uint8_t which, size_t n);
/* 'n' bytes of stream 'which' kept nowhere else (a display cell's records): copied. */
int exec_stream_push_copy(ExecStream *s, uint8_t which, const void *data, size_t n);
/* Frames not yet written whole. */
size_t exec_stream_pending(const ExecStream *s);
int runner_handle_cancel(Runner *r, const void *params, const int *fds, size_t n_fds);

/* The proxy variables of an exec with a network, as its payload's extra environment (env, NULL
 * terminated); the values are bounded by the protocol (RUNNER_ENV_VALUE_MAX). */
typedef struct ProxyEnv {
        char http[RUNNER_ENV_VALUE_MAX + sizeof("HTTP_PROXY=")];
        char https[RUNNER_ENV_VALUE_MAX + sizeof("HTTPS_PROXY=")];
        char *env[3];
} ProxyEnv;
void proxy_env_build(ProxyEnv *pe, const char *http_proxy, const char *https_proxy);

/* runner-network.c: the network of an exec (dify runs with a network). A network namespace in a
 * new user namespace in which uid and gid 0 are the session's; the fds of both. */
int runner_network_new(const Runner *r, int *ret_userns_fd, int *ret_netns_fd);
/* The cgroup slirp4netns runs in, "net" below the scope in the unified hierarchy, with the network
 * filter attached: made at the first exec with a network, then kept. Returns its cgroup.procs
 * (borrowed); fails when there is no filter or it can't be attached (then there is no network). */
int runner_network_cgroup(Runner *r);
/* Starts slirp4netns for that network namespace as uid 0 of that user namespace, in the filtered
 * cgroup ('cgroup_procs_fd', which it joins first): it says "1" on 'ready_fd' (borrowed, like the
 * other fds) once the interface is up, and ends when *ret_exit_fd closes. */
int runner_network_start(int cgroup_procs_fd, int userns_fd, int netns_fd, int ready_fd, PidRef *ret,
                         int *ret_exit_fd);

/* runner-kernel.c */
/* Hands the cell 'se' to the kernel (a new one if there is none): *ret gets the read ends of its
 * pipes, *ret_results_fd that of its records' pipe when 'display' (else -EBADF), *ret_new whether
 * the kernel is new. */
int runner_kernel_cell(Runner *r, SandboxExec *se, bool display, SandboxProcess *ret, int *ret_results_fd,
                       bool *ret_new);
void runner_kernel_stop(Runner *r);
int runner_handle_reset_kernel(Runner *r, const void *params, const int *fds, size_t n_fds);

/* runner-template.c */
void runner_template_setup(Runner *r);
int runner_template_connect(Runner *r);

/* runner-files.c */
int runner_handle_write(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_read(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_list(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_reset_inputs(Runner *r, const void *params, const int *fds, size_t n_fds);
/* runner-fs.c: E2B's filesystem calls (RunnerFsRequest). */
int runner_handle_fs_stat(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_fs_list(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_fs_mkdir(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_fs_move(Runner *r, const void *params, const int *fds, size_t n_fds);
int runner_handle_fs_remove(Runner *r, const void *params, const int *fds, size_t n_fds);

/* runner-archive.c */
ArchiveJob *archive_job_free(ArchiveJob *j);
int runner_handle_archive(Runner *r, const RunnerArchiveRequest *p, int data_fd, bool restore);
