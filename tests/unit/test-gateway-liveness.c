/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The gateway's liveness watch of the daemons (http-health.h), against a fake session manager on a
 * socketpair bus that can be "stopped" (its connection no longer processed, as under SIGSTOP): a
 * request waiting for it ends within the bound with 503, /healthz names it within 2 s, new calls
 * fail at once, and all is well again once it answers; a long call is no wedge; a storage agent that
 * does not answer pings is named by /healthz, one that is not running is not. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "bus-util.h"
#include "fake-manager.h"
#include "gateway-server.h"
#include "http-apis.h"
#include "http-health.h"
#include "http-router.h"
#include "io-util.h"
#include "time-util.h"
#include "tests.h"

#define SID       "0123456789abcdef0123456789abcdef"
#define EXEC_BODY "{\"session_id\":\"" SID "\",\"code\":\"1\"}"
#define NOT_RESPONDING(daemon) "{\"ok\":false,\"image_ready\":false,\"error\":\"" daemon " not responding\"}"

typedef enum AgentMode {
        AGENT_ANSWERS,     /* its pings are answered (here: by the fake manager's connection) */
        AGENT_SILENT,      /* a running agent that answers nothing */
        AGENT_NOT_RUNNING, /* the bus says the name has no owner */
} AgentMode;

typedef struct Fake {
        sd_bus *bus;
        bool hold;                /* keep Exec and CreateSession calls */
        sd_bus_message *held;
        int hangup;               /* a duplicate of the held call's hang-up pipe */
        unsigned calls;
        AgentMode agent;
        sd_event_source *answer_later;
} Fake;

typedef struct Env {
        sd_event *event;
        Server server;
        Fake fake;
} Env;

static int fake_keep_hangup(Fake *f, sd_bus_message *m) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        ASSERT_TRUE(r >= 0);
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *k;

                ASSERT_TRUE(sd_bus_message_read(m, "s", &k) >= 0);
                if (streq(k, "hangup")) {
                        int fd;

                        ASSERT_TRUE(sd_bus_message_read(m, "v", "h", &fd) >= 0);
                        f->hangup = safe_close(f->hangup);
                        f->hangup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                        ASSERT_TRUE(f->hangup >= 0);
                } else
                        ASSERT_TRUE(sd_bus_message_skip(m, "v") >= 0);
                ASSERT_TRUE(sd_bus_message_exit_container(m) >= 0);
        }
        ASSERT_TRUE(r >= 0);
        return sd_bus_message_exit_container(m);
}

static int fake_exec_reply(sd_bus_message *m) {
        _cleanup_close_ int fd = memfd_new_data("fake-data", "hi\n", 3);

        ASSERT_TRUE(fd >= 0);
        return sd_bus_reply_method_return(m, "itta(stt)a{sv}h", 0, (uint64_t) 3, (uint64_t) 0, 0, 0, fd);
}

static int fake_exec(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        const char *id;
        int fd;

        f->calls++;
        ASSERT_TRUE(sd_bus_message_read(m, "sh", &id, &fd) >= 0);
        ASSERT_TRUE(fake_keep_hangup(f, m) >= 0);
        if (f->hold) {
                ASSERT_TRUE(!f->held);
                f->held = sd_bus_message_ref(m);
                return 1;
        }
        return fake_exec_reply(m);
}

static int fake_create(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        f->calls++;
        ASSERT_TRUE(fake_keep_hangup(f, m) >= 0);
        if (f->hold) {
                ASSERT_TRUE(!f->held);
                f->held = sd_bus_message_ref(m);
                return 1;
        }
        return sd_bus_reply_method_return(m, "s", SID);
}

static int fake_get_health(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        f->calls++;
        return sd_bus_reply_method_return(m, "ba{sv}", 1, 4,
                                          "systemd_version", "s", "252",
                                          "counted_sessions", "u", 1,
                                          "max_sessions", "x", (int64_t) 4,
                                          "draining", "b", 0);
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("GetHealth", "", "ba{sv}", fake_get_health, 0),
        SD_BUS_METHOD("CreateSession", "a{sv}", "s", fake_create, 0),
        SD_BUS_METHOD("Exec", "sha{sv}", "itta(stt)a{sv}h", fake_exec, 0),
        SD_BUS_VTABLE_END,
};

