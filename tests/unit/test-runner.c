/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the runner's pure parts: artifact diffing and limits, the control protocol, the
 * seccomp policy (loaded in a child), and the D-Bus API document against the vtable. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "outputs.h"
#include "runner-protocol.h"
#include "seccomp-policy.h"
#include "workspace.h"
#include "tests.h"

static void test_output_diff(void) {
        OutputSet before = {}, after = {};
        OutputEntry **changed = NULL;
        size_t n = 0;

        ASSERT_EQ(output_set_add(&before, "a.txt", 5, 100), 0);
        ASSERT_EQ(output_set_add(&before, "sub/b.png", 10, 100), 0);
        ASSERT_EQ(output_set_add(&before, "same.csv", 3, 100), 0);
        output_set_sort(&before);

        ASSERT_EQ(output_set_add(&after, "same.csv", 3, 100), 0);   /* unchanged */
        ASSERT_EQ(output_set_add(&after, "sub/b.png", 10, 200), 0); /* touched */
        ASSERT_EQ(output_set_add(&after, "a.txt", 6, 100), 0);      /* resized */
        ASSERT_EQ(output_set_add(&after, "new.pdf", 1, 1), 0);      /* new */
        output_set_sort(&after);

        ASSERT_EQ(output_set_diff(&before, &after, &changed, &n), 0);
        ASSERT_EQ(n, 3);
        ASSERT_STREQ(changed[0]->path, "a.txt");
        ASSERT_STREQ(changed[1]->path, "new.pdf");
        ASSERT_STREQ(changed[2]->path, "sub/b.png");
        free(changed);

        /* Deleted files are not artifacts; an empty 'before' reports everything. */
        OutputSet empty = {};
        ASSERT_EQ(output_set_diff(&after, &empty, &changed, &n), 0);
        ASSERT_EQ(n, 0);
        free(changed);
        ASSERT_EQ(output_set_diff(&empty, &after, &changed, &n), 0);
        ASSERT_EQ(n, 4);
        free(changed);

        output_set_done(&before);
        output_set_done(&after);
}

static void test_output_scan(void) {
        char dir[] = "/tmp/scopebox-test-outputs-XXXXXX";
        OutputSet s = {};
        int fd;

        ASSERT_TRUE(mkdtemp(dir));
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(mkdirat(fd, "d", 0755), 0);
        ASSERT_EQ(write_file_at(fd, "z.txt", "zz", 2, 0644), 0);
        ASSERT_EQ(write_file_at(fd, "d/a.txt", "a", 1, 0644), 0);
        ASSERT_EQ(symlinkat("/etc/passwd", fd, "link"), 0);      /* never followed */
        ASSERT_EQ(mkfifoat(fd, "fifo", 0644), 0);                /* not a regular file */
        ASSERT_EQ(symlinkat("/etc", fd, "dirlink"), 0);

        ASSERT_EQ(output_set_scan(fd, &s), 0);
        ASSERT_EQ(s.n, 2);
        ASSERT_STREQ(s.entries[0].path, "d/a.txt");
        ASSERT_EQ(s.entries[0].size, 1);
        ASSERT_STREQ(s.entries[1].path, "z.txt");
        ASSERT_TRUE(!s.truncated);
        output_set_done(&s);

        /* Empty directories count against the bound like files: a walk over a tree of them
         * stops after max_entries entries of any type. */
        ASSERT_EQ(mkdirat(fd, "empty", 0755), 0);
        for (unsigned i = 0; i < 200; i++) {
                char name[32];
                snprintf(name, sizeof(name), "empty/%u", i);
                ASSERT_EQ(mkdirat(fd, name, 0755), 0);
        }
        ASSERT_EQ(output_set_scan_bounded(fd, OUTPUTS_DEPTH_MAX, 50, &s), 0);
        ASSERT_TRUE(s.truncated);
        ASSERT_TRUE(s.visited <= 50 && s.visited > 50 - OUTPUTS_DIR_COST);
        output_set_done(&s);

        ASSERT_EQ(rm_rf_children(fd), 0);
        close(fd);
        ASSERT_EQ(rmdir(dir), 0);
}

