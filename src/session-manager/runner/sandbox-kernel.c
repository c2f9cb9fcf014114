/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* PID 1 of a stateful session's sandbox: one interpreter (the kernel) runs every cell.
 *
 * The kernel is the sandbox's payload, specialized like any other (user namespace, uid,
 * capabilities, no_new_privs, the session's seccomp filter), running SANDBOX_KERNEL_SCRIPT. For
 * each cell PID 1 hands it the code and the cell's stdout and stderr over SANDBOX_KERNEL_FD,
 * continues it, and waits for its exit code (or its death, or the runner's SIGTERM at the
 * timeout or a cancel: then everything of the sandbox is killed and PID 1 exits). Then it kills
 * every other process of the namespace, stops the kernel (SIGSTOP) once nothing is left that could
 * continue it (SIGCONT), and checks that it is still stopped; measures the cell and reports it on
 * the cell's status pipe as a stateless sandbox does. While stopped between cells nothing of the
 * session runs; the next cell checks that it did not (its threads' context switches), and a kernel
 * that ran anyway is ended, the cell then runs in a new one. The kernel is held by a pidfd, never
 * signalled by its number. The kernel's messages are hostile input: only an 8-byte answer (the
 * cell's number, its exit code) is read, anything else ends the kernel. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "parse-util.h"
#include "pidref.h"
#include "sandbox.h"
#include "time-util.h"

/* A cell's fds: those of a display cell have its result records' pipe too (else -EBADF). */
typedef struct KernelCell {
        int code_fd, stdout_fd, stderr_fd, status_fd, results_fd;
} KernelCell;

/* The kernel's own counters (/proc/<pid>/stat, io) and ours at the start of a cell. */
typedef struct KernelMark {
        uint64_t kernel_cpu_usec;        /* its user + system time and that of what it reaped */
        uint64_t kernel_wchar;
        uint64_t children_cpu_usec;      /* what we reaped */
        uint64_t children_max_rss;
        uint64_t self_wchar;
        uint64_t last_pid;
} KernelMark;

static void kernel_cell_close(KernelCell *c) {
        c->code_fd = safe_close(c->code_fd);
        c->stdout_fd = safe_close(c->stdout_fd);
        c->stderr_fd = safe_close(c->stderr_fd);
        c->status_fd = safe_close(c->status_fd);
        c->results_fd = safe_close(c->results_fd);
}

static int read_proc_file(pid_t pid, const char *name, char *buf, size_t size) {
        char path[64];
        ssize_t k;
        int fd;

        if (pid > 0)
                snprintf(path, sizeof(path), "/proc/%i/%s", (int) pid, name);
        else
                snprintf(path, sizeof(path), "/proc/%s", name);
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        k = read(fd, buf, size - 1);
        (void) close(fd);
        if (k < 0)
                return -errno;
        buf[k] = 0;
        return 0;
}

/* Fields of /proc/<pid>/stat after the command: f[i] is field i + 3 (f[0] the state). */
static int proc_stat_fields(pid_t pid, char *ret_state, uint64_t *f, size_t n) {
        char buf[1024], *c, *save = NULL;
        size_t i = 0;

        if (read_proc_file(pid, "stat", buf, sizeof(buf)) < 0 || !(c = strrchr(buf, ')')))
                return -ESRCH;
        for (char *t = strtok_r(c + 1, " \n", &save); t && i < n; t = strtok_r(NULL, " \n", &save), i++) {
                if (i == 0)
                        *ret_state = t[0];
                f[i] = strtoull(t, NULL, 10);
        }
        return i == n ? 0 : -EBADMSG;
}

static uint64_t ticks_to_usec(uint64_t ticks) {
        long hz = sysconf(_SC_CLK_TCK);
        return ticks * USEC_PER_SEC / (uint64_t) (hz > 0 ? hz : 100);
}

static uint64_t kernel_cpu_usec(pid_t kernel) {
        uint64_t f[18];
        char state;

        if (proc_stat_fields(kernel, &state, f, ELEMENTSOF(f)) < 0)
                return 0;
        return ticks_to_usec(f[11] + f[12] + f[13] + f[14]); /* utime stime cutime cstime */
}

static uint64_t kernel_proc_value(pid_t kernel, const char *file, const char *key) {
        char buf[4096], *p;
        uint64_t v = 0;

        if (read_proc_file(kernel, file, buf, sizeof(buf)) < 0 || !(p = strstr(buf, key)))
                return 0;
        (void) sscanf(p + strlen(key), " %" SCNu64, &v);
        return v;
}

static void kernel_mark(pid_t kernel, int io_fd, int last_pid_fd, KernelMark *ret) {
        struct rusage ru;
        char buf[32];
        ssize_t k;

        *ret = (KernelMark) {
                .kernel_cpu_usec = kernel_cpu_usec(kernel),
                .kernel_wchar = kernel_proc_value(kernel, "io", "wchar:"),
        };
        if (getrusage(RUSAGE_CHILDREN, &ru) >= 0) {
                ret->children_cpu_usec = timeval_load(&ru.ru_utime) + timeval_load(&ru.ru_stime);
                ret->children_max_rss = (uint64_t) ru.ru_maxrss * 1024U;
        }
        if (io_fd >= 0)
                (void) proc_io_read_wchar(io_fd, &ret->self_wchar);
        k = last_pid_fd >= 0 ? pread(last_pid_fd, buf, sizeof(buf) - 1, 0) : -1;
        if (k > 0) {
                buf[k] = 0;
                ret->last_pid = strtoull(buf, NULL, 10);
        }
}

static uint64_t sub0(uint64_t a, uint64_t b) {
        return a > b ? a - b : 0;
}

/* What the cell used: what we reaped meanwhile, plus the kernel's growth (a kernel that died was
 * reaped by us, so its whole life is in the former: take off what it had used before). */
static void kernel_usage(pid_t kernel, bool alive, const KernelMark *before, int io_fd, int last_pid_fd,
                         SandboxUsage *ret) {
        KernelMark after;
        uint64_t children = 0, wchar;

        kernel_mark(alive ? kernel : 0, io_fd, last_pid_fd, &after);
        children = after.children_cpu_usec - MIN(after.children_cpu_usec, before->children_cpu_usec);
        wchar = sub0(after.self_wchar, before->self_wchar);
        *ret = (SandboxUsage) { .valid = true,
                                .written_valid = io_fd >= 0,
                                .tasks_valid = after.last_pid > 0 };
        if (alive) {
                ret->cpu_usec = children + sub0(after.kernel_cpu_usec, before->kernel_cpu_usec);
                /* Its peak since the cell began (kernel_clear_peak()), from the start of a line:
                 * the first line holds its name, which it chooses; a child's only when the
                 * largest we ever reaped is of this cell (the figure is a maximum over all). */
                ret->max_rss_bytes = kernel_proc_value(kernel, "status", "\nVmHWM:") * 1024U;
                if (after.children_max_rss > before->children_max_rss)
                        ret->max_rss_bytes = MAX(ret->max_rss_bytes, after.children_max_rss);
                ret->written_bytes = wchar + sub0(after.kernel_wchar, before->kernel_wchar);
        } else {
                ret->cpu_usec = sub0(children, before->kernel_cpu_usec);
                ret->max_rss_bytes = after.children_max_rss;
                ret->written_bytes = sub0(wchar, before->kernel_wchar);
        }
        ret->tasks = sub0(after.last_pid, before->last_pid);
}

/* Resets the kernel's VmHWM so that the cell's peak is its own. */
static void kernel_clear_peak(pid_t kernel) {
        char path[64];
        int fd;

        snprintf(path, sizeof(path), "/proc/%i/clear_refs", (int) kernel);
        fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
                (void) write_all(fd, "5", 1);
                (void) close(fd);
        }
}

