/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the wire forms of envd's filesystem RPCs (e2b-fs.h): E2B paths as the workspace's,
 * Go's permission strings, protobuf timestamps, EntryInfo, the events of a watch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "connect-rpc.h"
#include "e2b-fs.h"
#include "macro.h"
#include "tests.h"

static void check_path(const char *p, int want, const char *want_rel, const char *want_root) {
        _cleanup_free_ char *rel = NULL;
        const char *root = NULL;

        ASSERT_EQ(e2b_fs_path(p, strlen(p), &rel, &root), want);
        if (want < 0)
                return;
        ASSERT_STREQ(rel, want_rel);
        ASSERT_STREQ(root, want_root);
}

static void test_paths(void) {
        _cleanup_free_ char *rel = NULL, *shown = NULL;
        const char *root = NULL;
        char *longp;

        check_path("", 0, "", E2B_HOME);
        check_path("~", 0, "", E2B_HOME);
        check_path("~/a/b", 0, "a/b", E2B_HOME);
        check_path("a.txt", 0, "a.txt", E2B_HOME);
        check_path("./a//b/", 0, "a/b", E2B_HOME);
        check_path("/home/user", 0, "", E2B_HOME);
        check_path("/home/user/x/../y", 0, "y", E2B_HOME);
        check_path("/workspace/outputs", 0, "outputs", "/workspace");
        check_path("/workspace", 0, "", "/workspace");
        /* Outside, also by "..", by a name that only starts like the home, or "~user". */
        check_path("/etc", -EPERM, NULL, NULL);
        check_path("/", -EPERM, NULL, NULL);
        check_path("..", -EPERM, NULL, NULL);
        check_path("a/../../etc", -EPERM, NULL, NULL);
        check_path("/home/user/../../etc/passwd", -EPERM, NULL, NULL);
        check_path("/home/username", -EPERM, NULL, NULL);
        check_path("/workspacex/a", -EPERM, NULL, NULL);
        check_path("/home", -EPERM, NULL, NULL);
        check_path("~root", 0, "~root", E2B_HOME); /* a relative name, as envd reads it */
        /* NUL bytes, invalid UTF-8, overlong paths and names. */
        ASSERT_EQ(e2b_fs_path("a\0b", 3, &rel, &root), -EINVAL);
        ASSERT_EQ(e2b_fs_path("a\xff", 2, &rel, &root), -EILSEQ);
        ASSERT_EQ(e2b_fs_path("\xc0\xaf", 2, &rel, &root), -EILSEQ);
        longp = malloc(5000);
        ASSERT_TRUE(longp);
        memset(longp, 'a', 4999);
        longp[4999] = 0;
        ASSERT_EQ(e2b_fs_path(longp, 4999, &rel, &root), -ENAMETOOLONG);
        longp[300] = 0; /* one name of 300 bytes */
        ASSERT_EQ(e2b_fs_path(longp, 300, &rel, &root), -ENAMETOOLONG);
        free(longp);

        shown = e2b_fs_path_show(E2B_HOME, "");
        ASSERT_STREQ(shown, "/home/user");
        free(shown);
        shown = e2b_fs_path_show("/workspace", "a/b");
        ASSERT_STREQ(shown, "/workspace/a/b");
        printf("ok - paths\n");
}

static void check_permissions(uint32_t mode, const char *want) {
        char buf[24];

        e2b_fs_permissions(mode, buf);
        ASSERT_STREQ(buf, want);
}

static void test_permissions(void) {
        check_permissions(S_IFREG | 0644, "-rw-r--r--");
        check_permissions(S_IFDIR | 0755, "drwxr-xr-x");
        check_permissions(S_IFLNK | 0777, "Lrwxrwxrwx");
        check_permissions(S_IFDIR | S_ISVTX | 01777, "dtrwxrwxrwx");
        check_permissions(S_IFREG | S_ISUID | 0755, "urwxr-xr-x");
        check_permissions(S_IFREG | S_ISGID | 0750, "grwxr-x---");
        check_permissions(S_IFCHR | 0666, "Dcrw-rw-rw-");
        check_permissions(S_IFBLK | 0660, "Drw-rw----");
        check_permissions(S_IFIFO | 0600, "prw-------");
        check_permissions(S_IFSOCK | 0777, "Srwxrwxrwx");
        check_permissions(S_IFREG, "----------");
        printf("ok - permissions\n");
}