/* There is no bus daemon between the two ends: the storage agent's pings reach the fake manager's
 * connection, which plays the agent (or the bus's answer for a name without owner) as told. */
static int fake_filter(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        if (!sd_bus_message_is_method_call(m, "org.freedesktop.DBus.Peer", "Ping") ||
            !streq_ptr(sd_bus_message_get_destination(m), STORAGE_AGENT_BUS_NAME))
                return 0;
        switch (f->agent) {
        case AGENT_SILENT:
                return 1;
        case AGENT_NOT_RUNNING:
                (void) sd_bus_reply_method_errorf(m, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                                  "Name \"%s\" does not exist", STORAGE_AGENT_BUS_NAME);
                return 1;
        default:
                return 0;
        }
}

static void env_setup(Env *env) {
        *env = (Env) { .fake.hangup = -EBADF };
        ASSERT_TRUE(sd_event_new(&env->event) >= 0);
        fake_manager_connect(env->event, fake_vtable, &env->fake, &env->fake.bus, &env->server.bus);
        ASSERT_TRUE(sd_bus_add_filter(env->fake.bus, NULL, fake_filter, &env->fake) >= 0);
        env->server.event = env->event;
        env->server.body_budget = 1ULL << 30;
        env->server.config = (Config) {
                .max_body_bytes = 1 << 20,
                .max_code_bytes = 1 << 20,
                .exec_timeout_cap_ms = 600000,
                .max_output_bytes = 32768,
                .queue_timeout_sec = 150,
                .archive_timeout_sec = 120,
        };
        ASSERT_TRUE(server_add_api(&env->server, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(&env->server, &http_dify_api) == 0);
}

static void env_done(Env *env) {
        ASSERT_TRUE(!env->server.requests && env->server.n_requests == 0);
        peer_watch_done(&env->server.manager_watch);
        peer_watch_done(&env->server.agent_watch);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        env->fake.hangup = safe_close(env->fake.hangup);
        env->fake.answer_later = sd_event_source_disable_unref(env->fake.answer_later);
        env->fake.bus = sd_bus_flush_close_unref(env->fake.bus);
        env->server.bus = sd_bus_flush_close_unref(env->server.bus);
        json_object_put(env->server.health_cache);
        env->event = sd_event_unref(env->event);
}

/* The fake manager stops (SIGSTOP): its end of the connection is no longer processed. */
static void fake_stop(Env *env) {
        ASSERT_TRUE(sd_bus_detach_event(env->fake.bus) >= 0);
}

static void fake_cont(Env *env) {
        ASSERT_TRUE(sd_bus_attach_event(env->fake.bus, env->event, 0) >= 0);
}

static HttpRequest *request(Env *env, const char *method, const char *path, const char *body) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(&env->server, NULL, NULL, method, path, &req) == 0);
        ASSERT_TRUE(http_request_begin(req, &(HttpRequestHeaders) { .n = 1, .bytes = 10 }) == 0);
        if (body)
                ASSERT_TRUE(http_request_append_body(req, body, strlen(body)) == 0);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        if (!req->response) {
                ASSERT_TRUE(req->slot);
                req->suspended = true;
                env->server.n_suspended++;
        }
        return req;
}

/* The documented bound of a request waiting for a daemon that stopped answering (3 s), and of
 * /healthz (2 s): with a margin for a loaded test machine on the first, none needed on the second
 * beyond the ping's own 1.5 s. */
#define WAIT_BOUND_USEC   (3U * USEC_PER_SEC)
#define HEALTH_BOUND_USEC (2U * USEC_PER_SEC)

