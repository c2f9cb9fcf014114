/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Children held by pidfds (shared/pidref.c): a child that another path reaped, whose number the
 * kernel then gave to a new process, is never signalled through its PidRef; and no process of ours
 * (the privileged ones: the session manager, the runner, PID 1 of a sandbox, the template and its
 * children, the storage agent, scopeboxctl as root; and the gateway) signals or waits for a
 * process by its number beyond the few calls listed here with their reasons. Argument: the source
 * root. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pidref.h"
#include "string-util.h"
#include "tests.h"

static const char *source_root;

/* A child that waits for its pipe to close, then exits with 'code'. */
static PidRef spawn_waiting(int *ret_hold, int code) {
        int hold[2];
        PidRef ref = PIDREF_NULL;
        int r;

        ASSERT_TRUE(pipe2(hold, O_CLOEXEC) == 0);
        r = pidref_clone(0, &ref);
        ASSERT_TRUE(r >= 0);
        if (r == 0) {
                char c;

                close(hold[1]);
                (void) read(hold[0], &c, 1);
                _exit(code);
        }
        close(hold[0]);
        *ret_hold = hold[1];
        return ref;
}

static void test_wait_and_kill(void) {
        struct rusage ru = {};
        siginfo_t si = {};
        PidRef ref, dup = PIDREF_NULL;
        int hold;

        ASSERT_EQ(pidref_kill(&PIDREF_NULL, 0), -ESRCH);
        ref = spawn_waiting(&hold, 7);
        ASSERT_TRUE(pidref_is_set(&ref) && ref.pid > 0);
        ASSERT_EQ(pidref_wait(&ref, WEXITED | WNOHANG, &si, NULL), 0);
        ASSERT_EQ(pidref_kill(&ref, 0), 0);
        /* A copy reaches the same process, and outlives the original. */
        ASSERT_EQ(pidref_dup(&ref, &dup), 0);
        ASSERT_EQ(dup.pid, ref.pid);
        close(hold);
        ASSERT_EQ(pidref_wait(&ref, WEXITED, &si, &ru), 1);
        ASSERT_EQ(si.si_pid, ref.pid);
        ASSERT_EQ(si.si_code, CLD_EXITED);
        ASSERT_EQ(si.si_status, 7);
        pidref_done(&ref);
        ASSERT_TRUE(ref.fd < 0 && ref.pid == 0);
        /* Reaped: no signal reaches anything, no second wait. */
        ASSERT_EQ(pidref_kill(&dup, SIGKILL), -ESRCH);
        ASSERT_EQ(pidref_wait(&dup, WEXITED | WNOHANG, &si, NULL), -ECHILD);
        pidref_done_kill(&dup);

        /* pidref_done_kill() ends a live child and reaps it. */
        ref = spawn_waiting(&hold, 0);
        ASSERT_EQ(pidref_dup(&ref, &dup), 0);
        pidref_done_kill(&ref);
        ASSERT_EQ(pidref_kill(&dup, 0), -ESRCH);
        pidref_done(&dup);
        close(hold);
}

/* In a PID namespace of our own (as PID 1 there): child A is reaped by number (as another
 * callback would), A's number is given to a new child B (ns_last_pid), and A's PidRef must not
 * reach B. Returns the exit status: 0 passed, 77 when the number could not be handed on. */
static int reuse_in_namespace(void) {
        PidRef a, b;
        int hold_a, hold_b, fd, status;
        char buf[32];
        pid_t pid_a;

        a = spawn_waiting(&hold_a, 0);
        pid_a = a.pid;
        close(hold_a);
        ASSERT_EQ(waitpid(pid_a, &status, __WALL), pid_a);

        fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return 77;
        snprintf(buf, sizeof(buf), "%i", (int) pid_a - 1);
        if (write(fd, buf, strlen(buf)) != (ssize_t) strlen(buf)) {
                close(fd);
                return 77;
        }
        close(fd);
        b = spawn_waiting(&hold_b, 0);
        if (b.pid != pid_a) {
                fprintf(stderr, "B got %i, not A's %i\n", (int) b.pid, (int) pid_a);
                return 77;
        }

        /* A's reference: gone, whatever has its number now. */
        ASSERT_EQ(pidref_kill(&a, SIGKILL), -ESRCH);
        ASSERT_EQ(pidref_wait(&a, WEXITED | WNOHANG, NULL, NULL), -ECHILD);
        pidref_done_kill(&a);
        /* B lives on, untouched. */
        ASSERT_EQ(pidref_wait(&b, WEXITED | WNOHANG, NULL, NULL), 0);
        ASSERT_EQ(pidref_kill(&b, 0), 0);
        close(hold_b);
        ASSERT_EQ(pidref_wait(&b, WEXITED, &(siginfo_t) {}, NULL), 1);
        pidref_done(&b);
        return 0;
}

