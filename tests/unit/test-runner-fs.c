/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* E2B's filesystem calls in the runner: the fs-* requests and their listing (runner-protocol.c),
 * what the manager builds being what the runner parses; and the operations (workspace-fs.c) on a
 * workspace with the links a process of the sandbox makes, while it swaps a directory for a link
 * to a host directory, and through the view of a real session (a tmpfs bound into it). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "json-util.h"
#include "runner-protocol.h"
#include "tests.h"
#include "workspace-fs.h"

static void test_requests(void) {
        _cleanup_json_ json_object *o = NULL;
        RunnerFsRequest out;

        ASSERT_EQ(runner_request_fs(&runner_fs_move_request,
                                    &(RunnerFsRequest) { .path = "a/b", .destination = "c" }, &o),
                  0);
        ASSERT_TRUE(runner_request_lookup(o) == &runner_fs_move_request);
        ASSERT_EQ(schema_parse(&runner_fs_move_request, o, &out, NULL), 0);
        ASSERT_STREQ(out.path, "a/b");
        ASSERT_STREQ(out.destination, "c");
        json_object_put(TAKE_PTR(o));

        /* The workspace's root is "": sent, for a stat or a listing. */
        ASSERT_EQ(runner_request_fs(&runner_fs_list_request, &(RunnerFsRequest) { .path = "", .depth = 3 },
                                    &o),
                  0);
        ASSERT_EQ(schema_parse(&runner_fs_list_request, o, &out, NULL), 0);
        ASSERT_STREQ(out.path, "");
        ASSERT_EQ(out.depth, 3U);
        json_object_put(TAKE_PTR(o));

        /* A depth the runner would not walk, a move without its destination, another op. */
        ASSERT_EQ(runner_request_fs(&runner_fs_list_request,
                                    &(RunnerFsRequest) { .path = "", .depth = RUNNER_FS_DEPTH_MAX + 1 }, &o),
                  -ERANGE);
        ASSERT_EQ(runner_request_fs(&runner_fs_list_request, &(RunnerFsRequest) { .path = "" }, &o),
                  -ERANGE);
        ASSERT_EQ(runner_request_fs(&runner_fs_move_request, &(RunnerFsRequest) { .path = "a" }, &o),
                  -ERANGE);
        ASSERT_EQ(runner_request_fs(&runner_fs_stat_request, &(RunnerFsRequest) { .path = "a\xff" }, &o),
                  -ERANGE);
        ASSERT_EQ(runner_request_fs(&runner_exec_request, &(RunnerFsRequest) { .path = "a" }, &o), -EINVAL);
        ASSERT_TRUE(!o);
        printf("ok - fs requests\n");
}

static void test_listing(void) {
        RunnerFsEntry entries[] = {
                { .path = "",
                  .type = "dir",
                  .size = 60,
                  .mode = 040755,
                  .owner = "user",
                  .group = "user",
                  .mtime_nsec = -5 },
                { .path = "l",
                  .type = "symlink",
                  .size = 4,
                  .mode = 0120777,
                  .owner = "root",
                  .group = "1001",
                  .mtime_nsec = 1,
                  .target = "/etc" },
        };
        _cleanup_json_ json_object *o = NULL;
        _cleanup_(runner_fs_listing_done) RunnerFsListing out = {};

        ASSERT_EQ(schema_build(&runner_fs_listing,
                               &(RunnerFsListing) { .entries = entries, .n_entries = 2, .truncated = true },
                               &o),
                  0);
        ASSERT_EQ(schema_parse(&runner_fs_listing, o, &out, NULL), 0);
        ASSERT_EQ(out.n_entries, 2U);
        ASSERT_TRUE(out.truncated && !out.existed);
        ASSERT_STREQ(out.entries[0].path, "");
        ASSERT_TRUE(!out.entries[0].target);
        ASSERT_EQ(out.entries[0].mtime_nsec, -5);
        ASSERT_EQ(out.entries[1].mode, 0120777U);
        ASSERT_STREQ(out.entries[1].target, "/etc");
        ASSERT_STREQ(out.entries[1].group, "1001");
        json_object_put(TAKE_PTR(o));

        /* An empty listing still says so; an owner that is no one line is refused. */
        ASSERT_EQ(schema_build(&runner_fs_listing, &(RunnerFsListing) {}, &o), 0);
        ASSERT_TRUE(json_object_object_get_ex(o, "entries", NULL));
        json_object_put(TAKE_PTR(o));
        entries[1].owner = "a\nb";
        ASSERT_EQ(schema_build(&runner_fs_listing, &(RunnerFsListing) { .entries = entries, .n_entries = 2 },
                               &o),
                  -ERANGE);
        printf("ok - fs listing\n");
}

