/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the resources against a fake session manager on a socketpair bus, client-gone included. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "agent-check.h"
#include "bus-util.h"
#include "gateway-server.h"
#include "http-apis.h"
#include "http-router.h"
#include "io-util.h"
#include "json-util.h"
#include "fake-manager.h"
#include "tests.h"

#define SID      "0123456789abcdef0123456789abcdef"
#define SID_GONE "fedcba9876543210fedcba9876543210"

typedef enum FakeMode {
        FAKE_OK,
        FAKE_UNSEALED,   /* data memfd without seals: the gateway must copy, not map */
        FAKE_HOSTILE,    /* artifact offsets outside the data */
        FAKE_ERROR,      /* answer with fake->error_name */
        FAKE_HOLD,       /* keep the call, answer later */
} FakeMode;

typedef struct Fake {
        sd_bus *bus;
        FakeMode mode;
        const char *error_name;
        bool health_ok;
        uint32_t counted_sessions;
        int64_t max_sessions;
        bool draining;
        sd_bus_message *held;
        unsigned calls;

        /* What the last call carried. */
        bool have_ttl, discard, no_archive;
        uint64_t ttl, timeout_ms;
        char *archive_key, *storage, *language, *session_id, *code, *path;
        size_t code_size;
        int hangup;      /* a duplicate of the call's hang-up pipe, -EBADF if it had none */
} Fake;

/* Forgets what the last call carried. */
static void fake_clear(Fake *f) {
        free(f->archive_key);
        free(f->storage);
        free(f->language);
        free(f->session_id);
        free(f->code);
        free(f->path);
        f->archive_key = f->storage = f->language = f->session_id = f->code = f->path = NULL;
        f->hangup = safe_close(f->hangup);
        f->have_ttl = f->discard = f->no_archive = false;
        f->ttl = f->timeout_ms = 0;
        f->code_size = 0;
}

static void fake_reset(Fake *f) {
        fake_clear(f);
        f->mode = FAKE_OK;
        f->error_name = NULL;
}

static int fake_read_options(sd_bus_message *m, Fake *f) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *k, *s;

                ASSERT_TRUE(sd_bus_message_read(m, "s", &k) >= 0);
                if (streq(k, "idle_ttl_sec")) {
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "t", &f->ttl) >= 0);
                        f->have_ttl = true;
                } else if (streq(k, "timeout_ms"))
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "t", &f->timeout_ms) >= 0);
                else if (streq(k, "discard")) {
                        int b;
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "b", &b) >= 0);
                        f->discard = b;
                } else if (streq(k, "archive")) {
                        int b;
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "b", &b) >= 0);
                        f->no_archive = !b;
                } else if (streq(k, "archive_key")) {
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "s", &s) >= 0);
                        f->archive_key = strdup(s);
                } else if (streq(k, "storage")) {
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "s", &s) >= 0);
                        f->storage = strdup(s);
                } else if (streq(k, "language")) {
                        ASSERT_TRUE(sd_bus_message_read(m, "v", "s", &s) >= 0);
                        f->language = strdup(s);
                } else if (streq(k, "hangup")) {
                        int fd;

                        ASSERT_TRUE(sd_bus_message_read(m, "v", "h", &fd) >= 0);
                        /* The read end of a pipe whose writer is alive: the gateway keeps it. */
                        ASSERT_EQ(fd_is_pipe_read_end(fd), 1);
                        ASSERT_EQ(pipe_hung_up(fd), 0);
                        f->hangup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                        ASSERT_TRUE(f->hangup >= 0);
                } else
                        ASSERT_TRUE(!"unexpected option");
                ASSERT_TRUE(sd_bus_message_exit_container(m) >= 0);
        }
        ASSERT_TRUE(r >= 0);
        return sd_bus_message_exit_container(m);
}

static int fake_get_health(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        f->calls++;
        if (f->mode == FAKE_ERROR)
                return sd_bus_error_set(error, f->error_name, "Failed to talk to systemd: /run/secret");
        if (f->mode == FAKE_HOLD) {
                f->held = sd_bus_message_ref(m);
                return 1;
        }
        return sd_bus_reply_method_return(m, "ba{sv}", f->health_ok, 7,
                                          "systemd_version", "s", "252",
                                          "runner", "s", "/usr/libexec/scopebox/scopebox-runner",
                                          "reason", "s", f->health_ok ? "" : "runner missing",
                                          "sessions", "u", f->counted_sessions + 2,
                                          "counted_sessions", "u", f->counted_sessions,
                                          "max_sessions", "x", f->max_sessions,
                                          "draining", "b", (int) f->draining);
}

static int fake_create(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;

        f->calls++;
        fake_clear(f);
        ASSERT_TRUE(fake_read_options(m, f) >= 0);
        if (f->mode == FAKE_ERROR)
                return sd_bus_error_set(error, f->error_name, "too many active sessions");
        if (f->mode == FAKE_HOLD) {
                f->held = sd_bus_message_ref(m);
                return 1;
        }
        return sd_bus_reply_method_return(m, "s", f->mode == FAKE_HOSTILE ? "../../etc" : SID);
}

static int fake_release(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        const char *id;

        f->calls++;
        fake_clear(f);
        ASSERT_TRUE(sd_bus_message_read(m, "s", &id) >= 0);
        f->session_id = strdup(id);
        ASSERT_TRUE(fake_read_options(m, f) >= 0);
        if (streq(id, SID_GONE))
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION, "Session is gone");
        if (f->mode == FAKE_ERROR)
                return sd_bus_error_set(error, f->error_name, "Archiving failed: bucket secret-bucket");
        return sd_bus_reply_method_return(m, NULL);
}

static int fake_exec_reply(Fake *f, sd_bus_message *m) {
        static const char data[] = "hi\nerr\n" "PNGDATA";
        _cleanup_close_ int fd = -EBADF;

        if (f->mode == FAKE_UNSEALED) {
                fd = memfd_new_empty("fake-data");
                ASSERT_TRUE(fd >= 0);
                ASSERT_TRUE(write_all(fd, data, sizeof(data) - 1) == 0);
        } else {
                fd = memfd_new_data("fake-data", data, sizeof(data) - 1);
                ASSERT_TRUE(fd >= 0);
        }

        return sd_bus_reply_method_return(m, "itta(stt)a{sv}h",
                                          0, (uint64_t) 3, (uint64_t) 4,
                                          1, "charts/plot.png", (uint64_t) 7,
                                          (uint64_t) (f->mode == FAKE_HOSTILE ? 4096 : 7),
                                          4,
                                          "timed_out", "b", 0,
                                          "files_skipped", "u", 2,
                                          "duration_usec", "t", (uint64_t) 1234,
                                          "future_key", "as", 1, "ignored",
                                          fd);
}

static int fake_exec(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        const char *id;
        int fd;

        f->calls++;
        fake_clear(f);
        ASSERT_TRUE(sd_bus_message_read(m, "sh", &id, &fd) >= 0);
        f->session_id = strdup(id);
        /* The code arrives sealed, complete. */
        ASSERT_TRUE(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE);
        ASSERT_TRUE(read_full_memfd(fd, 1 << 20, &f->code, &f->code_size) >= 0);
        ASSERT_TRUE(fake_read_options(m, f) >= 0);

        switch (f->mode) {
        case FAKE_ERROR:
                return sd_bus_error_set(error, f->error_name, "session is busy");
        case FAKE_HOLD:
                f->held = sd_bus_message_ref(m);
                return 1;
        default:
                return fake_exec_reply(f, m);
        }
}

