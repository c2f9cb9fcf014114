/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Workspace archives: round trip, exclusions, and hostile archives that must leave the host
 * untouched (tar-slip, absolute names, links leading out, hard links, devices, set-id bits,
 * expansion bombs). Extraction runs chrooted into the target as an unprivileged user, as the
 * runner does. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <locale.h>
#include <sys/sysmacros.h>
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

static const ArchiveLimits limits = { .max_bytes = 10 << 20, .max_entries = 1000 };

/* Extract in_fd into dir in a child confined like the runner's: chroot + uid 65534. */
static int extract_confined(const char *dir, int in_fd, uint64_t *ret_total) {
        int pipefd[2], status;
        pid_t pid;
        struct {
                int r;
                uint64_t total;
        } res = {};

        ASSERT_EQ(pipe(pipefd), 0);
        ASSERT_EQ(chown(dir, 65534, 65534), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                close(pipefd[0]);
                if (chdir(dir) < 0 || chroot(".") < 0 || setgroups(0, NULL) < 0 ||
                    setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
                        _exit(99);
                res.r = archive_extract(in_fd, &limits, &res.total);
                (void) !write(pipefd[1], &res, sizeof(res));
                _exit(0);
        }
        close(pipefd[1]);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_EQ(read(pipefd[0], &res, sizeof(res)), (ssize_t) sizeof(res));
        close(pipefd[0]);
        if (ret_total)
                *ret_total = res.total;
        return res.r;
}

static void test_entry_check(void) {
        ASSERT_EQ(archive_entry_check("./a/b.txt", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_EXTRACT);
        ASSERT_EQ(archive_entry_check("a/", S_IFDIR, NULL, NULL), ARCHIVE_ENTRY_EXTRACT);
        ASSERT_EQ(archive_entry_check("./", S_IFDIR, NULL, NULL), ARCHIVE_ENTRY_SKIP);
        ASSERT_EQ(archive_entry_check("./uploads/x", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_SKIP);
        ASSERT_EQ(archive_entry_check("./skills", S_IFDIR, NULL, NULL), ARCHIVE_ENTRY_SKIP);
        ASSERT_EQ(archive_entry_check("./uploadsX", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_EXTRACT);
        ASSERT_EQ(archive_entry_check("../x", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./a/../../x", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("/etc/passwd", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./l", S_IFLNK, "sub/file", NULL), ARCHIVE_ENTRY_EXTRACT);
        ASSERT_EQ(archive_entry_check("./l", S_IFLNK, "/etc", NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./l", S_IFLNK, "../..", NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./h", S_IFREG, NULL, "etc/passwd"), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./d", S_IFCHR, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./b", S_IFBLK, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
        ASSERT_EQ(archive_entry_check("./f", S_IFIFO, NULL, NULL), ARCHIVE_ENTRY_SKIP);
        /* A name is bytes: not being UTF-8 is no reason to lose the file. */
        ASSERT_EQ(archive_entry_check("./bad\xff", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_EXTRACT);
        ASSERT_EQ(archive_entry_check("./\xe9\x94\x80/../x", S_IFREG, NULL, NULL), ARCHIVE_ENTRY_REFUSE);
}

static void test_roundtrip(void) {
        char src[] = "/tmp/scopebox-test-arc-src-XXXXXX", dst[] = "/tmp/scopebox-test-arc-dst-XXXXXX";
        int sfd, mfd, dfd;
        char *text = NULL;
        struct stat st;

        ASSERT_TRUE(mkdtemp(src) && mkdtemp(dst));
        sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_EQ(mkdirat(sfd, "outputs", 0755), 0);
        ASSERT_EQ(mkdirat(sfd, "uploads", 0755), 0);
        ASSERT_EQ(write_file_at(sfd, "outputs/r.txt", "result", 6, 0644), 0);
        ASSERT_EQ(write_file_at(sfd, "uploads/in.csv", "input", 5, 0644), 0);
        ASSERT_EQ(write_file_at(sfd, "notes.md", "# n", 3, 0600), 0);
        ASSERT_EQ(symlinkat("outputs/r.txt", sfd, "latest"), 0);

        mfd = memfd_new_empty("archive");
        ASSERT_EQ(archive_create(sfd, mfd, &limits), 0);
        ASSERT_EQ(lseek(mfd, 0, SEEK_SET), 0);
        ASSERT_EQ(extract_confined(dst, mfd, NULL), 0);

        dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(dfd >= 0);
        int f = openat(dfd, "outputs/r.txt", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(f >= 0);
        ASSERT_EQ(read_full_fd(f, 100, &text, NULL), 0);
        ASSERT_STREQ(text, "result");
        free(text);
        close(f);
        ASSERT_EQ(fstatat(dfd, "notes.md", &st, 0), 0);
        ASSERT_EQ(st.st_mode & 0777, 0600);
        ASSERT_EQ(st.st_uid, 65534);
        ASSERT_EQ(fstatat(dfd, "latest", &st, AT_SYMLINK_NOFOLLOW), 0);
        ASSERT_TRUE(S_ISLNK(st.st_mode));
        /* Inputs are not archived. */
        ASSERT_TRUE(fstatat(dfd, "uploads", &st, 0) < 0);

        /* Too big to archive. */
        ArchiveLimits tiny = { .max_bytes = 64, .max_entries = 1000 };
        int m2 = memfd_new_empty("archive");
        ASSERT_EQ(archive_create(sfd, m2, &tiny), -EFBIG);
        close(m2);

        close(mfd);
        ASSERT_EQ(rm_rf_children(sfd), 0);
        ASSERT_EQ(rm_rf_children(dfd), 0);
        close(sfd);
        close(dfd);
        ASSERT_EQ(rmdir(src), 0);
        ASSERT_EQ(rmdir(dst), 0);
}

/* File names users give: CJK, accents, emoji, and bytes that are no UTF-8 at all. */
static const char *const odd_names[] = {
        "\xe9\x94\x80\xe5\x94\xae\xe5\x9b\xbe\xe8\xa1\xa8.png",       /* 销售图表.png */
        "caf\xc3\xa9.txt",
        "emoji \xf0\x9f\x98\x80.txt",
        "latin1 caf\xe9.txt",
        "bad \xff\xfe.bin",
        "d\xc3\xafr/\xe5\x86\x85.txt",                                       /* dïr/内.txt */
};

static void odd_tree_make(int dfd) {
        ASSERT_EQ(mkdirat(dfd, "d\xc3\xafr", 0755), 0);
        for (size_t i = 0; i < ELEMENTSOF(odd_names); i++)
                ASSERT_EQ(write_file_at(dfd, odd_names[i], odd_names[i], strlen(odd_names[i]), 0644), 0);
}

static void odd_tree_check(int dfd) {
        for (size_t i = 0; i < ELEMENTSOF(odd_names); i++) {
                _cleanup_free_ char *text = NULL;
                _cleanup_close_ int f = openat(dfd, odd_names[i], O_RDONLY | O_CLOEXEC);

                if (f < 0)
                        fprintf(stderr, "missing after the round trip: %s\n", odd_names[i]);
                ASSERT_TRUE(f >= 0);
                ASSERT_EQ(read_full_fd(f, 100, &text, NULL), 0);
                ASSERT_STREQ(text, odd_names[i]);
        }
}

/* Our archive, then archives GNU tar made (what the real sidecar leaves in storage), restored
 * in the C locale and in C.UTF-8. */
static void test_names(void) {
        static const char *const locales[] = { "C", "C.UTF-8" };
        static const char *const tar_formats[] = { NULL, "gnu", "posix", "ustar" };

        for (size_t l = 0; l < ELEMENTSOF(locales); l++)
                for (size_t t = 0; t < ELEMENTSOF(tar_formats); t++) {
                        char src[] = "/tmp/scopebox-test-arc-src-XXXXXX",
                             dst[] = "/tmp/scopebox-test-arc-dst-XXXXXX";
                        _cleanup_close_ int sfd = -EBADF, dfd = -EBADF, mfd = -EBADF;

                        ASSERT_TRUE(setlocale(LC_CTYPE, locales[l]));
                        ASSERT_TRUE(mkdtemp(src) && mkdtemp(dst));
                        sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        ASSERT_TRUE(sfd >= 0);
                        odd_tree_make(sfd);

                        mfd = memfd_new_empty("archive");
                        ASSERT_TRUE(mfd >= 0);
                        if (!tar_formats[t])
                                ASSERT_EQ(archive_create(sfd, mfd, &limits), 0);
                        else {
                                _cleanup_free_ char *cmd = NULL;

                                /* ustar can't carry every name; what it can't, tar refuses. */
                                ASSERT_TRUE(
                                        asprintf(&cmd,
                                                 "tar -C %s --format=%s -czf /proc/%d/fd/%d . 2>/dev/null",
                                                 src, tar_formats[t], getpid(), mfd) > 0);
                                if (system(cmd) != 0 && streq(tar_formats[t], "ustar"))
                                        goto next;
                        }
                        ASSERT_EQ(lseek(mfd, 0, SEEK_SET), 0);
                        ASSERT_EQ(extract_confined(dst, mfd, NULL), 0);
                        dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        ASSERT_TRUE(dfd >= 0);
                        odd_tree_check(dfd);
                        ASSERT_EQ(rm_rf_children(dfd), 0);
                next:
                        ASSERT_EQ(rm_rf_children(sfd), 0);
                        ASSERT_EQ(rmdir(src), 0);
                        ASSERT_EQ(rmdir(dst), 0);
                }
        ASSERT_TRUE(setlocale(LC_CTYPE, "C"));
}

/* A hand-made archive with whatever entries we like. */
static struct archive *evil_new(int fd) {
        struct archive *a = archive_write_new();
        ASSERT_TRUE(a);
        ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        ASSERT_EQ(archive_write_add_filter_gzip(a), ARCHIVE_OK);
        ASSERT_EQ(archive_write_open_fd(a, fd), ARCHIVE_OK);
        return a;
}

static void evil_add(struct archive *a, const char *name, mode_t mode, const char *data, const char *symlink,
                     const char *hardlink) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_mode(e, mode);
        archive_entry_set_size(e, data ? (la_int64_t) strlen(data) : 0);
        if (symlink)
                archive_entry_set_symlink(e, symlink);
        if (hardlink)
                archive_entry_set_hardlink(e, hardlink);
        if (S_ISCHR(mode))
                archive_entry_set_rdev(e, makedev(1, 3));
        ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
        if (data)
                ASSERT_EQ(archive_write_data(a, data, strlen(data)), (la_ssize_t) strlen(data));
        archive_entry_free(e);
}

static void test_hostile(void) {
        char base[] = "/tmp/scopebox-test-arc-evil-XXXXXX";
        char *dst;
        int mfd, dfd, refused;
        struct archive *a;
        struct stat st;

        ASSERT_TRUE(mkdtemp(base));
        ASSERT_TRUE(asprintf(&dst, "%s/ws", base) > 0);
        ASSERT_EQ(mkdir(dst, 0755), 0);

        mfd = memfd_new_empty("evil");
        a = evil_new(mfd);
        evil_add(a, "../escape.txt", S_IFREG | 0644, "pwned", NULL, NULL);
        evil_add(a, "/abs-escape.txt", S_IFREG | 0644, "pwned", NULL, NULL);
        evil_add(a, "./out", S_IFLNK | 0777, NULL, base, NULL);
        evil_add(a, "./out/through.txt", S_IFREG | 0644, "pwned", NULL, NULL);
        evil_add(a, "./up", S_IFLNK | 0777, NULL, "..", NULL);
        evil_add(a, "./up/up-escape.txt", S_IFREG | 0644, "pwned", NULL, NULL);
        evil_add(a, "./hl", S_IFREG | 0644, NULL, NULL, "/etc/passwd");
        evil_add(a, "./dev", S_IFCHR | 0666, NULL, NULL, NULL);
        evil_add(a, "./suid", S_IFREG | 04755, "#!/bin/sh\n", NULL, NULL);
        evil_add(a, "./ok.txt", S_IFREG | 0644, "fine", NULL, NULL);
        ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);

        ASSERT_EQ(lseek(mfd, 0, SEEK_SET), 0);
        refused = extract_confined(dst, mfd, NULL);
        ASSERT_TRUE(refused >= 6);
        close(mfd);

        /* Nothing appeared next to the workspace, nothing through links. */
        ASSERT_TRUE(access(strjoina(base, "/escape.txt"), F_OK) < 0);
        ASSERT_TRUE(access(strjoina(base, "/through.txt"), F_OK) < 0);
        ASSERT_TRUE(access(strjoina(base, "/up-escape.txt"), F_OK) < 0);
        ASSERT_TRUE(access("/abs-escape.txt", F_OK) < 0);
        dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        /* The refused link is not there; the file behind it landed in a plain directory. */
        ASSERT_EQ(fstatat(dfd, "out", &st, AT_SYMLINK_NOFOLLOW), 0);
        ASSERT_TRUE(S_ISDIR(st.st_mode));
        ASSERT_EQ(fstatat(dfd, "up", &st, AT_SYMLINK_NOFOLLOW), 0);
        ASSERT_TRUE(S_ISDIR(st.st_mode));
        ASSERT_TRUE(fstatat(dfd, "hl", &st, AT_SYMLINK_NOFOLLOW) < 0);
        ASSERT_TRUE(fstatat(dfd, "dev", &st, AT_SYMLINK_NOFOLLOW) < 0);
        ASSERT_EQ(fstatat(dfd, "suid", &st, 0), 0);
        ASSERT_EQ(st.st_mode & 07000, 0);
        ASSERT_EQ(fstatat(dfd, "ok.txt", &st, 0), 0);

        /* Expansion bomb: more entries than allowed. */
        mfd = memfd_new_empty("bomb");
        a = evil_new(mfd);
        for (int i = 0; i < 1100; i++) {
                char n[32];
                snprintf(n, sizeof(n), "./b/%d", i);
                evil_add(a, n, S_IFREG | 0644, "x", NULL, NULL);
        }
        ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        ASSERT_EQ(lseek(mfd, 0, SEEK_SET), 0);
        ASSERT_EQ(extract_confined(dst, mfd, NULL), -EFBIG);
        close(mfd);

        /* Expansion bomb: a small archive of one entry larger than the byte budget. */
        mfd = memfd_new_empty("bytes-bomb");
        a = evil_new(mfd);
        {
                struct archive_entry *e = archive_entry_new();
                static char zeros[64 * 1024];
                archive_entry_set_pathname(e, "./zeros");
                archive_entry_set_mode(e, S_IFREG | 0644);
                archive_entry_set_size(e, (la_int64_t) limits.max_bytes + 1);
                ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
                for (uint64_t left = limits.max_bytes + 1; left > 0;) {
                        size_t n = left < sizeof(zeros) ? (size_t) left : sizeof(zeros);
                        ASSERT_EQ(archive_write_data(a, zeros, n), (la_ssize_t) n);
                        left -= n;
                }
                archive_entry_free(e);
        }
        ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
        ASSERT_TRUE(lseek(mfd, 0, SEEK_END) < 1 << 20); /* it really is small */
        ASSERT_EQ(lseek(mfd, 0, SEEK_SET), 0);
        ASSERT_EQ(extract_confined(dst, mfd, NULL), -EFBIG);
        close(mfd);
        ASSERT_TRUE(fstatat(dfd, "zeros", &st, 0) < 0);

        /* Garbage is not an archive. */
        mfd = memfd_new_data("junk", "this is not gzip", 16);
        ASSERT_EQ(extract_confined(dst, mfd, NULL), -EBADMSG);
        close(mfd);

        ASSERT_EQ(rm_rf_children(dfd), 0);
        close(dfd);
        ASSERT_EQ(rmdir(dst), 0);
        ASSERT_EQ(rmdir(base), 0);
        free(dst);
}

int main(void) {
        RUN(test_entry_check);
        if (geteuid() != 0) {
                printf("# skipping extraction tests: they need root to chroot\n");
                return 0;
        }
        RUN(test_roundtrip);
        RUN(test_names);
        RUN(test_hostile);
        return 0;
}