static void test_artifact_limits(void) {
        OutputEntry e[] = {
                { "a", 10, 0 }, { "b", 30, 0 }, { "c", 10, 0 }, { "d", 5, 0 }, { "e", 1, 0 },
        };
        OutputEntry *list[] = { &e[0], &e[1], &e[2], &e[3], &e[4] };
        bool chosen[5];
        ArtifactLimits l = { .max_file_bytes = 20, .max_files = 3, .max_total_bytes = 24 };

        /* a fits; b too big per file; c fits (20); d would pass 24 total; e fits (21), then 3 files. */
        ASSERT_EQ(artifacts_select(list, 5, &l, chosen), 2);
        ASSERT_TRUE(chosen[0] && !chosen[1] && chosen[2] && !chosen[3] && chosen[4]);

        l = (ArtifactLimits) { .max_file_bytes = 100, .max_files = 2, .max_total_bytes = 1000 };
        ASSERT_EQ(artifacts_select(list, 5, &l, chosen), 3);
        ASSERT_TRUE(chosen[0] && chosen[1] && !chosen[2] && !chosen[3] && !chosen[4]);
}

static void test_protocol(void) {
        int sv[2], fds[RUNNER_MESSAGE_FDS_MAX];
        size_t n_fds = 0;
        json_object *m, *got = NULL, *v;
        int memfd;
        char *data = NULL;
        size_t size;

        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        m = json_object_new_object();
        json_object_object_add(m, "op", json_object_new_string("exec"));
        memfd = memfd_new_data("t", "print(1)\n", 9);
        ASSERT_TRUE(memfd >= 0);
        ASSERT_EQ(runner_message_send(sv[0], m, &memfd, 1), 0);
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), 0);
        ASSERT_TRUE(json_object_object_get_ex(got, "op", &v));
        ASSERT_STREQ(json_object_get_string(v), "exec");
        ASSERT_EQ(n_fds, 1);
        ASSERT_TRUE(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
        ASSERT_EQ(read_full_memfd(fds[0], 100, &data, &size), 0);
        ASSERT_EQ(size, 9);
        ASSERT_STREQ(data, "print(1)\n");
        free(data);
        close(fds[0]);
        json_object_put(got);
        json_object_put(m);

        /* Nothing queued; then garbage; then EOF. */
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), -EAGAIN);
        ASSERT_EQ(write(sv[0], "not json", 8), 8);
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), -EBADMSG);
        ASSERT_EQ(write(sv[0], "[1,2]", 5), 5);
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), -EBADMSG);

        /* More fds than a message may carry, or fds where none are wanted: refused, and whatever
         * fds came along closed (the next fd number is free again). */
        int five[RUNNER_MESSAGE_FDS_MAX + 1], probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(probe >= 0);
        close(probe);
        for (size_t i = 0; i < ELEMENTSOF(five); i++)
                five[i] = memfd;
        ASSERT_EQ(fds_send(sv[0], "{}", 2, five, ELEMENTSOF(five)), 0);
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), -EBADMSG);
        ASSERT_EQ(fds_send(sv[0], "{}", 2, five, 1), 0);
        ASSERT_EQ(runner_message_recv(sv[1], &got, NULL, NULL), -EBADMSG);
        int after = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ASSERT_EQ(after, probe);
        close(after);
        close(memfd);

        close(sv[0]);
        ASSERT_EQ(runner_message_recv(sv[1], &got, fds, &n_fds), -ECONNRESET);
        close(sv[1]);
}

/* Forks a child that loads the policy and runs probe(); answers its refused calls as the
 * sandbox's PID 1 does. Returns the child's wait status. */
