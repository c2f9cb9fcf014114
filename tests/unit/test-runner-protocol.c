/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The runner protocol's declarations (runner-protocol.c) and the engine that builds and parses from
 * them (runner-schema.c): every declared message is walked member by member — a message made of
 * valid values parses; without a mandatory member, with a member of another type, with a number
 * just outside its range, a string too long or holding a NUL, it is refused and the member named.
 * Then the builders round-trip, and a builder refuses to send what the declaration forbids. */
#include <errno.h>
#include <string.h>

#include "json-util.h"
#include "runner-protocol.h"
#include "tests.h"

static const SchemaMessage *const all_messages[] = {
        &runner_init_request,         &runner_exec_request,        &runner_cancel_request,
        &runner_write_request,        &runner_read_request,        &runner_archive_request,
        &runner_restore_request,      &runner_ping_request,        &runner_list_request,
        &runner_reset_inputs_request, &runner_reset_kernel_request, &runner_init_reply,
        &runner_ping_reply,           &runner_archive_reply,       &runner_exec_result,
        &runner_ok_reply,             &runner_error_reply,
};

static bool is_number(SchemaKind k) {
        return k == SCHEMA_U64 || k == SCHEMA_I64 || k == SCHEMA_INT || k == SCHEMA_U32;
}

/* The range the engine must enforce for a number member (as runner-schema.c documents it). */
static void number_range(const SchemaField *f, int64_t *min, int64_t *max) {
        *min = f->kind == SCHEMA_I64 ? INT64_MIN : f->kind == SCHEMA_INT ? INT32_MIN : 0;
        *max = f->kind == SCHEMA_INT ? INT32_MAX : f->kind == SCHEMA_U32 ? UINT32_MAX : INT64_MAX;
        if (f->min != 0 || f->max != 0) {
                *min = f->min > *min ? f->min : *min;
                *max = f->max < *max ? f->max : *max;
        }
}

static json_object *valid_object(const SchemaMessage *m);

/* A value the declaration accepts. */
static json_object *valid_value(const SchemaField *f) {
        int64_t min, max;

        if (is_number(f->kind)) {
                number_range(f, &min, &max);
                return json_object_new_int64(min > 0 ? min : max < 0 ? max : 0);
        }
        switch (f->kind) {
        case SCHEMA_STRING:
                return json_object_new_string("a");
        case SCHEMA_BOOL:
                return json_object_new_boolean(true);
        case SCHEMA_OBJECT:
                return valid_object(f->sub);
        case SCHEMA_ARRAY: {
                json_object *a = json_object_new_array();
                json_object_array_add(a, valid_object(f->sub));
                return a;
        }
        default:
                abort();
        }
}

static json_object *valid_object(const SchemaMessage *m) {
        json_object *o = json_object_new_object();

        for (const SchemaField *f = m->fields; f->name; f++)
                ASSERT_EQ(json_add(o, f->name, valid_value(f)), 0);
        return o;
}

/* 'o' with member 'name' replaced by 'v' (or removed when v is NULL); must be refused, naming it. */
static void assert_refused(const SchemaMessage *m, const char *name, json_object *v) {
        _cleanup_json_ json_object *o = valid_object(m);
        uint8_t data[4096];
        const char *field = NULL;
        int r;

        ASSERT_TRUE(m->size <= sizeof(data));
        json_object_object_del(o, name);
        if (v)
                ASSERT_EQ(json_add(o, name, v), 0);
        r = schema_parse(m, o, data, &field);
        if (r != -EBADMSG)
                fprintf(stderr, "%s: member %s was taken: %s\n", m->name ?: "reply", name,
                        json_object_to_json_string(o));
        ASSERT_EQ(r, -EBADMSG);
        ASSERT_TRUE(field);
        schema_done(m, data);
}

