/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Workspace paths from clients: lexical normalisation and confinement below /workspace. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "path-util.h"

int workspace_path_normalize(const char *path, char **ret_relative) {
        _cleanup_free_ char *joined = NULL, *out = NULL;
        size_t o = 0, n;
        const char *p;

        if (!path || *path == 0)
                return -EINVAL;
        n = strlen(path);
        if (n > WORKSPACE_PATH_MAX)
                return -ENAMETOOLONG;

        if (path[0] == '/')
                joined = strdup(path);
        else if (asprintf(&joined, WORKSPACE_PATH "/%s", path) < 0)
                joined = NULL;
        if (!joined)
                return -ENOMEM;

        /* Resolve ".", ".." and repeated slashes lexically; ".." at the root stays at the root. */
        out = malloc(strlen(joined) + 2);
        if (!out)
                return -ENOMEM;
        for (p = joined; *p;) {
                size_t l;

                while (*p == '/')
                        p++;
                if (*p == 0)
                        break;
                l = strcspn(p, "/");
                if (l > WORKSPACE_NAME_MAX)
                        return -ENAMETOOLONG;
                if (l == 1 && p[0] == '.') {
                        /* nothing */
                } else if (l == 2 && p[0] == '.' && p[1] == '.') {
                        while (o > 0 && out[o - 1] != '/')
                                o--;
                        if (o > 0)
                                o--; /* drop the separator too */
                } else {
                        out[o++] = '/';
                        memcpy(out + o, p, l);
                        o += l;
                }
                p += l;
        }
        out[o] = 0;

        /* out is now absolute without a trailing slash ("" is the root). */
        if (streq(out, WORKSPACE_PATH)) {
                char *e = strdup("");
                if (!e)
                        return -ENOMEM;
                *ret_relative = e;
                return 0;
        }
        if (!strneq(out, WORKSPACE_PATH "/", strlen(WORKSPACE_PATH "/")))
                return -EXDEV;

        char *rel = strdup(out + strlen(WORKSPACE_PATH "/"));
        if (!rel)
                return -ENOMEM;
        *ret_relative = rel;
        return 0;
}