static void test_timestamps(void) {
        char buf[40];

        ASSERT_EQ(e2b_fs_timestamp(0, buf), 0);
        ASSERT_STREQ(buf, "1970-01-01T00:00:00Z");
        ASSERT_EQ(e2b_fs_timestamp(INT64_C(1767225600) * 1000000000 + 5, buf), 0);
        ASSERT_STREQ(buf, "2026-01-01T00:00:00.000000005Z");
        ASSERT_EQ(e2b_fs_timestamp(-1, buf), 0);
        ASSERT_STREQ(buf, "1969-12-31T23:59:59.999999999Z");
        ASSERT_EQ(e2b_fs_timestamp(INT64_MAX, buf), 0); /* 2262 */
        ASSERT_EQ(e2b_fs_timestamp(INT64_MIN, buf), 0); /* 1677 */
        ASSERT_STREQ(buf, "1677-09-21T00:12:43.145224192Z");
        printf("ok - timestamps\n");
}

static void test_entry(void) {
        static const struct {
                E2bFsEntry entry;
                const char *root;
        } entries[] = {
                { { "d/a.txt", "file", 5, S_IFREG | 0644, "user", "user", 0, "" }, E2B_HOME },
                { { "", "dir", 60, S_IFDIR | 0755, "user", "root", 1, "" }, "/workspace" },
                { { "l\"", "symlink", 4, S_IFLNK | 0777, "1001", "1001", 0, "/etc" }, E2B_HOME },
                { { "s", "other", 0, S_IFSOCK | 0755, "user", "user", 0, "" }, E2B_HOME },
        };
        _cleanup_(json_writer_done) JsonWriter w = {};
        _cleanup_free_ char *text = NULL;
        size_t size;

        for (size_t i = 0; i < ELEMENTSOF(entries); i++) {
                if (i > 0)
                        ASSERT_EQ(json_writer_append_str(&w, ","), 0);
                ASSERT_EQ(e2b_fs_entry_append(&w, &entries[i].entry, entries[i].root), 0);
        }
        text = json_writer_steal(&w, &size);
        ASSERT_TRUE(text);
        ASSERT_STREQ(text,
                     "{\"name\":\"a.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/home/user/d/a.txt\","
                     "\"size\":\"5\","
                     "\"mode\":420,\"permissions\":\"-rw-r--r--\",\"owner\":\"user\",\"group\":\"user\","
                     "\"modifiedTime\":\"1970-01-01T00:00:00Z\"},"
                     "{\"name\":\"workspace\",\"type\":\"FILE_TYPE_DIRECTORY\",\"path\":\"/workspace\","
                     "\"size\":\"60\","
                     "\"mode\":493,\"permissions\":\"drwxr-xr-x\",\"owner\":\"user\",\"group\":\"root\","
                     "\"modifiedTime\":\"1970-01-01T00:00:00.000000001Z\"},"
                     "{\"name\":\"l\\\"\",\"type\":\"FILE_TYPE_SYMLINK\",\"path\":\"/home/user/l\\\"\","
                     "\"size\":\"4\","
                     "\"mode\":511,\"permissions\":\"Lrwxrwxrwx\",\"owner\":\"1001\",\"group\":\"1001\","
                     "\"modifiedTime\":\"1970-01-01T00:00:00Z\",\"symlinkTarget\":\"/etc\"},"
                     "{\"name\":\"s\",\"type\":\"FILE_TYPE_UNSPECIFIED\",\"path\":\"/home/user/s\","
                     "\"size\":\"0\","
                     "\"mode\":493,\"permissions\":\"Srwxr-xr-x\",\"owner\":\"user\",\"group\":\"user\","
                     "\"modifiedTime\":\"1970-01-01T00:00:00Z\"}");
        printf("ok - entries\n");
}

/* A snapshot of entries given as (path, type, size, mode, mtime), sorted. */
typedef struct Seen {
        const char *path, *type;
        uint64_t size;
        uint32_t mode;
        int64_t mtime;
} Seen;

static void snap(E2bFsSnapshot *s, const Seen *seen, size_t n) {
        for (size_t i = 0; i < n; i++)
                ASSERT_EQ(e2b_fs_snapshot_add(s, &(E2bFsEntry) { .path = seen[i].path,
                                                                 .type = seen[i].type,
                                                                 .size = seen[i].size,
                                                                 .mode = seen[i].mode,
                                                                 .mtime_nsec = seen[i].mtime,
                                                                 .owner = "user",
                                                                 .group = "user",
                                                                 .target = "" }),
                          0);
        e2b_fs_snapshot_sort(s);
}