static void test_reused_number_is_not_signalled(void) {
        int status;
        pid_t pid;

        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                pid_t init;

                /* As root a PID namespace alone; otherwise with a user namespace that owns it (and
                 * lets us write its ns_last_pid). */
                if (unshare(CLONE_NEWPID) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWPID) < 0)
                        _exit(77);
                init = fork();
                if (init < 0)
                        _exit(1);
                if (init == 0)
                        _exit(reuse_in_namespace());
                _exit(waitpid(init, &status, 0) == init && WIFEXITED(status) ? WEXITSTATUS(status) : 1);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        if (WEXITSTATUS(status) == 77) {
                /* Without namespaces (an unprivileged build without user namespaces) the number
                 * can't be handed on on purpose; test_wait_and_kill() still ran. */
                printf("# SKIP number reuse: no PID namespace of our own here\n");
                return;
        }
        ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* Calls that signal or wait for a process by number, allowed in our sources, each with its reason.
 * Every one must still be in use (a stale exception would allow the next such call unseen). */
static const struct {
        const char *file, *call;
} allowed[] = {
        /* PID 1: every process of its own namespace, the only ones it can see. */
        { "sandbox.c", "kill(-1, SIGKILL)" },
        { "sandbox-kernel.c", "kill(-1, SIGKILL)" },
        { "sandbox-kernel.c", "kill(-1, SIGSTOP)" },
        /* PID 1 kills each process its namespace's /proc lists but the kernel: whatever has such a
         * number is a process of the sandbox, to be killed (sandbox-kernel.c). */
        { "sandbox-kernel.c", "kill((pid_t) pid, SIGKILL)" },
        /* PID 1 reaps whatever ended in its namespace. */
        { "sandbox.c", "waitpid(-1," },
        { "sandbox-kernel.c", "waitpid(-1," },
};
static unsigned allowed_used[ELEMENTSOF(allowed)];

/* sd_event_add_child() by number too: sd_event_add_child_pidfd() takes the PidRef's fd. */
static const char *const by_number[] = { "kill(", "tgkill(", "tkill(", "sigqueue(", "waitpid(", "wait4(",
                                          "wait3(", "waitid(P_PID,", "waitid(P_ALL", "waitid(P_PGID",
                                          "sd_event_add_child(" };

static bool call_allowed(const char *file, const char *at) {
        const char *base = strrchr(file, '/') + 1;

        for (size_t i = 0; i < ELEMENTSOF(allowed); i++)
                if (streq(base, allowed[i].file) && strneq(at, allowed[i].call, strlen(allowed[i].call))) {
                        allowed_used[i]++;
                        return true;
                }
        return false;
}

/* The calls by number on one line of 'file' that are not allowed, each reported. */
static unsigned line_offences(const char *file, unsigned n, const char *code) {
        unsigned offences = 0;

        for (size_t k = 0; k < ELEMENTSOF(by_number); k++)
                for (const char *p = strstr(code, by_number[k]); p; p = strstr(p + 1, by_number[k])) {
                        /* A word of its own: not pidref_kill(, not a field. */
                        if (p > code && (p[-1] == '_' || p[-1] == '.' || p[-1] == '>' ||
                                         (p[-1] >= 'a' && p[-1] <= 'z')))
                                continue;
                        if (call_allowed(file, p))
                                continue;
                        fprintf(stderr, "%s:%u: by number: %s", file, n, code);
                        offences++;
                }
        return offences;
}

static void test_sources_signal_no_number(void) {
        char pattern[4096];
        unsigned files = 0, offences = 0;
        glob_t g = {};

        /* Every C source of every daemon and tool: the session manager and its runner, sandboxes'
         * PID 1 and the template (root), the storage agent, scopeboxctl (run as root), the
         * gateway, and the shared code all of them link. */
        snprintf(pattern, sizeof(pattern),
                 "%s/src/{session-manager,session-manager/runner,session-manager/template,storage-agent,"
                 "scopeboxctl,gateway,shared}/*.c",
                 source_root);
        ASSERT_EQ(glob(pattern, GLOB_BRACE, NULL, &g), 0);
        for (size_t i = 0; i < g.gl_pathc; i++) {
                char line[4096];
                unsigned n = 0;
                FILE *f = fopen(g.gl_pathv[i], "re");

                ASSERT_TRUE(f);
                files++;
                while (fgets(line, sizeof(line), f)) {
                        char *code = line + strspn(line, " \t");

                        n++;
                        /* Comments name the calls they avoid. */
                        if (startswith(code, "/*") || startswith(code, "*"))
                                continue;
                        offences += line_offences(g.gl_pathv[i], n, code);
                }
                fclose(f);
        }
        globfree(&g);
        ASSERT_TRUE(files >= 90);
        ASSERT_EQ(offences, 0);
        for (size_t i = 0; i < ELEMENTSOF(allowed); i++) {
                if (allowed_used[i] == 0)
                        fprintf(stderr, "stale exception: %s: %s\n", allowed[i].file, allowed[i].call);
                ASSERT_TRUE(allowed_used[i] > 0);
        }
}

int main(int argc, char *argv[]) {
        ASSERT_TRUE(argc == 2);
        source_root = argv[1];
        RUN(test_wait_and_kill);
        RUN(test_reused_number_is_not_signalled);
        RUN(test_sources_signal_no_number);
        return 0;
}