/* Reaps what has ended; the kernel's status goes to *kernel_status. Returns whether the kernel
 * was among them. */
static bool reap_children(pid_t kernel, int *kernel_status) {
        bool dead = false;
        int ws;
        pid_t c;

        while ((c = waitpid(-1, &ws, WNOHANG | __WALL)) > 0)
                if (c == kernel) {
                        *kernel_status = ws;
                        dead = true;
                }
        return dead;
}

/* One look at our namespace: SIGKILL to every process but us and the kernel. /proc is the
 * namespace's own procfs, which nothing of the sandbox can change; the numbers it lists are all of
 * processes of the sandbox, each to be killed (one that died and whose number came to a new
 * process names a process to kill as well), and the kernel's cannot change hands while it lives.
 * Returns whether one of them was alive: not a zombie the kernel itself must reap (its driver does
 * at the next cell's start). A process whose main thread ended is a zombie leader with live
 * threads: alive, and killed all the same. */
static bool kill_others_once(pid_t kernel) {
        _cleanup_closedir_ DIR *d = NULL;
        struct dirent *de;
        bool alive = false;

        d = opendir("/proc");
        if (!d)
                return false;
        FOREACH_DIRENT(de, d, alive = true) { /* not known: look again */
                uint64_t f[18];
                char state = 0, *end;
                long pid = strtol(de->d_name, &end, 10);

                if (*end != 0 || pid <= 1 || pid == kernel)
                        continue;
                (void) kill((pid_t) pid, SIGKILL);
                if (proc_stat_fields((pid_t) pid, &state, f, ELEMENTSOF(f)) < 0)
                        continue;
                if (state != 'Z' || f[17] > 1)
                        alive = true;
        }
        return alive;
}