static void test_every_declared_member(void) {
        for (size_t i = 0; i < ELEMENTSOF(all_messages); i++) {
                const SchemaMessage *m = all_messages[i];
                uint8_t data[4096];
                _cleanup_json_ json_object *o = valid_object(m), *built = NULL;

                /* Valid values parse, and what parsed builds again into the same members. */
                ASSERT_EQ(schema_parse(m, o, data, NULL), 0);
                ASSERT_EQ(schema_build(m, data, &built), 0);
                for (const SchemaField *f = m->fields; f->name; f++) {
                        json_object *a, *b;

                        ASSERT_TRUE(json_object_object_get_ex(o, f->name, &a));
                        ASSERT_TRUE(json_object_object_get_ex(built, f->name, &b));
                        ASSERT_TRUE(json_object_equal(a, b));
                }
                schema_done(m, data);

                for (const SchemaField *f = m->fields; f->name; f++) {
                        int64_t min, max;

                        if (f->flags & SCHEMA_MANDATORY)
                                assert_refused(m, f->name, NULL);
                        /* Another type: a string where there is none, an array where a string is. */
                        assert_refused(m, f->name,
                                       f->kind == SCHEMA_STRING ? json_object_new_array()
                                                                : json_object_new_string("1"));
                        if (is_number(f->kind)) {
                                number_range(f, &min, &max);
                                if (min > INT64_MIN)
                                        assert_refused(m, f->name, json_object_new_int64(min - 1));
                                if (max < INT64_MAX)
                                        assert_refused(m, f->name, json_object_new_int64(max + 1));
                                assert_refused(m, f->name, json_object_new_double(1.5));
                        }
                        if (f->kind == SCHEMA_STRING) {
                                /* A NUL inside is never cut short into another string. */
                                assert_refused(m, f->name, json_object_new_string_len("a\0b", 3));
                                assert_refused(m, f->name, json_object_new_string("\xff\xfe"));
                                if (f->max > 0) {
                                        char *s = malloc(f->max + 2);
                                        memset(s, 'a', f->max + 1);
                                        s[f->max + 1] = 0;
                                        assert_refused(m, f->name, json_object_new_string(s));
                                        free(s);
                                }
                                if (f->flags & SCHEMA_PRINTABLE)
                                        assert_refused(m, f->name, json_object_new_string("a\nb"));
                        }
                }
        }
}

static void test_requests_round_trip(void) {
        _cleanup_json_ json_object *o = NULL;
        RunnerExecRequest in = {
                .exec_id = "0000abcd00000001",
                .timeout_ms = 5000,
                .output_limit = 32768,
                .max_artifact_bytes = 1,
                .max_files = 2,
                .max_total_artifact_bytes = 3,
                .memory_limit = 4,
                .language = "nodejs",
                .no_processes = true,
                .network = false,
                .http_proxy = "http://proxy:3128",
        };
        RunnerExecRequest out;
        json_object *v;

        ASSERT_EQ(runner_request_exec(&in, &o), 0);
        ASSERT_TRUE(runner_request_lookup(o) == &runner_exec_request);
        /* Proxies go only with a network. */
        ASSERT_TRUE(!json_object_object_get_ex(o, "http_proxy", NULL));
        ASSERT_EQ(schema_parse(&runner_exec_request, o, &out, NULL), 0);
        ASSERT_STREQ(out.exec_id, in.exec_id);
        ASSERT_EQ(out.timeout_ms, 5000U);
        ASSERT_EQ(out.max_total_artifact_bytes, 3U);
        ASSERT_STREQ(out.language, "nodejs");
        ASSERT_TRUE(out.no_processes && !out.network && !out.http_proxy);
        json_object_put(TAKE_PTR(o));

        in.network = true;
        ASSERT_EQ(runner_request_exec(&in, &o), 0);
        ASSERT_EQ(schema_parse(&runner_exec_request, o, &out, NULL), 0);
        ASSERT_STREQ(out.http_proxy, "http://proxy:3128");
        ASSERT_TRUE(!out.https_proxy);
        json_object_put(TAKE_PTR(o));

        /* What the declaration forbids is never sent. */
        in.output_limit = 0;
        ASSERT_EQ(runner_request_exec(&in, &o), -ERANGE);
        in.output_limit = RUNNER_OUTPUT_LIMIT_MAX + 1;
        ASSERT_EQ(runner_request_exec(&in, &o), -ERANGE);
        in.output_limit = 1;
        in.http_proxy = "http://a\r\nInjected: 1";
        ASSERT_EQ(runner_request_exec(&in, &o), -ERANGE);
        in.http_proxy = NULL;
        in.exec_id = "0123456789abcdef0123456789abcdef"; /* 32: one too many */
        ASSERT_EQ(runner_request_exec(&in, &o), -ERANGE);
        ASSERT_TRUE(!o);
        ASSERT_EQ(runner_request_init(&(RunnerInitRequest) { .uid = 0, .gid = 1, .workspace_size = 1,
                                                             .tmp_size = 1, .cpus_percent = 1 },
                                      &o),
                  -ERANGE);

        /* Each op is its own declaration; an unknown or missing op is none. */
        ASSERT_EQ(runner_request_archive(true, 10, 20, &o), 0);
        ASSERT_TRUE(runner_request_lookup(o) == &runner_restore_request);
        json_object_put(TAKE_PTR(o));
        ASSERT_EQ(runner_request_plain(&runner_reset_kernel_request, &o), 0);
        ASSERT_TRUE(runner_request_lookup(o) == &runner_reset_kernel_request);
        ASSERT_TRUE(json_object_object_get_ex(o, "op", &v));
        ASSERT_EQ(json_object_object_length(o), 1);
        json_object_put(TAKE_PTR(o));
        /* A request with members of its own is never built empty. */
        ASSERT_EQ(runner_request_plain(&runner_exec_request, &o), -EINVAL);
        ASSERT_EQ(runner_request_plain(&runner_ping_reply, &o), -EINVAL);
        o = json_tokener_parse("{\"op\": \"format-disk\"}");
        ASSERT_TRUE(!runner_request_lookup(o));
        json_object_put(TAKE_PTR(o));
        o = json_tokener_parse("{\"op\": 7}");
        ASSERT_TRUE(!runner_request_lookup(o));
}

