/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Asynchronous calls to systemd's manager API: transient scopes, stopping units, job tracking. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include "bus-util.h"
#include "list.h"
#include "log.h"
#include "manager.h"
#include "systemd-client.h"

#define SYSTEMD_BUS_NAME "org.freedesktop.systemd1"
#define SYSTEMD_OBJECT_PATH "/org/freedesktop/systemd1"
#define SYSTEMD_MANAGER_INTERFACE "org.freedesktop.systemd1.Manager"
#define SYSTEMD_CALL_TIMEOUT_USEC (30 * USEC_PER_SEC)

/* A call that starts a job, then the wait for the job. Owned by whoever asked for it. */
struct SystemdJob {
        Manager *manager;
        sd_bus_slot *slot;      /* the StartTransientUnit/StopUnit call, until systemd answers */
        char *job_path;         /* then the job, while it is in manager->job_waits */
        JobCallback callback;
        void *userdata;
        LIST_FIELDS(SystemdJob, job_waits);
};

SystemdJob *systemd_job_free(SystemdJob *j) {
        if (!j)
                return NULL;
        /* Unreferencing the slot of a pending call cancels it: its reply callback never runs. */
        j->slot = sd_bus_slot_unref(j->slot);
        if (j->job_path)
                LIST_REMOVE(job_waits, j->manager->job_waits, j);
        free(j->job_path);
        free(j);
        return NULL;
}

/* The job is over: nothing of it is pending any more, and the callback, which may free it, is the
 * last thing that touches it. */
static void systemd_job_done(SystemdJob *j, const char *result, int error, const sd_bus_error *bus_error) {
        j->slot = sd_bus_slot_unref(j->slot);
        if (j->job_path) {
                LIST_REMOVE(job_waits, j->manager->job_waits, j);
                j->job_path = mfree(j->job_path);
        }
        j->callback(j->manager, result, error, bus_error, j->userdata);
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
        LIST_FOREACH(job_waits, j, m->job_waits)
                if (streq(j->job_path, path)) {
                        systemd_job_done(j, result, 0, NULL);
                        break;
                }
        return 0;
}

int systemd_subscribe(Manager *m) {
        int r;

        r = sd_bus_match_signal_async(m->bus, &m->job_removed_slot, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                      SYSTEMD_MANAGER_INTERFACE, "JobRemoved", on_job_removed, NULL, m);
        if (r < 0)
                return r;
        /* Ask systemd to send us job signals even when nobody else listens. */
        return sd_bus_call_method_async(m->bus, NULL, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                        SYSTEMD_MANAGER_INTERFACE, "Subscribe", NULL, NULL, NULL);
}

/* Reply to StartTransientUnit/StopUnit: wait for the job's completion. */
static int on_job_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        SystemdJob *j = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        const char *path;
        int r;

        if (e) {
                r = sd_bus_message_get_errno(reply);
                systemd_job_done(j, NULL, r < 0 ? r : -EIO, e);
                return 0;
        }
        r = sd_bus_message_read(reply, "o", &path);
        if (r < 0) {
                systemd_job_done(j, NULL, r, NULL);
                return 0;
        }
        j->job_path = strdup(path);
        if (!j->job_path) {
                systemd_job_done(j, NULL, -ENOMEM, NULL);
                return 0;
        }
        j->slot = sd_bus_slot_unref(j->slot);
        LIST_PREPEND(job_waits, j->manager->job_waits, j);
        return 0;
}

static int systemd_job_new(Manager *m, JobCallback cb, void *userdata, SystemdJob **ret) {
        SystemdJob *j;

        j = calloc(1, sizeof(SystemdJob));
        if (!j)
                return -ENOMEM;
        *j = (SystemdJob) { .manager = m, .callback = cb, .userdata = userdata };
        *ret = j;
        return 0;
}

static bool cgroup_unified(void) {
        struct statfs fs;
        return statfs("/sys/fs/cgroup", &fs) >= 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

int systemd_start_scope(Manager *m, const char *unit, const ScopeProperties *p, JobCallback cb,
                        void *userdata, SystemdJob **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
        _cleanup_(systemd_job_freep) SystemdJob *j = NULL;
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
        /* The runner makes a cgroup of its own below the scope (a dify run's network filter). */
        if (r >= 0 && p->delegate)
                r = BUS_APPEND_PROPERTY(msg, "Delegate", "b", 1);
        if (r < 0)
                return r;
        r = sd_bus_message_close_container(msg);
        if (r < 0)
                return r;
        r = sd_bus_message_append(msg, "a(sa(sv))", 0);
        if (r < 0)
                return r;

        r = systemd_job_new(m, cb, userdata, &j);
        if (r < 0)
                return r;
        r = sd_bus_call_async(m->bus, &j->slot, msg, on_job_reply, j, SYSTEMD_CALL_TIMEOUT_USEC);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(j);
        return 0;
}

int systemd_stop_unit(Manager *m, const char *unit, JobCallback cb, void *userdata, SystemdJob **ret) {
        _cleanup_(systemd_job_freep) SystemdJob *j = NULL;
        int r;

        r = systemd_job_new(m, cb, userdata, &j);
        if (r < 0)
                return r;
        r = sd_bus_call_method_async(m->bus, &j->slot, SYSTEMD_BUS_NAME, SYSTEMD_OBJECT_PATH,
                                     SYSTEMD_MANAGER_INTERFACE, "StopUnit", on_job_reply, j, "ss", unit,
                                     "replace");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(j);
        return 0;
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
