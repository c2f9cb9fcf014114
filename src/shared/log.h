/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Structured logging: native journal entries under systemd, "<N>message" lines on stderr otherwise. */
#pragma once

#include <stdarg.h>
#include <syslog.h>

#include "macro.h"
#include "string-util.h"

void log_setup(const char *identifier);
void log_set_max_level(int level);
int log_get_max_level(void);
const char *log_get_identifier(void);
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* Core entry point. 'fields' is a NULL-terminated array of "KEY=value" strings (may be NULL).
 * Returns -abs(error) (or 0 when error is 0) so callers can "return log_..._errno(r, ...)". */
int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *const *fields, const char *format, ...) _printf_(7, 8);
int log_internalv(int level, int error, const char *file, int line, const char *func,
                  const char *const *fields, const char *format, va_list ap) _printf_(7, 0);

#define log_full_errno_fields(level, error, fields, ...)                                        \
        ({                                                                                      \
                int _level_ = (level), _e_ = (error);                                           \
                (log_get_max_level() >= LOG_PRI(_level_))                                       \
                        ? log_internal(_level_, _e_, __FILE__, __LINE__, __func__, fields,      \
                                       __VA_ARGS__)                                             \
                        : -abs(_e_);                                                            \
        })

#define log_full_errno(level, error, ...) log_full_errno_fields(level, error, NULL, __VA_ARGS__)
#define log_full(level, ...) (void) log_full_errno(level, 0, __VA_ARGS__)

#define log_debug(...)   log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)    log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...)  log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...)   log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(e, ...)   log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...)    log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_notice_errno(e, ...)  log_full_errno(LOG_NOTICE, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...)   log_full_errno(LOG_ERR, e, __VA_ARGS__)

/* Structured entry with extra fields: log_struct(LOG_INFO, 0, LOG_FIELDS("A=b", "C=d"), "msg %s", x); */
/* The journal field that ties an entry to a session (stack-allocated). */
#define LOG_SESSION_FIELD(id) strjoina("SCOPEBOX_SESSION_ID=", id)
#define LOG_FIELDS(...) ((const char *const[]) { __VA_ARGS__, NULL })
#define log_struct(level, error, fields, ...) log_full_errno_fields(level, error, fields, __VA_ARGS__)

/* Log an out-of-memory condition and return -ENOMEM. */
#define log_oom() log_full_errno(LOG_ERR, ENOMEM, "Out of memory.")
