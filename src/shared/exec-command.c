/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec-command.h"

bool exec_command_env_name_ok(const char *name, size_t n) {
        return n > 0 && !memchr(name, '=', n) && !memchr(name, 0, n);
}

/* The next string at *pos, NULL when none is left whole. */
static const char *next_string(const char *buf, size_t size, size_t *pos) {
        const char *s, *end;

        if (*pos >= size)
                return NULL;
        s = buf + *pos;
        end = memchr(s, 0, size - *pos);
        if (!end)
                return NULL;
        *pos += (size_t) (end - s) + 1;
        return s;
}

void exec_command_done(ExecCommand *c) {
        free(c->argv);
        free(c->env);
        *c = (ExecCommand) {};
}

int exec_command_parse(const char *buf, size_t size, ExecCommand *ret) {
        ExecCommand c = {};
        const char *s, *count;
        size_t pos = 0, n_left = 0;
        char *end;
        unsigned long argc;

        s = next_string(buf, size, &pos);
        if (!s || strcmp(s, EXEC_COMMAND_MAGIC) != 0)
                return -EBADMSG;
        c.cwd = next_string(buf, size, &pos);
        count = next_string(buf, size, &pos);
        if (!c.cwd || strlen(c.cwd) > EXEC_COMMAND_CWD_MAX || !count || count[0] < '1' || count[0] > '9')
                return -EBADMSG;
        errno = 0;
        argc = strtoul(count, &end, 10);
        if (errno != 0 || *end != 0 || argc == 0 || argc > EXEC_COMMAND_ARGS_MAX)
                return -EBADMSG;
        /* What is left is argv, then the environment: count the strings first. */
        for (size_t p = pos; p < size; p++)
                if (buf[p] == 0)
                        n_left++;
        if (size == 0 || buf[size - 1] != 0 || n_left < argc || n_left - argc > EXEC_COMMAND_ENV_MAX)
                return -EBADMSG;
        c.argc = argc;
        c.n_env = n_left - argc;
        c.argv = calloc(c.argc + 1, sizeof(char *));
        c.env = calloc(c.n_env + 1, sizeof(char *));
        if (!c.argv || !c.env) {
                exec_command_done(&c);
                return -ENOMEM;
        }
        for (size_t i = 0; i < c.argc; i++)
                c.argv[i] = next_string(buf, size, &pos);
        for (size_t i = 0; i < c.n_env; i++) {
                const char *e = next_string(buf, size, &pos), *eq = strchr(e, '=');

                if (!eq || !exec_command_env_name_ok(e, (size_t) (eq - e))) {
                        exec_command_done(&c);
                        return -EBADMSG;
                }
                c.env[i] = e;
        }
        if (c.argv[0][0] == 0) {
                exec_command_done(&c);
                return -EBADMSG;
        }
        *ret = c;
        return 0;
}
