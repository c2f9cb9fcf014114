/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the storage agent's bus API on a socketpair bus, the real handlers and transfers behind
 * it: every answer a decision depends on travels by name (StorageNotConfigured, StorageRefused,
 * PolicyUnavailable, UnknownToken, ArchiveDamaged, NotFound); the endpoint policy refuses what the
 * kernel routes to this host (a network namespace of the test's own) and fails closed when it cannot
 * ask (netlink sockets refused by a seccomp filter, as the unit's RestrictAddressFamilies= did);
 * QuarantineArchive of local storage moves the archive aside without following links or replacing
 * anything, and neither garbage collection nor a restore ever touches what it moved. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "agent.h"
#include "fake-manager.h"
#include "fs-util.h"
#include "macro.h"
#include "netns.h"
#include "quarantine.h"
#include "string-util.h"
#include "tests.h"

/* What the daemon's main (storage-agent.c) does on each call and job: counting for its STATUS= line
 * and idle exit, neither of which is under test here. */
void agent_touch(Agent *a) {
        a->n_calls++;
}

void agent_job_begin(Agent *a) {
        a->n_jobs++;
}

void agent_job_end(Agent *a) {
        a->n_jobs--;
}

static const sd_bus_vtable no_vtable[] = { SD_BUS_VTABLE_START(0), SD_BUS_VTABLE_END };

typedef struct Test {
        sd_event *event;
        sd_bus *server, *client;
        Agent agent;
        char root[64]; /* SANDBOX_LOCAL_STORAGE_DIR */
} Test;

static void test_setup(Test *t, const char *extra_config) {
        char conf[128], *error = NULL;
        FILE *f;

        *t = (Test) {};
        strcpy(t->root, "/tmp/test-agent-dbus-XXXXXX");
        ASSERT_TRUE(mkdtemp(t->root) != NULL);
        snprintf(conf, sizeof(conf), "%s/scopebox.conf", t->root);
        f = fopen(conf, "we");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "SANDBOX_LOCAL_STORAGE_DIR=%s/storage\nSANDBOX_MAX_ARCHIVE_BYTES=64K\n%s\n", t->root,
                strempty(extra_config));
        ASSERT_EQ(fclose(f), 0);
        snprintf(conf + strlen(t->root), sizeof(conf) - strlen(t->root), "/storage");
        ASSERT_EQ(mkdir(conf, 0700), 0);
        snprintf(conf + strlen(t->root), sizeof(conf) - strlen(t->root), "/scopebox.conf");

        ASSERT_EQ(config_load(&t->agent.config, conf, &error), 0);
        ASSERT_EQ(address_policy_parse(t->agent.config.storage_allowed_networks, &t->agent.address_policy,
                                       NULL),
                  0);
        ASSERT_TRUE(sd_event_new(&t->event) >= 0);
        t->agent.event = t->event;
        ASSERT_EQ(curl_driver_new(t->event, &t->agent.curl), 0);
        fake_manager_connect(t->event, no_vtable, NULL, &t->server, &t->client);
        t->agent.bus = t->server;
        ASSERT_TRUE(agent_add_bus_objects(&t->agent) >= 0);
}

static void test_done(Test *t) {
        char path[96];

        agent_done(&t->agent);
        t->agent.curl = curl_driver_free(t->agent.curl);
        t->client = sd_bus_flush_close_unref(t->client);
        t->server = sd_bus_flush_close_unref(t->server);
        t->event = sd_event_unref(t->event);
        snprintf(path, sizeof(path), "%s", t->root);
        ASSERT_EQ(rm_rf(path), 0);
}

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        sd_bus_message **ret = userdata;
        *ret = sd_bus_message_ref(m);
        return 0;
}

/* Calls 'member' with 'types' and the arguments on the agent, runs the loop until the answer (the
 * agent's transfers and fsync children on the same loop) and returns it. */