static int run_under_policy_with(const SeccompOptions *o, int (*probe)(void), SeccompReport *report) {
        SeccompSupervisor sup = {};
        scmp_filter_ctx ctx = NULL;
        int sv[2], listener, status = 0;
        pid_t pid;

        ASSERT_EQ(seccomp_policy_build(o, &ctx), 0);
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                close(sv[0]);
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_load(ctx) < 0)
                        _exit(100);
                if (fd_send_one(sv[1], seccomp_notify_fd(ctx)) < 0)
                        _exit(101);
                _exit(probe());
        }
        close(sv[1]);
        sup.first_exec_pid = o->no_processes ? pid : 0;
        listener = fd_receive_one(sv[0]);
        close(sv[0]);
        ASSERT_TRUE(listener >= 0);
        for (;;) {
                struct pollfd p = { .fd = listener, .events = POLLIN };
                pid_t w = waitpid(pid, &status, WNOHANG);

                ASSERT_TRUE(w >= 0);
                if (w == pid)
                        break;
                if (poll(&p, 1, 50) > 0 && (p.revents & POLLIN))
                        ASSERT_EQ(seccomp_notify_handle_one(listener, &sup), 0);
        }
        close(listener);
        seccomp_release(ctx);
        *report = sup.report;
        return status;
}

static int run_under_policy(int (*probe)(void), SeccompReport *report) {
        return run_under_policy_with(&(SeccompOptions) {}, probe, report);
}

static void *thread_main(void *p) {
        return p;
}

/* The no_processes profile: threads yes, the first execve (the interpreter) yes, nothing after. */
static int probe_no_processes(void) {
        pthread_t t;
        void *ret = NULL;

        if (pthread_create(&t, NULL, thread_main, (void *) 0x1) != 0 || pthread_join(t, &ret) != 0 ||
            ret != (void *) 0x1)
                _exit(1);
        if (!(fork() < 0 && errno == EPERM))
                _exit(2);
        if (!(syscall(SYS_vfork) < 0 && errno == EPERM))
                _exit(3);
        execl("/bin/sh", "sh", "-c", "exec /bin/true", NULL);
        _exit(4);
}

static const SeccompBlocked *report_find(const SeccompReport *report, long nr) {
        for (uint32_t i = 0; i < report->n_calls; i++)
                if (report->calls[i].nr == nr)
                        return &report->calls[i];
        return NULL;
}

/* Each probe that fares as the policy says leaves its bit clear. */
static int probe_refusals(void) {
        int fails = 0, fd;
        pid_t p;

        /* Namespaces: refused softly, also through clone(). */
        if (!(unshare(CLONE_NEWUSER) < 0 && errno == EPERM))
                fails |= 1;
        if (!(syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, NULL, NULL, NULL, 0) < 0 && errno == EPERM))
                fails |= 2;
        /* clone3 answers ENOSYS so libc falls back to clone. */
        if (!(syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS))
                fails |= 4;
        /* Socket families. */
        if (!(socket(AF_NETLINK, SOCK_RAW, 0) < 0 && errno == EAFNOSUPPORT))
                fails |= 8;
        if (!(socket(AF_INET, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT))
                fails |= 16;
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
                fails |= 32;
        /* Plain fork still works. */
        p = fork();
        if (p == 0)
                _exit(0);
        if (p < 0 || waitpid(p, NULL, 0) != p)
                fails |= 64;
        /* io_uring is invisible. */
        if (!(syscall(SYS_io_uring_setup, 1, NULL) < 0 && errno == ENOSYS))
                fails |= 128;
        /* Terminal injection, also with the high bits set (CVE-2019-10063); other requests look
         * unsupported. */
        if (!(syscall(SYS_ioctl, fd, TIOCSTI | 0x100000000ULL, "x") < 0 && errno == EPERM))
                fails |= 256;
        if (!(ioctl(fd, 0x1234, 0) < 0 && errno == ENOTTY))
                fails |= 512;
        /* FIFOs yes, devices no. */
        if (mknodat(AT_FDCWD, "/dev/null-probe", S_IFCHR | 0600, makedev(1, 3)) == 0 || errno != EPERM)
                fails |= 1024;
        /* personality: only the query and PER_LINUX. */
        if (!(personality(ADDR_NO_RANDOMIZE) < 0 && errno == EPERM))
                fails |= 2048;
        if (personality(0xffffffff) < 0)
                fails |= 4096;
        /* A number no kernel knows: ENOSYS, and still reported. */
        if (!(syscall(1000) < 0 && errno == ENOSYS))
                fails |= 8192;
        return fails;
}

static int probe_reboot(void) {
        (void) syscall(SYS_reboot, 0, 0, 0, NULL);
        return 0;
}

