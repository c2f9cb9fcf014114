/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The bus contract's tables (bus-contract.h): error names and errnos, the values of result strings. */
#include <errno.h>
#include <stdlib.h>

#include "bus-contract.h"
#include "macro.h"
#include "string-util.h"

/* One table both ways: the manager's -errno becomes the first name with that errno. */
const sd_bus_error_map scopebox_bus_errors[] = {
        SD_BUS_ERROR_MAP(BUS_ERROR_NO_SUCH_SESSION, ENXIO),
        SD_BUS_ERROR_MAP(BUS_ERROR_LIMIT_EXCEEDED, EUSERS),
        SD_BUS_ERROR_MAP(BUS_ERROR_BUSY, EBUSY),
        SD_BUS_ERROR_MAP(BUS_ERROR_INVALID_PATH, EXDEV),
        SD_BUS_ERROR_MAP(BUS_ERROR_TOO_LARGE, EFBIG),
        SD_BUS_ERROR_MAP(BUS_ERROR_NOT_FOUND, ENOENT),
        SD_BUS_ERROR_MAP(BUS_ERROR_STORAGE_FAILED, EREMOTEIO),
        SD_BUS_ERROR_MAP(BUS_ERROR_RESTORE_FAILED, ENOLINK),
        SD_BUS_ERROR_MAP(BUS_ERROR_CANCELLED, ECANCELED),
        SD_BUS_ERROR_MAP(BUS_ERROR_PAUSED, ESTRPIPE),
        SD_BUS_ERROR_MAP(BUS_ERROR_BACKEND_FAILED, EHOSTDOWN),
        /* Set by name only (bus_error_name_from_errno() stops before them). */
        SD_BUS_ERROR_MAP(BUS_ERROR_DRAINING, ESHUTDOWN),
        SD_BUS_ERROR_MAP(BUS_ERROR_NOT_RUNNING, ESRCH),
        /* Decisions depend on these: they are never inferred from an errno that a parser or a
         * library may return for something else (EBADMSG is every malformed message's). */
        SD_BUS_ERROR_MAP(BUS_ERROR_STORAGE_NOT_CONFIGURED, ENOMEDIUM),
        SD_BUS_ERROR_MAP(BUS_ERROR_STORAGE_REFUSED, EADDRNOTAVAIL),
        SD_BUS_ERROR_MAP(BUS_ERROR_POLICY_UNAVAILABLE, ENETDOWN),
        SD_BUS_ERROR_MAP(BUS_ERROR_UNKNOWN_TOKEN, ESTALE),
        SD_BUS_ERROR_MAP(BUS_ERROR_ARCHIVE_DAMAGED, EBADMSG),
        SD_BUS_ERROR_MAP_END,
};

int bus_errors_register(void) {
        return sd_bus_error_add_map(scopebox_bus_errors);
}

const char *bus_error_name_from_errno(int error) {
        error = abs(error);
        if (error == EINVAL)
                return SD_BUS_ERROR_INVALID_ARGS;
        for (const sd_bus_error_map *m = scopebox_bus_errors; m->name; m++) {
                if (m->code == error)
                        return m->name;
                if (streq(m->name, BUS_ERROR_BACKEND_FAILED))
                        break;
        }
        return BUS_ERROR_BACKEND_FAILED;
}

static bool string_in(const char *s, const char *const *list, size_t n) {
        for (size_t i = 0; s && i < n; i++)
                if (streq(s, list[i]))
                        return true;
        return false;
}

bool bus_exit_reason_is_valid(const char *s) {
        static const char *const reasons[] = {
                "exited", "timeout", "memory", "tasks", "blocked_syscall", "signal", "cancelled",
        };
        return string_in(s, reasons, ELEMENTSOF(reasons));
}

bool bus_kernel_state_is_valid(const char *s) {
        static const char *const states[] = { "new", "running", "ended" };
        return string_in(s, states, ELEMENTSOF(states));
}