static void test_exec_result_round_trip(void) {
        ExecFile files[] = { { "a.txt", 10, 5 }, { "sub/b.png", 15, 0 } };
        ExecBlocked blocked[] = { { "mount", "EPERM", 3 } };
        RunnerExecResult in = {
                .exit_code = 137,
                .signal = 9,
                .cancelled = true,
                .stdout_size = 4,
                .stderr_size = 6,
                .files = files,
                .n_files = 2,
                .files_skipped = 1,
                .exit_reason = "memory",
                .kernel = "ended",
                .resources = { .has_cpu = true, .has_rss = true, .cpu_usec = 7, .max_rss_bytes = 8,
                               .has_processes = true, .processes = 2 },
                .blocked = blocked,
                .n_blocked = 1,
        }, out;
        _cleanup_json_ json_object *o = NULL;
        json_object *v;

        ASSERT_EQ(schema_build(&runner_exec_result, &in, &o), 0);
        ASSERT_TRUE(json_object_object_get_ex(o, "ok", &v) && json_object_get_boolean(v));
        /* Sent as they always were: false flags too, "cancelled" only when true. */
        ASSERT_TRUE(json_object_object_get_ex(o, "timed_out", &v) && !json_object_get_boolean(v));
        ASSERT_EQ(schema_parse(&runner_exec_result, o, &out, NULL), 0);
        ASSERT_EQ(out.exit_code, 137);
        ASSERT_EQ(out.signal, 9);
        ASSERT_TRUE(out.cancelled && !out.timed_out);
        ASSERT_EQ(out.n_files, 2U);
        ASSERT_STREQ(out.files[1].path, "sub/b.png");
        ASSERT_EQ(out.files[1].offset, 15U);
        ASSERT_EQ(out.files_skipped, 1U);
        ASSERT_STREQ(out.exit_reason, "memory");
        ASSERT_TRUE(out.resources.has_cpu && out.resources.has_processes && !out.resources.has_written);
        ASSERT_EQ(out.resources.max_rss_bytes, 8U);
        ASSERT_EQ(out.n_blocked, 1U);
        ASSERT_STREQ(out.blocked[0].name, "mount");
        runner_exec_result_done(&out);
        ASSERT_TRUE(!out.files && !out.blocked);

        /* A hostile file entry deep in the array: the member named is the innermost. */
        json_object *arr, *f;
        const char *field = NULL;
        ASSERT_TRUE(json_object_object_get_ex(o, "files", &arr));
        f = json_object_array_get_idx(arr, 1);
        json_object_object_add(f, "offset", json_object_new_int64(-1));
        ASSERT_EQ(schema_parse(&runner_exec_result, o, &out, &field), -EBADMSG);
        ASSERT_STREQ(field, "offset");
        runner_exec_result_done(&out);

        /* The error reply: "ok": false. */
        json_object_put(TAKE_PTR(o));
        ASSERT_EQ(schema_build(&runner_error_reply,
                               &(RunnerErrorReply) { .error_number = ENOSPC, .error = "full" }, &o),
                  0);
        ASSERT_TRUE(json_object_object_get_ex(o, "ok", &v) && !json_object_get_boolean(v));
        ASSERT_TRUE(json_object_object_get_ex(o, "errno", &v) && json_object_get_int(v) == ENOSPC);
}

int main(void) {
        test_every_declared_member();
        test_requests_round_trip();
        test_exec_result_round_trip();
        return 0;
}