static void test_seccomp_policy(void) {
        SeccompReport report;
        const SeccompBlocked *b;
        int status;

        status = run_under_policy(probe_refusals, &report);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        ASSERT_TRUE((b = report_find(&report, SYS_unshare)) && b->verdict == EPERM && b->count == 1);
        ASSERT_TRUE((b = report_find(&report, SYS_clone)) && b->verdict == EPERM);
        ASSERT_TRUE((b = report_find(&report, SYS_socket)) && b->verdict == EAFNOSUPPORT && b->count == 2);
        ASSERT_TRUE((b = report_find(&report, SYS_ioctl)) && b->count == 2);
        ASSERT_TRUE((b = report_find(&report, SYS_mknodat)) && b->verdict == EPERM);
        ASSERT_TRUE((b = report_find(&report, 1000)) && b->verdict == ENOSYS);
        /* The expected probes are answered by the kernel and not reported. */
        ASSERT_TRUE(!report_find(&report, SYS_clone3));
        ASSERT_TRUE(!report_find(&report, SYS_io_uring_setup));

        /* Without processes: the probe's own execve of sh works, sh's exec of true doesn't. */
        status = run_under_policy_with(&(SeccompOptions) { .no_processes = true }, probe_no_processes,
                                       &report);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_TRUE(WEXITSTATUS(status) >= 100); /* sh's "can't exec" */
        ASSERT_TRUE((b = report_find(&report, SYS_clone)) && b->verdict == EPERM); /* glibc fork() */
        ASSERT_TRUE((b = report_find(&report, SYS_vfork)) && b->verdict == EPERM);
        ASSERT_TRUE((b = report_find(&report, SYS_execve)) && b->verdict == EPERM && b->count == 1);

        /* A call with no legitimate use is killed by the kernel, before any errno filter. */
        status = run_under_policy(probe_reboot, &report);
        ASSERT_TRUE(WIFSIGNALED(status));
        ASSERT_EQ(WTERMSIG(status), SIGSYS);
        ASSERT_EQ(report.n_calls, 0);
        ASSERT_STREQ(seccomp_verdict_to_string(EAFNOSUPPORT), "EAFNOSUPPORT");

        /* The report keeps the first SECCOMP_REPORT_MAX distinct calls and counts the rest. */
        seccomp_report_init(&report);
        for (int nr = 0; nr < SECCOMP_REPORT_MAX + 3; nr++)
                seccomp_report_add(&report, nr, ENOSYS);
        seccomp_report_add(&report, 0, ENOSYS);
        ASSERT_EQ(report.n_calls, SECCOMP_REPORT_MAX);
        ASSERT_EQ(report.overflow, 3);
        ASSERT_EQ(report.calls[0].count, 2);

        /* In the exec's result: every call with its three members, and back. */
        {
                SeccompReportCalls calls = {};
                _cleanup_json_ json_object *reply = NULL;
                json_object *arr, *c, *v;
                RunnerExecResult res = { .exit_reason = "exited" }, got;

                seccomp_report_calls(&report, &calls);
                ASSERT_EQ(calls.n, (size_t) SECCOMP_REPORT_MAX);
                res.blocked = calls.items;
                res.n_blocked = calls.n;
                ASSERT_EQ(schema_build(&runner_exec_result, &res, &reply), 0);
                ASSERT_TRUE(json_object_object_get_ex(reply, "blocked_syscalls", &arr));
                ASSERT_EQ(json_object_array_length(arr), (size_t) SECCOMP_REPORT_MAX);
                c = json_object_array_get_idx(arr, 0);
                ASSERT_TRUE(json_object_object_get_ex(c, "name", &v) && json_object_get_string(v)[0]);
                ASSERT_TRUE(json_object_object_get_ex(c, "verdict", &v));
                ASSERT_STREQ(json_object_get_string(v), "ENOSYS");
                ASSERT_TRUE(json_object_object_get_ex(c, "count", &v) && json_object_get_int64(v) == 2);
                ASSERT_EQ(schema_parse(&runner_exec_result, reply, &got, NULL), 0);
                ASSERT_EQ(got.n_blocked, (size_t) SECCOMP_REPORT_MAX);
                ASSERT_STREQ(got.blocked[0].verdict, "ENOSYS");
                ASSERT_EQ(got.blocked[0].count, 2U);
                runner_exec_result_done(&got);
        }
}