/* The file methods answer with f->error_name in FAKE_ERROR mode, NoSuchSession for SID_GONE. */
static int fake_file_call(Fake *f, sd_bus_message *m, bool with_path, sd_bus_error *error) {
        const char *id, *path;

        f->calls++;
        fake_clear(f);
        ASSERT_TRUE(sd_bus_message_read(m, "s", &id) >= 0);
        f->session_id = strdup(id);
        if (with_path) {
                ASSERT_TRUE(sd_bus_message_read(m, "s", &path) >= 0);
                f->path = strdup(path);
        }
        if (streq(id, SID_GONE))
                return sd_bus_error_set(error, BUS_ERROR_NO_SUCH_SESSION, "Session is gone");
        if (f->mode == FAKE_ERROR)
                return sd_bus_error_set(error, f->error_name,
                                        streq(f->error_name, BUS_ERROR_INVALID_PATH) ?
                                        "path resolves outside /workspace" :
                                        streq(f->error_name, BUS_ERROR_BUSY) ?
                                        "session is busy" :
                                        streq(f->error_name, BUS_ERROR_TOO_LARGE) ?
                                        "workspace is full" : "No such file 'x'");
        return 0;
}

static int fake_write_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        int fd, r;

        r = fake_file_call(f, m, true, error);
        if (r != 0)
                return r;
        ASSERT_TRUE(sd_bus_message_read(m, "h", &fd) >= 0);
        /* The content arrives sealed, complete. */
        ASSERT_TRUE((fcntl(fd, F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_SHRINK)) ==
                    (F_SEAL_WRITE | F_SEAL_SHRINK));
        ASSERT_TRUE(read_full_memfd(fd, 1 << 20, &f->code, &f->code_size) >= 0);
        return sd_bus_reply_method_return(m, NULL);
}

static const char fake_file[] = "\x00\x01" "binary" "\xff";

static int fake_read_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_close_pair_ int pair[2] = { -EBADF, -EBADF };
        Fake *f = userdata;
        int r;

        r = fake_file_call(f, m, true, error);
        if (r != 0)
                return r;

        switch (f->mode) {
        case FAKE_UNSEALED:
                fd = memfd_new_empty("fake-file");
                ASSERT_TRUE(fd >= 0);
                ASSERT_TRUE(write_all(fd, fake_file, sizeof(fake_file) - 1) == 0);
                break;
        case FAKE_HOSTILE:
                /* Bigger than the gateway's SANDBOX_MAX_UPLOAD_BYTES (1 MiB here). */
                fd = memfd_new_empty("fake-file");
                ASSERT_TRUE(fd >= 0 && ftruncate(fd, (2 << 20)) == 0);
                ASSERT_TRUE(memfd_seal(fd) == 0);
                break;
        case FAKE_HOLD:
                /* Not a memfd at all. */
                ASSERT_TRUE(pipe2(pair, O_CLOEXEC) == 0);
                return sd_bus_reply_method_return(m, "h", pair[0]);
        default:
                fd = memfd_new_data("fake-file", fake_file, sizeof(fake_file) - 1);
                ASSERT_TRUE(fd >= 0);
        }
        return sd_bus_reply_method_return(m, "h", fd);
}

static int fake_list_files(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Fake *f = userdata;
        int r;

        r = fake_file_call(f, m, false, error);
        if (r != 0)
                return r;

        ASSERT_TRUE(sd_bus_message_new_method_return(m, &reply) >= 0);
        ASSERT_TRUE(sd_bus_message_open_container(reply, 'a', "(st)") >= 0);
        if (f->mode == FAKE_HOSTILE)
                /* More than the contract's 500. */
                for (unsigned i = 0; i < 501; i++)
                        ASSERT_TRUE(sd_bus_message_append(reply, "(st)", "f", (uint64_t) i) >= 0);
        else
                ASSERT_TRUE(sd_bus_message_append(reply, "(st)(st)(st)",
                                                  "outputs/result.txt", (uint64_t) 5,
                                                  "uploads/a\n\",\"size\":1},{\"path\":\"x", (uint64_t) 7,
                                                  "z/\xe4\xbd\xa0\"\\", (uint64_t) 0) >= 0);
        ASSERT_TRUE(sd_bus_message_close_container(reply) >= 0);
        return sd_bus_send(NULL, reply, NULL);
}

static int fake_reset_inputs(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Fake *f = userdata;
        int r;

        r = fake_file_call(f, m, false, error);
        if (r != 0)
                return r;
        return sd_bus_reply_method_return(m, NULL);
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("GetHealth", "", "ba{sv}", fake_get_health, 0),
        SD_BUS_METHOD("CreateSession", "a{sv}", "s", fake_create, 0),
        SD_BUS_METHOD("ReleaseSession", "sa{sv}", "", fake_release, 0),
        SD_BUS_METHOD("Exec", "sha{sv}", "itta(stt)a{sv}h", fake_exec, 0),
        SD_BUS_METHOD("WriteFile", "ssh", "", fake_write_file, 0),
        SD_BUS_METHOD("ReadFile", "ss", "h", fake_read_file, 0),
        SD_BUS_METHOD("ListFiles", "s", "a(st)", fake_list_files, 0),
        SD_BUS_METHOD("ResetInputs", "s", "", fake_reset_inputs, 0),
        SD_BUS_VTABLE_END,
};

typedef struct Env {
        sd_event *event;
        Server server;
        Fake fake;
} Env;

/* The configuration the tests' gateway runs with. */
static const Config test_config = {
        .max_body_bytes = 1 << 20,
        .max_code_bytes = 1 << 20,
        .idle_ttl_cap_sec = 86400,
        .exec_timeout_cap_ms = 600000,
        .max_output_bytes = 32768,
        .max_artifact_bytes = 20971520,
        .max_files_per_exec = 20,
        .max_total_artifact_bytes = 52428800,
        .max_upload_bytes = 1 << 20,
        .queue_timeout_sec = 150,
        .archive_timeout_sec = 120,
};

