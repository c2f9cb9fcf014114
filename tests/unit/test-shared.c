/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of src/shared: base64, ids, mime table, parsing, UTF-8, secrets, JSON, config, time,
 * stream frames, lists. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc-util.h"
#include "base64.h"
#include "bus-client.h"
#include "config.h"
#include "daemon-util.h"
#include "id.h"
#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "json-writer.h"
#include "list.h"
#include "mime.h"
#include "parse-util.h"
#include "path-util.h"
#include "signal-util.h"
#include "storage-config.h"
#include "stream-frame.h"
#include "string-util.h"
#include "tests.h"
#include "time-util.h"

static void test_base64_roundtrip(void) {
        static const struct {
                const char *plain, *encoded;
        } vectors[] = { /* RFC 4648 §10 */
                { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
                { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
        };
        for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
                _cleanup_free_ char *e = base64_encode(vectors[i].plain, strlen(vectors[i].plain));
                _cleanup_free_ void *d = NULL;
                size_t n;

                ASSERT_STREQ(e, vectors[i].encoded);
                ASSERT_EQ(base64_decode(vectors[i].encoded, strlen(vectors[i].encoded), &d, &n), 0);
                ASSERT_EQ(n, strlen(vectors[i].plain));
                ASSERT_TRUE(memcmp(d, vectors[i].plain, n) == 0);
        }
}

static void test_base64_strict(void) {
        /* What Python 3.11's base64.b64decode(s, validate=True) answers for each of these. */
        static const struct {
                const char *text, *plain;
        } good[] = {
                { "QR==", "A" }, { "Zh==", "f" }, { "Zm9=", "fo" }, /* non-zero trailing bits */
                { "Zm9v=", "foo" }, { "Zm9v==", "foo" }, { "Zm9v====", "foo" }, /* '=' after a quantum */
                { "QUJD=", "ABC" }, { "QUJDRA==", "ABCD" }, { "QUJ=", "AB" }, { "Zm9vZg==", "foof" },
        };
        static const char *const bad[] = {
                "=", "==", "=m9v",                      /* leading padding */
                "Zg=", "Zg", "QUJDRA", "QUJDRA=", "QUI", /* incorrect padding */
                "Z", "Z===", "QUJDR", "QUJDR=",         /* 4k+1 data characters */
                "Zg===", "Zm8==", "Zg==Zg==", "QUI==",  /* data or '=' after the padding */
                "Zm=v", "Zm9v=Zg==",                    /* discontinuous padding */
                "Zm 9v", "Zm9v\n", " Zm9v", "Zm9v=\n", "Zm9v\r\n", "Zm9-", "Zm9_", "Zm9\x80",
                "data:text/plain;base64,Zm9v",
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                _cleanup_free_ void *d = NULL;
                size_t n, used, size;

                ASSERT_EQ(base64_decode(good[i].text, strlen(good[i].text), &d, &n), 0);
                ASSERT_EQ(n, strlen(good[i].plain));
                ASSERT_TRUE(memcmp(d, good[i].plain, n) == 0);
                ASSERT_EQ(base64_decoded_size(good[i].text, strlen(good[i].text)), n);
                ASSERT_EQ(base64_validate(good[i].text, strlen(good[i].text), &used, &size), 0);
                ASSERT_EQ(size, n);
                ASSERT_EQ(used, (n + 2) / 3 * 4);
                ASSERT_TRUE(n <= base64_decoded_size_max(strlen(good[i].text)));
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                void *d = NULL;
                size_t n;

                ASSERT_EQ(base64_decode(bad[i], strlen(bad[i]), &d, &n), -EINVAL);
                ASSERT_EQ(base64_validate(bad[i], strlen(bad[i]), NULL, NULL), -EINVAL);
        }
        /* A NUL is a bad character, not the end of the text. */
        {
                void *d = NULL;
                size_t n;

                ASSERT_EQ(base64_decode("Zm9v\0AAA", 8, &d, &n), -EINVAL);
                ASSERT_EQ(base64_decode("Zm9v=\0", 6, &d, &n), -EINVAL);
        }
        {
                _cleanup_free_ void *d = NULL;
                size_t n = 1;

                ASSERT_EQ(base64_decode("", 0, &d, &n), 0);
                ASSERT_EQ(n, 0);
        }
        /* Binary round trip of every byte value. */
        unsigned char all[256];
        for (int i = 0; i < 256; i++)
                all[i] = (unsigned char) i;
        _cleanup_free_ char *e = base64_encode(all, sizeof(all));
        _cleanup_free_ void *d = NULL;
        size_t n;
        ASSERT_EQ(base64_decode(e, strlen(e), &d, &n), 0);
        ASSERT_EQ(n, 256);
        ASSERT_TRUE(memcmp(d, all, 256) == 0);
}

static void test_session_id(void) {
        char id[SESSION_ID_LEN + 1], id2[SESSION_ID_LEN + 1];

        ASSERT_EQ(session_id_generate(id), 0);
        ASSERT_TRUE(session_id_is_valid(id));
        ASSERT_EQ(id[12], '4'); /* UUIDv4 version nibble */
        ASSERT_TRUE(strchr("89ab", id[16]) != NULL);
        ASSERT_EQ(session_id_generate(id2), 0);
        ASSERT_TRUE(strcmp(id, id2) != 0);

        ASSERT_TRUE(session_id_is_valid("9fd8b918372d489ab6aa6843611148be"));
        ASSERT_TRUE(!session_id_is_valid("9FD8B918372D489AB6AA6843611148BE"));
        ASSERT_TRUE(!session_id_is_valid("9fd8b918-372d-489a-b6aa-6843611148be"));
        ASSERT_TRUE(!session_id_is_valid("9fd8b918372d489ab6aa6843611148b"));
        ASSERT_TRUE(!session_id_is_valid("9fd8b918372d489ab6aa6843611148bee"));
        ASSERT_TRUE(!session_id_is_valid("../../../../etc/passwd0000000000"));
        ASSERT_TRUE(!session_id_is_valid(""));
        ASSERT_TRUE(!session_id_is_valid(NULL));
}

/* SANDBOX_NODE_ID: ids minted with a tag start with it and are ids like any other. */
static void test_session_id_tagged(void) {
        char id[SESSION_ID_LEN + 1], id2[SESSION_ID_LEN + 1];

        ASSERT_TRUE(node_id_is_valid(""));
        ASSERT_TRUE(node_id_is_valid("0"));
        ASSERT_TRUE(node_id_is_valid("a7"));
        ASSERT_TRUE(node_id_is_valid("0123abcd"));
        ASSERT_TRUE(!node_id_is_valid("0123abcde"));   /* 9 digits */
        ASSERT_TRUE(!node_id_is_valid("A7"));
        ASSERT_TRUE(!node_id_is_valid("g1"));
        ASSERT_TRUE(!node_id_is_valid("a7 "));
        ASSERT_TRUE(!node_id_is_valid("-1"));
        ASSERT_TRUE(!node_id_is_valid(NULL));

        for (unsigned i = 0; i < 64; i++) {
                ASSERT_EQ(session_id_generate_tagged("a7", id), 0);
                ASSERT_TRUE(session_id_is_valid(id));
                ASSERT_TRUE(strncmp(id, "a7", 2) == 0);
                ASSERT_EQ(id[12], '4');
                ASSERT_TRUE(session_id_has_tag(id, "a7"));
                ASSERT_TRUE(!session_id_has_tag(id, "a8"));
                ASSERT_TRUE(!session_id_has_tag(id, id[2] == '0' ? "a71" : "a70"));
                ASSERT_TRUE(session_id_has_tag(id, ""));
                ASSERT_TRUE(session_id_has_tag(id, NULL));
        }
        ASSERT_EQ(session_id_generate_tagged("0123abcd", id), 0);
        ASSERT_TRUE(session_id_is_valid(id) && strncmp(id, "0123abcd", 8) == 0 && id[12] == '4');
        ASSERT_EQ(session_id_generate_tagged("0123abcd", id2), 0);
        ASSERT_TRUE(strcmp(id, id2) != 0); /* the rest is still random */
        ASSERT_EQ(session_id_generate_tagged("", id), 0);
        ASSERT_TRUE(session_id_is_valid(id));
        ASSERT_EQ(session_id_generate_tagged(NULL, id), 0);
        ASSERT_TRUE(session_id_is_valid(id));
        ASSERT_TRUE(session_id_has_tag("9fd8b918372d489ab6aa6843611148be", "9fd8"));
        ASSERT_TRUE(!session_id_has_tag("9fd8b918372d489ab6aa6843611148be", "9fd9"));
}

static void test_mime(void) {
        static const char text[] =
                "# a comment\n"
                "text/x-first  foo bar  # baz\n"
                "text/x-later  bar\r\n"
                "text/csv      CSV\r"
                "image/x-png   png\n"
                "application/x-xz  xz";
        _cleanup_(mime_types_freep) MimeTypes *m = NULL;
        char dir[] = "/tmp/test-mime-XXXXXX", path[64], big[64];
        const char *failed = NULL;
        int fd;

        /* Python's builtin table alone (NULL). */
        ASSERT_STREQ(mime_type_from_name(NULL, "hello.txt"), "text/plain");
        ASSERT_STREQ(mime_type_from_name(NULL, "data.CSV"), "text/csv");
        ASSERT_STREQ(mime_type_from_name(NULL, "data.csv.gz"), "text/csv");
        ASSERT_STREQ(mime_type_from_name(NULL, "data.csv.GZ"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "x.tgz"), "application/x-tar");
        ASSERT_STREQ(mime_type_from_name(NULL, "x.TGZ"), "application/x-tar");
        ASSERT_STREQ(mime_type_from_name(NULL, "x.gz"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "chart.png"), "image/png");
        ASSERT_STREQ(mime_type_from_name(NULL, "out/chart.png"), "image/png");
        ASSERT_STREQ(mime_type_from_name(NULL, "a.b.json"), "application/json");
        ASSERT_STREQ(mime_type_from_name(NULL, "a..json"), "application/json");
        ASSERT_STREQ(mime_type_from_name(NULL, "..json"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "noext"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, ".bashrc"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, ".json"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "x.unknownext"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "a:b.png"), "image/png");
        ASSERT_STREQ(mime_type_from_name(NULL, "a:.png"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(NULL, "DATA:x,y.png"), "text/plain");
        ASSERT_STREQ(mime_type_from_name(NULL, "data:x.png"), "application/octet-stream");
        /* U+212A KELVIN SIGN lowers to "k": ".KSH" is ".ksh", text/plain in the builtin table. */
        ASSERT_STREQ(mime_type_from_name(NULL, "\xe2\x84\xaa.\xe2\x84\xaaSH"), "text/plain");
        ASSERT_STREQ(mime_type_from_name(NULL, NULL), "application/octet-stream");
        ASSERT_TRUE(mime_types_size(NULL) > 100);

        /* A file overlays the builtin table; later definitions win; missing files and directories
         * are skipped; upper-case keys never match. */
        ASSERT_TRUE(mkdtemp(dir));
        ASSERT_TRUE(snprintf(path, sizeof(path), "%s/mime.types", dir) > 0);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write_all(fd, text, strlen(text)), 0);
        ASSERT_EQ(close(fd), 0);
        ASSERT_EQ(mime_types_load((const char *const[]) { "/nonexistent/mime.types", dir, path, NULL }, &m,
                                  &failed), 0);
        ASSERT_TRUE(!failed);
        ASSERT_STREQ(mime_type_from_name(m, "a.foo"), "text/x-first");
        ASSERT_STREQ(mime_type_from_name(m, "a.BAR"), "text/x-later");
        ASSERT_STREQ(mime_type_from_name(m, "a.baz"), "application/octet-stream");
        ASSERT_STREQ(mime_type_from_name(m, "a.csv"), "text/csv");  /* builtin; "CSV" never matches */
        ASSERT_STREQ(mime_type_from_name(m, "a.png"), "image/x-png");
        ASSERT_STREQ(mime_type_from_name(m, "a.png.xz"), "image/x-png");
        ASSERT_STREQ(mime_type_from_name(m, "a.xz"), "application/octet-stream");  /* an encoding */
        ASSERT_STREQ(mime_type_from_name(m, "a.txt"), "text/plain");
        ASSERT_EQ(mime_types_size(m), mime_types_size(NULL) + 4); /* foo bar CSV xz */
        m = mime_types_free(m);

        /* Unreadable in a way Python would fail on too: the caller falls back to the builtins. */
        ASSERT_TRUE(snprintf(big, sizeof(big), "%s/big", dir) > 0);
        fd = open(big, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(ftruncate(fd, MIME_TYPES_FILE_MAX + 1), 0);
        ASSERT_EQ(close(fd), 0);
        ASSERT_EQ(mime_types_load((const char *const[]) { path, big, NULL }, &m, &failed), -EFBIG);
        ASSERT_TRUE(!m);
        ASSERT_STREQ(failed, big);
        ASSERT_EQ(truncate(big, 16), 0);
        failed = NULL;
        ASSERT_EQ(mime_types_load((const char *const[]) { big, NULL }, &m, &failed), -EBADMSG);
        ASSERT_STREQ(failed, big);

        ASSERT_EQ(unlink(big), 0);
        ASSERT_EQ(unlink(path), 0);
        ASSERT_EQ(rmdir(dir), 0);
}

static void test_parse(void) {
        uint64_t u;
        int64_t i;

        ASSERT_EQ(parse_size("512M", &u), 0);
        ASSERT_EQ(u, 512ULL << 20);
        ASSERT_EQ(parse_size("2g", &u), 0);
        ASSERT_EQ(u, 2ULL << 30);
        ASSERT_EQ(parse_size("32768", &u), 0);
        ASSERT_EQ(u, 32768);
        ASSERT_EQ(parse_size("1.5G", &u), -EINVAL);
        ASSERT_EQ(parse_size("-1", &u), -EINVAL);
        ASSERT_EQ(parse_size("99999999999999999999", &u), -ERANGE);
        ASSERT_EQ(parse_size("20000000000T", &u), -ERANGE);
        ASSERT_EQ(parse_cpus("1", &u), 0);
        ASSERT_EQ(u, 100);
        ASSERT_EQ(parse_cpus("0.5", &u), 0);
        ASSERT_EQ(u, 50);
        ASSERT_EQ(parse_cpus("2.25", &u), 0);
        ASSERT_EQ(u, 225);
        ASSERT_EQ(parse_cpus("0", &u), -ERANGE);
        ASSERT_EQ(parse_cpus("x", &u), -EINVAL);
        ASSERT_EQ(parse_boolean("on"), 1);
        ASSERT_EQ(parse_boolean("TRUE"), 1);
        ASSERT_EQ(parse_boolean("0"), 0);
        ASSERT_EQ(parse_boolean("maybe"), -EINVAL);
        ASSERT_EQ(safe_atoi64("-5", &i), 0);
        ASSERT_EQ(i, -5);
        ASSERT_EQ(safe_atoi64("5x", &i), -EINVAL);
        ASSERT_EQ(safe_atoi64("-9223372036854775808", &i), 0);
        ASSERT_EQ(i, INT64_MIN);
        ASSERT_EQ(safe_atoi64("9223372036854775807", &i), 0);
        ASSERT_EQ(i, INT64_MAX);
        ASSERT_EQ(safe_atoi64("-9223372036854775809", &i), -ERANGE);
        ASSERT_EQ(safe_atoi64("9223372036854775808", &i), -ERANGE);
        ASSERT_EQ(safe_atoi64("-", &i), -EINVAL);
        ASSERT_EQ(safe_atoi64("--5", &i), -EINVAL);
        ASSERT_EQ(safe_atoi64("+5", &i), -EINVAL);
        ASSERT_EQ(safe_atoi64(" 5", &i), -EINVAL);
        ASSERT_EQ(safe_atou64("", &u), -EINVAL);
        ASSERT_EQ(safe_atou64("-1", &u), -EINVAL);
        ASSERT_EQ(safe_atou64("18446744073709551615", &u), 0);
        ASSERT_EQ(u, UINT64_MAX);
        ASSERT_EQ(safe_atou64("18446744073709551616", &u), -ERANGE);
        ASSERT_EQ(parse_size("18446744073709551616", &u), -ERANGE);
        ASSERT_EQ(parse_size("16E", &u), -EINVAL);
}

static void test_workspace_path(void) {
        static const struct {
                const char *in, *out;
                int r;
        } cases[] = {
                { "uploads/data.csv", "uploads/data.csv", 0 },
                { "/workspace/uploads/data.csv", "uploads/data.csv", 0 },
                { "/workspace", "", 0 },
                { "/workspace/", "", 0 },
                { ".", "", 0 },
                { "a//b/./c/", "a/b/c", 0 },
                { "a/b/../c", "a/c", 0 },
                { "/workspace/../workspace/x", "x", 0 },
                { "../etc/passwd", NULL, -EXDEV },
                { "uploads/../../etc", NULL, -EXDEV },
                { "/etc/passwd", NULL, -EXDEV },
                { "/workspacex/y", NULL, -EXDEV },
                { "/", NULL, -EXDEV },
                { "/../../workspace/ok", "ok", 0 },
                { "", NULL, -EINVAL },
        };
        char *rel = NULL, longname[300];

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int r = workspace_path_normalize(cases[i].in, &rel);
                if (r != cases[i].r || (r == 0 && !streq(rel, cases[i].out))) {
                        fprintf(stderr, "workspace_path_normalize(\"%s\") = %d \"%s\"\n", cases[i].in, r,
                                r == 0 ? rel : "");
                        abort();
                }
                if (r == 0) {
                        free(rel);
                        rel = NULL;
                }
        }
        memset(longname, 'a', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = 0;
        ASSERT_EQ(workspace_path_normalize(longname, &rel), -ENAMETOOLONG);
}

static void test_storage_config(void) {
        StorageConfig c;
        const char *err;
        json_object *o;
        char *k;

        /* Defaults: local, prefix workspaces/ → the sidecar's doubled archive layout. */
        ASSERT_EQ(json_parse("{}", 2, JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_EQ(c.provider, STORAGE_LOCAL);
        ASSERT_STREQ(c.prefix, "workspaces");
        ASSERT_EQ(storage_archive_key(&c, "conv_6211e497a1db", &k), 0);
        ASSERT_STREQ(k, "workspaces/workspaces/conv_6211e497a1db.tgz");
        free(k);
        ASSERT_EQ(storage_archive_key(&c, "bad/stem", &k), -EINVAL);
        ASSERT_TRUE(!storage_config_effective(&c, NULL));
        ASSERT_TRUE(!storage_config_effective(&c, "/nonexistent/dir"));
        ASSERT_TRUE(storage_config_effective(&c, "/tmp"));
        storage_config_done(&c);

        /* Keys: joined under the prefix; a full key is accepted where allowed; never outside. */
        const char *j =
                "{\"provider\":\"s3\",\"prefix\":\"aivory/\",\"s3_bucket\":\"b\",\"s3_secret_key\":\"s\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_TRUE(storage_config_effective(&c, NULL));
        ASSERT_EQ(storage_full_key(&c, "mineru/document.pdf", false, &k), 0);
        ASSERT_STREQ(k, "aivory/mineru/document.pdf");
        free(k);
        ASSERT_EQ(storage_full_key(&c, "aivory/mineru/document.pdf", true, &k), 0);
        ASSERT_STREQ(k, "aivory/mineru/document.pdf");
        free(k);
        ASSERT_EQ(storage_full_key(&c, "aivory/mineru/document.pdf", false, &k), 0);
        ASSERT_STREQ(k, "aivory/aivory/mineru/document.pdf");
        free(k);
        static const char *const bad[] = { "", "/etc/passwd", "../x", "a/../../b", "a\nb", "a\x01",
                                           "mineru//x.pdf", "mineru/./x.pdf", "mineru/", "./x", "." };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ASSERT_EQ(storage_full_key(&c, bad[i], true, &k), -EINVAL);
        storage_config_done(&c);

        /* OSS needs all four settings to be effective; bad providers and endpoints are refused. */
        j = "{\"provider\":\"aliyun_oss\",\"oss_bucket\":\"b\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_TRUE(!storage_config_effective(&c, NULL));
        storage_config_done(&c);
        static const char *const refused[] = {
                "{\"provider\":\"ftp\"}", "{\"provider\":\"s3\",\"s3_endpoint\":\"file:///etc\"}",
                "{\"prefix\":\"../up\"}", "{\"prefix\":\"/abs\"}", "{\"s3_bucket\":5}",
                /* Regions the signer could not put in its scope, nor the host name. */
                "{\"provider\":\"s3\",\"s3_region\":\"us east-1\"}",
                "{\"provider\":\"s3\",\"s3_region\":\"us-east-1/x\"}",
                "{\"provider\":\"s3\",\"s3_region\":\"eu\\r\\nX-Evil: 1\"}",
                "{\"provider\":\"s3\",\"s3_region\":\"r\u00e9gion\"}",
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                ASSERT_EQ(json_parse(refused[i], strlen(refused[i]), JSON_DEPTH_MAX, &o), 0);
                ASSERT_EQ(storage_config_parse(o, &c, &err), -EINVAL);
                ASSERT_TRUE(err != NULL);
                json_object_put(o);
        }

        /* Regions: A-Z a-z 0-9 - . _, at most STORAGE_REGION_MAX bytes; an empty one is the default. */
        ASSERT_TRUE(storage_region_is_valid("us-east-1") && storage_region_is_valid("cn-north-1"));
        ASSERT_TRUE(storage_region_is_valid("oss-cn-hangzhou.internal") &&
                    storage_region_is_valid("my_region"));
        char region[STORAGE_REGION_MAX + 2] = {};
        memset(region, 'r', STORAGE_REGION_MAX);
        ASSERT_TRUE(storage_region_is_valid(region));
        region[STORAGE_REGION_MAX] = 'r';
        ASSERT_TRUE(!storage_region_is_valid(region) && !storage_region_is_valid(""));
        j = "{\"provider\":\"s3\",\"s3_bucket\":\"b\",\"s3_region\":\"\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_TRUE(c.s3_region == NULL);
        storage_config_done(&c);
        /* Only an s3 block's region is one: another provider's stray member is not looked at. */
        j = "{\"provider\":\"local\",\"s3_region\":\"not a region\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        storage_config_done(&c);

        /* The operator's endpoint allowlist. */
        j = "{\"provider\":\"s3\",\"s3_bucket\":\"b\",\"s3_endpoint\":\"http://MinIO.internal:9000/base/\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_TRUE(storage_endpoint_allowed(&c, NULL));
        ASSERT_TRUE(storage_endpoint_allowed(&c, ""));
        ASSERT_TRUE(storage_endpoint_allowed(&c, "aws, http://minio.internal:9000"));
        ASSERT_TRUE(!storage_endpoint_allowed(&c, "aws"));
        ASSERT_TRUE(!storage_endpoint_allowed(&c, "http://minio.internal"));          /* other port */
        ASSERT_TRUE(!storage_endpoint_allowed(&c, "https://minio.internal:9000"));    /* other scheme */
        ASSERT_TRUE(!storage_endpoint_allowed(&c, "http://minio.internal:9000.evil")); /* other host */
        storage_config_done(&c);
        j = "{\"provider\":\"s3\",\"s3_bucket\":\"b\"}";
        ASSERT_EQ(json_parse(j, strlen(j), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(storage_config_parse(o, &c, &err), 0);
        json_object_put(o);
        ASSERT_TRUE(storage_endpoint_allowed(&c, "aws"));
        ASSERT_TRUE(!storage_endpoint_allowed(&c, "http://127.0.0.1:9000"));
        storage_config_done(&c);

        ASSERT_TRUE(archive_stem_is_valid("conv_example-1"));
        ASSERT_TRUE(!archive_stem_is_valid("api smoke"));
        ASSERT_TRUE(!archive_stem_is_valid(""));
}

static void test_utf8(void) {
        static const struct {
                uint32_t cp;
                const char *utf8;
        } encodings[] = { { 0x41, "A" }, { 0x7f, "\x7f" }, { 0x80, "\xc2\x80" }, { 0x7ff, "\xdf\xbf" },
                          { 0x800, "\xe0\xa0\x80" }, { 0xfffd, "\xef\xbf\xbd" },
                          { 0x10000, "\xf0\x90\x80\x80" }, { 0x10ffff, "\xf4\x8f\xbf\xbf" } };
        size_t n;

        /* Every length's first and last code point, as the validator sees them. */
        for (size_t i = 0; i < ELEMENTSOF(encodings); i++) {
                char out[4];
                size_t l = utf8_encode(encodings[i].cp, out);

                ASSERT_EQ(l, strlen(encodings[i].utf8));
                ASSERT_TRUE(memcmp(out, encodings[i].utf8, l) == 0 && utf8_is_valid_n(out, l));
        }

        ASSERT_TRUE(utf8_is_valid_n("héllo 中文 😀", strlen("héllo 中文 😀")));
        ASSERT_TRUE(!utf8_is_valid_n("\xff", 1));
        ASSERT_TRUE(!utf8_is_valid_n("\xc0\xaf", 2));         /* overlong '/' */
        ASSERT_TRUE(!utf8_is_valid_n("\xed\xa0\x80", 3));     /* surrogate */
        ASSERT_TRUE(!utf8_is_valid_n("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
        ASSERT_TRUE(!utf8_is_valid_n("\xe4\xb8", 2));         /* truncated */

        _cleanup_free_ char *s = utf8_sanitize("a\xffz\xe4\xb8", 5, &n);
        ASSERT_STREQ(s, "a\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd");
        ASSERT_EQ(n, strlen(s));
}

static void test_secret_equal(void) {
        ASSERT_TRUE(secret_equal("Bearer abc", 10, "Bearer abc", 10));
        ASSERT_TRUE(!secret_equal("Bearer abc", 10, "Bearer abd", 10));
        ASSERT_TRUE(!secret_equal("Bearer abc", 10, "Bearer ab", 9));
        ASSERT_TRUE(!secret_equal("", 0, "x", 1));
        ASSERT_TRUE(secret_equal("", 0, "", 0));
}

static void test_json_parse(void) {
        json_object *o = NULL;
        char deep[200];

        ASSERT_EQ(json_parse("{\"a\":1}", strlen("{\"a\":1}"), JSON_DEPTH_MAX, &o), 0);
        ASSERT_TRUE(json_object_is_type(o, json_type_object));
        json_object_put(o);
        ASSERT_EQ(json_parse("null", 4, JSON_DEPTH_MAX, &o), 0);
        ASSERT_TRUE(o == NULL);
        ASSERT_EQ(json_parse("123", 3, JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(json_object_get_int(o), 123);
        json_object_put(o);
        ASSERT_EQ(json_parse("{\"a\":1} x", strlen("{\"a\":1} x"), JSON_DEPTH_MAX, &o), -EBADMSG);
        ASSERT_EQ(json_parse("{\"a\":1", strlen("{\"a\":1"), JSON_DEPTH_MAX, &o), -EBADMSG);
        ASSERT_EQ(json_parse("{'a':1}", strlen("{'a':1}"), JSON_DEPTH_MAX, &o), -EBADMSG);
        ASSERT_EQ(json_parse("{\"a\":\"\xff\"}", strlen("{\"a\":\"\xff\"}"), JSON_DEPTH_MAX, &o), -EBADMSG);
        memset(deep, '[', 100);
        memset(deep + 100, ']', 100);
        ASSERT_EQ(json_parse(deep, 200, JSON_DEPTH_MAX, &o), -E2BIG);
}

static void test_json_strict(void) {
        static const char *const good[] = {
                "{}",
                "[]",
                "0",
                "-0.5e+3",
                "\"\\u00e9\\ud83d\\ude00\"",
                "{\"a\":[1,{\"b\":null}],\"c\":true}",
                " \t\r\n{\"a\":\"b\"} \n",
                "{\"a\":1,\"A\":2}",
                "[ ]", "{ }", "[[],{}]", "-0", "12.50", "1E-7", "3e9",
        };
        static const char *const bad[] = {
                "{'a':1}", "{\"a\":1,}", "[1,]", "{\"a\" 1}", "NaN", "Infinity", "01", "1.", ".5", "+1",
                "\"\\x41\"", "\"\\ud800\"", "\"\\udc00x\"", "\"a\tb\"", "/* c */ {}", "{} {}", "tru", "",
                "{\"a\":1 // c\n}",
                "-", "1e", "1e+", "--1", "1.e5", "[1 2]", "{\"a\":1 \"b\":2}", "[", "{", "{,}", "[,1]",
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                if (json_validate_strict(good[i], strlen(good[i]), JSON_DEPTH_MAX) != 0) {
                        fprintf(stderr, "rejected good JSON: %s\n", good[i]);
                        abort();
                }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (json_validate_strict(bad[i], strlen(bad[i]), JSON_DEPTH_MAX) >= 0) {
                        fprintf(stderr, "accepted bad JSON: %s\n", bad[i]);
                        abort();
                }
        /* Duplicates, also when spelled differently. */
        ASSERT_EQ(json_validate_strict("{\"a\":1,\"a\":2}", strlen("{\"a\":1,\"a\":2}"), JSON_DEPTH_MAX),
                  -ENOTUNIQ);
        ASSERT_EQ(json_validate_strict("{\"a\":1,\"\\u0061\":2}", strlen("{\"a\":1,\"\\u0061\":2}"),
                                       JSON_DEPTH_MAX),
                  -ENOTUNIQ);
        ASSERT_EQ(json_validate_strict("{\"x\":{\"a\":1},\"y\":{\"a\":1}}",
                                       strlen("{\"x\":{\"a\":1},\"y\":{\"a\":1}}"), JSON_DEPTH_MAX),
                  0);
        ASSERT_EQ(json_validate_strict("[[[1]]]", strlen("[[[1]]]"), 3), 0);
        ASSERT_EQ(json_validate_strict("[[[[1]]]]", strlen("[[[[1]]]]"), 3), -E2BIG);
}

static uint64_t test_now_usec(void) {
        struct timespec ts;

        ASSERT_EQ(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
        return (uint64_t) ts.tv_sec * 1000000U + (uint64_t) ts.tv_nsec / 1000U;
}

/* {"k0000000":0,...}: n members, the last one named like the first when 'duplicate'. */
static char *json_many_keys(size_t n, bool duplicate, size_t *ret_len) {
        char *buf = malloc(n * 16 + 2), *p = buf;

        ASSERT_TRUE(buf);
        *p++ = '{';
        for (size_t i = 0; i < n; i++)
                p += sprintf(p, "%s\"k%07zu\":0", i > 0 ? "," : "",
                             duplicate && i == n - 1 ? (size_t) 0 : i);
        *p++ = '}';
        *ret_len = (size_t) (p - buf);
        return buf;
}

static void test_json_strict_bounds(void) {
        static const JsonLimits unbounded = { .depth_max = JSON_DEPTH_MAX, .members_max = SIZE_MAX,
                                              .tokens_max = SIZE_MAX };
        _cleanup_free_ char *many = NULL, *dup = NULL, *members = NULL, *tokens = NULL;
        json_object *o = NULL;
        uint64_t t;
        size_t n, m;

        /* The body of issue 14: a million members, 12 MB. Refused at the bound, at once. */
        many = json_many_keys(1000000, false, &n);
        t = test_now_usec();
        ASSERT_EQ(json_validate_strict(many, n, JSON_DEPTH_MAX), -E2BIG);
        printf("# 1,000,000-key object (%zu bytes) refused in %.3f ms\n", n, (test_now_usec() - t) / 1000.0);
        t = test_now_usec();
        ASSERT_EQ(json_parse(many, n, JSON_DEPTH_MAX, &o), -E2BIG);
        printf("# json_parse() of it refused in %.3f ms\n", (test_now_usec() - t) / 1000.0);
        ASSERT_TRUE(o == NULL);

        /* Without the bounds the duplicate check is still not quadratic: all keys checked. */
        t = test_now_usec();
        ASSERT_EQ(json_validate_strict_limits(many, n, &unbounded), 0);
        printf("# 1,000,000 distinct keys validated without bounds in %.3f ms\n",
               (test_now_usec() - t) / 1000.0);
        dup = json_many_keys(1000000, true, &n);
        t = test_now_usec();
        ASSERT_EQ(json_validate_strict_limits(dup, n, &unbounded), -ENOTUNIQ);
        printf("# 1,000,000 keys, the last a duplicate of the first, refused in %.3f ms\n",
               (test_now_usec() - t) / 1000.0);

        /* Exactly at the bounds passes, one more is refused. */
        members = json_many_keys(JSON_MEMBERS_MAX, false, &m);
        ASSERT_EQ(json_validate_strict(members, m, JSON_DEPTH_MAX), 0);
        members = mfree(members);
        members = json_many_keys(JSON_MEMBERS_MAX + 1, false, &m);
        ASSERT_EQ(json_validate_strict(members, m, JSON_DEPTH_MAX), -E2BIG);
        tokens = malloc(2 * JSON_TOKENS_MAX + 2);
        ASSERT_TRUE(tokens);
        tokens[0] = '[';
        for (size_t i = 0; i < JSON_TOKENS_MAX; i++) {
                tokens[1 + 2 * i] = '0';
                tokens[2 + 2 * i] = ',';
        }
        tokens[2 * JSON_TOKENS_MAX] = ']';          /* JSON_TOKENS_MAX zeros and the array */
        ASSERT_EQ(json_validate_strict(tokens, 2 * JSON_TOKENS_MAX + 1, JSON_DEPTH_MAX), -E2BIG);
        tokens[2 * JSON_TOKENS_MAX - 2] = ']';      /* one zero less */
        ASSERT_EQ(json_validate_strict(tokens, 2 * JSON_TOKENS_MAX - 1, JSON_DEPTH_MAX), 0);
        /* Keys count too: half as many members of small objects. */
        ASSERT_EQ(json_validate_strict("{\"a\":{\"b\":1}}", strlen("{\"a\":{\"b\":1}}"),
                                       JSON_DEPTH_MAX), 0);
        ASSERT_EQ(json_validate_strict_limits("{\"a\":{\"b\":1}}", strlen("{\"a\":{\"b\":1}}"),
                                              &(const JsonLimits) { 32, 16, 4 }), -E2BIG);
        ASSERT_EQ(json_validate_strict_limits("{\"a\":{\"b\":1}}", strlen("{\"a\":{\"b\":1}}"),
                                              &(const JsonLimits) { 32, 16, 5 }), 0);
}

static void test_json_strict_text(void) {
        /* In member names \u0000 is refused (a C string would alias another member); in values
         * it is kept for the resource to refuse, naming the field. */
        static const char *const nul[] = {
                "{\"a\\u0000\":1}", "{\"code\\u0000x\":1}", "[\"x\",{\"k\\u0000\":[1]}]",
        };
        static const char *const nul_values[] = {
                "\"\\u0000\"",
                "\"a\\u0000b\"",
                "{\"code\":\"print(1)\\u0000junk\"}",
                "[\"x\",{\"k\":[\"\\u0000\"]}]",
        };
        static const char raw_nul[] = "{\"code\":\"print(1)\0junk\"}";
        static const char *const bad_utf8[] = {
                "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xe2\x82\"", "\"\xf4\x90\x80\x80\"",
                "{\"\x80\":1}", "\"\xc3\xa9\xa9\"",
        };
        static const char *const good[] = {
                "\"\\u0001\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "{\"\xc3\xa9\":\"\\u00e9\"}",
        };
        json_object *o = NULL;

        for (size_t i = 0; i < ELEMENTSOF(nul); i++) {
                ASSERT_EQ(json_validate_strict(nul[i], strlen(nul[i]), JSON_DEPTH_MAX), -EILSEQ);
                ASSERT_EQ(json_parse(nul[i], strlen(nul[i]), JSON_DEPTH_MAX, &o), -EILSEQ);
                ASSERT_TRUE(o == NULL);
        }
        for (size_t i = 0; i < ELEMENTSOF(nul_values); i++) {
                ASSERT_EQ(json_validate_strict(nul_values[i], strlen(nul_values[i]), JSON_DEPTH_MAX), 0);
                ASSERT_EQ(json_parse(nul_values[i], strlen(nul_values[i]), JSON_DEPTH_MAX, &o), 0);
                json_object_put(o);
                o = NULL;
        }
        /* A raw NUL is a control character: not JSON at all. */
        ASSERT_EQ(json_validate_strict(raw_nul, sizeof(raw_nul) - 1, JSON_DEPTH_MAX), -EBADMSG);
        for (size_t i = 0; i < ELEMENTSOF(bad_utf8); i++)
                ASSERT_EQ(json_validate_strict(bad_utf8[i], strlen(bad_utf8[i]), JSON_DEPTH_MAX), -EBADMSG);
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                ASSERT_EQ(json_validate_strict(good[i], strlen(good[i]), JSON_DEPTH_MAX), 0);
        /* Keys compare decoded, whatever the spelling. */
        ASSERT_EQ(json_validate_strict("{\"\\u00e9\":1,\"\xc3\xa9\":2}",
                                       strlen("{\"\\u00e9\":1,\"\xc3\xa9\":2}"), JSON_DEPTH_MAX),
                  -ENOTUNIQ);
        ASSERT_EQ(json_validate_strict("{\"a\\/\":1,\"a/\":2}", strlen("{\"a\\/\":1,\"a/\":2}"),
                                       JSON_DEPTH_MAX), -ENOTUNIQ);
        ASSERT_EQ(json_validate_strict("{\"ab\":1,\"a\":2,\"abc\":3}",
                                       strlen("{\"ab\":1,\"a\":2,\"abc\":3}"), JSON_DEPTH_MAX),
                  0);
        ASSERT_STREQ(json_strict_error_to_string(-EILSEQ), "NUL (\\u0000) in a JSON member name");
        ASSERT_TRUE(json_strict_error_to_string(-EPERM) == NULL);
}

static void test_json_dispatch(void) {
        struct {
                const char *s;
                int64_t i;
                bool b;
        } v = {};
        static const JsonField fields[] = {
                { "s", JSON_FIELD_STRING, offsetof(typeof(v), s), JSON_MANDATORY },
                { "i", JSON_FIELD_INT64, offsetof(typeof(v), i), JSON_NULLABLE },
                { "b", JSON_FIELD_BOOL, offsetof(typeof(v), b), 0 },
                {},
        };
        JsonDispatchError e = {};
        json_object *o;

        ASSERT_EQ(json_parse("{\"s\":\"x\",\"i\":5.0,\"b\":true,\"extra\":[]}",
                             strlen("{\"s\":\"x\",\"i\":5.0,\"b\":true,\"extra\":[]}"), JSON_DEPTH_MAX, &o),
                  0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), 0);
        ASSERT_STREQ(v.s, "x");
        ASSERT_EQ(v.i, 5);
        ASSERT_TRUE(v.b);
        json_object_put(o);

        ASSERT_EQ(json_parse("{\"i\":1}", strlen("{\"i\":1}"), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), -EINVAL);
        ASSERT_STREQ(e.field, "s");
        ASSERT_STREQ(e.type, "missing");
        json_object_put(o);

        ASSERT_EQ(json_parse("{\"s\":1}", strlen("{\"s\":1}"), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), -EINVAL);
        ASSERT_STREQ(e.type, "string_type");
        json_object_put(o);

        ASSERT_EQ(
                json_parse("{\"s\":\"a\",\"i\":1.5}", strlen("{\"s\":\"a\",\"i\":1.5}"), JSON_DEPTH_MAX, &o),
                0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), -EINVAL);
        ASSERT_STREQ(e.field, "i");
        json_object_put(o);

        ASSERT_EQ(json_parse("{\"s\":\"a\",\"i\":99999999999999999999}",
                             strlen("{\"s\":\"a\",\"i\":99999999999999999999}"), JSON_DEPTH_MAX, &o),
                  0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), -EINVAL);
        json_object_put(o);

        ASSERT_EQ(json_parse("[1]", strlen("[1]"), JSON_DEPTH_MAX, &o), 0);
        ASSERT_EQ(json_dispatch(o, fields, &v, &e), -EINVAL);
        ASSERT_TRUE(e.field == NULL);
        json_object_put(o);
}

static void test_config(void) {
        _cleanup_free_ char *err = NULL;
        char path[] = "/tmp/scopebox-test-config-XXXXXX";
        Config c;
        int fd;

        /* Defaults from COMPAT.md. */
        unsetenv("SANDBOX_MAX_SESSIONS");
        ASSERT_EQ(config_load(&c, "/nonexistent/scopebox.conf", &err), 0);
        ASSERT_EQ(c.max_sessions, 16);
        ASSERT_EQ(c.idle_ttl_sec, 1800);
        ASSERT_EQ(c.idle_ttl_cap_sec, 86400);
        ASSERT_EQ(c.exec_timeout_cap_ms, 600000);
        ASSERT_EQ(c.max_code_bytes, 1 << 20);
        ASSERT_EQ(c.max_output_bytes, 32768);
        ASSERT_EQ(c.max_body_bytes, 56ULL << 20);
        ASSERT_EQ(c.memory_limit, 2ULL << 30);
        ASSERT_EQ(c.pids_limit, 256);
        ASSERT_EQ(c.cpu_quota_percent, 100);
        ASSERT_EQ(c.workspace_size, 512ULL << 20);
        ASSERT_EQ(c.max_artifact_bytes, 20ULL << 20);
        ASSERT_EQ(c.max_files_per_exec, 20);
        ASSERT_EQ(c.max_total_artifact_bytes, 50ULL << 20);
        config_done(&c);

        /* The file, then the environment on top. */
        fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        dprintf(fd,
                "# comment\nSANDBOX_MAX_SESSIONS=3\nexport SANDBOX_MEMORY_LIMIT=\"1G\"\nOTHER_THING=x\n");
        close(fd);
        setenv("SANDBOX_MAX_SESSIONS", "7", 1);
        ASSERT_EQ(config_load(&c, path, &err), 0);
        ASSERT_EQ(c.max_sessions, 7);
        ASSERT_EQ(c.memory_limit, 1ULL << 30);
        config_done(&c);

        /* Bad values are refused with the name of the variable. */
        setenv("SANDBOX_MAX_SESSIONS", "many", 1);
        ASSERT_EQ(config_load(&c, path, &err), -EINVAL);
        ASSERT_TRUE(err && strstr(err, "SANDBOX_MAX_SESSIONS=many"));
        config_done(&c);
        free(err);
        err = NULL;
        unsetenv("SANDBOX_MAX_SESSIONS");
        setenv("SANDBOX_PIDS_LIMIT", "1", 1);
        ASSERT_EQ(config_load(&c, path, &err), -ERANGE);
        ASSERT_TRUE(err && strstr(err, "SANDBOX_PIDS_LIMIT"));
        config_done(&c);
        unsetenv("SANDBOX_PIDS_LIMIT");
        err = mfree(err);

        /* SANDBOX_NODE_ID: empty by default, else 1-8 lowercase hex digits. */
        ASSERT_EQ(config_load(&c, path, &err), 0);
        ASSERT_TRUE(c.node_id && streq(c.node_id, ""));
        config_done(&c);
        setenv("SANDBOX_NODE_ID", "0a", 1);
        ASSERT_EQ(config_load(&c, path, &err), 0);
        ASSERT_TRUE(streq(c.node_id, "0a"));
        config_done(&c);
        static const char *const bad_node_ids[] = { "0A", "xy", "123456789", "0a-", "-1", "0x1" };
        for (size_t i = 0; i < ELEMENTSOF(bad_node_ids); i++) {
                free(err);
                err = NULL;
                setenv("SANDBOX_NODE_ID", bad_node_ids[i], 1);
                ASSERT_EQ(config_load(&c, path, &err), -EINVAL);
                ASSERT_TRUE(err && strstr(err, "SANDBOX_NODE_ID"));
                config_done(&c);
        }
        unsetenv("SANDBOX_NODE_ID");
        unlink(path);

        /* A line that is no assignment names the file and the line. */
        strcpy(path, "/tmp/scopebox-test-config-XXXXXX");
        fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        dprintf(fd, "SANDBOX_API_KEY=secret\nnot an assignment\n");
        close(fd);
        err = mfree(err);
        ASSERT_EQ(config_load(&c, path, &err), -EINVAL);
        ASSERT_TRUE(err && endswith(err, ":2: expected KEY=VALUE"));
        config_done(&c);
        ASSERT_TRUE(!c.api_key);
        unlink(path);
}

/* Every setting is documented in docs/configuration.md and in the shipped example file. */
static void test_config_documented(const char *srcdir) {
        _cleanup_free_ char *doc = NULL, *example = NULL;
        const ConfigItemInfo *items;
        unsigned n;
        int fd;

        fd = open(strjoina(srcdir, "/docs/configuration.md"), O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(read_full_fd(fd, 1 << 20, &doc, NULL), 0);
        close(fd);
        fd = open(strjoina(srcdir, "/conf/scopebox.conf"), O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(read_full_fd(fd, 1 << 20, &example, NULL), 0);
        close(fd);

        items = config_items(&n);
        ASSERT_TRUE(n > 10);
        for (unsigned i = 0; i < n; i++) {
                const char *row = strjoina("| `", items[i].name, "` | `", items[i].default_value, "` |");
                if (!strstr(doc, row) && !(streq(items[i].name, "SANDBOX_API_KEY") &&
                                           strstr(doc, "| `SANDBOX_API_KEY` | (empty) |"))) {
                        fprintf(stderr, "docs/configuration.md lacks the row %s\n", row);
                        abort();
                }
                if (!streq(items[i].name, "SANDBOX_API_KEY") &&
                    !strstr(example, strjoina("#", items[i].name, "=", items[i].default_value, "\n"))) {
                        fprintf(stderr, "conf/scopebox.conf lacks #%s=%s\n", items[i].name,
                                items[i].default_value);
                        abort();
                }
        }
}

/* The hang-up pipes of the bus API's "hangup" option. */
static void test_hangup_pipe(void) {
        int p[2], memfd, sk[2];

        ASSERT_TRUE(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
        ASSERT_EQ(fd_is_pipe_read_end(p[0]), 1);
        ASSERT_EQ(fd_is_pipe_read_end(p[1]), 0);
        ASSERT_EQ(pipe_hung_up(p[0]), 0);
        /* Data is no hang-up; a closed writer is, data or not. */
        ASSERT_TRUE(write(p[1], "x", 1) == 1);
        ASSERT_EQ(pipe_hung_up(p[0]), 0);
        close(p[1]);
        ASSERT_EQ(pipe_hung_up(p[0]), 1);
        close(p[0]);
        ASSERT_EQ(pipe_hung_up(p[0]), -EBADF);
        ASSERT_TRUE(fd_is_pipe_read_end(p[0]) < 0);

        memfd = memfd_new_empty("not-a-pipe");
        ASSERT_TRUE(memfd >= 0);
        ASSERT_EQ(fd_is_pipe_read_end(memfd), 0);
        close(memfd);
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sk) == 0);
        ASSERT_EQ(fd_is_pipe_read_end(sk[0]), 0);
        close(sk[0]);
        close(sk[1]);
}

/* The mask of a /proc/self/status line, e.g. "SigIgn:". */
static uint64_t status_mask(const char *field) {
        char line[256];
        unsigned long long v = UINT64_MAX;
        FILE *f = fopen("/proc/self/status", "re");

        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, field, strlen(field)) == 0)
                        v = strtoull(line + strlen(field), NULL, 16);
        fclose(f);
        return v;
}

static void test_reset_signals(void) {
        pid_t pid = fork();
        int status;

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                /* What a service inherits when whatever started its manager ignored glibc's two
                 * signals: sigaction(3) cannot undo that, the reset must. */
                struct { void (*h)(int); unsigned long f; void (*r)(void); uint64_t m; } ign = { SIG_IGN };
                uint64_t block = 1ULL << (SIGTERM - 1);

                ASSERT_TRUE(syscall(SYS_rt_sigaction, 32, &ign, NULL, 8) == 0);
                ASSERT_TRUE(syscall(SYS_rt_sigaction, 33, &ign, NULL, 8) == 0);
                ASSERT_TRUE(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
                ASSERT_TRUE(syscall(SYS_rt_sigprocmask, SIG_BLOCK, &block, NULL, 8) == 0);
                /* On top of whatever this test inherited (nohup's SIGHUP, a shell's SIGINT and
                 * SIGQUIT for background jobs): all of it goes. */
                uint64_t ours = (1ULL << 31) | (1ULL << 32) | (1ULL << (SIGPIPE - 1));
                ASSERT_EQ(status_mask("SigIgn:") & ours, ours);
                ASSERT_EQ(reset_all_signal_dispositions(), 0);
                ASSERT_EQ(status_mask("SigIgn:"), 0);
                ASSERT_EQ(status_mask("SigBlk:"), 0);
                ASSERT_EQ(status_mask("SigCgt:"), 0);
                _exit(0);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_daemon_signals(void) {
        pid_t pid = fork();
        int status;

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                uint64_t want = (1ULL << (SIGCHLD - 1)) | (1ULL << (SIGTERM - 1)) | (1ULL << (SIGHUP - 1));
                sd_event *e = NULL;
                sigset_t old;

                ASSERT_EQ(reset_all_signal_dispositions(), 0);
                ASSERT_EQ(sigprocmask_many(SIG_BLOCK, NULL, SIGUSR1, SIGUSR2, -1), 0);
                ASSERT_EQ(status_mask("SigBlk:"), (1ULL << (SIGUSR1 - 1)) | (1ULL << (SIGUSR2 - 1)));
                ASSERT_EQ(sigprocmask_many(SIG_UNBLOCK, &old, SIGUSR1, -1), 0);
                ASSERT_EQ(sigismember(&old, SIGUSR1), 1);
                ASSERT_EQ(status_mask("SigBlk:"), 1ULL << (SIGUSR2 - 1));
                /* A number that is no signal changes nothing. */
                ASSERT_EQ(sigprocmask_many(SIG_SETMASK, NULL, SIGTERM, 12345, -1), -EINVAL);
                ASSERT_EQ(status_mask("SigBlk:"), 1ULL << (SIGUSR2 - 1));
                ASSERT_EQ(sigprocmask_many(SIG_SETMASK, NULL, -1), 0);

                ASSERT_EQ(daemon_event_new(&e, SIGTERM, SIGHUP, -1), 0);
                ASSERT_EQ(status_mask("SigBlk:"), want);
                /* Each listed signal ends the loop with its exit code 0. */
                ASSERT_EQ(kill(getpid(), SIGHUP), 0);
                ASSERT_EQ(sd_event_loop(e), 0);
                e = sd_event_unref(e);
                _exit(0);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_proc_field(void) {
        static const char io[] = "rchar: 12\nwchar: 4096\nsyscr: 3\nwchar_x: 7\n";
        uint64_t v = 0;
        _cleanup_close_ int fd = -EBADF;

        ASSERT_EQ(parse_proc_field(io, strlen(io), "wchar", &v), 0);
        ASSERT_TRUE(v == 4096);
        ASSERT_EQ(parse_proc_field(io, strlen(io), "rchar", &v), 0);
        ASSERT_TRUE(v == 12);
        /* A prefix of another name, or cut before the value, is not the field. */
        ASSERT_EQ(parse_proc_field(io, strlen(io), "wcha", &v), -ENOENT);
        ASSERT_EQ(parse_proc_field(io, 10, "wchar", &v), -ENOENT);
        ASSERT_EQ(parse_proc_field("wchar: x\n", 9, "wchar", &v), -EINVAL);
        ASSERT_EQ(parse_proc_field("wchar:\n", 7, "wchar", &v), -ENOENT);
        ASSERT_EQ(parse_proc_field("wchar: 99999999999999999999999\n", 31, "wchar", &v), -ERANGE);
        /* The last line needs no newline; the counter of a real task reads. */
        ASSERT_EQ(parse_proc_field("wchar: 5", 8, "wchar", &v), 0);
        ASSERT_TRUE(v == 5);
        fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(proc_io_read_wchar(fd, &v), 0);
        ASSERT_EQ(proc_io_read_wchar(-EBADF, &v), -EBADF);
}

static void test_time(void) {
        struct timespec ts;
        uint64_t a, b, real;

        ASSERT_EQ(timespec_load(&(struct timespec) { 0, 0 }), 0);
        /* Nanoseconds are cut, not rounded: 999 ns is still the same microsecond. */
        ASSERT_EQ(timespec_load(&(struct timespec) { 3, 999 }), 3000000);
        ASSERT_EQ(timespec_load(&(struct timespec) { 3, 999999999 }), 3999999);
        ASSERT_EQ(timeval_load(&(struct timeval) { 0, 0 }), 0);
        ASSERT_EQ(timeval_load(&(struct timeval) { 7, 250000 }), 7250000);
        /* Past 2^32 seconds, where a 32-bit product would wrap. */
        ASSERT_TRUE(timeval_load(&(struct timeval) { 5000000000LL, 1 }) == 5000000000ULL * USEC_PER_SEC + 1);

        a = now_usec(CLOCK_MONOTONIC);
        b = now_usec(CLOCK_MONOTONIC);
        ASSERT_TRUE(a > 0 && b >= a);
        ASSERT_EQ(clock_gettime(CLOCK_REALTIME, &ts), 0);
        real = now_usec(CLOCK_REALTIME);
        ASSERT_TRUE(real >= timespec_load(&ts) && real - timespec_load(&ts) < 10 * USEC_PER_SEC);
        /* A clock that can't be read. */
        ASSERT_EQ(now_usec((clockid_t) 12345), 0);
}

/* What the frame callback saw, as "<stream>:<data>|" for each frame. */
typedef struct FrameLog {
        char text[512];
        size_t n;
        unsigned calls;
        int answer;                     /* what the callback returns */
} FrameLog;

static int frame_log_add(unsigned stream, const uint8_t *data, size_t size, void *userdata) {
        FrameLog *l = userdata;

        ASSERT_TRUE(size > 0 && size <= STREAM_FRAME_DATA_MAX);
        l->calls++;
        if (l->n + size + 3 < sizeof(l->text)) {
                l->n += (size_t) snprintf(l->text + l->n, sizeof(l->text) - l->n, "%u:%.*s|", stream,
                                          (int) size, (const char *) data);
        } else
                l->n = sizeof(l->text); /* too long to compare: the test says so below */
        return l->answer;
}

static size_t frame_put(uint8_t *buf, unsigned stream, const char *data) {
        StreamFrameHeader h = { .stream = (uint8_t) stream, .size = (uint32_t) strlen(data) };

        memcpy(buf, &h, sizeof(h));
        memcpy(buf + sizeof(h), data, strlen(data));
        return sizeof(h) + strlen(data);
}

/* A pipe whose read end is non-blocking, as the gateway and scopeboxctl have it. */
static void frame_pipe(int fds[2]) {
        ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
        ASSERT_EQ(fd_nonblock(fds[0], true), 0);
}

/* Feeds 'buf' in pieces cut at 'a' and 'b' (a <= b), reading after each, with 'budget' per call;
 * returns the last result once the write end is closed. */
static int frame_feed(StreamFrameReader *reader, const uint8_t *buf, size_t n, size_t a, size_t b,
                      size_t budget, FrameLog *log) {
        const size_t cut[] = { 0, a, b, n };
        int fds[2], r = 0;

        frame_pipe(fds);
        *reader = (StreamFrameReader) {};
        for (size_t i = 0; i < 3; i++) {
                ASSERT_EQ(write_all(fds[1], buf + cut[i], cut[i + 1] - cut[i]), 0);
                if (i == 2)
                        safe_close(fds[1]);
                /* Small budgets take several calls for what the pipe holds. */
                do
                        r = stream_frame_read(reader, fds[0], budget, frame_log_add, log);
                while (r == 0 && i == 2);
                if (i < 2)
                        ASSERT_EQ(r, 0);
        }
        safe_close(fds[0]);
        return r;
}

static void test_stream_frame_splits(void) {
        _cleanup_free_ StreamFrameReader *reader = calloc(1, sizeof(StreamFrameReader));
        const char *expected = "1:hello|2:oops\n|1:x|3:{\"a\":|2:0123456789abcdefghij|1:world|";
        uint8_t buf[256];
        size_t n = 0;

        ASSERT_TRUE(reader);
        n += frame_put(buf + n, STREAM_FRAME_STDOUT, "hello");
        n += frame_put(buf + n, STREAM_FRAME_STDERR, "oops\n");
        n += frame_put(buf + n, STREAM_FRAME_STDOUT, "x");
        n += frame_put(buf + n, STREAM_FRAME_RESULT, "{\"a\":");
        n += frame_put(buf + n, STREAM_FRAME_STDERR, "0123456789abcdefghij");
        n += frame_put(buf + n, STREAM_FRAME_STDOUT, "world");

        /* Every pair of cut points, so every split of a header and of data, alone or together. */
        for (size_t a = 0; a <= n; a++)
                for (size_t b = a; b <= n; b++) {
                        FrameLog log = {};

                        ASSERT_EQ(frame_feed(reader, buf, n, a, b, SIZE_MAX, &log), 1);
                        ASSERT_STREQ(log.text, expected);
                }
        /* A byte at a time, and budgets that end inside headers and frames. */
        for (size_t budget = 1; budget <= 16; budget++) {
                FrameLog log = {};

                ASSERT_EQ(frame_feed(reader, buf, n, n / 3, n / 2, budget, &log), 1);
                ASSERT_STREQ(log.text, expected);
        }
}

/* What the line callback saw, as "<line>|" for each. */
static int line_log_add(const uint8_t *line, size_t size, void *userdata) {
        FrameLog *l = userdata;

        ASSERT_TRUE(size > 0 && line[size - 1] == '\n');
        l->calls++;
        ASSERT_TRUE(l->n + size + 2 < sizeof(l->text));
        memcpy(l->text + l->n, line, size - 1);
        l->n += size - 1;
        l->text[l->n++] = '|';
        l->text[l->n] = 0;
        return l->answer;
}

/* A display cell's records: whole lines within the bounds, whatever the pieces they come in; the
 * rest left out whole and counted. */
static void test_stream_lines(void) {
        const char *in = "{\"a\":1}\n0123456789\n{}\n{\"big\":\"xxxxxxxxxxxxxxx\"}\n[]\nend";
        const char *expected = "{\"a\":1}|0123456789|{}|[]|";

        /* Every cut into three pieces: the same lines. */
        for (size_t a = 0; a <= strlen(in); a++)
                for (size_t b = a; b <= strlen(in); b++) {
                        StreamLines l = STREAM_LINES_INIT(16, 1000);
                        FrameLog log = {};

                        ASSERT_EQ(stream_lines_feed(&l, in, a, line_log_add, &log), 0);
                        ASSERT_EQ(stream_lines_feed(&l, in + a, b - a, line_log_add, &log), 0);
                        ASSERT_EQ(stream_lines_feed(&l, in + b, strlen(in) - b, line_log_add, &log), 0);
                        stream_lines_end(&l);
                        ASSERT_STREQ(log.text, expected);
                        ASSERT_EQ(l.n_too_large, 1);     /* 27 bytes > 16 */
                        ASSERT_EQ(l.n_unfinished, 1);    /* "end" */
                        ASSERT_EQ(l.n_over_total, 0);
                        ASSERT_EQ(l.total, strlen(expected));
                        ASSERT_TRUE(l.allocated <= 16);
                        stream_lines_done(&l);
                }

        /* A line of exactly the bound passes; past the total, every line that follows is left out,
         * a small one too. */
        {
                StreamLines l = STREAM_LINES_INIT(4, 10);
                FrameLog log = {};

                ASSERT_EQ(stream_lines_feed(&l, "abc\nde", 6, line_log_add, &log), 0);
                ASSERT_EQ(stream_lines_feed(&l, "f\nghi\nj\n", 8, line_log_add, &log), 0);
                stream_lines_end(&l);
                ASSERT_STREQ(log.text, "abc|def|");
                ASSERT_EQ(l.n_over_total, 2);
                ASSERT_EQ(l.n_too_large + l.n_unfinished, 0);
                stream_lines_done(&l);
        }

        /* The callback's error is returned; the line is over all the same. */
        {
                StreamLines l = STREAM_LINES_INIT(100, 100);
                FrameLog log = { .answer = -EIO };

                ASSERT_EQ(stream_lines_feed(&l, "a\nb\n", 4, line_log_add, &log), -EIO);
                ASSERT_STREQ(log.text, "a|");
                log.answer = 0;
                ASSERT_EQ(stream_lines_feed(&l, "c\n", 2, line_log_add, &log), 0);
                ASSERT_STREQ(log.text, "a|c|");
                stream_lines_done(&l);
        }
}

static void test_stream_frame_bounds(void) {
        _cleanup_free_ StreamFrameReader *reader = calloc(1, sizeof(StreamFrameReader));
        _cleanup_free_ uint8_t *big = malloc(STREAM_FRAME_DATA_MAX);
        uint8_t buf[64];
        int fds[2], avail, r;
        size_t n;

        ASSERT_TRUE(reader && big);

        /* The budget bounds what one call takes out of the pipe. */
        n = frame_put(buf, STREAM_FRAME_STDOUT, "0123456789");
        frame_pipe(fds);
        *reader = (StreamFrameReader) {};
        ASSERT_EQ(write_all(fds[1], buf, n), 0);
        {
                FrameLog log = {};

                ASSERT_EQ(stream_frame_read(reader, fds[0], 5, frame_log_add, &log), 0);
                ASSERT_EQ(ioctl(fds[0], FIONREAD, &avail), 0);
                ASSERT_EQ(avail, (int) n - 5);
                ASSERT_EQ(log.calls, 0);
                ASSERT_EQ(stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log), 0);
                ASSERT_STREQ(log.text, "1:0123456789|");
        }
        safe_close(fds[0]);
        safe_close(fds[1]);

        /* A frame of exactly STREAM_FRAME_DATA_MAX bytes is fine; it arrives in pieces, as a pipe
         * of the default size can't hold it whole. */
        memset(big, 'z', STREAM_FRAME_DATA_MAX);
        frame_pipe(fds);
        *reader = (StreamFrameReader) {};
        {
                StreamFrameHeader h = { .stream = STREAM_FRAME_STDERR, .size = STREAM_FRAME_DATA_MAX };
                FrameLog log = {};

                ASSERT_EQ(write_all(fds[1], &h, sizeof(h)), 0);
                for (size_t off = 0; off < STREAM_FRAME_DATA_MAX; off += 4096) {
                        ASSERT_EQ(write_all(fds[1], big + off, 4096), 0);
                        ASSERT_EQ(stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log), 0);
                }
                ASSERT_EQ(log.calls, 1);
                ASSERT_EQ(log.n, sizeof(log.text)); /* 64 KiB: longer than the log keeps */
        }
        safe_close(fds[0]);
        safe_close(fds[1]);

        /* Headers that make no sense: a stream other than 1, 2 or 3, padding, size 0 or above 64 KiB. */
        for (unsigned i = 0; i < 7; i++) {
                StreamFrameHeader h = { .stream = STREAM_FRAME_STDOUT, .size = 1 };
                FrameLog log = {};

                if (i < 3)
                        h.zero[i] = 1;
                else if (i == 3)
                        h.stream = 0;
                else if (i == 4)
                        h.stream = 4;
                else if (i == 5)
                        h.size = 0;
                else
                        h.size = STREAM_FRAME_DATA_MAX + 1;
                frame_pipe(fds);
                *reader = (StreamFrameReader) {};
                ASSERT_EQ(write_all(fds[1], &h, sizeof(h)), 0);
                ASSERT_EQ(write_all(fds[1], "x", 1), 0);
                ASSERT_EQ(stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log), -EBADMSG);
                ASSERT_EQ(log.calls, 0);
                safe_close(fds[0]);
                safe_close(fds[1]);
        }

        /* The end of the pipe: between frames 1, inside a header or a frame -EPIPE, and the cut
         * frame never reaches the callback. */
        n = frame_put(buf, STREAM_FRAME_STDOUT, "abc");
        for (size_t cut = 0; cut < n; cut++) {
                FrameLog log = {};

                frame_pipe(fds);
                *reader = (StreamFrameReader) {};
                ASSERT_EQ(write_all(fds[1], buf, cut), 0);
                safe_close(fds[1]);
                r = stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log);
                ASSERT_EQ(r, cut == 0 ? 1 : -EPIPE);
                ASSERT_EQ(log.calls, 0);
                safe_close(fds[0]);
        }

        /* The callback stops the reading (the rest stays in the pipe) or fails it. */
        n = frame_put(buf, STREAM_FRAME_STDOUT, "one");
        n += frame_put(buf + n, STREAM_FRAME_STDERR, "two");
        for (size_t i = 0; i < 2; i++) {
                int answer = i == 0 ? 1 : -ENOMEM;
                FrameLog log = { .answer = answer };

                frame_pipe(fds);
                *reader = (StreamFrameReader) {};
                ASSERT_EQ(write_all(fds[1], buf, n), 0);
                r = stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log);
                ASSERT_EQ(r, answer > 0 ? 0 : answer);
                ASSERT_STREQ(log.text, "1:one|");
                if (answer > 0) {
                        log.answer = 0;
                        ASSERT_EQ(stream_frame_read(reader, fds[0], SIZE_MAX, frame_log_add, &log), 0);
                        ASSERT_STREQ(log.text, "1:one|2:two|");
                }
                safe_close(fds[0]);
                safe_close(fds[1]);
        }
}

typedef struct ListItem ListItem;
struct ListItem {
        char name;
        LIST_FIELDS(ListItem, all);
        LIST_FIELDS(ListItem, some);  /* a second list the same elements can be in */
};

/* The names from first to last, checked against the links back. */
static const char *list_names(ListItem *head, char buf[static 16]) {
        ListItem *prev = NULL;
        size_t n = 0;

        LIST_FOREACH(all, i, head) {
                ASSERT_TRUE(i->all_prev == prev);
                buf[n++] = i->name;
                prev = i;
        }
        buf[n] = 0;
        return buf;
}

static void test_list(void) {
        ListItem items[5] = {
                { .name = 'a' }, { .name = 'b' }, { .name = 'c' }, { .name = 'd' }, { .name = 'e' }
        };
        ListItem *head = NULL, *some = NULL;
        char buf[16];
        size_t n = 0;

        ASSERT_STREQ(list_names(head, buf), "");
        LIST_PREPEND(all, head, &items[1]);
        LIST_PREPEND(all, head, &items[0]);
        LIST_APPEND(all, head, &items[2]);
        LIST_APPEND(all, head, &items[3]);
        LIST_APPEND(all, head, &items[4]);
        ASSERT_STREQ(list_names(head, buf), "abcde");

        /* Membership of one list is independent of the other. */
        LIST_APPEND(some, some, &items[3]);
        LIST_PREPEND(some, some, &items[1]);
        LIST_FOREACH(some, i, some)
                buf[n++] = i->name;
        buf[n] = 0;
        ASSERT_STREQ(buf, "bd");

        LIST_REMOVE(all, head, &items[2]); /* the middle */
        ASSERT_TRUE(!items[2].all_next && !items[2].all_prev);
        ASSERT_STREQ(list_names(head, buf), "abde");
        LIST_REMOVE(all, head, &items[0]); /* the first */
        ASSERT_STREQ(list_names(head, buf), "bde");
        LIST_REMOVE(all, head, &items[4]); /* the last */
        ASSERT_STREQ(list_names(head, buf), "bd");
        /* In it: the head, a later one; not: one removed, one never added to this list. */
        ASSERT_TRUE(LIST_CONTAINS(all, head, &items[1]) && LIST_CONTAINS(all, head, &items[3]));
        ASSERT_TRUE(!LIST_CONTAINS(all, head, &items[4]) && !LIST_CONTAINS(some, some, &items[0]));
        ASSERT_TRUE(some == &items[1] && items[1].some_next == &items[3] && !items[3].some_next);

        /* A removed element can go in again; the safe walk may unlink what it is at. */
        LIST_PREPEND(all, head, &items[2]);
        LIST_APPEND(all, head, &items[0]);
        ASSERT_STREQ(list_names(head, buf), "cbda");
        LIST_FOREACH_SAFE(all, i, next, head)
                if (i->name != 'd')
                        LIST_REMOVE(all, head, i);
        ASSERT_STREQ(list_names(head, buf), "d");
        LIST_REMOVE(all, head, &items[3]);
        ASSERT_TRUE(!head);
}

/* JsonWriter keeps its first failure: every later append returns it and writes nothing, and
 * steal hands out nothing; before a failure it builds the text (escapes, base64, lossy). */
static void test_json_writer(void) {
        JsonWriter w = {};
        _cleanup_free_ char *text = NULL;
        size_t n = 0;

        ASSERT_EQ(json_writer_append_str(&w, "{\"a\":"), 0);
        ASSERT_EQ(json_writer_append_string(&w, "x\"\n\x01", 4), 0);
        ASSERT_EQ(json_writer_appendf(&w, ",\"n\":%d,\"b\":", 42), 0);
        ASSERT_EQ(json_writer_append_base64(&w, "hi", 2), 0);
        ASSERT_EQ(json_writer_append_str(&w, ",\"l\":"), 0);
        ASSERT_EQ(json_writer_append_string_lossy(&w, "\xff!", 2), 0);
        ASSERT_EQ(json_writer_append_str(&w, "}"), 0);
        ASSERT_EQ(json_writer_error(&w), 0);
        text = json_writer_steal(&w, &n);
        ASSERT_STREQ(text, "{\"a\":\"x\\\"\\n\\u0001\",\"n\":42,\"b\":\"aGk=\",\"l\":\"\xef\xbf\xbd!\"}");
        ASSERT_EQ(n, strlen(text));
        ASSERT_TRUE(!w.buf.s && w.buf.len == 0);

        /* An empty writer steals an empty string. */
        free(text);
        text = json_writer_steal(&w, &n);
        ASSERT_TRUE(text && n == 0 && *text == 0);

        /* A reservation that can't be had sticks. */
        ASSERT_EQ(json_writer_append_str(&w, "kept"), 0);
        ASSERT_EQ(json_writer_reserve(&w, SIZE_MAX - 2), -ENOMEM);
        ASSERT_EQ(json_writer_append_str(&w, "lost"), -ENOMEM);
        ASSERT_EQ(json_writer_appendf(&w, "%d", 1), -ENOMEM);
        ASSERT_EQ(json_writer_append_base64(&w, "x", 1), -ENOMEM);
        ASSERT_EQ(json_writer_append_string_lossy(&w, "x", 1), -ENOMEM);
        ASSERT_EQ(json_writer_error(&w), -ENOMEM);
        ASSERT_STREQ(w.buf.s, "kept");
        ASSERT_TRUE(!json_writer_steal(&w, &n));
        ASSERT_TRUE(!w.buf.s && json_writer_error(&w) == 0);
}

/* ARRAY_GROW: room when needed, doubling from the minimum, nothing lost or changed on -ENOMEM. */
static void test_array_grow(void) {
        _cleanup_free_ uint32_t *a = NULL;
        size_t allocated = 0;

        ASSERT_EQ(ARRAY_GROW(a, allocated, 0, 4), 0);
        ASSERT_EQ(allocated, 4U);
        for (uint32_t i = 0; i < 4; i++)
                a[i] = i;
        ASSERT_EQ(ARRAY_GROW(a, allocated, 3, 4), 0); /* room already */
        ASSERT_EQ(allocated, 4U);
        ASSERT_EQ(ARRAY_GROW(a, allocated, 4, 4), 0);
        ASSERT_EQ(allocated, 8U);
        for (uint32_t i = 0; i < 4; i++)
                ASSERT_EQ(a[i], i);
        ASSERT_EQ(ARRAY_GROW(a, allocated, 20, 4), 0); /* at least n + 1 */
        ASSERT_EQ(allocated, 21U);
        /* Too large to allocate: the array stays. */
        ASSERT_EQ(ARRAY_GROW(a, allocated, SIZE_MAX / 2, 0), -ENOMEM);
        ASSERT_EQ(ARRAY_GROW(a, allocated, SIZE_MAX, 0), -ENOMEM);
        ASSERT_EQ(allocated, 21U);
        ASSERT_EQ(a[3], 3U);
}

static unsigned open_fds(void) {
        _cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        unsigned n = 0;

        ASSERT_TRUE(d);
        FOREACH_DIRENT(de, d, ASSERT_TRUE(false))
                n++;
        return n;
}

/* The fds that come with a message: what is not asked for is closed, a second one refused. */
static void test_receive_fds(void) {
        int sv[2], fds[3], got[3];
        size_t n;
        unsigned before;
        char byte = 0;

        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                ASSERT_TRUE((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
        before = open_fds();

        ASSERT_EQ(fds_send(sv[0], &byte, 1, fds, 3), 0);
        ASSERT_EQ(fds_receive(sv[1], &byte, 1, got, 1, &n), 1);
        ASSERT_EQ(n, 1U);
        ASSERT_EQ(open_fds(), before + 1); /* the two not asked for are closed */
        safe_close(got[0]);

        ASSERT_EQ(fds_send(sv[0], &byte, 1, fds, 2), 0);
        ASSERT_EQ(fd_receive_one(sv[1]), -EBADMSG);
        ASSERT_EQ(open_fds(), before);

        ASSERT_EQ(fd_send_one(sv[0], fds[0]), 0);
        got[0] = fd_receive_one(sv[1]);
        ASSERT_TRUE(got[0] >= 0);
        safe_close(got[0]);
        ASSERT_EQ(open_fds(), before);

        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                safe_close(fds[i]);
        safe_close(sv[0]);
        ASSERT_EQ(fd_receive_one(sv[1]), -EPIPE);
        safe_close(sv[1]);
}

/* A sealed message holding what 'types' appends, ready to read. */
static sd_bus_message *bus_message_of(const char *types, ...) {
        static sd_bus *bus = NULL;
        sd_bus_message *m = NULL;
        va_list ap;
        int r;

        /* A bus to make messages with (a started one: this sd-bus wants one); nothing is sent. */
        if (!bus) {
                int pair[2];

                ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
                ASSERT_TRUE(sd_bus_new(&bus) >= 0);
                ASSERT_TRUE(sd_bus_set_fd(bus, pair[0], pair[0]) >= 0);
                ASSERT_TRUE(sd_bus_negotiate_fds(bus, 1) >= 0);
                ASSERT_TRUE(sd_bus_start(bus) >= 0);
        }
        ASSERT_TRUE(sd_bus_message_new_method_call(bus, &m, "io.scopebox.Test", "/", "io.scopebox.Test",
                                                   "Test") >= 0);
        va_start(ap, types);
        r = sd_bus_message_appendv(m, types, ap);
        va_end(ap);
        ASSERT_TRUE(r >= 0);
        ASSERT_TRUE(sd_bus_message_seal(m, 1, 0) >= 0);
        ASSERT_TRUE(sd_bus_message_rewind(m, true) >= 0);
        return m;
}

typedef struct Collected {
        uint64_t v[4];
        size_t n, calls;
        int fail_at;
} Collected;

static int collect_element(sd_bus_message *m, void *userdata) {
        Collected *c = userdata;
        int r;

        c->calls++;
        if ((int) c->calls == c->fail_at)
                return -ENOTRECOVERABLE;
        ASSERT_TRUE(c->n < ELEMENTSOF(c->v));
        r = sd_bus_message_read(m, "t", &c->v[c->n]);
        if (r >= 0)
                c->n++;
        return r;
}

typedef struct Options {
        bool flag;
        uint64_t count;
        const char *name;
        int fd;
} Options;

static const BusDictField option_fields[] = {
        { "flag",  'b', offsetof(Options, flag)  },
        { "count", 't', offsetof(Options, count) },
        { "name",  's', offsetof(Options, name)  },
        { "fd",    'h', offsetof(Options, fd)    },
        {}
};

static void test_bus_read_array(void) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        Collected c = {};

        /* As many as the bound: all read, in order, and the array left (the next value reads). */
        m = bus_message_of("ats", 3, (uint64_t) 7, (uint64_t) 8, (uint64_t) 9, "after");
        ASSERT_EQ(bus_message_read_array(m, "t", 3, collect_element, &c), 1);
        ASSERT_EQ(c.n, 3U);
        ASSERT_TRUE(c.v[0] == 7 && c.v[1] == 8 && c.v[2] == 9);
        const char *after = NULL;
        ASSERT_TRUE(sd_bus_message_read(m, "s", &after) > 0 && streq(after, "after"));
        m = sd_bus_message_unref(m);

        /* One too many: refused before the element reader sees it. */
        c = (Collected) {};
        m = bus_message_of("at", 3, (uint64_t) 1, (uint64_t) 2, (uint64_t) 3);
        ASSERT_EQ(bus_message_read_array(m, "t", 2, collect_element, &c), -EBADMSG);
        ASSERT_EQ(c.calls, 2U);
        m = sd_bus_message_unref(m);

        /* Empty: no call. A failing element: its failure, and no further call. */
        c = (Collected) {};
        m = bus_message_of("at", 0);
        ASSERT_EQ(bus_message_read_array(m, "t", 2, collect_element, &c), 1);
        ASSERT_EQ(c.calls, 0U);
        m = sd_bus_message_unref(m);
        c = (Collected) { .fail_at = 2 };
        m = bus_message_of("at", 3, (uint64_t) 1, (uint64_t) 2, (uint64_t) 3);
        ASSERT_EQ(bus_message_read_array(m, "t", 8, collect_element, &c), -ENOTRECOVERABLE);
        ASSERT_EQ(c.calls, 2U);
        m = sd_bus_message_unref(m);

        /* Another element type than the array's: the walk fails. */
        c = (Collected) {};
        m = bus_message_of("as", 1, "x");
        ASSERT_TRUE(bus_message_read_array(m, "t", 8, collect_element, &c) < 0);
        ASSERT_EQ(c.calls, 0U);
}

static void test_bus_read_options(void) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        Options o = { .fd = -EBADF };

        ASSERT_TRUE(fd >= 0);
        m = bus_message_of("a{sv}", 4, "flag", "b", 1, "count", "t", (uint64_t) 5, "name", "s", "n", "fd",
                           "h", fd);
        ASSERT_TRUE(bus_message_read_options(m, option_fields, &o, &e) >= 0);
        ASSERT_TRUE(o.flag && o.count == 5 && streq(o.name, "n") && o.fd >= 0 && o.fd != fd);
        m = sd_bus_message_unref(m);

        /* An unknown key, and a known one of another type: InvalidArgs naming it. */
        m = bus_message_of("a{sv}", 2, "count", "t", (uint64_t) 1, "bogus", "b", 0);
        ASSERT_EQ(bus_message_read_options(m, option_fields, &o, &e), -EINVAL);
        ASSERT_TRUE(sd_bus_error_has_name(&e, SD_BUS_ERROR_INVALID_ARGS));
        ASSERT_STREQ(e.message, "Unknown option 'bogus'.");
        sd_bus_error_free(&e);
        m = sd_bus_message_unref(m);
        m = bus_message_of("a{sv}", 1, "count", "u", 1);
        ASSERT_EQ(bus_message_read_options(m, option_fields, &o, &e), -EINVAL);
        ASSERT_STREQ(e.message, "Option 'count' must be of type 't'.");
        sd_bus_error_free(&e);
        m = sd_bus_message_unref(m);

        /* The same for a reply's info: the unknown key is skipped, the other type is -EBADMSG. */
        o = (Options) {};
        m = bus_message_of("a{sv}", 2, "bogus", "b", 0, "count", "t", (uint64_t) 3);
        ASSERT_TRUE(bus_message_read_dict(m, option_fields, &o) >= 0);
        ASSERT_EQ(o.count, 3U);
        m = sd_bus_message_unref(m);
        m = bus_message_of("a{sv}", 1, "name", "u", 1);
        ASSERT_EQ(bus_message_read_dict(m, option_fields, &o), -EBADMSG);
        safe_close(fd);
}

/* A struct and its table from one list: each member has its letter's C type, and the table reads
 * every key into its member. */
#define LISTED_FIELDS(F, T)                 \
        F(T, "flag",   b, flag)             \
        F(T, "pid",    u, pid)              \
        F(T, "signal", i, signal)           \
        F(T, "usec",   t, usec)             \
        F(T, "limit",  x, limit)            \
        F(T, "Name",   s, name)             \
        F(T, "fd",     h, fd)
typedef struct Listed {
        LISTED_FIELDS(BUS_DICT_MEMBER, Listed)
} Listed;
static const BusDictField listed_fields[] = {
        LISTED_FIELDS(BUS_DICT_FIELD, Listed)
        {}
};
#define ASSERT_MEMBER_TYPE(member, type) \
        _Static_assert(__builtin_types_compatible_p(typeof(((Listed *) NULL)->member), type), #member)
ASSERT_MEMBER_TYPE(flag, bool);
ASSERT_MEMBER_TYPE(pid, uint32_t);
ASSERT_MEMBER_TYPE(signal, int32_t);
ASSERT_MEMBER_TYPE(usec, uint64_t);
ASSERT_MEMBER_TYPE(limit, int64_t);
ASSERT_MEMBER_TYPE(name, const char *);
ASSERT_MEMBER_TYPE(fd, int);

static void test_bus_dict_list(void) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        Listed l = { .fd = -EBADF };

        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(ELEMENTSOF(listed_fields), 8U);
        ASSERT_STREQ(listed_fields[5].name, "Name"); /* the key as written, not the member's name */
        ASSERT_EQ(listed_fields[5].type, 's');
        ASSERT_EQ(listed_fields[5].offset, offsetof(Listed, name));
        m = bus_message_of("a{sv}", 7, "flag", "b", 1, "pid", "u", 42, "signal", "i", -9, "usec", "t",
                           (uint64_t) 1 << 40, "limit", "x", (int64_t) -5, "Name", "s", "n", "fd", "h", fd);
        ASSERT_TRUE(bus_message_read_dict(m, listed_fields, &l) >= 0);
        ASSERT_TRUE(l.flag && l.pid == 42 && l.signal == -9);
        ASSERT_TRUE(l.usec == (uint64_t) 1 << 40 && l.limit == -5);
        ASSERT_STREQ(l.name, "n");
        ASSERT_TRUE(l.fd >= 0);
}

/* fd_regular_size(): the size of a regular file within the bound; other kinds of files are -EBADFD. */
static void test_fd_regular_size(void) {
        _cleanup_close_ int fd = memfd_new_data("five", "12345", 5), dir = open("/", O_RDONLY | O_DIRECTORY);
        uint64_t size = 1;
        int p[2];

        ASSERT_TRUE(fd >= 0 && dir >= 0);
        ASSERT_EQ(fd_regular_size(fd, 5, &size), 0);
        ASSERT_EQ(size, 5U);
        size = 1;
        ASSERT_EQ(fd_regular_size(fd, 4, &size), -EFBIG);
        ASSERT_EQ(size, 1U); /* untouched on failure */
        ASSERT_EQ(fd_regular_size(dir, UINT64_MAX, &size), -EBADFD);
        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        ASSERT_EQ(fd_regular_size(p[0], UINT64_MAX, &size), -EBADFD);
        safe_close(p[0]);
        safe_close(p[1]);
        ASSERT_EQ(fd_regular_size(-1, UINT64_MAX, &size), -EBADF);
}

/* daemon_load_config(): $SCOPEBOX_CONFIG's file, and a bad value's error. */
static void test_daemon_load_config(void) {
        char path[] = "/tmp/scopebox-test-config-XXXXXX";
        Config c = {};
        int fd;

        fd = mkstemp(path);
        ASSERT_TRUE(fd >= 0);
        dprintf(fd, "SANDBOX_MAX_SESSIONS=5\n");
        close(fd);
        setenv("SCOPEBOX_CONFIG", path, 1);
        ASSERT_EQ(daemon_load_config(&c), 0);
        ASSERT_EQ(c.max_sessions, 5);
        config_done(&c);
        setenv("SANDBOX_PIDS_LIMIT", "1", 1);
        ASSERT_EQ(daemon_load_config(&c), -ERANGE);
        config_done(&c);
        unsetenv("SANDBOX_PIDS_LIMIT");
        unsetenv("SCOPEBOX_CONFIG");
        unlink(path);
}

int main(int argc, char *argv[]) {
        RUN(test_bus_read_array);
        RUN(test_bus_read_options);
        RUN(test_bus_dict_list);
        RUN(test_fd_regular_size);
        RUN(test_daemon_load_config);
        RUN(test_receive_fds);
        RUN(test_array_grow);
        RUN(test_base64_roundtrip);
        RUN(test_base64_strict);
        RUN(test_session_id);
        RUN(test_session_id_tagged);
        RUN(test_mime);
        RUN(test_parse);
        RUN(test_workspace_path);
        RUN(test_storage_config);
        RUN(test_utf8);
        RUN(test_secret_equal);
        RUN(test_json_parse);
        RUN(test_json_strict);
        RUN(test_json_strict_bounds);
        RUN(test_json_strict_text);
        RUN(test_json_dispatch);
        RUN(test_config);
        RUN(test_hangup_pipe);
        RUN(test_reset_signals);
        RUN(test_daemon_signals);
        RUN(test_proc_field);
        RUN(test_time);
        RUN(test_stream_frame_splits);
        RUN(test_stream_frame_bounds);
        RUN(test_stream_lines);
        RUN(test_list);
        RUN(test_json_writer);
        if (argc > 1) {
                test_config_documented(argv[1]);
                printf("ok - test_config_documented\n");
        }
        return 0;
}
