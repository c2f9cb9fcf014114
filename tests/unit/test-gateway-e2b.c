/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of the E2B API's credentials: the key's e2b_ spelling, the sandbox tokens and which
 * headers open what. */
#include <string.h>

#include "connect-rpc.h"
#include "e2b-token.h"
#include "exec-command.h"
#include "gateway-server.h"
#include "macro.h"
#include "json-writer.h"
#include "multipart.h"
#include "tests.h"

#define ID_A "0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210"

static void test_key(void) {
        Config config = {};
        _cleanup_(server_freep) Server *s = NULL;
        HttpRequestHeaders h = {};

        ASSERT_TRUE(server_new(&config, &s) == 0);
        ASSERT_TRUE(server_set_api_key(s, "k-1/") == 0);
        ASSERT_STREQ(s->e2b_api_key, "e2b_6b2d312f");
        ASSERT_EQ(s->e2b_api_key_size, strlen("e2b_6b2d312f"));

        h = (HttpRequestHeaders) { .n_api_key = 1, .api_key = "k-1/", .api_key_size = 4 };
        ASSERT_TRUE(e2b_key_matches(s, &h));
        h = (HttpRequestHeaders) { .n_api_key = 1, .api_key = "e2b_6b2d312f", .api_key_size = 12 };
        ASSERT_TRUE(e2b_key_matches(s, &h));
        /* Upper-case hex is another key; so is a prefix, a repeated header, none. */
        h = (HttpRequestHeaders) { .n_api_key = 1, .api_key = "e2b_6B2D312F", .api_key_size = 12 };
        ASSERT_TRUE(!e2b_key_matches(s, &h));
        h = (HttpRequestHeaders) { .n_api_key = 1, .api_key = "e2b_6b2d31", .api_key_size = 10 };
        ASSERT_TRUE(!e2b_key_matches(s, &h));
        h = (HttpRequestHeaders) { .n_api_key = 2, .api_key = "k-1/", .api_key_size = 4 };
        ASSERT_TRUE(!e2b_key_matches(s, &h));
        h = (HttpRequestHeaders) {};
        ASSERT_TRUE(!e2b_key_matches(s, &h));
}

static void test_tokens(void) {
        Config config = {};
        _cleanup_(server_freep) Server *s = NULL;
        char envd[E2B_TOKEN_LEN + 1], traffic[E2B_TOKEN_LEN + 1], other[E2B_TOKEN_LEN + 1],
                again[E2B_TOKEN_LEN + 1];
        HttpRequestHeaders h;

        ASSERT_TRUE(server_new(&config, &s) == 0);
        ASSERT_TRUE(server_set_api_key(s, "secret") == 0);
        ASSERT_TRUE(e2b_token(s, E2B_TOKEN_ENVD, ID_A, envd) == 0);
        ASSERT_TRUE(e2b_token(s, E2B_TOKEN_TRAFFIC, ID_A, traffic) == 0);
        ASSERT_TRUE(e2b_token(s, E2B_TOKEN_ENVD, ID_B, other) == 0);
        ASSERT_EQ(strlen(envd), E2B_TOKEN_LEN);
        ASSERT_TRUE(strspn(envd, "0123456789abcdef") == E2B_TOKEN_LEN);
        /* One per kind and per sandbox. */
        ASSERT_TRUE(!streq(envd, traffic) && !streq(envd, other));

        /* Another key, other tokens: changing the key revokes them all. */
        ASSERT_TRUE(server_set_api_key(s, "secret2") == 0);
        ASSERT_TRUE(e2b_token(s, E2B_TOKEN_ENVD, ID_A, again) == 0);
        ASSERT_TRUE(!streq(envd, again));
        ASSERT_TRUE(server_set_api_key(s, "secret") == 0);

        h = (HttpRequestHeaders) { .n_e2b_sandbox_id = 1,
                                   .e2b_sandbox_id = ID_A,
                                   .e2b_sandbox_id_size = 32,
                                   .n_access_token = 1,
                                   .access_token = envd,
                                   .access_token_size = 64 };
        ASSERT_TRUE(e2b_token_matches(s, &h));
        /* The traffic token alone opens it too; each kind only in its own header. */
        h.n_access_token = 0, h.access_token = NULL;
        h.n_traffic_token = 1, h.traffic_token = traffic, h.traffic_token_size = 64;
        ASSERT_TRUE(e2b_token_matches(s, &h));
        h.traffic_token = envd;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        /* Both sent: both must be right. */
        h.traffic_token = traffic;
        h.n_access_token = 1, h.access_token = other, h.access_token_size = 64;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        h.access_token = envd;
        ASSERT_TRUE(e2b_token_matches(s, &h));
        /* Another sandbox's token, the sandbox's id cut or repeated, no token at all. */
        h.e2b_sandbox_id = ID_B;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        h.e2b_sandbox_id = ID_A, h.e2b_sandbox_id_size = 31;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        h.e2b_sandbox_id_size = 32, h.n_e2b_sandbox_id = 2;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        h.n_e2b_sandbox_id = 1, h.n_access_token = 0, h.n_traffic_token = 0;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
        /* The API key is no token. */
        h.n_access_token = 1, h.access_token = "secret", h.access_token_size = 6;
        ASSERT_TRUE(!e2b_token_matches(s, &h));
}

