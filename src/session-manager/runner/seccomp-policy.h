/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The seccomp filter loaded as the last step before the sandboxed interpreter is executed. */
#pragma once

#include <stdbool.h>

#include <seccomp.h>

#include "macro.h"

DEFINE_CLEANUP_FUNC(scmp_filter_ctx, seccomp_release);

typedef struct SeccompOptions {
        bool allow_inet;      /* AF_INET/AF_INET6 sockets (networking enabled) */
} SeccompOptions;

/* Builds the filter for the native architecture. Does not load it. */
int seccomp_policy_build(const SeccompOptions *options, scmp_filter_ctx *ret);
