/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /metrics: the OpenMetrics text, the reading of GetMetrics() against a fake session manager, auth. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake-manager.h"
#include "gateway-server.h"
#include "http-apis.h"
#include "http-metrics.h"
#include "http-router.h"
#include "tests.h"

#define H(...)     &(HttpRequestHeaders) { __VA_ARGS__ }
#define BEARER(k)  .n_authorization = 1, .authorization = (k), .authorization_size = strlen(k)

static void assert_contains(const char *text, const char *line) {
        if (!strstr(text, line)) {
                fprintf(stderr, "missing: %s\nin:\n%s", line, text);
                abort();
        }
}

static ManagerMetrics sample_metrics(void) {
        ManagerMetrics m = {
                .start_time_usec = 1700000000250000ULL,
                .sessions = 3,
                .sessions_started = 10,
                .sessions_ended = 7,
                .sessions_reaped = 2,
                .execs_running = 1,
                .execs_waiting = 4,
                .creates_running = 2,
                .creates_waiting = 5,
                .runs_running = 1,
                .runs_waiting = 6,
                .runs = 9,
                .execs = { .v = { { "ok", 8 }, { "error", 1 }, { "timeout", 1 } }, .n = 3 },
                .kills = { .v = { { "timeout", 1 }, { "memory", 0 } }, .n = 2 },
                .exec_duration = { .b = { { 10000, 2 }, { 1000000, 9 }, { 600000000, 10 } }, .n = 3 },
                .exec_duration_sum_usec = 31500000,
                .exec_duration_count = 10,
                .archive_bytes_written = 4096,
                .archive_bytes_restored = 1024,
        };
        return m;
}

static void test_render(void) {
        GatewayMetrics g = { .start_time_usec = 1700000000000001ULL, .responses = { 1, 0, 40, 0, 3, 2 },
                             .connections_made_room = 5, .connections_over = 7, .body_bytes = 1024,
                             .response_bytes = 2048, .body_budget = 1ULL << 30 };
        ManagerMetrics m = sample_metrics();
        _cleanup_free_ char *text = NULL;
        size_t size;

        ASSERT_TRUE(metrics_render(&g, &m, &text, &size) == 0);
        assert_contains(text, "# TYPE scopebox_http_connections_made_room counter\n");
        assert_contains(text, "\nscopebox_http_connections_made_room_total 5\n");
        assert_contains(text, "\nscopebox_http_connections_over_bounds_total 7\n");
        assert_contains(text, "# UNIT scopebox_http_buffered_bytes bytes\n");
        assert_contains(text, "\nscopebox_http_buffered_bytes{kind=\"bodies\"} 1024\n");
        assert_contains(text, "\nscopebox_http_buffered_bytes{kind=\"responses\"} 2048\n");
        assert_contains(text, "\nscopebox_http_buffer_budget_bytes 1073741824\n");
        ASSERT_EQ(size, strlen(text));
        ASSERT_TRUE(size > 6 && streq(text + size - 6, "# EOF\n"));
        ASSERT_TRUE(strncmp(text, "# TYPE scopebox_http_responses counter\n", 39) == 0);

        assert_contains(text, "scopebox_http_responses_total{class=\"2xx\"} 40\n");
        assert_contains(text, "scopebox_http_responses_total{class=\"4xx\"} 3\n");
        assert_contains(text, "scopebox_http_responses_total{class=\"5xx\"} 2\n");
        assert_contains(text, "scopebox_http_responses_total{class=\"none\"} 1\n");
        assert_contains(
                text,
                "# TYPE process_start_time_seconds gauge\n# UNIT process_start_time_seconds seconds\n");
        assert_contains(text, "process_start_time_seconds 1700000000.000001\n");
        assert_contains(text, "scopebox_session_manager_up 1\n");
        assert_contains(text, "# TYPE scopebox_sessions gauge\n");
        assert_contains(text, "\nscopebox_sessions 3\n");
        assert_contains(text, "# TYPE scopebox_sessions_started counter\n");
        assert_contains(text, "scopebox_sessions_started_total 10\n");
        assert_contains(text, "scopebox_sessions_ended_total 7\n");
        assert_contains(text, "scopebox_sessions_reaped_total 2\n");
        assert_contains(text, "scopebox_execs_running 1\n");
        assert_contains(text, "scopebox_execs_waiting 4\n");
        assert_contains(text, "scopebox_session_creates_running 2\n");
        assert_contains(text, "scopebox_session_creates_waiting 5\n");
        assert_contains(text, "scopebox_dify_runs_running 1\n");
        assert_contains(text, "scopebox_dify_runs_waiting 6\n");
        assert_contains(text, "scopebox_dify_runs_total 9\n");
        assert_contains(text, "scopebox_execs_total{outcome=\"ok\"} 8\n");
        assert_contains(text, "scopebox_execs_total{outcome=\"timeout\"} 1\n");
        assert_contains(text, "scopebox_exec_kills_total{reason=\"memory\"} 0\n");
        /* Bounds in the form the le label wants: "0.01", "1.0", "600.0". */
        assert_contains(text, "# TYPE scopebox_exec_duration_seconds histogram\n"
                              "# UNIT scopebox_exec_duration_seconds seconds\n");
        assert_contains(text, "scopebox_exec_duration_seconds_bucket{le=\"0.01\"} 2\n"
                              "scopebox_exec_duration_seconds_bucket{le=\"1.0\"} 9\n"
                              "scopebox_exec_duration_seconds_bucket{le=\"600.0\"} 10\n"
                              "scopebox_exec_duration_seconds_bucket{le=\"+Inf\"} 10\n"
                              "scopebox_exec_duration_seconds_sum 31.5\n"
                              "scopebox_exec_duration_seconds_count 10\n");
        assert_contains(text, "# UNIT scopebox_archive_bytes bytes\n");
        assert_contains(text, "scopebox_archive_bytes_total{direction=\"written\"} 4096\n");
        assert_contains(text, "scopebox_archive_bytes_total{direction=\"restored\"} 1024\n");
        assert_contains(text, "scopebox_session_manager_start_time_seconds 1700000000.25\n");
}

