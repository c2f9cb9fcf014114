/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The runner protocol's fs-* requests and their listing (runner-protocol.c): what the manager
 * builds is what the runner parses, and what the declarations forbid is never sent. */
#include <errno.h>
#include <string.h>

#include "json-util.h"
#include "runner-protocol.h"
#include "tests.h"

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

int main(void) {
        test_requests();
        test_listing();
        return 0;
}