static sd_bus_message *call(Test *t, const char *member, const char *types, ...) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        sd_bus_message *reply = NULL;
        va_list ap;

        ASSERT_TRUE(sd_bus_message_new_method_call(t->client, &m, NULL, STORAGE_AGENT_OBJECT_PATH,
                                                   STORAGE_AGENT_INTERFACE, member) >= 0);
        va_start(ap, types);
        ASSERT_TRUE(sd_bus_message_appendv(m, types, ap) >= 0);
        va_end(ap);
        ASSERT_TRUE(sd_bus_call_async(t->client, NULL, m, on_reply, &reply, 60 * USEC_PER_SEC) >= 0);
        for (unsigned i = 0; !reply && i < 6000; i++)
                ASSERT_TRUE(sd_event_run(t->event, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(reply != NULL);
        return reply;
}

/* The answer is the error 'name' with 'message' (NULL: any). */
static void expect_error(sd_bus_message *reply, const char *name, const char *message) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (!e || !sd_bus_error_has_name(e, name) || (message && !streq_ptr(e->message, message)))
                fprintf(stderr, "expected %s '%s', got %s '%s'\n", name, strna(message),
                        e ? e->name : "success", e ? strna(e->message) : "");
        ASSERT_TRUE(e && sd_bus_error_has_name(e, name));
        ASSERT_TRUE(!message || streq_ptr(e->message, message));
        sd_bus_message_unref(reply);
}

static void expect_success(sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                fprintf(stderr, "unexpected error %s '%s'\n", e->name, strna(e->message));
        ASSERT_TRUE(!e);
}

#define LOCAL "{\"provider\":\"local\",\"prefix\":\"p/\"}"
#define S3_AT(endpoint)                                                                                     \
        "{\"provider\":\"s3\",\"prefix\":\"p/\",\"s3_bucket\":\"b\",\"s3_endpoint\":\"" endpoint "\","      \
        "\"s3_access_key\":\"AKID\",\"s3_secret_key\":\"secret\"}"

/* Stages and commits 'data' as the archive of 'stem'. */
static void local_archive(Test *t, const char *stem, const char *data) {
        sd_bus_message *reply = call(t, "BeginArchive", "ss", LOCAL, stem);
        const char *token;
        int fd;
        uint64_t size;

        expect_success(reply);
        ASSERT_TRUE(sd_bus_message_read(reply, "sh", &token, &fd) >= 0);
        ASSERT_EQ(write(fd, data, strlen(data)), (ssize_t) strlen(data));
        _cleanup_free_ char *tok = strdup(token);
        sd_bus_message_unref(reply);
        reply = call(t, "CommitArchive", "st", tok, (uint64_t) strlen(data));
        expect_success(reply);
        ASSERT_TRUE(sd_bus_message_read(reply, "t", &size) >= 0);
        ASSERT_EQ(size, strlen(data));
        sd_bus_message_unref(reply);
}

static void test_storage_block_errors(void) {
        Test t;

        test_setup(&t, "SANDBOX_STORAGE_ALLOWED_ENDPOINTS=http://listed.example:9000");
        /* Not in effect: by name, from every method that takes a block (gc: zeros, the contract). */
        expect_error(call(&t, "BeginArchive", "ss", "{\"provider\":\"s3\"}", "x"),
                     BUS_ERROR_STORAGE_NOT_CONFIGURED, "storage backend not configured");
        expect_error(
                call(&t, "OpenArchive", "ss", "{\"provider\":\"aliyun_oss\",\"oss_bucket\":\"b\"}", "x"),
                BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL);
        expect_error(call(&t, "DeleteObject", "ss", "{\"provider\":\"s3\"}", "k"),
                     BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL);
        expect_error(call(&t, "QuarantineArchive", "ss", "{\"provider\":\"s3\"}", "x"),
                     BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL);
        expect_error(call(&t, "ListQuarantinedArchives", "s", "{\"provider\":\"s3\"}"),
                     BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL);
        /* Not listed by the operator: refused, never tried. */
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://elsewhere.example:9000"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed");
        /* Malformed: still InvalidArgs. */
        expect_error(call(&t, "OpenArchive", "ss", "[", "x"), SD_BUS_ERROR_INVALID_ARGS,
                     "invalid storage config");
        expect_error(call(&t, "OpenArchive", "ss", LOCAL, "../x"), SD_BUS_ERROR_INVALID_ARGS,
                     "invalid archive stem");
        /* A token the agent does not know. */
        expect_error(call(&t, "CommitArchive", "st", "0123456789abcdef0123456789abcdef", (uint64_t) 1),
                     BUS_ERROR_UNKNOWN_TOKEN, "unknown archive token");
        expect_error(call(&t, "AbortArchive", "s", "0123456789abcdef0123456789abcdef"),
                     BUS_ERROR_UNKNOWN_TOKEN, "unknown archive token");
        ASSERT_EQ(t.agent.n_jobs, 0);
        test_done(&t);

        /* Local storage without SANDBOX_LOCAL_STORAGE_DIR: not in effect either. */
        test_setup(&t, "SANDBOX_LOCAL_STORAGE_DIR=");
        expect_error(call(&t, "OpenArchive", "ss", LOCAL, "x"), BUS_ERROR_STORAGE_NOT_CONFIGURED, NULL);
        test_done(&t);
}

