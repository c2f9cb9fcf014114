/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>

#include "alloc-util.h"
#include "bus-client.h"
#include "bus-util.h"
#include "exec-reply.h"
#include "macro.h"
#include "string-util.h"

/* Room for what the reply's data memfd may hold beyond the configured limits (alignment, skew). */
#define EXEC_DATA_SLACK (16ULL << 20)

void exec_info_done(ExecInfo *info) {
        info->blocked.items = mfree(info->blocked.items);
}

static int exec_read_blocked_one(sd_bus_message *m, void *userdata) {
        ExecBlockedList *list = userdata;
        ExecBlocked b;
        int r;

        r = sd_bus_message_read(m, "(ssu)", &b.name, &b.verdict, &b.count);
        if (r < 0 || list->n >= BUS_EXEC_BLOCKED_MAX)
                return r; /* past the most there can be: skipped */
        if (!list->items) {
                list->items = calloc(BUS_EXEC_BLOCKED_MAX, sizeof(ExecBlocked));
                if (!list->items)
                        return -ENOMEM;
        }
        list->items[list->n++] = b;
        return 0;
}

/* "blocked_syscalls" is a(ssu); strings stay owned by the message. */
static int exec_read_blocked(sd_bus_message *m, void *dest) {
        return bus_message_read_array(m, "(ssu)", SIZE_MAX, exec_read_blocked_one, dest);
}

static const BusDictField exec_info_fields[] = {
        EXEC_INFO_FIELDS(BUS_DICT_FIELD, ExecInfo)
        { "blocked_syscalls", 0, offsetof(ExecInfo, blocked), "a(ssu)", exec_read_blocked },
        {}
};

int exec_reply_read_info(sd_bus_message *reply, ExecInfo *info, int *ret_fd) {
        int r;

        info->cpu_usec = info->max_rss_bytes = info->written_bytes = info->processes = EXEC_USAGE_UNKNOWN;
        r = bus_message_read_dict(reply, exec_info_fields, info);
        if (r < 0)
                return r;
        /* Strings go into the response as they are: only the words we know. */
        if ((info->exit_reason && !bus_exit_reason_is_valid(info->exit_reason)) ||
            (info->kernel && !bus_kernel_state_is_valid(info->kernel)))
                return -EBADMSG;
        return sd_bus_message_read_basic(reply, 'h', ret_fd);
}

typedef struct ExecFileList {
        ExecFile *items;
        size_t n, allocated;
} ExecFileList;

static int exec_read_file(sd_bus_message *m, void *userdata) {
        ExecFileList *l = userdata;
        int r;

        if (ARRAY_GROW(l->items, l->allocated, l->n, 8) < 0)
                return -ENOMEM;
        r = sd_bus_message_read(m, "(stt)", &l->items[l->n].path, &l->items[l->n].offset,
                                &l->items[l->n].size);
        if (r >= 0)
                l->n++;
        return r;
}

int exec_reply_read_files(sd_bus_message *reply, ExecFile **ret, size_t *ret_n) {
        ExecFileList l = {};
        int r;

        r = bus_message_read_array(reply, "(stt)", BUS_EXEC_FILES_MAX, exec_read_file, &l);
        if (r < 0) {
                free(l.items);
                return r;
        }
        *ret = l.items;
        *ret_n = l.n;
        return 0;
}

uint64_t exec_reply_data_max(const Config *config) {
        return 2 * config->max_output_bytes + config->max_total_artifact_bytes + EXEC_DATA_SLACK;
}
