/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-storage-agent: bus-activated owner of io.scopebox.StorageAgent1; exits when idle. */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "agent.h"
#include "bus-client.h"
#include "bus-util.h"
#include "daemon-util.h"
#include "log.h"

/* AGENT_IDLE_EXIT_USEC, or what $SCOPEBOX_IDLE_EXIT_SEC says (daemon-util.h). */
static uint64_t arg_idle_exit_usec = AGENT_IDLE_EXIT_USEC;

static void agent_arm_idle(Agent *a) {
        if (!a->idle_source || a->idle_exit)
                return;
        (void) sd_event_source_set_time_relative(a->idle_source, arg_idle_exit_usec);
        (void) sd_event_source_set_enabled(a->idle_source, SD_EVENT_ONESHOT);
}

/* Whether every call taken has been answered. A staging waits for its CommitArchive, which is a call
 * of its own: sent for our name after we gave it back, it reaches the next instance (which does not
 * know the token, and the session manager stages the archive anew there), so it holds nothing up. */
static bool agent_calls_answered(void *userdata) {
        Agent *a = userdata;
        unsigned waiting = 0;

        LIST_FOREACH(staged, s, a->staged)
                if (!s->commit)
                        waiting++;
        return a->n_jobs <= waiting;
}

static int on_idle(sd_event_source *s, uint64_t usec, void *userdata) {
        Agent *a = userdata;
        int r;

        if (a->n_jobs > 0) {
                agent_arm_idle(a);
                return 0;
        }
        log_debug("Idle, giving up %s and exiting once the calls queued for it are answered.",
                  STORAGE_AGENT_BUS_NAME);
        /* The longest a call may take: a sweep of the storage, which the gateway waits this long for. */
        r = bus_idle_exit_start(a->event, a->bus, STORAGE_AGENT_BUS_NAME,
                                bus_timeout_storage_gc_usec(&a->config), agent_calls_answered, a,
                                &a->idle_exit);
        if (r < 0) {
                log_warning_errno(r, "Failed to give up the bus name, exiting at once: %m");
                return sd_event_exit(a->event, 0);
        }
        return 0;
}

static void agent_send_status(Agent *a) {
        (void) sd_notifyf(false,
                          "STATUS=%u transfer%s in progress, %" PRIu64
                          " call%s served; exits after %llus without calls.",
                          a->n_jobs, a->n_jobs == 1 ? "" : "s", a->n_calls, a->n_calls == 1 ? "" : "s",
                          (unsigned long long) (arg_idle_exit_usec / USEC_PER_SEC));
}

void agent_job_begin(Agent *a) {
        a->n_jobs++;
        agent_send_status(a);
}

void agent_job_end(Agent *a) {
        if (a->n_jobs > 0)
                a->n_jobs--;
        agent_send_status(a);
}

void agent_touch(Agent *a) {
        a->n_calls++;
        agent_send_status(a);
        agent_arm_idle(a);
}

static Agent *agent_free(Agent *a) {
        if (!a)
                return NULL;
        a->idle_exit = bus_idle_exit_free(a->idle_exit);
        agent_done(a);
        a->curl = curl_driver_free(a->curl);
        a->idle_source = sd_event_source_disable_unref(a->idle_source);
        sd_bus_flush_close_unref(a->bus);
        sd_event_unref(a->event);
        free(a);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Agent *, agent_free);

/* The configuration; nothing else is set up yet. */
static int agent_new(Agent **ret) {
        _cleanup_(agent_freep) Agent *a = NULL;
        _cleanup_free_ char *config_error = NULL;
        int r;

        a = calloc(1, sizeof(Agent));
        if (!a)
                return log_oom();
        r = daemon_load_config(&a->config);
        if (r < 0)
                return r;
        r = address_policy_parse(a->config.storage_allowed_networks, &a->address_policy, &config_error);
        if (r < 0)
                return log_error_errno(
                        r,
                        "Invalid configuration: SANDBOX_STORAGE_ALLOWED_NETWORKS: '%s' is not an "
                        "address or network (address/prefix length)",
                        strna(config_error));
        *ret = TAKE_PTR(a);
        return 0;
}