static void env_setup(Env *env) {
        sd_bus *client = NULL;

        *env = (Env) { .fake.hangup = -EBADF };
        ASSERT_TRUE(sd_event_new(&env->event) >= 0);
        fake_manager_connect(env->event, fake_vtable, &env->fake, &env->fake.bus, &client);

        env->server = (Server) {
                .event = env->event,
                .bus = client,
                .config = test_config,
                .body_budget = 1ULL << 30,
        };
        ASSERT_TRUE(server_add_api(&env->server, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(&env->server, &http_dify_api) == 0);
}

static void env_done(Env *env) {
        ASSERT_TRUE(!env->server.requests && env->server.n_requests == 0 && env->server.n_suspended == 0);
        fake_reset(&env->fake);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        env->fake.bus = sd_bus_flush_close_unref(env->fake.bus);
        env->server.bus = sd_bus_flush_close_unref(env->server.bus);
        json_object_put(env->server.health_cache);
        env->server.health_cache = NULL;
        env->event = sd_event_unref(env->event);
}

/* A request as the router has it after reading the body, suspended like a real one. */
static HttpRequest *request(Env *env, const char *method, const char *path, const char *body) {
        HttpRequest *req = NULL;

        ASSERT_TRUE(http_request_new(&env->server, NULL, NULL, method, path, &req) == 0);
        ASSERT_TRUE(http_request_begin(req, &(HttpRequestHeaders) { .n = 1, .bytes = 10 }) == 0);
        ASSERT_TRUE(!req->response);
        if (body)
                ASSERT_TRUE(http_request_append_body(req, body, strlen(body)) == 0);
        return req;
}

static void dispatch_and_wait(Env *env, HttpRequest *req) {
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        if (!req->response) {
                ASSERT_TRUE(req->slot);
                req->suspended = true;
                env->server.n_suspended++;
        }
        for (unsigned i = 0; i < 200 && !req->response; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(req->response);
        ASSERT_TRUE(!req->slot && !req->suspended);
}

static void check_response(HttpRequest *req, unsigned status, const char *body) {
        ASSERT_TRUE(http_response_flatten(req->response) == 0);
        if (req->response->status != status || req->response->size != strlen(body) ||
            memcmp(req->response->body, body, req->response->size) != 0)
                fprintf(stderr, "got %u %.*s\nexpected %u %s\n", req->response->status,
                        (int) req->response->size, req->response->body, status, body);
        ASSERT_TRUE(req->response->status == status);
        ASSERT_TRUE(req->response->size == strlen(body));
        ASSERT_TRUE(memcmp(req->response->body, body, strlen(body)) == 0);
}

static void roundtrip(Env *env, const char *method, const char *path, const char *body, unsigned status,
                      const char *expected) {
        HttpRequest *req = request(env, method, path, body);

        dispatch_and_wait(env, req);
        check_response(req, status, expected);
        http_request_free(req);
}

#define DETAIL(s)    "{\"detail\":\"" s "\"}"
#define UNHEALTHY(s) "{\"ok\":false,\"image_ready\":false,\"error\":\"" s "\"}"
#define CREATED      "{\"session_id\":\"" SID "\"}"
#define EXEC_BODY    "{\"session_id\":\"" SID "\",\"code\":\"1\"}"
#define HEALTHY(extra) "{\"ok\":true,\"image_ready\":true,\"backend\":\"systemd\",\"systemd\":\"252\"," \
                       "\"runner\":\"scopebox-runner " PROJECT_VERSION "\"," extra "}"

static void test_health(Env *env) {
        fake_reset(&env->fake);
        env->fake.health_ok = true;
        env->fake.counted_sessions = 3;
        env->fake.max_sessions = 16;
        roundtrip(env, "GET", "/healthz", NULL, 200,
                  HEALTHY("\"node\":\"\",\"sessions\":3,\"capacity\":16,\"draining\":false"));
        ASSERT_TRUE(env->server.health.sessions == 3 && env->server.health.capacity == 16);

        /* A healthy answer is reused for a second: the manager isn't asked again. */
        env->fake.health_ok = false;
        roundtrip(env, "GET", "/healthz", NULL, 200,
                  HEALTHY("\"node\":\"\",\"sessions\":3,\"capacity\":16,\"draining\":false"));

        /* Draining or full is still healthy (pinned requests must reach the node); unlimited is
         * capacity 0. */
        env->fake.health_ok = true;
        env->fake.draining = true;
        env->fake.counted_sessions = 20;
        env->fake.max_sessions = -1;
        env->server.config.node_id = (char *) "0a";
        env->server.health.usec = 0;
        roundtrip(env, "GET", "/healthz", NULL, 200,
                  HEALTHY("\"node\":\"0a\",\"sessions\":20,\"capacity\":0,\"draining\":true"));
        env->server.config.node_id = NULL;
        env->fake.draining = false;
        env->fake.health_ok = false;
        /* Once it is older than that, the manager is asked, and an unhealthy answer is never kept. */
        env->server.health.usec = 0;
        roundtrip(env, "GET", "/healthz", NULL, 503, UNHEALTHY("runner missing"));

        /* A failing manager: 503, and nothing of its message. */
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_BACKEND_FAILED;
        roundtrip(env, "GET", "/healthz", NULL, 503, UNHEALTHY("session manager unavailable"));
}

static void test_sessions(Env *env) {
        const char *storage = "{\"provider\":\"local\",\"prefix\":\"w/\",\"n\":[1,{\"a\":null}]}";
        _cleanup_free_ char *body = NULL;
        HttpRequest *req;

        fake_reset(&env->fake);
        ASSERT_TRUE(asprintf(&body, "{\"idle_ttl_sec\":999999,\"archive_key\":\"conv_1\","
                             "\"storage\":%s,\"x\":1}", storage) > 0);
        req = request(env, "POST", "/sessions", body);
        dispatch_and_wait(env, req);
        check_response(req, 200, CREATED);
        ASSERT_STREQ(req->session_id, SID);
        http_request_free(req);
        ASSERT_TRUE(env->fake.have_ttl && env->fake.ttl == 86400);
        ASSERT_STREQ(env->fake.archive_key, "conv_1");
        ASSERT_STREQ(env->fake.storage, storage);

        /* No body at all is {}: nothing but defaults. */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", NULL, 200, CREATED);
        ASSERT_TRUE(!env->fake.have_ttl && !env->fake.archive_key && !env->fake.storage);

        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", "{\"idle_ttl_sec\":null,\"archive_key\":null,\"storage\":null}",
                  200, CREATED);
        ASSERT_TRUE(!env->fake.have_ttl && !env->fake.archive_key && !env->fake.storage);

        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", "{\"idle_ttl_sec\":0}", 200, CREATED);
        ASSERT_TRUE(!env->fake.have_ttl);
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", "{\"idle_ttl_sec\":-5}", 200, CREATED);
        ASSERT_TRUE(env->fake.have_ttl && env->fake.ttl == 1);
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", "{\"idle_ttl_sec\":60}", 200, CREATED);
        ASSERT_TRUE(env->fake.have_ttl && env->fake.ttl == 60);

        /* A key that cannot cross the bus is dropped, which means "use the session id". */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", "{\"archive_key\":\"conv\\u0000x\"}", 200, CREATED);
        ASSERT_TRUE(!env->fake.archive_key);

        /* Archive keys that can't be archive stems are dropped: the session id is the stem. */
        fake_reset(&env->fake);
        {
                _cleanup_free_ char *b = NULL;
                char key[130];

                memset(key, 'k', sizeof(key) - 1);
                key[sizeof(key) - 1] = 0;
                ASSERT_TRUE(asprintf(&b, "{\"archive_key\":\"%s\"}", key) > 0);
                roundtrip(env, "POST", "/sessions", b, 200, CREATED);
                ASSERT_TRUE(!env->fake.archive_key);
                key[128] = 0;
                free(b);
                ASSERT_TRUE(asprintf(&b, "{\"archive_key\":\"%s\"}", key) > 0);
                roundtrip(env, "POST", "/sessions", b, 200, CREATED);
                ASSERT_TRUE(env->fake.archive_key && strlen(env->fake.archive_key) == 128);
        }
        /* Nor does anything else outside the stem alphabet reach the manager (or an operator's
         * terminal through scopeboxctl inspect): control characters, slashes, dots. */
        {
                static const char *const bad[] = {
                        "{\"archive_key\":\"a\\u001b]52;c;eA==\\u0007\"}", "{\"archive_key\":\"../x\"}",
                        "{\"archive_key\":\"a.b\"}", "{\"archive_key\":\"\"}",
                };

                for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                        fake_reset(&env->fake);
                        roundtrip(env, "POST", "/sessions", bad[i], 200, CREATED);
                        ASSERT_TRUE(!env->fake.archive_key);
                }
        }

        /* A storage block too large for a bus message is refused, never sent. */
        fake_reset(&env->fake);
        env->fake.calls = 0;
        {
                _cleanup_free_ char *pad = malloc(64 * 1024 + 1), *b = NULL;

                ASSERT_TRUE(pad);
                memset(pad, 'x', 64 * 1024);
                pad[64 * 1024] = 0;
                ASSERT_TRUE(asprintf(&b, "{\"storage\":{\"provider\":\"local\",\"pad\":\"%s\"}}", pad) > 0);
                roundtrip(env, "POST", "/sessions", b, 400, DETAIL("storage is too large"));
                roundtrip(env, "DELETE", "/sessions/" SID, b, 400, DETAIL("storage is too large"));
                ASSERT_TRUE(env->fake.calls == 0);
                /* Just below the limit it goes through. */
                free(b);
                pad[64 * 1024 - sizeof("{\"provider\":\"local\",\"pad\":\"\"}") + 1] = 0;
                ASSERT_TRUE(asprintf(&b, "{\"storage\":{\"provider\":\"local\",\"pad\":\"%s\"}}", pad) > 0);
                roundtrip(env, "POST", "/sessions", b, 200, CREATED);
                ASSERT_TRUE(env->fake.storage && strlen(env->fake.storage) == 64 * 1024);
        }

        /* Schema errors never reach the manager. */
        fake_reset(&env->fake);
        env->fake.calls = 0;
        roundtrip(env, "POST", "/sessions", "{\"idle_ttl_sec\":\"60\"}", 422,
                  "{\"detail\":[{\"type\":\"int_type\",\"loc\":[\"body\",\"idle_ttl_sec\"],"
                  "\"msg\":\"Input should be a valid integer\"}]}");
        roundtrip(env, "POST", "/sessions", "{\"storage\":\"s3\"}", 422,
                  "{\"detail\":[{\"type\":\"dict_type\",\"loc\":[\"body\",\"storage\"],"
                  "\"msg\":\"Input should be a valid dictionary\"}]}");
        ASSERT_TRUE(env->fake.calls == 0);

        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_LIMIT_EXCEEDED;
        roundtrip(env, "POST", "/sessions", "{}", 429, DETAIL("too many active sessions"));

        /* A reply that is not a session id is the manager's bug: 500. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOSTILE;
        roundtrip(env, "POST", "/sessions", "{}", 500, DETAIL("internal error"));

        /* Release: options forwarded, idempotent for a gone session. */
        fake_reset(&env->fake);
        roundtrip(env, "DELETE", "/sessions/" SID, "{\"discard\":true,\"archive_key\":\"conv_1\"}",
                  200, "{\"ok\":true}");
        ASSERT_TRUE(streq(env->fake.session_id, SID) && env->fake.discard);
        ASSERT_STREQ(env->fake.archive_key, "conv_1");
        fake_reset(&env->fake);
        roundtrip(env, "DELETE", "/sessions/" SID, "{}", 200, "{\"ok\":true}");
        ASSERT_TRUE(!env->fake.discard && !env->fake.archive_key && !env->fake.storage);
        fake_reset(&env->fake);
        roundtrip(env, "DELETE", "/sessions/" SID_GONE, NULL, 200, "{\"ok\":true}");
        ASSERT_STREQ(env->fake.session_id, SID_GONE);

        /* Storage failures are not ours: the provider's message is passed on. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_STORAGE_FAILED;
        roundtrip(env, "DELETE", "/sessions/" SID, NULL, 502,
                  DETAIL("Archiving failed: bucket secret-bucket"));
}

static const char *exec_ok =
        "{\"stdout\":\"hi\\n\","
        "\"stderr\":\"err\\n[sandbox] skipped 2 output file(s) because artifact limits are 20 files, "
        "20971520 bytes per file, 52428800 bytes total\","
        "\"exit_code\":0,"
        "\"files\":[{\"name\":\"plot.png\",\"mime_type\":\"image/png\",\"data_base64\":\"UE5HREFUQQ==\"}]}";

static void test_exec(Env *env) {
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/exec",
                  "{\"session_id\":\"" SID "\",\"code\":\"print(1)\\u0000#\",\"timeout_ms\":2500}",
                  400, "{\"detail\":\"code contains a NUL byte\"}");
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/exec",
                  "{\"session_id\":\"" SID "\",\"code\":\"print(1)\\n#\",\"timeout_ms\":2500}",
                  200, exec_ok);
        ASSERT_STREQ(env->fake.session_id, SID);
        ASSERT_TRUE(env->fake.code_size == 10 && memcmp(env->fake.code, "print(1)\n#", 10) == 0);
        ASSERT_TRUE(env->fake.timeout_ms == 2500);
        ASSERT_STREQ(env->fake.language, "python3");

        fake_reset(&env->fake);
        roundtrip(env, "POST", "/exec", "{\"session_id\":\"" SID "\",\"code\":\"\"}", 200, exec_ok);
        ASSERT_TRUE(env->fake.timeout_ms == 120000 && env->fake.code_size == 0);

        fake_reset(&env->fake);
        env->fake.mode = FAKE_UNSEALED;
        roundtrip(env, "POST", "/exec", EXEC_BODY, 200, exec_ok);

        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOSTILE;
        roundtrip(env, "POST", "/exec", EXEC_BODY, 500, DETAIL("internal error"));

        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_BUSY;
        roundtrip(env, "POST", "/exec", EXEC_BODY, 429, DETAIL("session is busy"));

        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_NO_SUCH_SESSION;
        roundtrip(env, "POST", "/exec", EXEC_BODY, 404, DETAIL("session not found or not running"));
}

#define FILE_BODY(path, data) \
        "{\"session_id\":\"" SID "\",\"path\":\"" path "\",\"data_base64\":\"" data "\"}"
#define GET_BODY(sid, path) "{\"session_id\":\"" sid "\",\"path\":\"" path "\"}"
#define SESSION_BODY(sid) "{\"session_id\":\"" sid "\"}"

static void test_files(Env *env) {
        /* Write: decoded, sealed, the path as the client gave it. */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files", FILE_BODY("../uploads/./x.bin", "AAH/YmluYXJ5"), 200,
                  "{\"ok\":true}");
        ASSERT_STREQ(env->fake.session_id, SID);
        ASSERT_STREQ(env->fake.path, "../uploads/./x.bin");
        ASSERT_TRUE(env->fake.code_size == 9 && memcmp(env->fake.code, "\x00\x01\xff" "binary", 9) == 0);

        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files", FILE_BODY("/workspace/empty", ""), 200, "{\"ok\":true}");
        ASSERT_TRUE(env->fake.code_size == 0);
        ASSERT_STREQ(env->fake.path, "/workspace/empty");

        /* Client errors never reach the manager. */
        fake_reset(&env->fake);
        env->fake.calls = 0;
        roundtrip(env, "POST", "/files", FILE_BODY("a", "aGVsbG8"), 400, DETAIL("invalid base64"));
        roundtrip(env, "POST", "/files", FILE_BODY("a\\u0000", "aGVsbG8="), 400,
                  DETAIL("path must be under /workspace"));
        roundtrip(env, "POST", "/files", "{\"session_id\":\"x\",\"path\":\"a\",\"data_base64\":\"\"}", 400,
                  DETAIL("invalid session_id"));
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "a\\u0000"), 400,
                  DETAIL("path must be under /workspace"));
        roundtrip(env, "POST", "/files/list", "{}", 422,
                  "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"session_id\"],"
                  "\"msg\":\"Field required\"}]}");
        roundtrip(env, "POST", "/files/reset-inputs", SESSION_BODY("nope"), 400,
                  DETAIL("invalid session_id"));
        ASSERT_TRUE(env->fake.calls == 0);

        /* The manager's path verdicts pass through with their text. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_INVALID_PATH;
        roundtrip(env, "POST", "/files", FILE_BODY("evil/passwd", "QQ=="), 400,
                  DETAIL("path resolves outside /workspace"));
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "evil/passwd"), 400,
                  DETAIL("path resolves outside /workspace"));
        env->fake.error_name = BUS_ERROR_BUSY;
        roundtrip(env, "POST", "/files", FILE_BODY("a", "QQ=="), 429, DETAIL("session is busy"));
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files",
                  "{\"session_id\":\"" SID_GONE "\",\"path\":\"a\",\"data_base64\":\"\"}", 404,
                  DETAIL("session not found or not running"));

        /* Read: sealed memfds are mapped, unsealed ones copied; both encode the same. */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "uploads/x.bin"), 200,
                  "{\"data_base64\":\"AAFiaW5hcnn/\"}");
        ASSERT_STREQ(env->fake.path, "uploads/x.bin");
        fake_reset(&env->fake);
        env->fake.mode = FAKE_UNSEALED;
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "x"), 200, "{\"data_base64\":\"AAFiaW5hcnn/\"}");
        /* Too big, or not a file: the manager's bug, never encoded. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOSTILE;
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "x"), 500, DETAIL("internal error"));
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOLD;
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "x"), 500, DETAIL("internal error"));
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_NOT_FOUND;
        roundtrip(env, "POST", "/files/get", GET_BODY(SID, "outputs"), 404, DETAIL("file not found"));
        env->fake.error_name = BUS_ERROR_TOO_LARGE;
        roundtrip(env, "POST", "/files", FILE_BODY("big", "QQ=="), 413, DETAIL("workspace is full"));
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/get", GET_BODY(SID_GONE, "x"), 404,
                  DETAIL("session not found or not running"));

        /* List: the manager's order, names escaped. */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/list", SESSION_BODY(SID), 200,
                  "{\"files\":[{\"path\":\"outputs/result.txt\",\"size\":5},"
                  "{\"path\":\"uploads/a\\n\\\",\\\"size\\\":1},{\\\"path\\\":\\\"x\",\"size\":7},"
                  "{\"path\":\"z/\xe4\xbd\xa0\\\"\\\\\",\"size\":0}]}");
        ASSERT_STREQ(env->fake.session_id, SID);
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOSTILE;
        roundtrip(env, "POST", "/files/list", SESSION_BODY(SID), 500, DETAIL("internal error"));
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/list", SESSION_BODY(SID_GONE), 404,
                  DETAIL("session not found or not running"));

        /* Reset: a gone session is a 200 too. */
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/reset-inputs", SESSION_BODY(SID), 200,
                  "{\"ok\":true,\"session_gone\":false}");
        ASSERT_STREQ(env->fake.session_id, SID);
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/files/reset-inputs", SESSION_BODY(SID_GONE), 200,
                  "{\"ok\":false,\"session_gone\":true}");
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_BUSY;
        roundtrip(env, "POST", "/files/reset-inputs", SESSION_BODY(SID), 429, DETAIL("session is busy"));
}

