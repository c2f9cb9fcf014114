/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Asynchronous calls to systemd's manager API: transient scopes, stopping units, job tracking. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include "bus-util.h"
#include "log.h"
#include "manager.h"
#include "systemd-client.h"

#define SYSTEMD_BUS_NAME "org.freedesktop.systemd1"
#define SYSTEMD_OBJECT_PATH "/org/freedesktop/systemd1"
#define SYSTEMD_MANAGER_INTERFACE "org.freedesktop.systemd1.Manager"
#define SYSTEMD_CALL_TIMEOUT_USEC (30 * USEC_PER_SEC)

typedef struct JobWait {
        Manager *manager;
        char *job_path;
        JobCallback callback;
        void *userdata;
        struct JobWait *next;
} JobWait;

static void job_wait_free(JobWait *w) {
        if (!w)
                return;
        free(w->job_path);
        free(w);
}

static void manager_remove_job_wait(Manager *m, JobWait *w) {
        for (JobWait **p = (JobWait **) &m->job_waits; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        return;
                }
}

void systemd_forget_job_waits(Manager *m, void *userdata) {
        JobWait **p = (JobWait **) &m->job_waits;
        while (*p) {
                JobWait *w = *p;
                if (w->userdata == userdata) {
                        *p = w->next;
                        job_wait_free(w);
                } else
                        p = &w->next;
        }
}

static int on_job_removed(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const char *path, *unit, *result;
        uint32_t id;
        int r;

        r = sd_bus_message_read(message, "uoss", &id, &path, &unit, &result);
        if (r < 0) {
                log_debug_errno(r, "Failed to parse JobRemoved signal, ignoring: %m");
                return 0;
        }
        for (JobWait *w = m->job_waits; w; w = w->next)
                if (streq(w->job_path, path)) {
                        manager_remove_job_wait(m, w);
                        w->callback(m, result, 0, NULL, w->userdata);
                        job_wait_free(w);
                        break;
                }
        return 0;
}

int systemd_subscribe(Manager *m) {
        int r;

        r = sd_bus_match_signal_async(m->bus, NULL, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH, SYSTEMD_MANAGER_INTERFACE,
                                      "JobRemoved", on_job_removed, NULL, m);
        if (r < 0)
                return r;
        /* Ask systemd to send us job signals even when nobody else listens. */
        return sd_bus_call_method_async(m->bus, NULL, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                        SYSTEMD_MANAGER_INTERFACE, "Subscribe", NULL, NULL, NULL);
}

/* Reply to StartTransientUnit/StopUnit: register the wait for the job's completion. */
static int on_job_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        JobWait *w = userdata;
        Manager *m = w->manager;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *path;
        int r;

        if (e) {
                r = sd_bus_message_get_errno(reply);
                w->callback(m, NULL, r < 0 ? r : -EIO, e, w->userdata);
                job_wait_free(w);
                return 0;
        }
        r = sd_bus_message_read(reply, "o", &path);
        if (r < 0) {
                w->callback(m, NULL, r, NULL, w->userdata);
                job_wait_free(w);
                return 0;
        }
        w->job_path = strdup(path);
        if (!w->job_path) {
                w->callback(m, NULL, -ENOMEM, NULL, w->userdata);
                job_wait_free(w);
                return 0;
        }
        w->next = m->job_waits;
        m->job_waits = w;
        return 0;
}

static bool cgroup_unified(void) {
        struct statfs fs;
        return statfs("/sys/fs/cgroup", &fs) >= 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

int systemd_start_scope(Manager *m, const char *unit, const ScopeProperties *p, JobCallback cb, void *userdata,
                        sd_bus_slot **ret_slot) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
        JobWait *w;
        int r;

        r = sd_bus_message_new_method_call(m->bus, &msg, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                           SYSTEMD_MANAGER_INTERFACE, "StartTransientUnit");
        if (r < 0)
                return r;
        r = sd_bus_message_append(msg, "ss", unit, "fail");
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(msg, 'a', "(sv)");
        if (r < 0)
                return r;
        r = BUS_APPEND_PROPERTY(msg, "Description", "s", p->description);
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "Slice", "s", p->slice);
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "PIDs", "au", 1, (uint32_t) p->pid);
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "MemoryMax", "t", p->memory_max);
        if (r >= 0 && cgroup_unified())
                r = BUS_APPEND_PROPERTY(msg, "MemorySwapMax", "t", (uint64_t) 0);
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "TasksMax", "t", p->tasks_max);
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "CPUQuotaPerSecUSec", "t", p->cpu_quota_percent * 10000);
        /* A memory bomb kills the offending process, not the whole session. */
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "OOMPolicy", "s", "continue");
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "CollectMode", "s", "inactive-or-failed");
        if (r >= 0)
                r = BUS_APPEND_PROPERTY(msg, "TimeoutStopUSec", "t", 10 * USEC_PER_SEC);
        if (r >= 0 && p->runtime_max_usec > 0)
                r = BUS_APPEND_PROPERTY(msg, "RuntimeMaxUSec", "t", p->runtime_max_usec);
        if (r < 0)
                return r;
        r = sd_bus_message_close_container(msg);
        if (r < 0)
                return r;
        r = sd_bus_message_append(msg, "a(sa(sv))", 0);
        if (r < 0)
                return r;

        w = calloc(1, sizeof(JobWait));
        if (!w)
                return -ENOMEM;
        *w = (JobWait) { .manager = m, .callback = cb, .userdata = userdata };
        r = sd_bus_call_async(m->bus, ret_slot, msg, on_job_reply, w, SYSTEMD_CALL_TIMEOUT_USEC);
        if (r < 0)
                job_wait_free(w);
        return r;
}

int systemd_stop_unit(Manager *m, const char *unit, JobCallback cb, void *userdata, sd_bus_slot **ret_slot) {
        JobWait *w;
        int r;

        w = calloc(1, sizeof(JobWait));
        if (!w)
                return -ENOMEM;
        *w = (JobWait) { .manager = m, .callback = cb, .userdata = userdata };
        r = sd_bus_call_method_async(m->bus, ret_slot, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                     SYSTEMD_MANAGER_INTERFACE, "StopUnit", on_job_reply, w, "ss", unit, "replace");
        if (r < 0)
                job_wait_free(w);
        return r;
}

typedef struct VersionWait {
        Manager *manager;
        VersionCallback callback;
        void *userdata;
} VersionWait;

static int on_version_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        VersionWait *w = userdata;
        const char *version = NULL;

        if (!sd_bus_message_is_method_error(reply, NULL) &&
            sd_bus_message_enter_container(reply, 'v', "s") >= 0)
                (void) sd_bus_message_read(reply, "s", &version);
        w->callback(w->manager, version, w->userdata);
        free(w);
        return 0;
}

int systemd_get_version(Manager *m, VersionCallback cb, void *userdata, sd_bus_slot **ret_slot) {
        VersionWait *w;
        int r;

        w = calloc(1, sizeof(VersionWait));
        if (!w)
                return -ENOMEM;
        *w = (VersionWait) { .manager = m, .callback = cb, .userdata = userdata };
        r = sd_bus_call_method_async(m->bus, ret_slot, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                     "org.freedesktop.DBus.Properties", "Get", on_version_reply, w, "ss",
                                     SYSTEMD_MANAGER_INTERFACE, "Version");
        if (r < 0)
                free(w);
        return r;
}
