/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* For tests of what only an administrator can set up (addresses on lo, local routes): a child in a
 * network namespace of its own, in a user namespace when the test runs unprivileged. */
#pragma once

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"

#define NETNS_UNAVAILABLE 77

static inline int netns_write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        int r = 0;

        if (!f)
                return -errno;
        if (fputs(text, f) < 0 || fflush(f) != 0)
                r = -errno;
        fclose(f);
        return r;
}

/* Runs 'setup' (a shell command, e.g. ip(8) calls; NULL: none) and then fn() in a forked child in a
 * new network namespace; returns the child's exit status: 0 when fn() returned, NETNS_UNAVAILABLE
 * when no namespace could be had (then the caller says it skipped, and why). A failed setup or
 * assertion fails the caller. */
static inline int netns_run(const char *setup, void (*fn)(void)) {
        uid_t uid = getuid();
        gid_t gid = getgid();
        pid_t pid = fork();
        int status;

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                char map[64];

                if (unshare(CLONE_NEWNET) < 0) {
                        /* Unprivileged: a user namespace of ours owns the network namespace. */
                        if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0) {
                                fprintf(stderr, "no network namespace: %s\n", strerror(errno));
                                _exit(NETNS_UNAVAILABLE);
                        }
                        snprintf(map, sizeof(map), "0 %u 1", (unsigned) uid);
                        ASSERT_EQ(netns_write_file("/proc/self/uid_map", map), 0);
                        ASSERT_EQ(netns_write_file("/proc/self/setgroups", "deny"), 0);
                        snprintf(map, sizeof(map), "0 %u 1", (unsigned) gid);
                        ASSERT_EQ(netns_write_file("/proc/self/gid_map", map), 0);
                }
                if (setup && system(setup) != 0) {
                        fprintf(stderr, "failed: %s\n", setup);
                        abort();
                }
                fn();
                _exit(EXIT_SUCCESS);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == NETNS_UNAVAILABLE);
        return WEXITSTATUS(status);
}
