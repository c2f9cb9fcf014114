/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A command for Exec's language "command" (the E2B API's processes, docs/dbus-api.md "Exec"): its
 * working directory, argv and environment, packed into the code memfd as NUL-terminated strings:
 *
 *   "scopebox-command-1" NUL  cwd NUL  argc (decimal) NUL  argv[0] NUL ... argv[argc-1] NUL
 *   "NAME=value" NUL ...
 *
 * The gateway packs what its client sent; the sandbox's PID 1 unpacks it in the payload, before
 * it becomes the sandbox user, and trusts nothing of it: every bound is checked again there. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define EXEC_COMMAND_MAGIC "scopebox-command-1"
#define EXEC_COMMAND_ARGS_MAX 4096U
#define EXEC_COMMAND_ENV_MAX 1024U
#define EXEC_COMMAND_CWD_MAX 4096U

typedef struct ExecCommand {
        const char *cwd;        /* "" for the default (the user's home) */
        size_t argc;
        const char **argv;      /* argc entries and a NULL */
        size_t n_env;
        const char **env;       /* n_env "NAME=value" entries and a NULL */
} ExecCommand;

/* Whether 'name' may be an environment variable's name here: not empty, no '=' and no NUL. */
bool exec_command_env_name_ok(const char *name, size_t n);

/* Parses 'buf' (which stays referenced: the strings point into it). -EBADMSG when it is not one
 * command in the format within the bounds. 'ret' has its own arrays: exec_command_done(). */
int exec_command_parse(const char *buf, size_t size, ExecCommand *ret);
void exec_command_done(ExecCommand *c);

/* A stateful cell's code may begin with an environment block (docs/dbus-api.md "Exec"): these
 * bytes (NUL, never in python source, first), "NAME=value" NUL entries, and an empty entry. The
 * kernel sets the variables for the cell and puts its environment back after it. */
#define KERNEL_ENV_MAGIC "\0scopebox-env-1"
#define KERNEL_ENV_MAX 1024U