/* Loads 'fd' (one profile's BPF) in a child with no_new_privs, closes the listener (a notified call
 * then fails with ENOSYS) and tries an inet socket: 0 if it was created, else the errno. */
static int inet_socket_under(int fd) {
        struct sock_filter insns[BPF_MAXINSNS];
        struct stat st;
        int pipefd[2], result = -1;
        pid_t pid;

        ASSERT_EQ(fstat(fd, &st), 0);
        ASSERT_EQ(pread(fd, insns, (size_t) st.st_size, 0), (ssize_t) st.st_size);
        ASSERT_EQ(pipe(pipefd), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct sock_fprog prog = { .len = (unsigned short) (st.st_size / sizeof(struct sock_filter)),
                                           .filter = insns };
                long l;
                int s, e = 0;

                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                        _exit(2);
                l = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
                if (l < 0)
                        _exit(3);
                close((int) l);
                s = socket(AF_INET, SOCK_DGRAM, 0);
                e = s >= 0 ? 0 : errno;
                (void) !write(pipefd[1], &e, sizeof(e));
                _exit(0);
        }
        close(pipefd[1]);
        ASSERT_EQ(read(pipefd[0], &result, sizeof(result)), (ssize_t) sizeof(result));
        close(pipefd[0]);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
        return result;
}

/* The profiles compiled once (by the manager), split by each runner, and nothing else accepted. */
static void test_seccomp_filter_set(void) {
        int set, fds[_SECCOMP_PROFILE_MAX], bad[_SECCOMP_PROFILE_MAX];
        char buf[256 * 1024];
        struct stat st;
        ssize_t n;

        ASSERT_EQ(seccomp_filter_set_new(&set), 0);
        ASSERT_EQ(seccomp_filter_set_split(set, fds), 0);
        for (size_t i = 0; i < _SECCOMP_PROFILE_MAX; i++) {
                ASSERT_EQ(fstat(fds[i], &st), 0);
                ASSERT_TRUE(st.st_size > 0 && st.st_size % (off_t) sizeof(struct sock_filter) == 0);
                /* Sealed: no one who holds it can change what the next payload loads. */
                ASSERT_TRUE(write(fds[i], "x", 1) < 0 && errno == EPERM);
        }
        ASSERT_EQ(seccomp_profile_of(false, false), SECCOMP_PROFILE_SIDECAR);
        ASSERT_EQ(seccomp_profile_of(true, true), SECCOMP_PROFILE_DIFY_INET);
        /* Each program is its profile's: inet sockets only with a network. */
        ASSERT_EQ(inet_socket_under(fds[SECCOMP_PROFILE_SIDECAR]), ENOSYS);
        ASSERT_EQ(inet_socket_under(fds[SECCOMP_PROFILE_SIDECAR_INET]), 0);
        ASSERT_EQ(inet_socket_under(fds[SECCOMP_PROFILE_DIFY]), ENOSYS);
        ASSERT_EQ(inet_socket_under(fds[SECCOMP_PROFILE_DIFY_INET]), 0);

        /* A set cut short, or with bytes after its programs, or another magic, is refused whole. */
        n = pread(set, buf, sizeof(buf), 0);
        ASSERT_TRUE(n > (ssize_t) sizeof(SeccompFilterSetHeader));
        for (int k = 0; k < 3; k++) {
                char copy[sizeof(buf) + 8];
                size_t len = (size_t) n;
                int fd;

                memcpy(copy, buf, (size_t) n);
                if (k == 0)
                        len -= sizeof(struct sock_filter);
                else if (k == 1)
                        len += sizeof(struct sock_filter);
                else
                        copy[0] ^= 1;
                fd = memfd_new_data("set", copy, len);
                ASSERT_TRUE(fd >= 0);
                for (size_t i = 0; i < _SECCOMP_PROFILE_MAX; i++)
                        bad[i] = -EBADF;
                ASSERT_EQ(seccomp_filter_set_split(fd, bad), -EBADMSG);
                for (size_t i = 0; i < _SECCOMP_PROFILE_MAX; i++)
                        ASSERT_EQ(bad[i], -EBADF);
                close(fd);
        }
        for (size_t i = 0; i < _SECCOMP_PROFILE_MAX; i++)
                close(fds[i]);
        close(set);
}