static int parse(const char *boundary, const char *body, MultipartForm *f) {
        return multipart_parse(boundary, body, strlen(body), f);
}

static void test_multipart(void) {
        _cleanup_(multipart_form_done) MultipartForm f = {};
        char *b = NULL;

        ASSERT_TRUE(multipart_boundary("multipart/form-data; boundary=----x1", &b) == 0);
        ASSERT_STREQ(b, "----x1");
        free(b);
        ASSERT_TRUE(multipart_boundary("multipart/form-data; charset=utf-8; boundary=\"a b\"", &b) == 0);
        ASSERT_STREQ(b, "a b");
        free(b);
        ASSERT_EQ(multipart_boundary("application/json; boundary=x", &b), -EINVAL);
        ASSERT_EQ(multipart_boundary("multipart/form-data", &b), -EINVAL);
        ASSERT_EQ(multipart_boundary("multipart/form-data; xboundary=x", &b), -EINVAL);
        /* Inside another parameter's quoted value it is no boundary; twice is ambiguous. */
        ASSERT_TRUE(multipart_boundary("multipart/form-data; x=\"a; boundary=evil\"; boundary=good", &b) ==
                    0);
        ASSERT_STREQ(b, "good");
        free(b);
        ASSERT_EQ(multipart_boundary("multipart/form-data; x=\"; boundary=evil\"", &b), -EINVAL);
        ASSERT_EQ(multipart_boundary("multipart/form-data; boundary=a; boundary=b", &b), -EINVAL);
        ASSERT_EQ(multipart_boundary("multipart/form-databoundary=a", &b), -EINVAL);

        /* Two files, a directory in a filename kept, the data as sent (CRLF inside included). */
        ASSERT_TRUE(
                parse("B",
                      "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x/1.txt\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\none\r\ntwo\r\n"
                      "--B\r\ncontent-disposition: form-data; name=file; filename=\"/tmp/2.txt\"\r\n\r\n\r\n"
                      "--B--\r\n",
                      &f) == 0);
        ASSERT_EQ(f.n, 2U);
        ASSERT_STREQ(f.parts[0].name, "file");
        ASSERT_STREQ(f.parts[0].filename, "x/1.txt");
        ASSERT_EQ(f.parts[0].size, strlen("one\r\ntwo"));
        ASSERT_TRUE(memcmp(f.parts[0].data, "one\r\ntwo", f.parts[0].size) == 0);
        ASSERT_STREQ(f.parts[1].filename, "/tmp/2.txt");
        ASSERT_EQ(f.parts[1].size, 0U);
        multipart_form_done(&f);

        /* Not well formed: no closing delimiter, no disposition, a parameter twice, a control
         * character in a name, the wrong first boundary. */
        ASSERT_EQ(parse("B", "--B\r\nContent-Disposition: form-data; name=file\r\n\r\ndata", &f), -EBADMSG);
        multipart_form_done(&f);
        ASSERT_EQ(parse("B", "--B\r\nX: y\r\n\r\ndata\r\n--B--", &f), -EBADMSG);
        multipart_form_done(&f);
        ASSERT_EQ(parse("B", "--B\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\nd\r\n--B--", &f),
                  -EBADMSG);
        multipart_form_done(&f);
        ASSERT_EQ(parse("B", "--B\r\nContent-Disposition: form-data; name=\"a\tb\"\r\n\r\nd\r\n--B--", &f),
                  -EBADMSG);
        multipart_form_done(&f);
        ASSERT_EQ(parse("B", "--C\r\nContent-Disposition: form-data; name=a\r\n\r\nd\r\n--B--", &f),
                  -EBADMSG);
        multipart_form_done(&f);
        /* A boundary inside the data is the part's end only after CRLF. */
        ASSERT_TRUE(parse("B", "--B\r\nContent-Disposition: form-data; name=a\r\n\r\nx--By\r\n--B--", &f) ==
                    0);
        ASSERT_EQ(f.parts[0].size, strlen("x--By"));
}

#define CMD(s) s, sizeof(s) - 1

