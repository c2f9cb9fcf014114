/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Structured logging: native journal entries under systemd, "<N>message" lines on stderr otherwise. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* We pass the caller's CODE_FILE/LINE/FUNC ourselves; without this sd-journal adds log.c's. */
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-journal.h>

#include "log.h"
#include "string-table.h"

#define LOG_MESSAGE_MAX 4096
#define LOG_FIELDS_MAX 32

static int log_max_level = LOG_INFO;
static bool log_to_journal = false;
static const char *log_identifier = "scopebox";

static const char *const log_level_table[] = {
        [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",
        [LOG_ERR] = "err",         [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",       [LOG_DEBUG] = "debug",
};

int log_level_from_string(const char *s) {
        ssize_t i = string_table_lookup(log_level_table, ELEMENTSOF(log_level_table), s);

        if (i >= 0)
                return (int) i;
        if (s && streq(s, "error"))
                return LOG_ERR;
        return -EINVAL;
}

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(log_level, int)

void log_setup(const char *identifier) {
        const char *e;
        int l;

        if (identifier)
                log_identifier = identifier;

        /* Under systemd we get $JOURNAL_STREAM (stderr is connected to journald) or at least
         * $INVOCATION_ID; then native entries carry our structured fields. */
        log_to_journal = getenv("JOURNAL_STREAM") || getenv("INVOCATION_ID");
        e = getenv("SCOPEBOX_LOG_TARGET");
        if (e && streq(e, "console"))
                log_to_journal = false;
        else if (e && streq(e, "journal"))
                log_to_journal = true;

        e = getenv("SCOPEBOX_LOG_LEVEL");
        if (e && (l = log_level_from_string(e)) >= 0)
                log_max_level = l;
}

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

const char *log_get_identifier(void) {
        return log_identifier;
}

int log_internalv(int level, int error, const char *file, int line, const char *func,
                  const char *const *fields, const char *format, va_list ap) {
        char message[LOG_MESSAGE_MAX], prio[32], codeline[32], err[32], codefile[256], codefunc[256];
        char ident[128];
        struct iovec iov[LOG_FIELDS_MAX + 8];
        size_t n = 0;
        int saved_errno = errno;

        error = abs(error);
        if (LOG_PRI(level) > log_max_level)
                return -error;

        /* Make %m refer to the error we were given. */
        if (error != 0)
                errno = error;
        (void) vsnprintf(message, sizeof(message), format, ap);

        if (!log_to_journal) {
                fprintf(stderr, "<%i>%s\n", LOG_PRI(level), message);
                errno = saved_errno;
                return -error;
        }

#define IOV_STR(s) (struct iovec) { .iov_base = (char *) (s), .iov_len = strlen(s) }
        char *m = NULL;
        if (asprintf(&m, "MESSAGE=%s", message) < 0)
                m = NULL;
        iov[n++] = IOV_STR(m ?: "MESSAGE=(out of memory)");
        snprintf(prio, sizeof(prio), "PRIORITY=%i", LOG_PRI(level));
        iov[n++] = IOV_STR(prio);
        snprintf(ident, sizeof(ident), "SYSLOG_IDENTIFIER=%s", log_identifier);
        iov[n++] = IOV_STR(ident);
        snprintf(codefile, sizeof(codefile), "CODE_FILE=%s", file);
        iov[n++] = IOV_STR(codefile);
        snprintf(codeline, sizeof(codeline), "CODE_LINE=%i", line);
        iov[n++] = IOV_STR(codeline);
        snprintf(codefunc, sizeof(codefunc), "CODE_FUNC=%s", func);
        iov[n++] = IOV_STR(codefunc);
        if (error != 0) {
                snprintf(err, sizeof(err), "ERRNO=%i", error);
                iov[n++] = IOV_STR(err);
        }
        for (size_t i = 0; fields && fields[i] && i < LOG_FIELDS_MAX; i++)
                if (strchr(fields[i], '='))
                        iov[n++] = IOV_STR(fields[i]);
#undef IOV_STR

        if (sd_journal_sendv(iov, (int) n) < 0)
                fprintf(stderr, "<%i>%s\n", LOG_PRI(level), message);
        free(m);

        errno = saved_errno;
        return -error;
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *const *fields, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = log_internalv(level, error, file, line, func, fields, format, ap);
        va_end(ap);
        return r;
}