static void test_openat_beneath(void) {
        char dir[] = "/tmp/scopebox-test-beneath-XXXXXX";
        int fd, f;

        ASSERT_TRUE(mkdtemp(dir));
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(mkdirat(fd, "sub", 0755), 0);
        ASSERT_EQ(write_file_at(fd, "sub/f.txt", "x", 1, 0644), 0);
        ASSERT_EQ(symlinkat("/etc/passwd", fd, "link"), 0);
        ASSERT_EQ(symlinkat("sub", fd, "dirlink"), 0);

        /* Both the openat2() path and the component walk used where it is unavailable. */
        int (*const impls[])(int, const char *, int, mode_t) = { openat_beneath, openat_beneath_walk };
        for (size_t i = 0; i < ELEMENTSOF(impls); i++) {
                f = impls[i](fd, "sub/f.txt", O_RDONLY, 0);
                ASSERT_TRUE(f >= 0);
                close(f);
                f = impls[i](fd, "sub//./f.txt", O_RDONLY, 0);
                ASSERT_TRUE(f >= 0);
                close(f);
                f = impls[i](fd, "sub", O_RDONLY | O_DIRECTORY, 0);
                ASSERT_TRUE(f >= 0);
                close(f);
                ASSERT_TRUE(impls[i](fd, "link", O_RDONLY, 0) < 0);
                ASSERT_TRUE(impls[i](fd, "dirlink/f.txt", O_RDONLY, 0) < 0);
                ASSERT_TRUE(impls[i](fd, "../etc/passwd", O_RDONLY, 0) < 0);
                ASSERT_TRUE(impls[i](fd, "sub/../../etc/passwd", O_RDONLY, 0) < 0);
                ASSERT_TRUE(impls[i](fd, "/etc/passwd", O_RDONLY, 0) < 0);
                ASSERT_EQ(impls[i](fd, "missing", O_RDONLY, 0), -ENOENT);
        }

        ASSERT_EQ(rm_rf_children(fd), 0);
        close(fd);
        ASSERT_EQ(rmdir(dir), 0);
}