/* Runs the loop until the request has its answer; returns how long that took (µs). */
static uint64_t wait_answer(Env *env, HttpRequest *req, uint64_t bound) {
        uint64_t start = now_usec(CLOCK_MONOTONIC);

        while (!req->response && now_usec(CLOCK_MONOTONIC) < start + bound)
                ASSERT_TRUE(sd_event_run(env->event, 50 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(req->response);
        return now_usec(CLOCK_MONOTONIC) - start;
}

static void run_until(Env *env, bool (*done)(Env *env), uint64_t bound) {
        uint64_t start = now_usec(CLOCK_MONOTONIC);

        while (!done(env)) {
                ASSERT_TRUE(now_usec(CLOCK_MONOTONIC) < start + bound);
                ASSERT_TRUE(sd_event_run(env->event, 50 * USEC_PER_MSEC) >= 0);
        }
}

static void check_response(HttpRequest *req, unsigned status, const char *body) {
        _cleanup_free_ char *text = NULL;

        ASSERT_TRUE(http_response_flatten(req->response) == 0);
        text = strndup(req->response->body, req->response->size);
        ASSERT_TRUE(text);
        ASSERT_STREQ(text, body);
        ASSERT_EQ(req->response->status, status);
}

static void expect_healthy(Env *env) {
        HttpRequest *req = request(env, "GET", "/healthz", NULL);

        (void) wait_answer(env, req, 5 * USEC_PER_SEC);
        ASSERT_EQ(req->response->status, 200);
        http_request_free(req);
}

/* GET /healthz with the cached answer stale: a 503 that names 'daemon', within the bound. */
static HttpRequest *healthz_names(Env *env, const char *daemon, const char *expected) {
        HttpRequest *req;
        uint64_t took;

        env->server.health.usec = 0;
        req = request(env, "GET", "/healthz", NULL);
        took = wait_answer(env, req, 10 * USEC_PER_SEC);
        fprintf(stderr, "/healthz named the %s after %.3f s\n", daemon, (double) took / USEC_PER_SEC);
        ASSERT_TRUE(took <= HEALTH_BOUND_USEC);
        check_response(req, 503, expected);
        return req;
}

static bool manager_responding(Env *env) {
        return peer_watch_responding(&env->server.manager_watch);
}

static bool agent_responding(Env *env) {
        return peer_watch_responding(&env->server.agent_watch);
}

static bool fake_has_call(Env *env) {
        return env->fake.held;
}

/* An exec the fake manager has received and holds. */
static HttpRequest *exec_held(Env *env) {
        HttpRequest *exec;

        env->fake.hold = true;
        exec = request(env, "POST", "/exec", EXEC_BODY);
        run_until(env, fake_has_call, 5 * USEC_PER_SEC);
        ASSERT_EQ(pipe_hung_up(env->fake.hangup), 0);
        return exec;
}

static void test_wedged_manager(void) {
        HttpRequest *exec, *req;
        unsigned calls;
        uint64_t took;
        Env env;

        env_setup(&env);

        /* An exec is out; then the manager stops. */
        exec = exec_held(&env);
        fake_stop(&env);

        took = wait_answer(&env, exec, 10 * USEC_PER_SEC);
        fprintf(stderr, "exec answered %.3f s after the manager stopped\n", (double) took / USEC_PER_SEC);
        ASSERT_TRUE(took <= WAIT_BOUND_USEC);
        check_response(exec, 503, "{\"detail\":\"session manager not responding\"}");
        ASSERT_STREQ(exec->response->retry_after, PEER_RETRY_AFTER);
        ASSERT_TRUE(!manager_responding(&env));
        /* The call stays out, to undo what it leaves behind; its hang-up pipe tells the manager to
         * end it. */
        ASSERT_TRUE(exec->slot && exec->abandoned && !exec->suspended);
        ASSERT_EQ(pipe_hung_up(env.fake.hangup), 1);

        /* New calls are not made: answered at once. */
        calls = env.fake.calls;
        req = request(&env, "POST", "/sessions", NULL);
        check_response(req, 503, "{\"detail\":\"session manager not responding\"}");
        ASSERT_TRUE(!req->slot);
        http_request_free(req);

        /* /healthz names it at once, a fresh cached answer notwithstanding. */
        ASSERT_TRUE(env.server.health_cache == NULL);
        req = request(&env, "GET", "/healthz", NULL);
        check_response(req, 503, NOT_RESPONDING("session manager"));
        http_request_free(req);

        /* It runs again: the held exec, the pings and the new calls are answered. */
        fake_cont(&env);
        run_until(&env, manager_responding, 5 * USEC_PER_SEC);
        ASSERT_EQ(env.fake.calls, calls);
        /* The exec's late answer ends its call; nobody hears of it. */
        ASSERT_TRUE(fake_exec_reply(env.fake.held) >= 0);
        env.fake.held = sd_bus_message_unref(env.fake.held);
        for (unsigned i = 0; i < 20 && exec->slot; i++)
                ASSERT_TRUE(sd_event_run(env.event, 50 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(!exec->slot);
        check_response(exec, 503, "{\"detail\":\"session manager not responding\"}");
        http_request_free(exec);

        env.fake.hold = false;
        req = request(&env, "POST", "/sessions", NULL);
        (void) wait_answer(&env, req, 5 * USEC_PER_SEC);
        check_response(req, 200, "{\"session_id\":\"" SID "\"}");
        http_request_free(req);

        env_done(&env);
}

static void test_healthz_wedged_manager(void) {
        HttpRequest *req;
        Env env;

        env_setup(&env);

        /* Healthy first; then, once the cached answer is stale, the manager stops. */
        expect_healthy(&env);

        fake_stop(&env);
        req = healthz_names(&env, "session manager", NOT_RESPONDING("session manager"));
        /* Its GetHealth stays out as an abandoned call; no client waits for it. */
        ASSERT_TRUE(req->abandoned);
        fake_cont(&env);
        /* (Here the agent's pings reach the same stopped connection: it is back with it.) */
        run_until(&env, manager_responding, 5 * USEC_PER_SEC);
        run_until(&env, agent_responding, 5 * USEC_PER_SEC);
        for (unsigned i = 0; i < 20 && req->slot; i++)
                ASSERT_TRUE(sd_event_run(env.event, 50 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(!req->slot);
        http_request_free(req);

        expect_healthy(&env);

        env_done(&env);
}

static int on_answer_later(sd_event_source *s, uint64_t usec, void *userdata) {
        Fake *f = userdata;

        ASSERT_TRUE(fake_exec_reply(f->held) >= 0);
        f->held = sd_bus_message_unref(f->held);
        return 0;
}

/* An exec that runs longer than pings take is no wedge: the manager answers them meanwhile. */
static void test_long_call(void) {
        HttpRequest *exec;
        uint64_t took;
        Env env;

        env_setup(&env);
        exec = exec_held(&env);
        ASSERT_TRUE(sd_event_add_time_relative(env.event, &env.fake.answer_later, CLOCK_MONOTONIC,
                                               5 * USEC_PER_SEC, 0, on_answer_later, &env.fake) >= 0);
        took = wait_answer(&env, exec, 10 * USEC_PER_SEC);
        ASSERT_TRUE(took >= 4 * USEC_PER_SEC);
        ASSERT_EQ(exec->response->status, 200);
        ASSERT_TRUE(manager_responding(&env));
        /* Pinged meanwhile, and answered. */
        ASSERT_TRUE(env.server.manager_watch.answered_usec > 0);
        ASSERT_TRUE(!exec->abandoned && !env.fake.held);
        http_request_free(exec);
        env_done(&env);
}

static void test_healthz_storage_agent(void) {
        HttpRequest *req;
        Env env;

        env_setup(&env);

        /* Not running: the node is healthy (the agent is started on demand). */
        env.fake.agent = AGENT_NOT_RUNNING;
        expect_healthy(&env);
        ASSERT_TRUE(agent_responding(&env));

        /* Running, but silent: named within the bound. */
        env.fake.agent = AGENT_SILENT;
        req = healthz_names(&env, "storage agent", NOT_RESPONDING("storage agent"));
        ASSERT_TRUE(!agent_responding(&env));
        /* Its ping stays out until its own timeout, then the request is gone. */
        for (unsigned i = 0; i < 40 && req->slot; i++)
                ASSERT_TRUE(sd_event_run(env.event, 50 * USEC_PER_MSEC) >= 0);
        http_request_free(req);

        /* Asked again: at once, the cache notwithstanding. */
        req = request(&env, "GET", "/healthz", NULL);
        check_response(req, 503, NOT_RESPONDING("storage agent"));
        http_request_free(req);

        /* It answers again: healthy again. */
        env.fake.agent = AGENT_ANSWERS;
        run_until(&env, agent_responding, 5 * USEC_PER_SEC);
        expect_healthy(&env);

        env_done(&env);
}

int main(void) {
        RUN(test_wedged_manager);
        RUN(test_healthz_wedged_manager);
        RUN(test_long_call);
        RUN(test_healthz_storage_agent);
        return 0;
}
