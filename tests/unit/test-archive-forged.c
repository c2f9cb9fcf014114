/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A restore (ArchiveLimits.refuse_forged, as the archive helper runs it) fails with -EPERM on an
 * entry no workspace's archive holds - a tar-slip name, a device, an entry written through a
 * symlink entry - and leaves out, as before, what real archives do hold: links leading out, hard
 * links, names too long (issue 30: the manager quarantines the former, restores the latter). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "fs-util.h"
#include "io-util.h"
#include "string-util.h"
#include "tests.h"
#include "workspace-archive.h"

typedef struct Entry {
        const char *name;
        mode_t mode;
        const char *symlink;
        const char *hardlink;
} Entry;

/* A .tar.gz of the entries in a memfd, at offset 0; regular files hold "x". */
static int archive_of(const Entry *entries) {
        struct archive *a = archive_write_new();
        int fd = memfd_new_empty("archive");

        ASSERT_TRUE(a && fd >= 0);
        ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        ASSERT_EQ(archive_write_add_filter_gzip(a), ARCHIVE_OK);
        ASSERT_EQ(archive_write_open_fd(a, fd), ARCHIVE_OK);
        for (const Entry *e = entries; e->name; e++) {
                struct archive_entry *ae = archive_entry_new();
                bool data = S_ISREG(e->mode) && !e->hardlink;

                archive_entry_set_pathname(ae, e->name);
                archive_entry_set_mode(ae, e->mode);
                archive_entry_set_size(ae, data ? 1 : 0);
                if (e->symlink)
                        archive_entry_set_symlink(ae, e->symlink);
                if (e->hardlink)
                        archive_entry_set_hardlink(ae, e->hardlink);
                ASSERT_EQ(archive_write_header(a, ae), ARCHIVE_OK);
                if (data)
                        ASSERT_EQ(archive_write_data(a, "x", 1), 1);
                archive_entry_free(ae);
        }
        ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
        return fd;
}

/* archive_extract() with refuse_forged into a new directory, in a child (it writes to its current
 * directory): its result. *ret_dir names the directory, which the caller removes. */
static int extract(const Entry *entries, char **ret_dir) {
        char *dir = strdup("/tmp/scopebox-test-forged-XXXXXX");
        int fd, pipefd[2], status, result = 0;
        pid_t pid;

        ASSERT_TRUE(dir && mkdtemp(dir));
        fd = archive_of(entries);
        ASSERT_EQ(pipe(pipefd), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                ArchiveLimits limits = { .max_bytes = 1 << 20, .max_entries = 100, .refuse_forged = true };

                if (chdir(dir) < 0)
                        _exit(99);
                result = archive_extract(fd, &limits, NULL);
                _exit(write(pipefd[1], &result, sizeof(result)) == sizeof(result) ? 0 : 98);
        }
        close(pipefd[1]);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_EQ(read(pipefd[0], &result, sizeof(result)), (ssize_t) sizeof(result));
        close(pipefd[0]);
        close(fd);
        *ret_dir = dir;
        return result;
}

static void remove_dir(char *dir) {
        ASSERT_EQ(rm_rf(dir), 0);
        free(dir);
}

static void expect_forged(const Entry *entries) {
        char *dir;

        ASSERT_EQ(extract(entries, &dir), -EPERM);
        remove_dir(dir);
}

static void test_forged(void) {
        /* Tar-slip names, in any spelling. */
        expect_forged((const Entry[]) { { "ok.txt", S_IFREG | 0644 }, { "../x", S_IFREG | 0644 }, {} });
        expect_forged((const Entry[]) { { "./a/../../x", S_IFREG | 0644 }, {} });
        expect_forged((const Entry[]) { { "/etc/x", S_IFREG | 0644 }, {} });
        expect_forged((const Entry[]) { { "./a/./b", S_IFREG | 0644 }, {} });
        /* Types no workspace's archive carries. */
        expect_forged((const Entry[]) { { "./dev", S_IFCHR | 0666 }, {} });
        expect_forged((const Entry[]) { { "./blk", S_IFBLK | 0666 }, {} });
        /* Written through a symlink entry, leading out or not, however deep. */
        expect_forged((const Entry[]) {
                { "./esc", S_IFLNK | 0777, "/etc" }, { "./esc/passwd", S_IFREG | 0644 }, {} });
        expect_forged((const Entry[]) { { "sub", S_IFDIR | 0755 },
                                        { "in", S_IFLNK | 0777, "sub" },
                                        { "in/x", S_IFREG | 0644 },
                                        {} });
        expect_forged((const Entry[]) {
                { "a/b/l", S_IFLNK | 0777, "../.." }, { "./a/b/l/c/d", S_IFREG | 0644 }, {} });
}

static void test_what_real_archives_hold(void) {
        char long_name[5000], *dir;
        struct stat st;
        int r;

        /* What our archives and the upstream sidecar's GNU tar write from real workspaces: links
         * leading out (absolute, or up), hard links, a name over 4096 bytes. Left out, the rest
         * restored. */
        memset(long_name, 'n', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = 0;
        for (size_t i = 100; i < sizeof(long_name) - 1; i += 100)
                long_name[i] = '/';
        r = extract((const Entry[]) { { "./data.csv", S_IFREG | 0644 },
                                      { "./abs", S_IFLNK | 0777, "/workspace/data.csv" },
                                      { "./sub", S_IFDIR | 0755 },
                                      { "./sub/up", S_IFLNK | 0777, "../data.csv" },
                                      { "./same", S_IFREG | 0644, NULL, "./data.csv" },
                                      { "./in", S_IFLNK | 0777, "data.csv" },
                                      { long_name, S_IFREG | 0644 },
                                      { "./sub/last.txt", S_IFREG | 0644 },
                                      {} },
                    &dir);
        ASSERT_EQ(r, 4);
        ASSERT_EQ(lstat(strjoina(dir, "/data.csv"), &st), 0);
        ASSERT_EQ(lstat(strjoina(dir, "/sub/last.txt"), &st), 0);
        ASSERT_EQ(lstat(strjoina(dir, "/in"), &st), 0);
        ASSERT_TRUE(S_ISLNK(st.st_mode));
        ASSERT_TRUE(lstat(strjoina(dir, "/abs"), &st) < 0 && lstat(strjoina(dir, "/same"), &st) < 0);
        remove_dir(dir);
}

int main(void) {
        RUN(test_forged);
        RUN(test_what_real_archives_hold);
        return 0;
}