static void test_workspace_ops(void) {
        char dir[] = "/tmp/scopebox-test-ws-XXXXXX";
        uid_t uid = geteuid() == 0 ? 1000 : geteuid();
        gid_t gid = geteuid() == 0 ? 1000 : getegid();
        int ws, data, fd;
        Workspace w;
        OutputSet s = {};
        char *text = NULL;
        struct stat st;

        ASSERT_TRUE(mkdtemp(dir));
        ws = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(ws >= 0);
        data = memfd_new_data("t", "hello", 5);
        ASSERT_TRUE(data >= 0);
        w = (Workspace) { .fd = ws, .view_fd = -EBADF, .uid = uid, .gid = gid };

        /* Parents are created, owned by the sandbox user; content round-trips. */
        ASSERT_EQ(workspace_write(&w, "uploads/deep/er/f.txt", data), 0);
        ASSERT_EQ(fstatat(ws, "uploads/deep/er/f.txt", &st, 0), 0);
        ASSERT_EQ(st.st_uid, uid);
        ASSERT_EQ(fstatat(ws, "uploads/deep", &st, 0), 0);
        ASSERT_EQ(st.st_uid, uid);
        ASSERT_EQ(workspace_read(&w, "uploads/deep/er/f.txt", 100, &fd), 0);
        ASSERT_EQ(read_full_memfd(fd, 100, &text, NULL), 0);
        ASSERT_STREQ(text, "hello");
        free(text);
        close(fd);
        ASSERT_EQ(workspace_read(&w, "uploads/deep/er/f.txt", 4, &fd), -EFBIG);
        ASSERT_EQ(workspace_read(&w, "uploads/deep", 100, &fd), -ENOENT);
        ASSERT_EQ(workspace_read(&w, "missing", 100, &fd), -ENOENT);
        ASSERT_EQ(workspace_write(&w, "uploads", data), -EISDIR);

        /* Links: inside is fine to read, outside never, and writes never go through them. */
        ASSERT_EQ(symlinkat("/etc", ws, "evil"), 0);
        ASSERT_EQ(symlinkat("/etc/hostname", ws, "evil-file"), 0);
        ASSERT_EQ(symlinkat("uploads/deep/er/f.txt", ws, "inside"), 0);
        ASSERT_EQ(workspace_read(&w, "evil/passwd", 1 << 20, &fd), -EXDEV);
        ASSERT_EQ(workspace_read(&w, "evil-file", 1 << 20, &fd), -EXDEV);
        ASSERT_EQ(workspace_write(&w, "evil/passwd", data), -EXDEV);
        ASSERT_EQ(workspace_write(&w, "evil-file", data), -EXDEV);
        ASSERT_EQ(workspace_read(&w, "inside", 100, &fd), 0);
        close(fd);

        /* List: regular files only, sorted, no links followed, depth bounded. */
        ASSERT_EQ(workspace_write(&w, "a/b/c/d/e/six.txt", data), 0);
        ASSERT_EQ(workspace_write(&w, "a/b/c/d/e/f/seven.txt", data), 0);
        ASSERT_EQ(workspace_write(&w, "odd\nname\"x", data), 0);
        ASSERT_EQ(workspace_list(&w, &s), 0);
        ASSERT_EQ(s.n, 3);
        ASSERT_STREQ(s.entries[0].path, "a/b/c/d/e/six.txt");
        ASSERT_STREQ(s.entries[1].path, "odd\nname\"x");
        ASSERT_STREQ(s.entries[2].path, "uploads/deep/er/f.txt");
        ASSERT_EQ(s.entries[2].size, 5);
        output_set_done(&s);

        /* Reset empties uploads/ and skills/ only. */
        ASSERT_EQ(workspace_reset_inputs(&w), 0);
        ASSERT_TRUE(fstatat(ws, "uploads/deep", &st, 0) < 0);
        ASSERT_EQ(fstatat(ws, "uploads", &st, 0), 0);
        ASSERT_TRUE(S_ISDIR(st.st_mode));
        ASSERT_EQ(fstatat(ws, "skills", &st, 0), 0);
        ASSERT_EQ(fstatat(ws, "a/b/c/d/e/six.txt", &st, 0), 0);

        close(data);
        ASSERT_EQ(rm_rf_children(ws), 0);
        close(ws);
        ASSERT_EQ(rmdir(dir), 0);
}

/* reset-inputs while a process of the session swaps uploads/ with a symlink to a host directory
 * (renameat2(RENAME_EXCHANGE) in a loop): the host directory keeps its mode and its content. */