/* Before the bus name is ours no staging can be in progress: what is there, a killed agent left. */
static void agent_sweep_staging(Agent *a) {
        int r;

        if (isempty(a->config.local_storage_dir))
                return;
        r = local_sweep_staging(a->config.local_storage_dir);
        if (r < 0)
                log_warning_errno(r, "Failed to clean up '%s/" LOCAL_STAGING_DIR "', ignoring: %m",
                                  a->config.local_storage_dir);
        else if (r > 0)
                log_struct(
                        LOG_NOTICE, 0, LOG_FIELDS("SCOPEBOX_EVENT=staging-swept"),
                        "Removed %i leftover staging file%s of an earlier agent from '%s/" LOCAL_STAGING_DIR
                        "'.",
                        r, r == 1 ? "" : "s", a->config.local_storage_dir);
}

/* The event loop, libcurl, the bus objects, the idle timer; the bus name last, so that no call
 * arrives before we can answer it. */
static int agent_startup(Agent *a) {
        int r;

        agent_sweep_staging(a);

        /* SIGCHLD is blocked too: the fsync children of local commits are watched by pidfd. */
        r = daemon_event_new(&a->event, SIGTERM, SIGINT, -1);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");
        (void) sd_event_set_watchdog(a->event, true);
        r = curl_driver_new(a->event, &a->curl);
        if (r < 0)
                return log_error_errno(r, "Failed to set up libcurl: %m");

        r = bus_errors_register();
        if (r >= 0)
                r = sd_bus_default_system(&a->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        r = sd_bus_attach_event(a->bus, a->event, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = agent_add_bus_objects(a);
        if (r >= 0)
                r = bus_add_log_control(a->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to set up bus objects: %m");
        r = sd_event_add_time_relative(a->event, &a->idle_source, CLOCK_MONOTONIC, arg_idle_exit_usec,
                                       USEC_PER_SEC, on_idle, a);
        if (r < 0)
                return log_error_errno(r, "Failed to arm the idle timer: %m");
        r = sd_bus_request_name(a->bus, STORAGE_AGENT_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire bus name %s: %m", STORAGE_AGENT_BUS_NAME);
        return 0;
}

static int agent_run(Agent *a) {
        int r;

        agent_send_status(a);
        (void) sd_notify(false, "READY=1");
        r = sd_event_loop(a->event);
        if (r >= 0 && bus_idle_exit_gave_up(a->idle_exit))
                log_warning("Calls queued before the idle exit were still unanswered after %llus; exiting "
                            "anyway.",
                            (unsigned long long) (bus_timeout_storage_gc_usec(&a->config) / USEC_PER_SEC));
        return r;
}

int main(int argc, char *argv[]) {
        _cleanup_(agent_freep) Agent *a = NULL;
        int r;

        r = daemon_setup_bus(argc, argv, "scopebox-storage-agent",
                             "The storage agent of scopebox (io.scopebox.StorageAgent1).",
                             "by the system bus (scopebox-storage-agent.service)",
                             &(const BusInterface) { STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                                     agent_get_vtable() });
        if (r != 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        if (daemon_idle_exit_usec(AGENT_IDLE_EXIT_USEC, &arg_idle_exit_usec) < 0)
                log_warning("Ignoring %s=%s: not a whole number of seconds from 1 to 86400.",
                            DAEMON_IDLE_EXIT_ENV, getenv(DAEMON_IDLE_EXIT_ENV));

        r = agent_new(&a);
        if (r >= 0)
                r = agent_startup(a);
        if (r >= 0)
                r = agent_run(a);
        if (r < 0) {
                (void) sd_notifyf(false, "ERRNO=%i", -r);
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}