/* The names of a listing, one line each. */
static char *names_of(WorkspaceFsList *l) {
        char *s = strdup("");

        for (size_t i = 0; s && i < l->listing.n_entries; i++) {
                char *t = NULL;

                ASSERT_TRUE(asprintf(&t, "%s%s%s", s, l->listing.entries[i].path,
                                     i + 1 < l->listing.n_entries ? "\n" : "") > 0);
                free(s);
                s = t;
        }
        workspace_fs_list_done(l);
        ASSERT_TRUE(s);
        return s;
}

static void check_list(const Workspace *w, const char *path, unsigned depth, const char *want) {
        WorkspaceFsList l = {};
        char *names;

        ASSERT_EQ(workspace_fs_list(w, path, depth, &l), 0);
        names = names_of(&l);
        ASSERT_STREQ(names, want);
        free(names);
}

/* An operation that must fail with 'error', leaving nothing in the listing 'l' of the caller. */
#define ASSERT_FS_FAILS(call, error)                                                                        \
        do {                                                                                                \
                ASSERT_EQ(call, error);                                                                     \
                ASSERT_EQ(l.listing.n_entries, 0);                                                          \
                workspace_fs_list_done(&l);                                                                 \
        } while (0)

static int open_tmp_workspace(char *dir) {
        int fd;

        ASSERT_TRUE(mkdtemp(dir));
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        return fd;
}

