/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the gateway's API key handling: validation, the credential file, header comparison. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway-auth.h"
#include "macro.h"
#include "tests.h"

static bool key_ok(const char *k, size_t n) {
        const char *reason = "unset";
        int r = api_key_validate(k, n, &reason);

        ASSERT_TRUE(r == 0 ? reason == NULL : (r == -EINVAL && reason));
        return r == 0;
}

static void test_validate(void) {
        ASSERT_TRUE(key_ok("x", 1));
        ASSERT_TRUE(key_ok("replace-with-the-sidecar-key", 28));
        ASSERT_TRUE(key_ok("a b", 3));           /* inner blanks survive HTTP */
        ASSERT_TRUE(key_ok("\xe5\xaf\x86", 3));  /* non-ASCII is fine */

        ASSERT_TRUE(!key_ok(NULL, 0));
        ASSERT_TRUE(!key_ok("", 0));
        ASSERT_TRUE(!key_ok("   ", 3));
        ASSERT_TRUE(!key_ok("\t", 1));
        ASSERT_TRUE(!key_ok(" a", 2));
        ASSERT_TRUE(!key_ok("a ", 2));
        ASSERT_TRUE(!key_ok("a\tb ", 4));
        ASSERT_TRUE(!key_ok("a\0b", 3));
        ASSERT_TRUE(!key_ok("a\nb", 3));
        ASSERT_TRUE(!key_ok("ab\r", 3));
        ASSERT_TRUE(!key_ok("a\x7f", 2));
}

static void test_header(void) {
        _cleanup_free_ char *e = NULL;
        size_t n = 0;

        ASSERT_TRUE(auth_header_expected("k3y", &e, &n) == 0);
        ASSERT_TRUE(streq(e, "Bearer k3y") && n == 10);

#define M(v) auth_header_matches(v, strlen(v), e, n)
        ASSERT_TRUE(M("Bearer k3y"));
        ASSERT_TRUE(!M("bearer k3y"));       /* compared exactly, scheme included */
        ASSERT_TRUE(!M("BEARER k3y"));
        ASSERT_TRUE(!M("Bearer  k3y"));
        ASSERT_TRUE(!M(" Bearer k3y"));
        ASSERT_TRUE(!M("Bearer k3y "));
        ASSERT_TRUE(!M("Bearer\tk3y"));
        ASSERT_TRUE(!M("Bearerk3y"));
        ASSERT_TRUE(!M("Bearer "));
        ASSERT_TRUE(!M("Bearer"));
        ASSERT_TRUE(!M("Bearer k3"));
        ASSERT_TRUE(!M("Bearer k3yy"));
        ASSERT_TRUE(!M("Basic k3y"));
        ASSERT_TRUE(!M("k3y"));
        ASSERT_TRUE(!M(""));
#undef M
        /* A NUL inside the received value must not cut the comparison short. */
        ASSERT_TRUE(!auth_header_matches("Bearer k3y\0junk", 15, e, n));
        ASSERT_TRUE(!auth_header_matches("Bearer k3y", 11, e, n));
        ASSERT_TRUE(!auth_header_matches(NULL, 0, e, n));
}

static char *make_dir(void) {
        char *d = strdup("/tmp/test-gateway-auth.XXXXXX");
        ASSERT_TRUE(d && mkdtemp(d));
        return d;
}

static void write_key(const char *dir, const void *data, size_t n) {
        char p[256];
        int fd;

        (void) snprintf(p, sizeof(p), "%s/" API_KEY_CREDENTIAL, dir);
        fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(write(fd, data, n) == (ssize_t) n);
        close(fd);
}

static int load(const char *dir, char **ret, const char **reason) {
        if (dir)
                ASSERT_TRUE(setenv("CREDENTIALS_DIRECTORY", dir, 1) == 0);
        else
                ASSERT_TRUE(unsetenv("CREDENTIALS_DIRECTORY") == 0);
        *ret = NULL;
        return key_load_credential(API_KEY_CREDENTIAL, ret, reason);
}

static void test_credential(void) {
        _cleanup_free_ char *dir = make_dir();
        const char *reason;
        char *k, p[256], big[API_KEY_SIZE_MAX + 2];

        /* No credential at all: not an error, the caller falls back to SANDBOX_API_KEY. */
        ASSERT_TRUE(load(NULL, &k, &reason) == 0 && !k);
        ASSERT_TRUE(load("", &k, &reason) == 0 && !k);
        ASSERT_TRUE(load(dir, &k, &reason) == 0 && !k);

        write_key(dir, "s3cret\n", 7);
        ASSERT_TRUE(load(dir, &k, &reason) == 1 && streq(k, "s3cret"));
        free(k);

        write_key(dir, "s3cret", 6);
        ASSERT_TRUE(load(dir, &k, &reason) == 1 && streq(k, "s3cret"));
        free(k);

        /* Only one newline is stripped, carriage returns are not newlines. */
        write_key(dir, "s3cret\n\n", 8);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k && reason);
        write_key(dir, "s3cret\r\n", 8);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k);
        write_key(dir, "", 0);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k && streq(reason, "is empty"));
        write_key(dir, "\n", 1);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k);
        write_key(dir, "  \n", 3);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k);
        write_key(dir, "s3\0cret\n", 8);
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k && streq(reason, "contains a NUL byte"));

        memset(big, 'a', sizeof(big));
        write_key(dir, big, sizeof(big));
        ASSERT_TRUE(load(dir, &k, &reason) == -EINVAL && !k && streq(reason, "is too large"));

        /* A directory where the credential should be: an error, not a silent fallback. */
        (void) snprintf(p, sizeof(p), "%s/" API_KEY_CREDENTIAL, dir);
        ASSERT_TRUE(unlink(p) == 0);
        ASSERT_TRUE(mkdir(p, 0700) == 0);
        ASSERT_TRUE(load(dir, &k, &reason) < 0 && !k);
        ASSERT_TRUE(rmdir(p) == 0);

        ASSERT_TRUE(unsetenv("CREDENTIALS_DIRECTORY") == 0);
        ASSERT_TRUE(rmdir(dir) == 0);
}

int main(void) {
        RUN(test_validate);
        RUN(test_header);
        RUN(test_credential);
        return 0;
}