static void test_client_gone(Env *env) {
        HttpRequest *req;
        unsigned calls;

        /* The client goes away (MHD completes the request) while Exec() runs: freeing the request
         * must cancel the call, so that the late reply finds nothing to call back into. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOLD;
        calls = env->fake.calls;
        req = request(env, "POST", "/exec", EXEC_BODY);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        ASSERT_TRUE(req->slot && !req->response);
        req->suspended = true;
        env->server.n_suspended++;
        for (unsigned i = 0; i < 200 && !env->fake.held; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(env->fake.held && env->fake.calls == calls + 1);

        http_request_free(req);
        ASSERT_TRUE(env->server.n_suspended == 0);

        env->fake.mode = FAKE_OK;
        ASSERT_TRUE(fake_exec_reply(&env->fake, env->fake.held) >= 0);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        for (unsigned i = 0; i < 20; i++)
                ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
        /* Still usable afterwards. */
        roundtrip(env, "POST", "/exec", EXEC_BODY, 200, exec_ok);
}

/* The hang-up pipe of a request's call; its write end goes with the request or its client. */
static void test_hangup_pipe(Env *env) {
        HttpRequest *req;

        fake_reset(&env->fake);
        roundtrip(env, "POST", "/exec", EXEC_BODY, 200, exec_ok);
        /* roundtrip() freed the request: the manager sees the pipe hang up. */
        ASSERT_TRUE(env->fake.hangup >= 0);
        ASSERT_EQ(pipe_hung_up(env->fake.hangup), 1);

        /* Calls that run no code get none. */
        req = request(env, "POST", "/files/list", SESSION_BODY(SID));
        dispatch_and_wait(env, req);
        http_request_free(req);
        ASSERT_TRUE(env->fake.hangup < 0);

        /* A request that is freed while its call is out closes it too. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOLD;
        req = request(env, "POST", "/exec", EXEC_BODY);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        for (unsigned i = 0; i < 200 && !env->fake.held; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_EQ(pipe_hung_up(env->fake.hangup), 0);
        http_request_free(req);
        ASSERT_EQ(pipe_hung_up(env->fake.hangup), 1);
        ASSERT_TRUE(sd_bus_reply_method_errorf(env->fake.held, BUS_ERROR_CANCELLED, "cancelled") >= 0);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        for (unsigned i = 0; i < 20; i++)
                ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
        fake_reset(&env->fake);
}

/* A request dispatched and suspended whose call the fake manager holds, unanswered. */
static HttpRequest *request_held(Env *env, const char *method, const char *path, const char *body) {
        HttpRequest *req;

        fake_reset(&env->fake);
        env->fake.mode = FAKE_HOLD;
        req = request(env, method, path, body);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        req->suspended = true;
        env->server.n_suspended++;
        for (unsigned i = 0; i < 200 && !env->fake.held; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(env->fake.held);
        return req;
}

/* MHD completes the request of a client that went away while its call is out: the request stays,
 * without its connection, until the manager answers; the pipe tells the manager at once. */
static void test_orphan(Env *env) {
        HttpRequest *req;
        void *cls;

        req = request_held(env, "POST", "/exec", EXEC_BODY);
        cls = req;
        http_router_request_completed(NULL, NULL, &cls, MHD_REQUEST_TERMINATED_CLIENT_ABORT);
        ASSERT_TRUE(!cls);
        ASSERT_TRUE(env->server.requests == req && env->server.n_requests == 1);
        ASSERT_TRUE(req->orphaned && !req->connection && req->slot && !req->response);
        ASSERT_TRUE(env->server.n_suspended == 0 && env->server.n_orphaned == 1);
        ASSERT_EQ(pipe_hung_up(env->fake.hangup), 1);

        /* The manager's answer ends it; the handler never runs for nobody. */
        ASSERT_TRUE(sd_bus_reply_method_errorf(env->fake.held, BUS_ERROR_CANCELLED,
                                               "cancelled: the caller hung up") >= 0);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        for (unsigned i = 0; i < 200 && env->server.requests; i++)
                ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(!env->server.requests && env->server.n_requests == 0 && env->server.n_orphaned == 0);

        /* An orphan whose answer is a full result goes the same way. */
        req = request(env, "POST", "/exec", EXEC_BODY);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        for (unsigned i = 0; i < 200 && !env->fake.held; i++)
                ASSERT_TRUE(sd_event_run(env->event, 100 * USEC_PER_MSEC) >= 0);
        cls = req;
        http_router_request_completed(NULL, NULL, &cls, MHD_REQUEST_TERMINATED_WITH_ERROR);
        ASSERT_TRUE(fake_exec_reply(&env->fake, env->fake.held) >= 0);
        env->fake.held = sd_bus_message_unref(env->fake.held);
        for (unsigned i = 0; i < 200 && env->server.requests; i++)
                ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(!env->server.requests && env->server.n_orphaned == 0);
        fake_reset(&env->fake);

        /* Still usable afterwards. */
        roundtrip(env, "POST", "/exec", EXEC_BODY, 200, exec_ok);
}

/* What the manager reads from a create's hang-up pipe once the gateway has let go of it: 1 for the
 * byte that says the answer reached the client, 0 for the pipe's end without it. */
static int fake_hangup_read(Fake *f) {
        ssize_t n;
        char b;

        ASSERT_TRUE(f->hangup >= 0);
        ASSERT_EQ(pipe_hung_up(f->hangup), 1);
        n = read(f->hangup, &b, 1);
        ASSERT_TRUE(n >= 0);
        return (int) n;
}

/* The client of a create goes while the call is out. The manager undoes the create when the pipe
 * hangs up (answering Cancelled), or releases the session it answered with all the same when the
 * pipe ends without the byte that confirms the answer: the gateway has nothing to do. */
static void test_abandoned_create(Env *env) {
        HttpRequest *req;
        void *cls;

        for (unsigned pass = 0; pass < 2; pass++) {
                unsigned calls;

                req = request_held(env, "POST", "/sessions", NULL);
                ASSERT_EQ(pipe_hung_up(env->fake.hangup), 0);

                cls = req;
                http_router_request_completed(NULL, NULL, &cls, MHD_REQUEST_TERMINATED_CLIENT_ABORT);
                ASSERT_TRUE(req->orphaned);
                ASSERT_EQ(pipe_hung_up(env->fake.hangup), 1);

                calls = env->fake.calls;
                env->fake.mode = FAKE_OK;
                if (pass == 0)
                        ASSERT_TRUE(sd_bus_reply_method_errorf(env->fake.held, BUS_ERROR_CANCELLED,
                                                               "cancelled: the caller hung up") >= 0);
                else
                        ASSERT_TRUE(sd_bus_reply_method_return(env->fake.held, "s", SID) >= 0);
                env->fake.held = sd_bus_message_unref(env->fake.held);
                for (unsigned i = 0; i < 200 && (env->server.requests || env->fake.calls == calls); i++)
                        ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
                for (unsigned i = 0; i < 20; i++)
                        ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
                ASSERT_TRUE(!env->server.requests && env->server.n_orphaned == 0);
                /* No call of ours: the pipe said it all, and never confirmed anything. */
                ASSERT_TRUE(env->fake.calls == calls);
                ASSERT_EQ(fake_hangup_read(&env->fake), 0);
        }
        fake_reset(&env->fake);
        roundtrip(env, "POST", "/sessions", NULL, 200, CREATED);
        /* An answer that was not sent anywhere (no connection here) reached no client either. */
        ASSERT_EQ(fake_hangup_read(&env->fake), 0);
        /* Nor does a failed create's pipe ever carry the byte. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_LIMIT_EXCEEDED;
        roundtrip(env, "POST", "/sessions", NULL, 429, DETAIL("too many active sessions"));
        ASSERT_EQ(fake_hangup_read(&env->fake), 0);
        fake_reset(&env->fake);
}

static void test_manager_gone(void) {
        HttpRequest *req;
        Env env;

        /* The manager's connection breaks while a call is pending: the request gets an answer. */
        env_setup(&env);
        env.fake.mode = FAKE_HOLD;
        req = request(&env, "POST", "/exec", EXEC_BODY);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        for (unsigned i = 0; i < 200 && !env.fake.held; i++)
                ASSERT_TRUE(sd_event_run(env.event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(env.fake.held);
        env.fake.held = sd_bus_message_unref(env.fake.held);
        env.fake.bus = sd_bus_flush_close_unref(env.fake.bus);

        for (unsigned i = 0; i < 200 && !req->response; i++)
                ASSERT_TRUE(sd_event_run(env.event, 100 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(req->response && req->response->status == 500);
        ASSERT_TRUE(!req->slot);
        http_request_free(req);

        /* Later requests fail cleanly, without a call. */
        req = request(&env, "POST", "/exec", EXEC_BODY);
        ASSERT_TRUE(http_request_dispatch(req) < 0);
        http_request_free(req);

        req = request(&env, "GET", "/healthz", NULL);
        ASSERT_TRUE(http_request_dispatch(req) == 0);
        check_response(req, 503, UNHEALTHY("session manager unavailable"));
        http_request_free(req);

        env_done(&env);
}

/* SANDBOX_NODE_ID: an id without the node's tag gets, on every route, what an unknown session
 * gets, and the manager is never asked. */
static void test_node_tag(Env *env) {
        static const struct {
                const char *method, *path, *body;
        } routes[] = {
                { "DELETE", "/sessions/" SID, NULL },
                { "DELETE", "/sessions/" SID, "{\"discard\":true}" },
                { "POST", "/exec", EXEC_BODY },
                { "POST", "/files", FILE_BODY("a.txt", "aGVsbG8=") },
                { "POST", "/files/get", GET_BODY(SID, "a.txt") },
                { "POST", "/files/list", SESSION_BODY(SID) },
                { "POST", "/files/reset-inputs", SESSION_BODY(SID) },
        };

        for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
                HttpRequest *unknown, *foreign;

                /* What the manager's NoSuchSession makes of it, untagged. */
                fake_reset(&env->fake);
                env->fake.calls = 0;
                env->fake.mode = FAKE_ERROR;
                env->fake.error_name = BUS_ERROR_NO_SUCH_SESSION;
                env->server.config.node_id = NULL;
                unknown = request(env, routes[i].method, routes[i].path, routes[i].body);
                dispatch_and_wait(env, unknown);
                ASSERT_TRUE(unknown->response && env->fake.calls == 1);

                /* Tagged "ab": SID (01…) is another node's. */
                fake_reset(&env->fake);
                env->fake.calls = 0;
                env->server.config.node_id = (char *) "ab";
                foreign = request(env, routes[i].method, routes[i].path, routes[i].body);
                ASSERT_TRUE(http_request_dispatch(foreign) == 0);
                ASSERT_TRUE(foreign->response && !foreign->slot && env->fake.calls == 0);
                check_response(foreign, unknown->response->status, unknown->response->body);
                fprintf(stderr, "ok - %s %s: %u %s\n", routes[i].method, routes[i].path,
                        foreign->response->status, foreign->response->body);
                http_request_free(unknown);
                http_request_free(foreign);

                /* Tagged "0123": SID is ours and goes to the manager. */
                fake_reset(&env->fake);
                env->fake.calls = 0;
                env->server.config.node_id = (char *) "0123";
                foreign = request(env, routes[i].method, routes[i].path, routes[i].body);
                dispatch_and_wait(env, foreign);
                ASSERT_TRUE(env->fake.calls == 1);
                http_request_free(foreign);
        }
        env->server.config.node_id = NULL;

        /* A draining manager's refusal of a create. */
        fake_reset(&env->fake);
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_DRAINING;
        {
                HttpRequest *req = request(env, "POST", "/sessions", "{}");

                dispatch_and_wait(env, req);
                check_response(req, 503, DETAIL("node is draining"));
                ASSERT_STREQ(req->response->retry_after, "1");
                http_request_free(req);
        }
        fake_reset(&env->fake);
}

/* The agent check's line. */
static void test_agent_line(void) {
        char line[16];

        health_agent_line(&(HealthSnapshot) { .sessions = 0, .capacity = 16 }, line);
        ASSERT_STREQ(line, "ready up 100%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 1, .capacity = 3 }, line);
        ASSERT_STREQ(line, "ready up 66%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 15, .capacity = 16 }, line);
        ASSERT_STREQ(line, "ready up 6%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 16, .capacity = 16 }, line);
        ASSERT_STREQ(line, "ready up 0%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 40, .capacity = 16 }, line);
        ASSERT_STREQ(line, "ready up 0%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 40, .capacity = 0 }, line);
        ASSERT_STREQ(line, "ready up 100%\n");
        health_agent_line(&(HealthSnapshot) { .sessions = 1, .capacity = 16, .draining = true }, line);
        ASSERT_STREQ(line, "drain\n");
}

/* Connects to the agent socket and reads what it says, running the loop meanwhile. */
static void agent_expect(Env *env, const struct sockaddr_un *sa, socklen_t salen, const char *expected) {
        _cleanup_close_ int c = -EBADF;
        char buf[64];
        size_t got = 0;

        c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ASSERT_TRUE(c >= 0);
        ASSERT_TRUE(connect(c, (const struct sockaddr *) sa, salen) == 0);
        for (unsigned i = 0; i < 200; i++) {
                ssize_t n = read(c, buf + got, sizeof(buf) - 1 - got);
                if (n == 0)
                        break; /* closed after the line */
                if (n > 0) {
                        got += (size_t) n;
                        continue;
                }
                ASSERT_TRUE(errno == EAGAIN);
                ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
        }
        buf[got] = 0;
        ASSERT_STREQ(buf, expected);
}

static void test_agent_socket(Env *env) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        socklen_t salen;
        int l;

        (void) snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "scopebox-test-agent-%d", (int) getpid());
        salen = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sa.sun_path + 1);
        l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(l >= 0);
        ASSERT_TRUE(bind(l, (struct sockaddr *) &sa, salen) == 0);
        ASSERT_TRUE(listen(l, 64) == 0);
        ASSERT_TRUE(server_add_agent_fd(&env->server, l) == 0);

        /* Fresh answers through the manager. */
        fake_reset(&env->fake);
        env->fake.health_ok = true;
        env->fake.counted_sessions = 1;
        env->fake.max_sessions = 4;
        env->server.health.usec = 0;
        agent_expect(env, &sa, salen, "ready up 75%\n");
        /* Cached for a second, like /healthz. */
        env->fake.counted_sessions = 4;
        agent_expect(env, &sa, salen, "ready up 75%\n");
        env->server.health.usec = 0;
        agent_expect(env, &sa, salen, "ready up 0%\n");
        env->server.health.usec = 0;
        env->fake.draining = true;
        agent_expect(env, &sa, salen, "drain\n");
        env->server.health.usec = 0;
        env->fake.health_ok = false;
        agent_expect(env, &sa, salen, "down\n");
        env->fake.mode = FAKE_ERROR;
        env->fake.error_name = BUS_ERROR_BACKEND_FAILED;
        agent_expect(env, &sa, salen, "down\n");

        /* Garbage from the client changes nothing: it is never read. */
        env->fake.mode = FAKE_OK;
        env->fake.health_ok = true;
        env->fake.draining = false;
        {
                _cleanup_close_ int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                ASSERT_TRUE(c >= 0 && connect(c, (struct sockaddr *) &sa, salen) == 0);
                ASSERT_TRUE(write(c, "GET / HTTP/1.0\r\n\r\n", 18) == 18);
        }
        agent_expect(env, &sa, salen, "ready up 0%\n");

        /* Many at once while a fresh answer is out: at most AGENT_WAITING_MAX wait, the rest are
         * closed unanswered, and all of them get their answer when it comes. */
        {
                int cs[AGENT_WAITING_MAX + 8];
                unsigned answered = 0, closed = 0;

                env->server.health.usec = 0;
                env->fake.mode = FAKE_HOLD;
                for (size_t i = 0; i < ELEMENTSOF(cs); i++) {
                        cs[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                        ASSERT_TRUE(cs[i] >= 0 && connect(cs[i], (struct sockaddr *) &sa, salen) == 0);
                }
                for (unsigned i = 0; i < 200 && (!env->fake.held || env->server.n_agent_waiting +
                                                 env->server.n_agent_refused < ELEMENTSOF(cs)); i++)
                        ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
                ASSERT_TRUE(env->fake.held);
                ASSERT_TRUE(env->server.n_agent_waiting == AGENT_WAITING_MAX);
                ASSERT_TRUE(env->server.n_agent_refused == 8);
                ASSERT_TRUE(sd_bus_reply_method_return(env->fake.held, "ba{sv}", 1, 0) >= 0);
                env->fake.held = sd_bus_message_unref(env->fake.held);
                for (unsigned i = 0; i < 200 && env->server.n_agent_waiting > 0; i++)
                        ASSERT_TRUE(sd_event_run(env->event, 10 * USEC_PER_MSEC) >= 0);
                ASSERT_TRUE(env->server.n_agent_waiting == 0);
                for (size_t i = 0; i < ELEMENTSOF(cs); i++) {
                        char buf[16] = {};
                        ssize_t n = read(cs[i], buf, sizeof(buf) - 1);

                        if (n > 0) {
                                /* no counts in the reply: 0 of unlimited */
                                ASSERT_STREQ(buf, "ready up 100%\n");
                                answered++;
                        } else
                                closed++;
                        safe_close(cs[i]);
                }
                ASSERT_TRUE(answered == AGENT_WAITING_MAX && closed == 8);
        }
        fake_reset(&env->fake);
        server_free_agents(&env->server);
}

/* The session manager died with a call: the bus says NoReply on an open connection, long before
 * the call's own timeout. The client hears it may retry; a NoReply that came once the timeout may
 * have fired is the timeout, whatever it says. */
static void test_recipient_gone(Env *env) {
        static const struct {
                const char *method, *path, *body;
        } routes[] = {
                { "POST", "/sessions", NULL },
                { "DELETE", "/sessions/" SID, NULL },
                { "POST", "/exec", EXEC_BODY },
                { "POST", "/files/list", SESSION_BODY(SID) },
                { "POST", "/files/reset-inputs", SESSION_BODY(SID) },
        };

        for (size_t i = 0; i < ELEMENTSOF(routes); i++)
                for (unsigned late = 0; late < 2; late++) {
                        HttpRequest *req;

                        fake_reset(&env->fake);
                        env->fake.mode = FAKE_ERROR;
                        env->fake.error_name = SD_BUS_ERROR_NO_REPLY;
                        req = request(env, routes[i].method, routes[i].path, routes[i].body);
                        /* The request's age stands for the call's: older than any of its timeouts. */
                        if (late)
                                req->start_usec -= 24 * 3600 * USEC_PER_SEC;
                        dispatch_and_wait(env, req);
                        if (late) {
                                check_response(req, 500, DETAIL("session manager did not answer"));
                                ASSERT_TRUE(!req->response->retry_after);
                        } else {
                                check_response(req, 503, DETAIL("session manager restarted, retry"));
                                ASSERT_STREQ(req->response->retry_after, "1");
                        }
                        http_request_free(req);
                }
        fake_reset(&env->fake);
}

/* ---- a create's answer through libmicrohttpd: did it reach the client? ---- */

typedef struct Live {
        Server *server;
        Fake fake;
        struct sockaddr_in address;
} Live;

static void live_setup(Live *l) {
        Config config = test_config;
        sd_bus *client = NULL;
        socklen_t len = sizeof(l->address);
        int fd;

        *l = (Live) { .fake.hangup = -EBADF };
        ASSERT_TRUE(server_new(&config, &l->server) == 0);
        ASSERT_TRUE(server_add_api(l->server, &http_sidecar_api) == 0);
        ASSERT_TRUE(server_add_api(l->server, &http_dify_api) == 0);
        fake_manager_connect(l->server->event, fake_vtable, &l->fake, &l->fake.bus, &client);
        l->server->bus = client;

        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        l->address = (struct sockaddr_in) { .sin_family = AF_INET,
                                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_TRUE(bind(fd, (struct sockaddr *) &l->address, sizeof(l->address)) == 0);
        ASSERT_TRUE(listen(fd, 16) == 0);
        ASSERT_TRUE(getsockname(fd, (struct sockaddr *) &l->address, &len) == 0);
        ASSERT_TRUE(server_add_listen_fd(l->server, fd, "test") == 0);
}

static void live_done(Live *l) {
        fake_reset(&l->fake);
        l->fake.held = sd_bus_message_unref(l->fake.held);
        l->fake.bus = sd_bus_flush_close_unref(l->fake.bus);
        l->server = server_free(l->server);
}

/* Runs the loop, one event at a time, until 'done' or the time is up. */
static void live_run_until(Live *l, bool (*done)(Live *l, int c), int c) {
        for (unsigned i = 0; i < 5000 && !done(l, c); i++)
                ASSERT_TRUE(sd_event_run(l->server->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(done(l, c));
}

static bool live_idle(Live *l, int c) {
        return l->server->n_requests == 0;
}

static bool live_held(Live *l, int c) {
        return l->fake.held;
}

/* The gateway has the manager's answer ready, not yet handed to libmicrohttpd. */
static bool live_answer_ready(Live *l, int c) {
        return l->server->requests && l->server->requests->response;
}

static bool live_client_readable(Live *l, int c) {
        struct pollfd p = { .fd = c, .events = POLLIN };
        return poll(&p, 1, 0) > 0 && l->server->n_requests == 0;
}

/* A client that sends a create and keeps its connection open. */
static int live_create(Live *l, const char *extra_header) {
        _cleanup_free_ char *text = NULL;
        int c;

        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(c >= 0);
        ASSERT_TRUE(connect(c, (struct sockaddr *) &l->address, sizeof(l->address)) == 0);
        ASSERT_TRUE(asprintf(&text, "POST /sessions HTTP/1.1\r\nHost: test\r\n%sContent-Length: 0\r\n\r\n",
                             extra_header) > 0);
        ASSERT_TRUE(write_all(c, text, strlen(text)) == 0);
        return c;
}

/* "The client got its answer" (http_connection_answer_delivered()): libmicrohttpd wrote all of it,
 * and the client neither reset the connection nor left without taking it. Only then does the
 * manager get the byte that makes the session the client's. */
static void test_create_delivery(void) {
        char buf[512];
        ssize_t n;
        Live l;
        int c;

        (void) signal(SIGPIPE, SIG_IGN);
        live_setup(&l);

        /* Delivered: the byte, then the pipe's end; the client reads its session. */
        for (unsigned pass = 0; pass < 2; pass++) {
                fake_reset(&l.fake);
                c = live_create(&l, pass == 0 ? "" : "Connection: close\r\n");
                live_run_until(&l, live_client_readable, c);
                n = read(c, buf, sizeof(buf) - 1);
                ASSERT_TRUE(n > 0);
                buf[n] = 0;
                ASSERT_TRUE(strstr(buf, "HTTP/1.1 200 OK\r\n") == buf && strstr(buf, CREATED));
                ASSERT_EQ(fake_hangup_read(&l.fake), 1);
                safe_close(c);
        }

        /* The client leaves just as the answer is ready (the gateway saw nothing of it before):
         * libmicrohttpd's write meets a closed socket, and the manager gets no byte. */
        for (unsigned pass = 0; pass < 2; pass++) {
                fake_reset(&l.fake);
                l.fake.mode = FAKE_HOLD;
                c = live_create(&l, "");
                live_run_until(&l, live_held, -1);
                ASSERT_TRUE(sd_bus_reply_method_return(l.fake.held, "s", SID) >= 0);
                l.fake.held = sd_bus_message_unref(l.fake.held);
                live_run_until(&l, live_answer_ready, -1);
                if (pass == 1)
                        /* A reset rather than an orderly close. */
                        ASSERT_TRUE(setsockopt(c, SOL_SOCKET, SO_LINGER,
                                               &(struct linger) { .l_onoff = 1, .l_linger = 0 },
                                               sizeof(struct linger)) == 0);
                safe_close(c);
                live_run_until(&l, live_idle, -1);
                ASSERT_EQ(fake_hangup_read(&l.fake), 0);
        }

        /* A failed create has nothing to confirm. */
        fake_reset(&l.fake);
        l.fake.mode = FAKE_ERROR;
        l.fake.error_name = BUS_ERROR_LIMIT_EXCEEDED;
        c = live_create(&l, "");
        live_run_until(&l, live_client_readable, c);
        n = read(c, buf, sizeof(buf) - 1);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        ASSERT_TRUE(strstr(buf, "HTTP/1.1 429 ") == buf);
        ASSERT_EQ(fake_hangup_read(&l.fake), 0);
        safe_close(c);

        live_done(&l);
}

int main(void) {
        Env env;

        env_setup(&env);
        test_health(&env);
        test_sessions(&env);
        test_exec(&env);
        test_files(&env);
        test_client_gone(&env);
        test_hangup_pipe(&env);
        test_orphan(&env);
        test_abandoned_create(&env);
        test_recipient_gone(&env);
        test_node_tag(&env);
        test_agent_socket(&env);
        env_done(&env);

        RUN(test_agent_line);
        RUN(test_manager_gone);
        RUN(test_create_delivery);

        return 0;
}