static void test_loop_stalls(void) {
        LoopStats l = {};
        GatewayMetrics g = { .loop = &l };
        _cleanup_free_ char *text = NULL;
        size_t size;

        /* Each dispatch lands in the first bucket whose bound it does not pass. */
        loop_stats_add(&l, 0);
        loop_stats_add(&l, 100);
        loop_stats_add(&l, 101);
        loop_stats_add(&l, 3000);
        loop_stats_add(&l, 60 * USEC_PER_SEC);  /* past the last bound: +Inf only */
        ASSERT_EQ(l.count, 5);
        ASSERT_EQ(l.max_usec, 60 * USEC_PER_SEC);
        ASSERT_EQ(l.sum_usec, 60 * USEC_PER_SEC + 3201);
        ASSERT_EQ(l.buckets[0], 2);
        ASSERT_EQ(l.buckets[1], 1);
        ASSERT_EQ(l.buckets[4], 0);
        ASSERT_EQ(l.buckets[5], 1);

        ASSERT_TRUE(metrics_render(&g, NULL, &text, &size) == 0);
        assert_contains(text, "# TYPE scopebox_gateway_loop_stall_seconds histogram\n"
                              "# UNIT scopebox_gateway_loop_stall_seconds seconds\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_bucket{le=\"0.0001\"} 2\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_bucket{le=\"0.00025\"} 3\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_bucket{le=\"0.005\"} 4\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_bucket{le=\"10.0\"} 4\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_bucket{le=\"+Inf\"} 5\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_sum 60.003201\n");
        assert_contains(text, "scopebox_gateway_loop_stall_seconds_count 5\n");
        assert_contains(text, "# TYPE scopebox_gateway_loop_stall_seconds_max gauge\n");
        assert_contains(text, "\nscopebox_gateway_loop_stall_seconds_max 60.0\n");
        ASSERT_TRUE(!strstr(text, "# UNIT scopebox_gateway_loop_stall_seconds_max"));
}

static void test_render_manager_down(void) {
        GatewayMetrics g = {};
        _cleanup_free_ char *text = NULL;
        size_t size;

        ASSERT_TRUE(metrics_render(&g, NULL, &text, &size) == 0);
        assert_contains(text, "scopebox_session_manager_up 0\n# EOF\n");
        assert_contains(text, "scopebox_http_responses_total{class=\"2xx\"} 0\n");
        /* Nothing the manager would know, and no start time that isn't known. */
        ASSERT_TRUE(!strstr(text, "scopebox_sessions"));
        ASSERT_TRUE(!strstr(text, "process_start_time_seconds"));
}