/* The packed command (exec-command.h): what PID 1 accepts, and every way it is not one. */
static void test_command_format(void) {
        ExecCommand c = {};

        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0/tmp\0"
                                                            "2\0/bin/sh\0-c\0A=1\0B=x=y\0"),
                                     &c),
                  0);
        ASSERT_STREQ(c.cwd, "/tmp");
        ASSERT_EQ(c.argc, 2U);
        ASSERT_STREQ(c.argv[0], "/bin/sh");
        ASSERT_STREQ(c.argv[1], "-c");
        ASSERT_TRUE(c.argv[2] == NULL);
        ASSERT_EQ(c.n_env, 2U);
        ASSERT_STREQ(c.env[1], "B=x=y");
        ASSERT_TRUE(c.env[2] == NULL);
        exec_command_done(&c);
        /* An empty argument is one; an empty cwd is the default. */
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "2\0ls\0\0"), &c), 0);
        ASSERT_STREQ(c.argv[1], "");
        ASSERT_EQ(c.n_env, 0U);
        exec_command_done(&c);
        /* Refused: another magic, argc 0, leading zero, fewer arguments than counted, an empty
         * program, an entry without '=' or with an empty name, no final NUL, too many arguments. */
        ASSERT_EQ(exec_command_parse(CMD("scopebox-command-2\0\0" "1\0ls\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "0\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "01\0ls\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "3\0ls\0-l\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "1\0\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "1\0ls\0NOEQUALS\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "1\0ls\0=v\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "1\0ls"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(EXEC_COMMAND_MAGIC "\0\0" "4097\0ls\0"), &c), -EBADMSG);
        ASSERT_EQ(exec_command_parse(CMD(""), &c), -EBADMSG);
        ASSERT_TRUE(!exec_command_env_name_ok("A=B", 3));
        ASSERT_TRUE(exec_command_env_name_ok("A_1", 3));
}

/* Connect's envelopes, codes and the Basic user. */
static void test_connect(void) {
        _cleanup_(json_writer_done) JsonWriter w = {};
        const char *msg;
        char user[16];
        size_t n;

        ASSERT_EQ(connect_envelope_append(&w, 0, "{}", 2), 0);
        ASSERT_EQ(w.buf.len, 7U);
        ASSERT_EQ(memcmp(w.buf.s, "\0\0\0\0\2{}", 7), 0);
        ASSERT_EQ(connect_envelope_unwrap(w.buf.s, w.buf.len, &msg, &n), 0);
        ASSERT_EQ(n, 2U);
        ASSERT_EQ(memcmp(msg, "{}", 2), 0);
        /* A length that is not the body's, a compressed message, a short header. */
        ASSERT_EQ(connect_envelope_unwrap(w.buf.s, w.buf.len - 1, &msg, &n), -EBADMSG);
        ASSERT_EQ(connect_envelope_unwrap("\1\0\0\0\2{}", 7, &msg, &n), -EPROTONOSUPPORT);
        ASSERT_EQ(connect_envelope_unwrap("\0\0\0", 3, &msg, &n), -EBADMSG);
        json_writer_done(&w);
        ASSERT_EQ(connect_end_stream_append(&w, "not_found", "no \"such\""), 0);
        ASSERT_EQ((uint8_t) w.buf.s[0], CONNECT_FLAG_END_STREAM);
        ASSERT_EQ(memcmp(w.buf.s + 5, "{\"error\":{\"code\":\"not_found\",\"message\":\"no \\\"such\\\"\"}}",
                         w.buf.len - 5), 0);
        ASSERT_EQ(connect_code_http_status("not_found"), 404U);
        ASSERT_EQ(connect_code_http_status("unauthenticated"), 401U);
        ASSERT_EQ(connect_code_http_status("no_such_code"), 500U);
        /* base64("user:") and base64("root:x"); no colon, not Basic, a NUL. */
        ASSERT_EQ(connect_basic_user(CMD("Basic dXNlcjo="), user, sizeof(user)), 0);
        ASSERT_STREQ(user, "user");
        ASSERT_EQ(connect_basic_user(CMD("basic cm9vdDp4"), user, sizeof(user)), 0);
        ASSERT_STREQ(user, "root");
        ASSERT_EQ(connect_basic_user(CMD("Basic dXNlcg=="), user, sizeof(user)), -EINVAL);
        ASSERT_EQ(connect_basic_user(CMD("Bearer dXNlcjo="), user, sizeof(user)), -EINVAL);
        ASSERT_EQ(connect_basic_user(CMD("Basic dQB1Og=="), user, sizeof(user)), -EINVAL);
}

int main(void) {
        RUN(test_command_format);
        RUN(test_connect);
        RUN(test_key);
        RUN(test_multipart);
        RUN(test_tokens);
        return 0;
}