static void test_reset_inputs_race(void) {
        char dir[] = "/tmp/scopebox-test-ws-XXXXXX", host[] = "/tmp/scopebox-test-host-XXXXXX";
        uid_t uid = geteuid() == 0 ? 1000 : geteuid();
        gid_t gid = geteuid() == 0 ? 1000 : getegid();
        unsigned failures = 0;
        struct stat st;
        Workspace w;
        pid_t swapper;
        int ws, status;

        ASSERT_TRUE(mkdtemp(dir));
        ASSERT_TRUE(mkdtemp(host));
        ASSERT_EQ(chmod(host, 0700), 0);
        ws = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(ws >= 0);
        {
                int hfd = open(host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                ASSERT_TRUE(hfd >= 0);
                ASSERT_EQ(write_file_at(hfd, "keep", "canary", 6, 0600), 0);
                close(hfd);
        }
        ASSERT_EQ(mkdirat(ws, "uploads", 0755), 0);
        ASSERT_EQ(symlinkat(host, ws, "swap"), 0);
        w = (Workspace) { .fd = ws, .view_fd = -EBADF, .uid = uid, .gid = gid };

        swapper = fork();
        ASSERT_TRUE(swapper >= 0);
        if (swapper == 0) {
                for (;;) {
                        (void) syscall(SYS_renameat2, ws, "uploads", ws, "swap", RENAME_EXCHANGE);
                        /* reset-inputs may have replaced the link: put one back. */
                        (void) symlinkat(host, ws, "swap");
                        (void) symlinkat(host, ws, "uploads");
                }
        }
        for (unsigned i = 0; i < 3000; i++)
                if (workspace_reset_inputs(&w) < 0)
                        failures++; /* a refusal is fine; following the link is not */
        ASSERT_EQ(kill(swapper, SIGKILL), 0);
        ASSERT_EQ(waitpid(swapper, &status, 0), swapper);

        ASSERT_EQ(stat(host, &st), 0);
        ASSERT_EQ(st.st_mode & 07777, 0700);
        ASSERT_EQ(st.st_uid, geteuid());
        {
                char *path = NULL, buf[16] = {};
                int fd;

                ASSERT_TRUE(asprintf(&path, "%s/keep", host) > 0);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_EQ(read(fd, buf, sizeof(buf)), 6);
                ASSERT_STREQ(buf, "canary");
                ASSERT_EQ(fstat(fd, &st), 0);
                ASSERT_EQ(st.st_mode & 07777, 0600);
                close(fd);
                ASSERT_EQ(unlink(path), 0);
                free(path);
        }
        /* Once nobody races it, it does its job. */
        ASSERT_EQ(workspace_reset_inputs(&w), 0);
        ASSERT_EQ(fstatat(ws, "uploads", &st, AT_SYMLINK_NOFOLLOW), 0);
        ASSERT_TRUE(S_ISDIR(st.st_mode));
        ASSERT_EQ(st.st_mode & 07777, 0755);
        fprintf(stderr, "reset-inputs refused %u of 3000 calls under the swapper\n", failures);

        ASSERT_EQ(rm_rf_children(ws), 0);
        close(ws);
        ASSERT_EQ(rmdir(dir), 0);
        ASSERT_EQ(rmdir(host), 0);
}

/* FOREACH_DIRENT: every entry once, never "." or "..", continue and break as in any loop. */
static void test_foreach_dirent(void) {
        char dir[] = "/tmp/scopebox-test-dirent-XXXXXX";
        _cleanup_close_ int fd = -EBADF;
        struct dirent *de;
        unsigned n = 0, seen = 0;

        ASSERT_TRUE(mkdtemp(dir));
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write_file_at(fd, "a", "1", 1, 0600), 0);
        ASSERT_EQ(write_file_at(fd, ".b", "2", 1, 0600), 0);
        ASSERT_EQ(mkdirat(fd, "c", 0700), 0);
        {
                _cleanup_closedir_ DIR *d = NULL;

                ASSERT_EQ(opendir_at(fd, &d), 0);
                FOREACH_DIRENT(de, d, ASSERT_TRUE(false)) {
                        ASSERT_TRUE(strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0);
                        n++;
                        if (strcmp(de->d_name, "a") == 0)
                                continue;
                        seen |= de->d_name[0] == '.' ? 1 : 2;
                }
        }
        ASSERT_EQ(n, 3U);
        ASSERT_EQ(seen, 3U);
        n = 0;
        {
                _cleanup_closedir_ DIR *d = NULL;

                ASSERT_EQ(opendir_at(fd, &d), 0);
                FOREACH_DIRENT(de, d, ASSERT_TRUE(false)) {
                        n++;
                        break;
                }
        }
        ASSERT_EQ(n, 1U);
        ASSERT_EQ(rm_rf_children(fd), 0);
        ASSERT_EQ(rmdir(dir), 0);
}

int main(void) {
        RUN(test_output_diff);
        RUN(test_foreach_dirent);
        RUN(test_output_scan);
        RUN(test_artifact_limits);
        RUN(test_openat_beneath);
        RUN(test_workspace_ops);
        RUN(test_reset_inputs_race);
        RUN(test_protocol);
        /* valgrind can't run seccomp(2); the policy is tested in the plain run. */
        if (!getenv("SCOPEBOX_TEST_UNDER_VALGRIND")) {
                RUN(test_seccomp_policy);
                RUN(test_seccomp_filter_set);
        }
        return 0;
}