/* The messages of a stream, each envelope checked, as one text: "flags message\n"... */
static char *messages(JsonWriter *w) {
        _cleanup_(json_writer_done) JsonWriter t = {};
        size_t size;

        for (size_t at = 0; at < w->buf.len;) {
                const uint8_t *b = (const uint8_t *) w->buf.s + at;
                size_t n = (size_t) b[1] << 24 | (size_t) b[2] << 16 | (size_t) b[3] << 8 | b[4];

                ASSERT_TRUE(at + 5 + n <= w->buf.len);
                ASSERT_EQ(json_writer_appendf(&t, "%u %.*s\n", b[0], (int) n, (const char *) b + 5), 0);
                at += 5 + n;
        }
        json_writer_done(w);
        return json_writer_steal(&t, &size) ?: strdup("");
}

static void test_watch_diff(void) {
        _cleanup_(e2b_fs_snapshot_done) E2bFsSnapshot a = {}, b = {};
        _cleanup_(json_writer_done) JsonWriter w = {};
        _cleanup_free_ char *text = NULL;

        /* The listing's walk order is not the paths' order ("t/a.txt" after "t/a/x"): sorted first. */
        static const Seen before[] = {
                { "t/a", "dir", 0, S_IFDIR | 0755, 1 },      { "t/a/x", "file", 1, S_IFREG | 0644, 1 },
                { "t/a.txt", "file", 1, S_IFREG | 0644, 1 }, { "t/gone", "file", 0, S_IFREG | 0644, 1 },
                { "t/kind", "file", 0, S_IFREG | 0644, 1 },  { "t/mode", "file", 0, S_IFREG | 0644, 1 },
        };
        /* A directory's time changed: no event for it. */
        static const Seen after[] = {
                { "t/a", "dir", 0, S_IFDIR | 0755, 2 },      { "t/a/x", "file", 1, S_IFREG | 0644, 2 },
                { "t/a.txt", "file", 1, S_IFREG | 0644, 1 }, { "t/kind", "dir", 0, S_IFDIR | 0755, 1 },
                { "t/mode", "file", 0, S_IFREG | 0600, 1 },  { "t/new", "file", 3, S_IFREG | 0644, 1 },
                { "t/new0", "file", 0, S_IFREG | 0644, 1 },
        };

        snap(&a, before, ELEMENTSOF(before));
        ASSERT_STREQ(a.items[1].path, "t/a.txt");
        snap(&b, after, ELEMENTSOF(after));
        ASSERT_EQ(e2b_fs_watch_diff(&a, &b, "t", &w), 8);
        text = messages(&w);
        ASSERT_STREQ(text, "0 {\"filesystem\":{\"name\":\"a/x\",\"type\":\"EVENT_TYPE_WRITE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"gone\",\"type\":\"EVENT_TYPE_REMOVE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"kind\",\"type\":\"EVENT_TYPE_REMOVE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"kind\",\"type\":\"EVENT_TYPE_CREATE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"mode\",\"type\":\"EVENT_TYPE_CHMOD\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"new\",\"type\":\"EVENT_TYPE_CREATE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"new\",\"type\":\"EVENT_TYPE_WRITE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"new0\",\"type\":\"EVENT_TYPE_CREATE\"}}\n");
        free(TAKE_PTR(text));

        /* The same again: nothing. A cut listing neither creates nor removes; at the root, names are
         * the paths. */
        ASSERT_EQ(e2b_fs_watch_diff(&b, &b, "t", &w), 0);
        ASSERT_EQ(w.buf.len, 0U);
        a.truncated = b.truncated = true;
        ASSERT_EQ(e2b_fs_watch_diff(&a, &b, "", &w), 4);
        text = messages(&w);
        ASSERT_STREQ(text, "0 {\"filesystem\":{\"name\":\"t/a/x\",\"type\":\"EVENT_TYPE_WRITE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"t/kind\",\"type\":\"EVENT_TYPE_REMOVE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"t/kind\",\"type\":\"EVENT_TYPE_CREATE\"}}\n"
                           "0 {\"filesystem\":{\"name\":\"t/mode\",\"type\":\"EVENT_TYPE_CHMOD\"}}\n");
        free(TAKE_PTR(text));
        /* Only the new one cut: what it lacks may be past the cut, what it has that the old lacks is new. */
        a.truncated = false;
        ASSERT_EQ(e2b_fs_watch_diff(&a, &b, "t", &w), 7);
        json_writer_done(&w);
        free(TAKE_PTR(text));

        ASSERT_EQ(connect_end_stream_append(&w, NULL, NULL), 0);
        ASSERT_EQ(connect_end_stream_append(&w, "not_found", "gone"), 0);
        text = messages(&w);
        ASSERT_STREQ(text, "2 {}\n2 {\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}\n");
        printf("ok - watch diff\n");
}

int main(void) {
        test_paths();
        test_permissions();
        test_timestamps();
        test_entry();
        test_watch_diff();
        return 0;
}