/* An internal address, refused before anything else; the documented ranges need no route. */
static void test_refused_endpoint(void) {
        Test t;

        test_setup(&t, NULL);
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://127.0.0.1:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed");
        expect_error(call(&t, "DeleteArchive", "ss", S3_AT("http://10.1.2.3:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, NULL);
        expect_error(call(&t, "QuarantineArchive", "ss", S3_AT("http://[::1]:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, NULL);
        ASSERT_EQ(t.agent.n_jobs, 0);
        test_done(&t);
}

/* Public addresses the kernel routes to this host: a prefix on lo, a local route. */
static void routed_here(void) {
        Test t;

        test_setup(&t, NULL);
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://11.99.0.7:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed");
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://11.98.0.5:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, "storage endpoint not allowed");
        /* No route at all: no refusal, a transport failure that a retry may get past. */
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://8.8.8.8:9"), "x"),
                     BUS_ERROR_STORAGE_FAILED, NULL);
        test_done(&t);

        /* Unless the operator allows the network. */
        test_setup(&t, "SANDBOX_STORAGE_ALLOWED_NETWORKS=11.99.0.0/24");
        /* Then it is connected to: nothing listens, so a transport failure, not a refusal. */
        sd_bus_message *reply = call(&t, "OpenArchive", "ss", S3_AT("http://11.99.0.7:9"), "x");
        expect_error(reply, BUS_ERROR_STORAGE_FAILED,
                     "archive download failed: storage server unreachable (Connection refused)");
        test_done(&t);
}

static void test_endpoint_routed_to_this_host(void) {
        int r = netns_run("ip link set lo up && ip addr add 11.99.0.1/24 dev lo && "
                          "ip route add local 11.98.0.0/24 dev lo",
                          routed_here);
        if (r == NETNS_UNAVAILABLE) {
                printf("# SKIP test_endpoint_routed_to_this_host: no network namespace to be had\n");
                return;
        }
        ASSERT_EQ(r, 0);
}

/* The unit as it was (RestrictAddressFamilies= without AF_NETLINK): the route lookup cannot be made,
 * and nothing is connected to. */
static void without_netlink(void) {
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        Test t;

        ASSERT_TRUE(ctx != NULL);
        ASSERT_EQ(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                   SCMP_A0(SCMP_CMP_EQ, AF_NETLINK)),
                  0);
        ASSERT_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        ASSERT_EQ(seccomp_load(ctx), 0);
        seccomp_release(ctx);

        test_setup(&t, NULL);
        /* 11.99.0.7 is on lo here: without the lookup, it would have been taken for remote. */
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://11.99.0.7:9"), "x"),
                     BUS_ERROR_POLICY_UNAVAILABLE, STORAGE_POLICY_UNAVAILABLE);
        expect_error(call(&t, "DeleteObject", "ss", S3_AT("http://11.99.0.7:9"), "k"),
                     BUS_ERROR_POLICY_UNAVAILABLE, NULL);
        /* Never the zeros of a refused block. */
        expect_error(call(&t, "CollectGarbage", "sx", S3_AT("http://11.99.0.7:9"), (int64_t) 60),
                     BUS_ERROR_POLICY_UNAVAILABLE, NULL);
        /* Internal addresses and allowed networks need no lookup: judged as before. */
        expect_error(call(&t, "OpenArchive", "ss", S3_AT("http://127.0.0.1:9"), "x"),
                     BUS_ERROR_STORAGE_REFUSED, NULL);
        test_done(&t);
}

static void test_policy_unavailable(void) {
        int r = netns_run("ip link set lo up && ip addr add 11.99.0.1/24 dev lo", without_netlink);
        if (r == NETNS_UNAVAILABLE) {
                printf("# SKIP test_policy_unavailable: no network namespace to be had\n");
                return;
        }
        ASSERT_EQ(r, 0);
}

static char *path_in(Test *t, const char *rel) {
        char *p;
        ASSERT_TRUE(asprintf(&p, "%s/storage/%s", t->root, rel) > 0);
        return p;
}

static void test_local_quarantine(void) {
        _cleanup_free_ char *archive = NULL, *target_path = NULL, *aged = NULL, *target = NULL;
        const char *answer;
        Test t;
        struct stat st;
        char buf[64];
        int fd, truncated;

        test_setup(&t, NULL);
        local_archive(&t, "conv", "damaged bytes");
        time_t before = time(NULL);
        sd_bus_message *reply = call(&t, "QuarantineArchive", "ss", LOCAL, "conv");
        time_t after = time(NULL);
        expect_success(reply);
        ASSERT_TRUE(sd_bus_message_read(reply, "s", &answer) >= 0);
        target = strdup(answer);
        ASSERT_TRUE(target != NULL);
        int64_t when;
        ASSERT_TRUE(quarantine_key_parse(target, &when, NULL));
        ASSERT_TRUE(startswith(target, "p/workspaces/conv.tgz.damaged-"));
        ASSERT_TRUE(when >= before && when <= after);
        target_path = path_in(&t, target);
        archive = path_in(&t, "p/workspaces/conv.tgz");
        sd_bus_message_unref(reply);

        /* Moved, byte for byte; the stem names no archive now. */
        ASSERT_TRUE(lstat(archive, &st) < 0 && errno == ENOENT);
        fd = open(target_path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(read(fd, buf, sizeof(buf)), (ssize_t) strlen("damaged bytes"));
        safe_close(fd);
        reply = call(&t, "OpenArchive", "ss", LOCAL, "conv");
        expect_success(reply);
        int found;
        ASSERT_TRUE(sd_bus_message_read(reply, "bh", &found, &fd) >= 0);
        ASSERT_TRUE(!found);
        sd_bus_message_unref(reply);

        /* Listed. */
        reply = call(&t, "ListQuarantinedArchives", "s", LOCAL);
        expect_success(reply);
        const char *key, *stem;
        uint64_t size, usec;
        ASSERT_TRUE(sd_bus_message_enter_container(reply, 'a', "(sstt)") > 0);
        ASSERT_TRUE(sd_bus_message_read(reply, "(sstt)", &key, &stem, &size, &usec) > 0);
        ASSERT_STREQ(key, target);
        ASSERT_STREQ(stem, "conv");
        ASSERT_EQ(size, strlen("damaged bytes"));
        ASSERT_EQ(usec, (uint64_t) when * USEC_PER_SEC);
        ASSERT_EQ(sd_bus_message_read(reply, "(sstt)", &key, &stem, &size, &usec), 0);
        ASSERT_TRUE(sd_bus_message_exit_container(reply) >= 0);
        ASSERT_TRUE(sd_bus_message_read(reply, "b", &truncated) >= 0);
        ASSERT_TRUE(!truncated);
        sd_bus_message_unref(reply);

        /* Nothing more to move. */
        expect_error(call(&t, "QuarantineArchive", "ss", LOCAL, "conv"), BUS_ERROR_NOT_FOUND,
                     "no stored archive to quarantine");

        /* Never collected, however old: not even by a sweep of a mineru/ prefix, which takes anything. */
        ASSERT_TRUE(asprintf(&aged, "touch -d '30 days ago' '%s'", target_path) > 0);
        ASSERT_EQ(system(aged), 0);
        reply = call(&t, "CollectGarbage", "sx", "{\"provider\":\"local\",\"prefix\":\"\"}",
                     (int64_t) 86400);
        expect_success(reply);
        uint64_t deleted, scanned, freed;
        ASSERT_TRUE(sd_bus_message_read(reply, "ttt", &deleted, &scanned, &freed) >= 0);
        ASSERT_EQ(deleted, 0);
        sd_bus_message_unref(reply);
        ASSERT_EQ(lstat(target_path, &st), 0);
        test_done(&t);
}

/* The archive's name is a symlink (planted, or a leftover): not an archive, and never followed. */
static void test_local_quarantine_never_follows(void) {
        _cleanup_free_ char *archive = NULL, *outside = NULL, *dir = NULL;
        struct stat st;
        Test t;

        test_setup(&t, NULL);
        local_archive(&t, "link", "x");
        archive = path_in(&t, "p/workspaces/link.tgz");
        outside = path_in(&t, "outside");
        ASSERT_EQ(rename(archive, outside), 0);
        ASSERT_EQ(symlink(outside, archive), 0);
        expect_error(call(&t, "QuarantineArchive", "ss", LOCAL, "link"), BUS_ERROR_NOT_FOUND, NULL);
        ASSERT_EQ(lstat(archive, &st), 0);
        ASSERT_TRUE(S_ISLNK(st.st_mode));
        ASSERT_EQ(lstat(outside, &st), 0);
        ASSERT_TRUE(S_ISREG(st.st_mode));
        ASSERT_EQ(unlink(archive), 0);

        /* A directory of the key's that is a symlink is not followed either. */
        local_archive(&t, "d", "y");
        dir = path_in(&t, "p");
        free(archive);
        ASSERT_TRUE(asprintf(&archive, "%s/storage/moved", t.root) > 0);
        ASSERT_EQ(rename(dir, archive), 0);
        ASSERT_EQ(symlink(archive, dir), 0);
        expect_error(call(&t, "QuarantineArchive", "ss", LOCAL, "d"), BUS_ERROR_NOT_FOUND, NULL);
        test_done(&t);
}

/* Two quarantines of one key within its one-second resolution: the second finds the name taken and
 * replaces nothing. */
static void test_local_quarantine_never_replaces(void) {
        _cleanup_free_ char *archive = NULL;
        Test t;

        test_setup(&t, NULL);
        local_archive(&t, "twice", "first");
        archive = path_in(&t, "p/workspaces/twice.tgz");
        /* Names for this second and the next few are taken already. */
        time_t now = time(NULL);
        for (int i = 0; i < 5; i++) {
                _cleanup_free_ char *key = NULL, *p = NULL;
                ASSERT_EQ(quarantine_key("p/workspaces/twice.tgz", now + i, &key), 0);
                p = path_in(&t, key);
                ASSERT_EQ(netns_write_file(p, "taken"), 0);
        }
        expect_error(call(&t, "QuarantineArchive", "ss", LOCAL, "twice"), BUS_ERROR_STORAGE_FAILED,
                     "quarantine failed: the quarantine key exists");
        /* The archive is where it was, and so is what held the name. */
        sd_bus_message *reply = call(&t, "OpenArchive", "ss", LOCAL, "twice");
        int found, fd;
        char buf[16] = {};
        expect_success(reply);
        ASSERT_TRUE(sd_bus_message_read(reply, "bh", &found, &fd) >= 0);
        ASSERT_TRUE(found);
        ASSERT_EQ(read(fd, buf, sizeof(buf)), 5);
        ASSERT_STREQ(buf, "first");
        sd_bus_message_unref(reply);
        test_done(&t);
}

static void test_local_archive_over_the_bound_is_damaged(void) {
        _cleanup_free_ char *big = NULL;
        Test t;

        test_setup(&t, NULL);
        big = malloc(65 * 1024 + 1);
        ASSERT_TRUE(big != NULL);
        memset(big, 'a', 65 * 1024);
        big[65 * 1024] = 0;
        local_archive(&t, "big", big);
        expect_error(call(&t, "OpenArchive", "ss", LOCAL, "big"), BUS_ERROR_ARCHIVE_DAMAGED,
                     "stored archive is damaged: larger than SANDBOX_MAX_ARCHIVE_BYTES");
        test_done(&t);
}

int main(void) {
        sigset_t ss;

        /* As the daemon has it (daemon_event_new()): local commits fsync in children watched by
         * sd_event_add_child(), which wants SIGCHLD blocked. */
        ASSERT_EQ(sigemptyset(&ss), 0);
        ASSERT_EQ(sigaddset(&ss, SIGCHLD), 0);
        ASSERT_EQ(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        RUN(test_storage_block_errors);
        RUN(test_refused_endpoint);
        RUN(test_endpoint_routed_to_this_host);
        RUN(test_policy_unavailable);
        RUN(test_local_quarantine);
        RUN(test_local_quarantine_never_follows);
        RUN(test_local_quarantine_never_replaces);
        RUN(test_local_archive_over_the_bound_is_damaged);
        return 0;
}