/* ---- against a fake session manager ---- */

typedef enum FakeMode {
        FAKE_OK,
        FAKE_NOT_RUNNING,       /* the bus answers that nobody owns the name */
        FAKE_BAD_LABEL,         /* a label value that is no identifier */
        FAKE_NOT_CUMULATIVE,    /* histogram counts that shrink */
} FakeMode;

typedef struct Fake {
        FakeMode mode;
        unsigned calls;
        bool auto_start;
} Fake;

static int fake_get_metrics(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        f->calls++;
        f->auto_start = sd_bus_message_get_auto_start(m) > 0;
        switch (f->mode) {
        case FAKE_NOT_RUNNING:
                return sd_bus_error_set(error, SD_BUS_ERROR_NAME_HAS_NO_OWNER, "not activatable");
        case FAKE_BAD_LABEL:
                return sd_bus_reply_method_return(m, "a{sv}", 1, "execs", "a{st}", 1, "o\"k", (uint64_t) 1);
        case FAKE_NOT_CUMULATIVE:
                return sd_bus_reply_method_return(m, "a{sv}", 2, "exec_duration_count", "t", (uint64_t) 5,
                                                  "exec_duration_buckets", "a(tt)", 2, (uint64_t) 10000,
                                                  (uint64_t) 3, (uint64_t) 20000, (uint64_t) 2);
        default:
                return sd_bus_reply_method_return(
                        m, "a{sv}", 6, "sessions", "u", 2, "execs", "a{st}", 2, "ok", (uint64_t) 5, "killed",
                        (uint64_t) 1, "exec_duration_buckets", "a(tt)", 2, (uint64_t) 10000, (uint64_t) 1,
                        (uint64_t) 25000, (uint64_t) 4, "exec_duration_count", "t", (uint64_t) 6,
                        "exec_duration_sum_usec", "t", (uint64_t) 2000001, "future_key", "as", 1, "ignored");
        }
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("GetMetrics", "", "a{sv}", fake_get_metrics, 0),
        SD_BUS_VTABLE_END,
};

typedef struct Env {
        sd_event *event;
        sd_bus *manager;
        Server server;
        Fake fake;
} Env;

static void env_setup(Env *env) {
        sd_bus *client = NULL;

        *env = (Env) {};
        ASSERT_TRUE(sd_event_new(&env->event) >= 0);
        fake_manager_connect(env->event, fake_vtable, &env->fake, &env->manager, &client);
        env->server = (Server) {
                .event = env->event,
                .bus = client,
                .config = { .max_body_bytes = 1000 },
                .body_budget = 1ULL << 30,
                .n_responses = { 0, 0, 7, 0, 1, 0 },
        };
        ASSERT_TRUE(server_add_api(&env->server, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(&env->server, &http_dify_api) == 0);
        ASSERT_TRUE(server_set_api_key(&env->server, "k") == 0);
}

static void env_done(Env *env) {
        ASSERT_TRUE(!env->server.requests && env->server.n_requests == 0);
        ASSERT_TRUE(server_set_api_key(&env->server, NULL) == 0);
        ASSERT_TRUE(server_set_scrape_key(&env->server, NULL) == 0);
        env->manager = sd_bus_flush_close_unref(env->manager);
        env->server.bus = sd_bus_flush_close_unref(env->server.bus);
        env->event = sd_event_unref(env->event);
}

/* Runs GET /metrics with this Authorization value to its answer. */
static HttpRequest *scrape_as(Env *env, const char *authorization) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(&env->server, NULL, NULL, "GET", "/metrics", &req) == 0);
        ASSERT_TRUE(http_request_begin(req, H(BEARER(authorization))) == 0);
        ASSERT_TRUE(!req->response);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        for (unsigned i = 0; i < 200 && !req->response; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(req->response && !req->slot);
        return req;
}

static HttpRequest *scrape(Env *env) {
        return scrape_as(env, "Bearer k");
}

