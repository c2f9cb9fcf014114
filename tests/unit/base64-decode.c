/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Decodes each stdin line (the text in hex) with base64_decode(): "ok <hex>" or "invalid". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "macro.h"

static int unhex(const char *in, size_t n, char *out) {
        for (size_t i = 0; i + 1 < n; i += 2) {
                unsigned v;

                if (sscanf(in + i, "%2x", &v) != 1)
                        return -EINVAL;
                out[i / 2] = (char) v;
        }
        return n % 2 == 0 ? 0 : -EINVAL;
}

int main(void) {
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        ssize_t l;

        while ((l = getline(&line, &size, stdin)) >= 0) {
                _cleanup_free_ char *text = NULL;
                _cleanup_free_ void *data = NULL;
                size_t n, m;

                if (l > 0 && line[l - 1] == '\n')
                        line[--l] = 0;
                n = (size_t) l / 2;
                text = malloc(n + 1);
                if (!text || unhex(line, (size_t) l, text) < 0) {
                        fprintf(stderr, "Bad input line '%s'\n", line);
                        return EXIT_FAILURE;
                }
                if (base64_decode(text, n, &data, &m) < 0) {
                        puts("invalid");
                        continue;
                }
                fputs("ok ", stdout);
                for (size_t i = 0; i < m; i++)
                        printf("%02x", ((unsigned char *) data)[i]);
                putchar('\n');
        }
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
