/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mime_type_from_name() of each stdin line (a name in hex), one type per line. With no argument
 * the table is the host's (MIME_TYPES_FILES), "--builtin" the builtin one alone, else the files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "mime.h"

int main(int argc, char *argv[]) {
        _cleanup_(mime_types_freep) MimeTypes *m = NULL;
        _cleanup_free_ char *line = NULL;
        const char *failed = NULL;
        size_t size = 0;
        ssize_t l;
        int r;

        if (argc < 2 || !streq(argv[1], "--builtin")) {
                r = mime_types_load(argc < 2 ? MIME_TYPES_FILES : (const char *const *) argv + 1, &m,
                                    &failed);
                if (r < 0) {
                        fprintf(stderr, "Failed to load '%s': %s\n", strna(failed), strerror(-r));
                        return EXIT_FAILURE;
                }
        }

        while ((l = getline(&line, &size, stdin)) >= 0) {
                char name[1024];
                size_t n = 0;

                if (l > 0 && line[l - 1] == '\n')
                        line[--l] = 0;
                if ((size_t) l % 2 != 0 || (size_t) l / 2 >= sizeof(name)) {
                        fprintf(stderr, "Bad input line '%s'\n", line);
                        return EXIT_FAILURE;
                }
                for (; n < (size_t) l / 2; n++) {
                        unsigned v;

                        if (sscanf(line + 2 * n, "%2x", &v) != 1 || v == 0) {
                                fprintf(stderr, "Bad input line '%s'\n", line);
                                return EXIT_FAILURE;
                        }
                        name[n] = (char) v;
                }
                name[n] = 0;
                puts(mime_type_from_name(m, name));
        }
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