static void test_scrape(void) {
        HttpRequest *req;
        Env env;

        env_setup(&env);

        req = scrape(&env);
        ASSERT_EQ(req->response->status, 200);
        ASSERT_STREQ(req->response->content_type,
                     "application/openmetrics-text; version=1.0.0; charset=utf-8");
        ASSERT_TRUE(env.fake.calls == 1 && !env.fake.auto_start);
        assert_contains(req->response->body, "scopebox_session_manager_up 1\n");
        assert_contains(req->response->body, "\nscopebox_sessions 2\n");
        assert_contains(req->response->body, "scopebox_http_responses_total{class=\"2xx\"} 7\n");
        assert_contains(req->response->body, "scopebox_execs_total{outcome=\"ok\"} 5\n"
                                             "scopebox_execs_total{outcome=\"killed\"} 1\n");
        assert_contains(req->response->body, "scopebox_exec_duration_seconds_bucket{le=\"0.025\"} 4\n"
                                             "scopebox_exec_duration_seconds_bucket{le=\"+Inf\"} 6\n"
                                             "scopebox_exec_duration_seconds_sum 2.000001\n");
        http_request_free(req);

        /* The manager isn't running: an answer all the same, without its families. */
        env.fake.mode = FAKE_NOT_RUNNING;
        req = scrape(&env);
        ASSERT_EQ(req->response->status, 200);
        assert_contains(req->response->body, "scopebox_session_manager_up 0\n# EOF\n");
        http_request_free(req);

        /* A reply that would make an invalid exposition is an internal error. */
        env.fake.mode = FAKE_BAD_LABEL;
        req = scrape(&env);
        ASSERT_EQ(req->response->status, 500);
        ASSERT_TRUE(!req->response->content_type);
        http_request_free(req);
        env.fake.mode = FAKE_NOT_CUMULATIVE;
        req = scrape(&env);
        ASSERT_EQ(req->response->status, 500);
        http_request_free(req);

        env_done(&env);
}

static void test_auth(void) {
        HttpRequest *req = NULL;
        Env env;

        env_setup(&env);
        ASSERT_TRUE(http_request_new(&env.server, NULL, NULL, "GET", "/metrics", &req) == 0);
        ASSERT_TRUE(http_request_begin(req, H(BEARER("Bearer wrong"))) == 0);
        ASSERT_TRUE(req->response && req->response->status == 401);
        http_request_free(req);

        /* The dify API's header opens nothing here. */
        ASSERT_TRUE(http_request_new(&env.server, NULL, NULL, "GET", "/metrics", &req) == 0);
        ASSERT_TRUE(http_request_begin(req, H(.n_api_key = 1, .api_key = "k", .api_key_size = 1)) == 0);
        ASSERT_TRUE(req->response && req->response->status == 401);
        http_request_free(req);
        ASSERT_EQ(env.fake.calls, 0);

        /* The scrape key opens /metrics and nothing else; the API key still opens /metrics. */
        ASSERT_EQ(server_set_scrape_key(&env.server, "k"), -EEXIST);
        ASSERT_TRUE(server_set_scrape_key(&env.server, "scrape") == 0);
        req = scrape_as(&env, "Bearer scrape");
        ASSERT_EQ(req->response->status, 200);
        http_request_free(req);
        req = scrape(&env);
        ASSERT_EQ(req->response->status, 200);
        http_request_free(req);
        static const char *const others[][2] = {
                { "POST", "/sessions" }, { "POST", "/exec" }, { "DELETE", "/sessions/0123" },
                { "POST", "/files/get" }, { "POST", "/storage/gc" }, { "GET", "/nowhere" },
        };
        for (size_t i = 0; i < ELEMENTSOF(others); i++) {
                ASSERT_TRUE(http_request_new(&env.server, NULL, NULL, others[i][0], others[i][1], &req) ==
                            0);
                ASSERT_TRUE(http_request_begin(req, H(BEARER("Bearer scrape"))) == 0);
                ASSERT_TRUE(req->response && req->response->status == 401);
                http_request_free(req);
        }
        ASSERT_TRUE(http_request_new(&env.server, NULL, NULL, "POST", "/v1/sandbox/run", &req) == 0);
        ASSERT_TRUE(http_request_begin(req, H(.n_api_key = 1, .api_key = "scrape", .api_key_size = 6)) == 0);
        ASSERT_TRUE(req->response && req->response->status == 401);
        http_request_free(req);
        env_done(&env);
}

int main(void) {
        RUN(test_render);
        RUN(test_render_manager_down);
        RUN(test_loop_stalls);
        RUN(test_scrape);
        RUN(test_auth);
        return 0;
}
