/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sidecar API's bearer key: loading it from the credential or the configuration, checking headers. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "gateway-auth.h"
#include "io-util.h"
#include "macro.h"
#include "string-util.h"

int api_key_validate(const char *key, size_t size, const char **ret_reason) {
        const char *reason = NULL;
        bool blank = true;

        assert(ret_reason);

        if (!key || size == 0)
                reason = "is empty";
        else {
                for (size_t i = 0; i < size && !reason; i++) {
                        unsigned char c = (unsigned char) key[i];

                        if (c == 0)
                                reason = "contains a NUL byte";
                        else if ((c < 0x20 && c != '\t') || c == 0x7f)
                                reason = "contains control characters";
                        else if (!char_is_blank((char) c))
                                blank = false;
                }
                if (!reason && blank)
                        reason = "is empty or only whitespace";
                else if (!reason && (char_is_blank(key[0]) || char_is_blank(key[size - 1])))
                        reason = "has leading or trailing whitespace";
        }

        if (reason) {
                *ret_reason = reason;
                return -EINVAL;
        }
        *ret_reason = NULL;
        return 0;
}

int key_load_credential(const char *name, char **ret, const char **ret_reason) {
        _cleanup_close_ int dfd = -EBADF, fd = -EBADF;
        _cleanup_erase_free_ char *buf = NULL;
        const char *dir;
        size_t size = 0;
        int r;

        assert(ret);
        assert(ret_reason);

        *ret_reason = NULL;
        dir = getenv("CREDENTIALS_DIRECTORY");
        if (isempty(dir)) {
                *ret = NULL;
                return 0;
        }

        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return -errno;
        fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
        if (fd < 0) {
                if (errno == ENOENT) {
                        *ret = NULL;
                        return 0;
                }
                return -errno;
        }

        r = read_full_fd(fd, API_KEY_SIZE_MAX, &buf, &size);
        if (r == -EFBIG) {
                *ret_reason = "is too large";
                return -EINVAL;
        }
        if (r < 0)
                return r;

        /* Files written by editors and "echo" end in a newline; it is not part of the key. */
        if (size > 0 && buf[size - 1] == '\n')
                buf[--size] = 0;

        r = api_key_validate(buf, size, ret_reason);
        if (r < 0) {
                explicit_bzero(buf, size); /* the cleanup only wipes up to the first NUL */
                return r;
        }

        *ret = TAKE_PTR(buf);
        return 1;
}

int auth_header_expected(const char *key, char **ret, size_t *ret_size) {
        size_t kl, n;
        char *s;

        assert(key);
        assert(ret);

        kl = strlen(key);
        n = strlen(AUTH_BEARER_PREFIX) + kl;
        s = malloc(n + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, AUTH_BEARER_PREFIX, strlen(AUTH_BEARER_PREFIX));
        memcpy(s + strlen(AUTH_BEARER_PREFIX), key, kl + 1);

        *ret = s;
        if (ret_size)
                *ret_size = n;
        return 0;
}

bool auth_header_matches(const char *value, size_t size, const char *expected, size_t expected_size) {
        assert(expected);

        if (!value)
                return false;
        /* secret_equal() compares keyed hashes of both, so neither length nor content leaks. */
        return secret_equal(value, size, expected, expected_size);
}