static void test_ops(void) {
        char dir[] = "/tmp/scopebox-test-fs-XXXXXX";
        uid_t uid = geteuid() == 0 ? 1000 : geteuid();
        gid_t gid = geteuid() == 0 ? 1000 : getegid();
        int ws = open_tmp_workspace(dir);
        Workspace w = { .fd = ws, .view_fd = -EBADF, .uid = uid, .gid = gid };
        WorkspaceFsList l = {};
        struct stat st;

        /* makeDir: parents made and handed to the sandbox user; again: it existed. */
        ASSERT_EQ(workspace_fs_mkdir(&w, "a/b/c", &l), 0);
        ASSERT_TRUE(!l.listing.existed && l.listing.n_entries == 1);
        ASSERT_STREQ(l.listing.entries[0].path, "a/b/c");
        ASSERT_STREQ(l.listing.entries[0].type, "dir");
        ASSERT_STREQ(l.listing.entries[0].owner, "user");
        workspace_fs_list_done(&l);
        ASSERT_EQ(fstatat(ws, "a/b", &st, AT_SYMLINK_NOFOLLOW), 0);
        ASSERT_EQ(st.st_uid, uid);
        ASSERT_EQ(st.st_mode & 07777, 0755);
        ASSERT_EQ(workspace_fs_mkdir(&w, "a/b/c", &l), 0);
        ASSERT_TRUE(l.listing.existed);
        workspace_fs_list_done(&l);
        ASSERT_EQ(write_file_at(ws, "a/f", "hello", 5, 0644), 0);
        ASSERT_FS_FAILS(workspace_fs_mkdir(&w, "a/f", &l), -EEXIST);
        ASSERT_FS_FAILS(workspace_fs_mkdir(&w, "a/f/x", &l), -ENOTDIR);

        /* Stat: the entry itself; a missing one, or one below a file, is not there. */
        ASSERT_EQ(workspace_fs_stat(&w, "a/f", &l), 0);
        ASSERT_EQ(l.listing.entries[0].size, 5U);
        ASSERT_EQ(l.listing.entries[0].mode, S_IFREG | 0644);
        workspace_fs_list_done(&l);
        ASSERT_EQ(workspace_fs_stat(&w, "", &l), 0);
        ASSERT_STREQ(l.listing.entries[0].type, "dir");
        workspace_fs_list_done(&l);
        ASSERT_FS_FAILS(workspace_fs_stat(&w, "nope", &l), -ENOENT);
        ASSERT_FS_FAILS(workspace_fs_stat(&w, "a/f/x", &l), -ENOENT);

        /* Links out of it: reported, never followed, whatever the call. */
        ASSERT_EQ(symlinkat("/etc", ws, "etc"), 0);
        ASSERT_EQ(symlinkat("../..", ws, "up"), 0);
        ASSERT_EQ(symlinkat("a", ws, "rel"), 0);
        ASSERT_EQ(workspace_fs_stat(&w, "etc", &l), 0);
        ASSERT_STREQ(l.listing.entries[0].type, "symlink");
        ASSERT_STREQ(l.listing.entries[0].target, "/etc");
        workspace_fs_list_done(&l);
        ASSERT_FS_FAILS(workspace_fs_list(&w, "etc", 1, &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_list(&w, "up", 1, &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_stat(&w, "etc/passwd", &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_mkdir(&w, "etc/scopebox-x", &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_mkdir(&w, "up/scopebox-x", &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_move(&w, "a/f", "etc/f", &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_move(&w, "etc/hostname", "stolen", &l), -EXDEV);
        ASSERT_EQ(workspace_fs_remove(&w, "etc/hostname"), -EXDEV);
        ASSERT_EQ(workspace_fs_remove(&w, "up/etc"), -EXDEV);
        ASSERT_EQ(access("/etc/hostname", F_OK), 0);
        /* Links that stay inside are followed. */
        check_list(&w, "rel", 1, "rel/b\nrel/f");

        /* Listings: depth first in name order; links listed, not entered. */
        check_list(&w, "", 1, "a\netc\nrel\nup");
        check_list(&w, "", 3, "a\na/b\na/b/c\na/f\netc\nrel\nup");
        ASSERT_FS_FAILS(workspace_fs_list(&w, "a/f", 1, &l), -ENOTDIR);
        ASSERT_FS_FAILS(workspace_fs_list(&w, "nope", 1, &l), -ENOENT);

        /* Moves: parents made; into itself, the workspace itself: refused. */
        ASSERT_FS_FAILS(workspace_fs_move(&w, "a", "a/b/in", &l), -EINVAL);
        ASSERT_FS_FAILS(workspace_fs_move(&w, "", "x", &l), -EPERM);
        ASSERT_FS_FAILS(workspace_fs_move(&w, "nope", "x", &l), -ENOENT);
        ASSERT_EQ(workspace_fs_move(&w, "a/f", "x/y/g", &l), 0);
        ASSERT_STREQ(l.listing.entries[0].path, "x/y/g");
        workspace_fs_list_done(&l);
        /* A link moves as itself. */
        ASSERT_EQ(workspace_fs_move(&w, "etc", "x/etc2", &l), 0);
        ASSERT_STREQ(l.listing.entries[0].type, "symlink");
        workspace_fs_list_done(&l);

        /* Removes: a tree, a link (not what it leads to), nothing at all; never the workspace. */
        ASSERT_EQ(workspace_fs_remove(&w, "a"), 0);
        ASSERT_FS_FAILS(workspace_fs_stat(&w, "a", &l), -ENOENT);
        ASSERT_EQ(workspace_fs_remove(&w, "x/etc2"), 0);
        ASSERT_EQ(access("/etc/hostname", F_OK), 0);
        ASSERT_EQ(workspace_fs_remove(&w, "never"), 0);
        ASSERT_EQ(workspace_fs_remove(&w, "never/was"), 0);
        ASSERT_EQ(workspace_fs_remove(&w, ""), -EPERM);

        /* A huge directory: a bounded listing, the first names in order; unreadable names left out. */
        ASSERT_EQ(mkdirat(ws, "big", 0755), 0);
        {
                int big = openat(ws, "big", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

                ASSERT_TRUE(big >= 0);
                for (unsigned i = 0; i < RUNNER_FS_ENTRIES_MAX + 500; i++) {
                        char name[32];

                        snprintf(name, sizeof(name), "f%05u", i);
                        ASSERT_EQ(write_file_at(big, name, "", 0, 0644), 0);
                }
                ASSERT_EQ(write_file_at(big, "\xff", "", 0, 0644), 0);
                close(big);
        }
        ASSERT_EQ(workspace_fs_list(&w, "big", 1, &l), 0);
        ASSERT_EQ(l.listing.n_entries, RUNNER_FS_ENTRIES_MAX);
        ASSERT_TRUE(l.listing.truncated);
        ASSERT_STREQ(l.listing.entries[0].path, "big/f00000");
        workspace_fs_list_done(&l);

        ASSERT_EQ(rm_rf_children(ws), 0);
        close(ws);
        ASSERT_EQ(rmdir(dir), 0);
        printf("ok - fs operations\n");
}

/* Every operation through "d" while a process swaps "d" with a link to a host directory
 * (renameat2(RENAME_EXCHANGE) in a loop): the host directory keeps its mode and content. */
static void test_race(void) {
        char dir[] = "/tmp/scopebox-test-fs-XXXXXX", host[] = "/tmp/scopebox-test-host-XXXXXX";
        uid_t uid = geteuid() == 0 ? 1000 : geteuid();
        gid_t gid = geteuid() == 0 ? 1000 : getegid();
        int ws = open_tmp_workspace(dir), hfd, status;
        Workspace w = { .fd = ws, .view_fd = -EBADF, .uid = uid, .gid = gid };
        unsigned done = 0;
        struct stat st;
        pid_t swapper;

        ASSERT_TRUE(mkdtemp(host));
        ASSERT_EQ(chmod(host, 0700), 0);
        hfd = open(host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(hfd >= 0);
        ASSERT_EQ(write_file_at(hfd, "keep", "canary", 6, 0600), 0);
        ASSERT_EQ(mkdirat(hfd, "m1", 0700), 0);
        ASSERT_EQ(mkdirat(ws, "d", 0755), 0);
        ASSERT_EQ(symlinkat(host, ws, "swap"), 0);

        swapper = fork();
        ASSERT_TRUE(swapper >= 0);
        if (swapper == 0)
                for (;;) {
                        (void) syscall(SYS_renameat2, ws, "d", ws, "swap", RENAME_EXCHANGE);
                        (void) symlinkat(host, ws, "swap");
                        (void) symlinkat(host, ws, "d");
                }
        for (unsigned i = 0; i < 2000; i++) {
                WorkspaceFsList l = {};

                /* Refusals are fine; following the link is not. */
                done += workspace_fs_remove(&w, "d/keep") >= 0;
                done += workspace_fs_mkdir(&w, "d/new", &l) >= 0;
                workspace_fs_list_done(&l);
                done += workspace_fs_move(&w, "d/m1", "d/m2", &l) >= 0;
                workspace_fs_list_done(&l);
                done += workspace_fs_list(&w, "d", 2, &l) >= 0;
                workspace_fs_list_done(&l);
                done += workspace_fs_remove(&w, "d/new") >= 0;
        }
        ASSERT_EQ(kill(swapper, SIGKILL), 0);
        ASSERT_EQ(waitpid(swapper, &status, 0), swapper);

        ASSERT_EQ(fstat(hfd, &st), 0);
        ASSERT_EQ(st.st_mode & 07777, 0700);
        ASSERT_EQ(fstatat(hfd, "keep", &st, 0), 0);
        ASSERT_EQ(st.st_size, 6);
        ASSERT_EQ(fstatat(hfd, "m1", &st, 0), 0);
        ASSERT_TRUE(fstatat(hfd, "m2", &st, 0) < 0 && errno == ENOENT);
        ASSERT_TRUE(fstatat(hfd, "new", &st, 0) < 0 && errno == ENOENT);
        fprintf(stderr, "%u of 10000 operations went through under the swapper\n", done);

        ASSERT_EQ(rm_rf_children(hfd), 0);
        close(hfd);
        ASSERT_EQ(rmdir(host), 0);
        ASSERT_EQ(rm_rf_children(ws), 0);
        close(ws);
        ASSERT_EQ(rmdir(dir), 0);
        printf("ok - fs operations under a swapper\n");
}

/* As in a session: the workspace a tmpfs of its own, also bound at "workspace" in the view, where
 * absolute links are resolved. In a child with a mount namespace of its own (root only). */
static void test_view_child(const char *dir) {
        char *inside = NULL;
        int ws, view;
        WorkspaceFsList l = {};
        Workspace w;

        ASSERT_EQ(unshare(CLONE_NEWNS), 0);
        ASSERT_EQ(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ASSERT_TRUE(asprintf(&inside, "%s/ws", dir) > 0);
        ASSERT_EQ(mkdir(inside, 0755), 0);
        ASSERT_EQ(mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m"), 0);
        ws = open(inside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(ws >= 0);
        free(inside);
        ASSERT_TRUE(asprintf(&inside, "%s/view/workspace", dir) > 0);
        ASSERT_EQ(mkdir_p(inside, 0755), 0);
        {
                char *src = NULL;

                ASSERT_TRUE(asprintf(&src, "%s/ws", dir) > 0);
                ASSERT_EQ(mount(src, inside, NULL, MS_BIND, NULL), 0);
                free(src);
        }
        free(inside);
        ASSERT_TRUE(asprintf(&inside, "%s/view", dir) > 0);
        view = open(inside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(view >= 0);
        free(inside);
        w = (Workspace) { .fd = ws, .view_fd = view, .uid = 1000, .gid = 1000 };

        ASSERT_EQ(workspace_fs_mkdir(&w, "t/sub", &l), 0);
        workspace_fs_list_done(&l);
        ASSERT_EQ(write_file_at(ws, "t/f", "x", 1, 0644), 0);
        ASSERT_EQ(symlinkat("/workspace/t", ws, "abs"), 0);
        ASSERT_EQ(symlinkat("/", ws, "root"), 0);
        ASSERT_EQ(symlinkat("/etc", ws, "etc"), 0);
        ASSERT_EQ(symlinkat("../../..", ws, "up"), 0);
        /* An absolute link into the workspace is followed, as in the sandbox. */
        check_list(&w, "abs", 1, "abs/f\nabs/sub");
        /* "/" and ".." end on the view's own directory, "/etc" on nothing: all outside. */
        ASSERT_FS_FAILS(workspace_fs_list(&w, "root", 1, &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_list(&w, "up", 1, &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_list(&w, "etc", 1, &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_stat(&w, "root/workspace/../etc", &l), -EXDEV);
        ASSERT_FS_FAILS(workspace_fs_mkdir(&w, "root/x", &l), -EXDEV);
        /* Between two directories, through the root and through a link: one mount, no EXDEV. */
        ASSERT_EQ(workspace_fs_move(&w, "t/f", "moved/g", &l), 0);
        workspace_fs_list_done(&l);
        ASSERT_EQ(workspace_fs_move(&w, "abs/sub", "s2", &l), 0);
        workspace_fs_list_done(&l);
        ASSERT_EQ(workspace_fs_move(&w, "moved/g", "abs/g", &l), 0);
        ASSERT_STREQ(l.listing.entries[0].path, "abs/g");
        workspace_fs_list_done(&l);
        check_list(&w, "t", 1, "t/g");
        ASSERT_EQ(workspace_fs_remove(&w, "root"), 0);
        ASSERT_EQ(access("/etc/hostname", F_OK), 0);
        _exit(0);
}

static void test_view(void) {
        char dir[] = "/tmp/scopebox-test-view-XXXXXX";
        int status;
        pid_t pid;

        if (geteuid() != 0) {
                printf("ok - fs through the view # SKIP needs root (mounts)\n");
                return;
        }
        ASSERT_TRUE(mkdtemp(dir));
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0)
                test_view_child(dir);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_EQ(rm_rf(dir), 0);
        printf("ok - fs through the view\n");
}

int main(void) {
        test_requests();
        test_listing();
        test_ops();
        test_race();
        test_view();
        return 0;
}
