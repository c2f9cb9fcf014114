/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Growing arrays: one doubling rule instead of a reallocarray() block at each array. */
#pragma once

#include <stddef.h>

/* Makes room for element n (0-based) in the array *p of *allocated elements of 'size' bytes:
 * nothing when there is room, else it doubles (to at least 'min' and n + 1 elements). On -ENOMEM
 * (also when the size would overflow) the array and *allocated are as they were. */
int array_grow(void **p, size_t *allocated, size_t n, size_t size, size_t min);

/* The same for a typed array 'p' (an lvalue) of 'allocated' (a size_t lvalue) elements. */
#define ARRAY_GROW(p, allocated, n, min) array_grow((void **) &(p), &(allocated), (n), sizeof(*(p)), (min))
