/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "alloc-util.h"
#include "macro.h"

int array_grow(void **p, size_t *allocated, size_t n, size_t size, size_t min) {
        size_t want;
        void *a;

        if (n < *allocated)
                return 0;
        if (n == SIZE_MAX)
                return -ENOMEM;
        want = MAX(MAX(min, n + 1), *allocated <= SIZE_MAX / 2 ? *allocated * 2 : SIZE_MAX);
        /* reallocarray() checks this as well, but a sanitizer's aborts instead of failing. */
        if (size > 0 && want > SIZE_MAX / size)
                return -ENOMEM;
        a = reallocarray(*p, want, size);
        if (!a)
                return -ENOMEM;
        *p = a;
        *allocated = want;
        return 0;
}