/* Kills every process of our namespace but us and the kernel until none is alive, or for at most
 * 'max_rounds' (≥ 1) looks. Returns whether the kernel died meanwhile (its status in *kernel_status). */
static bool kill_all_but_kernel(pid_t kernel, int *kernel_status, unsigned max_rounds) {
        for (unsigned round = 1;; round++) {
                bool alive = kill_others_once(kernel);

                if (reap_children(kernel, kernel_status))
                        return true;
                if (!alive || round >= max_rounds)
                        return false;
                (void) nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
        }
}

/* What the kernel's threads had run when looked at: which threads, each one's context switches
 * (a thread that runs after it stopped is switched out again to stop, or still runs), whether all
 * were stopped; and the CPU time of the whole process. */
typedef struct KernelThread {
        pid_t tid;
        uint64_t switches;
} KernelThread;

typedef struct KernelSnapshot {
        KernelThread *threads;
        size_t n, allocated;
        uint64_t cpu_ticks;
        bool stopped;           /* no thread could run: each stopped ('T') or ended */
        bool valid;             /* read whole: no thread came or went while we read */
} KernelSnapshot;

static void kernel_snapshot_done(KernelSnapshot *s) {
        free(s->threads);
        *s = (KernelSnapshot) {};
}

static int thread_cmp(const void *a, const void *b) {
        const KernelThread *x = a, *y = b;
        return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static bool status_field(const char *buf, const char *key, uint64_t *ret) {
        const char *p = strstr(buf, key);
        return p && sscanf(p + strlen(key), " %" SCNu64, ret) == 1;
}

static void kernel_snapshot(pid_t kernel, KernelSnapshot *ret) {
        _cleanup_closedir_ DIR *d = NULL;
        char path[64], buf[4096];
        struct dirent *de;
        uint64_t f[18];
        char state;

        kernel_snapshot_done(ret);
        ret->stopped = true;
        if (proc_stat_fields(kernel, &state, f, ELEMENTSOF(f)) < 0)
                return;
        ret->cpu_ticks = f[11] + f[12]; /* utime stime: every thread's, the ended ones' too */
        snprintf(path, sizeof(path), "/proc/%i/task", (int) kernel);
        d = opendir(path);
        if (!d)
                return;
        FOREACH_DIRENT(de, d, return) {
                uint64_t voluntary, involuntary;
                char *end, *st;
                long tid = strtol(de->d_name, &end, 10);

                if (*end != 0 || tid <= 0)
                        continue;
                snprintf(path, sizeof(path), "task/%li/status", tid);
                /* The thread's name (first line) is its own choice, escaped: fields are matched
                 * from the start of a line. */
                if (read_proc_file(kernel, path, buf, sizeof(buf)) < 0 ||
                    !(st = strstr(buf, "\nState:\t")) ||
                    !status_field(buf, "\nvoluntary_ctxt_switches:", &voluntary) ||
                    !status_field(buf, "\nnonvoluntary_ctxt_switches:", &involuntary))
                        return; /* gone meanwhile: not a whole picture */
                /* Stopped, or a thread that ended (a leader whose thread exited stays a zombie
                 * while the others live): neither runs. */
                state = st[strlen("\nState:\t")];
                if (state != 'T' && state != 'Z' && state != 'X')
                        ret->stopped = false;
                if (ret->n == ret->allocated) {
                        size_t a = MAX(ret->allocated * 2, (size_t) 16);
                        KernelThread *t = reallocarray(ret->threads, a, sizeof(KernelThread));
                        if (!t)
                                return;
                        ret->threads = t;
                        ret->allocated = a;
                }
                ret->threads[ret->n++] = (KernelThread) { (pid_t) tid, voluntary + involuntary };
        }
        qsort(ret->threads, ret->n, sizeof(KernelThread), thread_cmp);
        ret->valid = ret->n > 0;
}

/* Whether the kernel did not run between the two looks: both whole, every thread stopped in
 * both, the same threads with the same context switches, the same CPU time. */
static bool kernel_snapshot_still(const KernelSnapshot *a, const KernelSnapshot *b) {
        if (!a->valid || !b->valid || !a->stopped || !b->stopped || a->n != b->n ||
            a->cpu_ticks != b->cpu_ticks)
                return false;
        /* Field by field: the structs' padding is whatever the allocation held. */
        for (size_t i = 0; i < a->n; i++)
                if (a->threads[i].tid != b->threads[i].tid ||
                    a->threads[i].switches != b->threads[i].switches)
                        return false;
        return true;
}

/* The end of a cell the kernel survived. First every other process of the sandbox is killed while
 * the kernel runs (its driver waits for the next cell by then). Then, until it holds: every process
 * of the namespace is stopped (the kernel, and whatever could continue it: a process the kernel
 * started meanwhile), the kernel once more after all the others, every process but the kernel
 * killed, and the kernel looked at; done when a look found no other process alive and the kernel
 * stopped, unchanged since the look before. Nothing is left then that could continue it. *ret: the
 * last look, which the next cell compares with. Returns false if the kernel died (status in
 * *kernel_status). Should something keep it from holding, the cell's timeout ends it all. */
static bool kernel_quiesce(const PidRef *kernel, int *kernel_status, KernelSnapshot *ret) {
        _cleanup_(kernel_snapshot_done) KernelSnapshot before = {};

        /* Bounded: a kernel that keeps starting processes is stopped with them, below. */
        if (kill_all_but_kernel(kernel->pid, kernel_status, 100))
                return false;
        for (;;) {
                KernelSnapshot swap;
                bool others;

                (void) kill(-1, SIGSTOP);
                /* One that continued it while the others were being stopped can't any more. */
                (void) pidref_kill(kernel, SIGSTOP);
                others = kill_others_once(kernel->pid);
                if (reap_children(kernel->pid, kernel_status))
                        return false;
                kernel_snapshot(kernel->pid, ret);
                if (!others && kernel_snapshot_still(&before, ret))
                        return true;
                /* Continued meanwhile by what is now killed, or not yet stopped: once more, at
                 * once while there were others, after a moment for its threads to stop if not. */
                swap = before;
                before = *ret;
                *ret = swap;
                if (!others)
                        (void) nanosleep(&(struct timespec) { .tv_nsec = 200000 }, NULL);
        }
}

typedef enum KernelCellEnd {
        KERNEL_CELL_KEPT,       /* the cell is over, the kernel lives on */
        KERNEL_CELL_ENDED,      /* the kernel ended with the cell */
        KERNEL_CELL_LOST,       /* the kernel died before the cell began: it never ran */
} KernelCellEnd;

/* Runs cell number 'seq': hands it to the kernel, waits for its exit code, or for the kernel's end
 * (it died, or the runner asked: everything is killed); the wait status goes to st->value. The
 * kernel says (seq) when the cell begins and (seq, exit code) when it is over: a message for
 * another cell — a cell's code that wrote to the kernel's socket itself, and the late answer of
 * the cell it cut short — is dropped, so that the cells that follow still get their own. A kernel
 * that had run cells before and dies before it said the cell began was killed while stopped (the
 * OOM killer, say): that cell is "lost", to be run in a new kernel. */
static KernelCellEnd kernel_run_cell(const PidRef *kernel, int ksock, uint32_t seq, int *listener,
                                     int signal_fd, KernelCell *cell, SeccompSupervisor *sup,
                                     SandboxStatus *st) {
        const int fds[4] = { cell->code_fd, cell->stdout_fd, cell->stderr_fd, cell->results_fd };
        bool ending = false, asked = false, begun = false;
        struct {
                uint32_t seq;
                int32_t code;
        } answer;
        char buf[64];

        /* What came since the last cell is stale. */
        while (recv(ksock, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
        /* A display cell's records pipe is the kernel's fourth fd: how it knows it is one. */
        if (fds_send(ksock, &seq, sizeof(seq), fds, cell->results_fd >= 0 ? 4 : 3) < 0) {
                (void) pidref_kill(kernel, SIGKILL);
                ending = true;
        }
        cell->code_fd = safe_close(cell->code_fd);
        cell->stdout_fd = safe_close(cell->stdout_fd);
        cell->stderr_fd = safe_close(cell->stderr_fd);
        cell->results_fd = safe_close(cell->results_fd);
        (void) pidref_kill(kernel, SIGCONT);

        for (;;) {
                struct pollfd p[3] = {
                        { .fd = signal_fd, .events = POLLIN },
                        { .fd = ending ? -1 : ksock, .events = POLLIN },
                        { .fd = *listener, .events = POLLIN },
                };
                int r = poll(p, 3, ending ? SANDBOX_END_GRACE_MS : -1);

                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        r = 0;
                }
                if (r == 0) {
                        /* Ending, and the kernel did not go: as if killed. */
                        st->value = SIGKILL;
                        return KERNEL_CELL_ENDED;
                }
                sandbox_listener_event(listener, p[2].revents, sup, &st->seccomp);

                if (p[1].revents) {
                        /* A larger buffer than the answer: a longer message is seen as such. */
                        ssize_t k = recv(ksock, buf, sizeof(buf), MSG_DONTWAIT);

                        if (k == (ssize_t) sizeof(answer.seq)) {
                                memcpy(&answer.seq, buf, sizeof(answer.seq));
                                begun = begun || answer.seq == seq;
                                continue;
                        }
                        if (k == (ssize_t) sizeof(answer)) {
                                memcpy(&answer, buf, sizeof(answer));
                                if (answer.seq != seq)
                                        continue;
                                st->value = (answer.code & 0xff) << 8; /* as an exit status */
                                return KERNEL_CELL_KEPT;
                        }
                        if (k < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        /* Its socket closed or a message that is no exit code: it ends. */
                        (void) pidref_kill(kernel, SIGKILL);
                        ending = true;
                }

                if (p[0].revents & POLLIN) {
                        unsigned got = sandbox_signals_from_outside(signal_fd);

                        /* Interrupted (the Exec option "interrupt"): the cell's KeyboardInterrupt,
                         * which the kernel survives; the runner ends us if the cell goes on. */
                        if ((got & SANDBOX_OUTSIDE_INT) && !ending)
                                (void) pidref_kill(kernel, SIGINT);
                        if ((got & SANDBOX_OUTSIDE_TERM) && !ending) {
                                ending = asked = true;
                                (void) kill(-1, SIGKILL);
                        }
                        if (reap_children(kernel->pid, &st->value))
                                return !begun && !asked && seq > 1 ? KERNEL_CELL_LOST : KERNEL_CELL_ENDED;
                }
        }
}

/* The next cell from the runner: code, stdout, stderr and status fds, and a display cell's results
 * pipe. Returns 0, -EPIPE when the
 * runner closed the socket or asked us to end (SIGTERM), -EOWNERDEAD when the kernel died (*ret
 * then holds the cell that came for it, or nothing). */
static int kernel_next_cell(pid_t kernel, int ctl_fd, int signal_fd, KernelCell *ret) {
        for (;;) {
                struct pollfd p[2] = {
                        { .fd = signal_fd, .events = POLLIN },
                        { .fd = ctl_fd, .events = POLLIN },
                };
                int fds[5], ws;
                size_t n = 0;
                char c;
                ssize_t k;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (p[0].revents & POLLIN) {
                        if (sandbox_sigterm_from_outside(signal_fd))
                                return -EPIPE;
                        if (reap_children(kernel, &ws))
                                return -EOWNERDEAD;
                }
                if (!p[1].revents)
                        continue;
                k = fds_receive(ctl_fd, &c, 1, fds, 5, &n);
                if (k == -EAGAIN)
                        continue;
                if (k <= 0)
                        return -EPIPE;
                if (c != 'c' || (n != 4 && n != 5)) {
                        for (size_t i = 0; i < n; i++)
                                safe_close(fds[i]);
                        continue;
                }
                *ret = (KernelCell) { fds[0], fds[1], fds[2], fds[3], n == 5 ? fds[4] : -EBADF };
                /* Its end may not have been noticed yet: a cell for a dead kernel never runs. */
                if (reap_children(kernel, &ws))
                        return -EOWNERDEAD;
                return 0;
        }
}

/* The kernel died while stopped, or ran and was ended ('loss'): no cell can run any more. The
 * runner's sends fail from now on (the socket is shut for reading); each cell it sent before is
 * answered "lost", never run. */
static void kernel_refuse_cells(int ctl_fd, KernelCell *pending, SandboxKernelLoss loss) {
        const int32_t start = SANDBOX_START_COLD;
        const SandboxStatus lost = { .kind = SANDBOX_STATUS_KERNEL_LOST, .value = loss,
                                     .kernel = SANDBOX_KERNEL_ENDED };

        (void) shutdown(ctl_fd, SHUT_RD);
        for (;;) {
                int fds[5];
                size_t n = 0;
                char c;

                /* The two as the runner reads them, one after the other: written as one struct,
                 * the padding between them (SandboxStatus is 8-aligned) would shift the status. */
                if (pending->status_fd >= 0 && write_all(pending->status_fd, &start, sizeof(start)) >= 0)
                        (void) write_all(pending->status_fd, &lost, sizeof(lost));
                kernel_cell_close(pending);
                if (fds_receive(ctl_fd, &c, 1, fds, 5, &n) <= 0)
                        return;
                for (size_t i = 0; i < n; i++)
                        if (i == 3)
                                pending->status_fd = fds[i];
                        else
                                safe_close(fds[i]);
        }
}

/* The first cell came with the sandbox; if it is a display cell, the runner put its results pipe
 * on our socket before it started us ('r', one fd): it is there already, or it is not one. */
static int kernel_first_results(int ctl_fd) {
        int fds[5];
        size_t n = 0;
        char c = 0;

        if (fds_receive(ctl_fd, &c, 1, fds, 5, &n) > 0 && c == 'r' && n == 1)
                return fds[0];
        for (size_t i = 0; i < n; i++)
                safe_close(fds[i]);
        return -EBADF;
}

_noreturn_ void sandbox_kernel_run(const SandboxExec *e, const PidRef *kernel, int ksock, int listener,
                                   int signal_fd, int io_fd, int last_pid_fd) {
        KernelCell cell = { e->code_fd, e->stdout_fd, e->stderr_fd, e->status_fd,
                            kernel_first_results(e->kernel_fd) };
        KernelSnapshot stopped = {}, now = {};
        uint32_t seq = 0;

        for (;;) {
                SeccompSupervisor sup = {};
                struct {
                        int32_t start;
                        SandboxStatus st;
                } report = {
                        .start = SANDBOX_START_COLD,
                        .st = { .kind = SANDBOX_STATUS_EXITED, .start = SANDBOX_START_COLD },
                };
                KernelMark before;
                KernelCellEnd end;
                bool alive;
                int q;

                /* Between cells it ran nothing, or it ran something nobody bounds: then it is
                 * ended, and the cell runs in a new kernel. */
                if (seq > 0) {
                        kernel_snapshot(kernel->pid, &now);
                        if (!kernel_snapshot_still(&stopped, &now)) {
                                (void) pidref_kill(kernel, SIGKILL);
                                sandbox_end_all_processes();
                                kernel_refuse_cells(e->kernel_fd, &cell, SANDBOX_KERNEL_LOSS_RAN);
                                break;
                        }
                }
                seccomp_report_init(&sup.report);
                report.st.seccomp = sup.report;
                kernel_mark(kernel->pid, io_fd, last_pid_fd, &before);
                kernel_clear_peak(kernel->pid);

                end = kernel_run_cell(kernel, ksock, ++seq, &listener, signal_fd, &cell, &sup, &report.st);
                if (end == KERNEL_CELL_LOST) {
                        sandbox_end_all_processes();
                        kernel_refuse_cells(e->kernel_fd, &cell, SANDBOX_KERNEL_LOSS_DIED);
                        break;
                }
                alive = end == KERNEL_CELL_KEPT;
                if (alive)
                        alive = kernel_quiesce(kernel, &report.st.value, &stopped);
                if (!alive)
                        sandbox_end_all_processes();
                kernel_usage(kernel->pid, alive, &before, io_fd, last_pid_fd, &report.st.usage);
                report.st.kernel = alive ? SANDBOX_KERNEL_KEPT : SANDBOX_KERNEL_ENDED;
                /* As a stateless PID 1 reports: how it started, then how it ended. */
                (void) write_all(cell.status_fd, &report.start, sizeof(report.start));
                (void) write_all(cell.status_fd, &report.st, sizeof(report.st));
                kernel_cell_close(&cell);
                if (!alive)
                        break;
                q = kernel_next_cell(kernel->pid, e->kernel_fd, signal_fd, &cell);
                if (q == -EOWNERDEAD) {
                        kernel_refuse_cells(e->kernel_fd, &cell, SANDBOX_KERNEL_LOSS_DIED);
                        break;
                }
                if (q < 0)
                        break;
        }
        sandbox_end_all_processes();
        _exit(0);
}
