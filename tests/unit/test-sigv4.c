/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit tests of AWS Signature Version 4 signing against AWS's published vectors and S3 examples. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "endpoint.h"
#include "macro.h"
#include "sigv4.h"
#include "storage-config.h"
#include "tests.h"

#define SUITE_TIME ((time_t) 1440938160) /* 20150830T123600Z */
#define S3_DOC_TIME ((time_t) 1369353600) /* 20130524T000000Z */
#define SUITE_STS_PREFIX "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
#define S3_STS_PREFIX "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"

static bool has_prefix(const char *s, const char *prefix) {
        return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static const SigV4Credentials suite_creds = {
        .access_key_id = "AKIDEXAMPLE",
        .secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
};

static const SigV4Credentials s3_doc_creds = {
        .access_key_id = "AKIAIOSFODNN7EXAMPLE",
        .secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

static void test_uri_encode(void) {
        static const struct {
                const char *in;
                const char *path, *component;
        } v[] = {
                { "", "", "" },
                { "abcXYZ019-_.~", "abcXYZ019-_.~", "abcXYZ019-_.~" },
                { "a b", "a%20b", "a%20b" },
                { "a+b", "a%2Bb", "a%2Bb" },
                { "a/b/", "a/b/", "a%2Fb%2F" },
                { "100%", "100%25", "100%25" },
                { "%2F", "%252F", "%252F" }, /* never decoded, never double-encoded */
                { "~user", "~user", "~user" },
                { "ü", "%C3%BC", "%C3%BC" },
                { "ሴ", "%E1%88%B4", "%E1%88%B4" },
                { "日本/語", "%E6%97%A5%E6%9C%AC/%E8%AA%9E", "%E6%97%A5%E6%9C%AC%2F%E8%AA%9E" },
                { "!'()*", "%21%27%28%29%2A", "%21%27%28%29%2A" },
                { "=&?#:@$,;", "%3D%26%3F%23%3A%40%24%2C%3B", "%3D%26%3F%23%3A%40%24%2C%3B" },
                { "\x01\x7f\xff", "%01%7F%FF", "%01%7F%FF" },
        };
        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                _cleanup_free_ char *p = NULL, *c = NULL;
                ASSERT_EQ(sigv4_uri_encode(v[i].in, true, &p), 0);
                ASSERT_STREQ(p, v[i].path);
                ASSERT_EQ(sigv4_uri_encode(v[i].in, false, &c), 0);
                ASSERT_STREQ(c, v[i].component);
        }
}

static void test_canonical_uri(void) {
        static const struct {
                const char *path;
                bool normalize;
                const char *expected;
        } v[] = {
                /* S3: exactly the path as sent, each byte encoded once. */
                { NULL, false, "/" },
                { "", false, "/" },
                { "/", false, "/" },
                { "/my photo+1.jpg", false, "/my%20photo%2B1.jpg" },
                { "/a//b/./c/../d/", false, "/a//b/./c/../d/" },
                { "/bucket/%7Euser", false, "/bucket/%257Euser" },
                { "/key~with~tilde", false, "/key~with~tilde" },
                { "/unicode/Ünïcødé ☃", false, "/unicode/%C3%9Cn%C3%AFc%C3%B8d%C3%A9%20%E2%98%83" },
                /* Other services: dot segments and empty segments removed first. */
                { "/example/..", true, "/" },
                { "/example1/example2/../..", true, "/" },
                { "/./", true, "/" },
                { "//", true, "/" },
                { "/./example", true, "/example" },
                { "//example//", true, "/example/" },
                { "/a/b/../c", true, "/a/c" },
                { "/../../x", true, "/x" },
                { "/example space/", true, "/example%20space/" },
        };
        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                _cleanup_free_ char *u = NULL;
                ASSERT_EQ(sigv4_canonical_uri(v[i].path, v[i].normalize, &u), 0);
                ASSERT_STREQ(u, v[i].expected);
        }
        char *u = NULL;
        ASSERT_EQ(sigv4_canonical_uri("relative", false, &u), -EINVAL);
        ASSERT_TRUE(!u);
}

static void test_canonical_query(void) {
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;

        /* Sorted by encoded name, then by encoded value; duplicates kept. */
        const SigV4Pair q1[] = {
                { "Param1", "value2" }, { "Param1", "Value1" }, { "b", "x" }, { "A", NULL }, { "a", "" },
        };
        ASSERT_EQ(sigv4_canonical_query(q1, ELEMENTSOF(q1), &a), 0);
        ASSERT_STREQ(a, "A=&Param1=Value1&Param1=value2&a=&b=x");

        /* Sorting happens after encoding: "%E1…" sorts before "P", "Param" before "Param-3". */
        const SigV4Pair q2[] = { { "Param-3", "Value3" }, { "Param", "Value2" }, { "ሴ", "Value1" } };
        ASSERT_EQ(sigv4_canonical_query(q2, ELEMENTSOF(q2), &b), 0);
        ASSERT_STREQ(b, "%E1%88%B4=Value1&Param=Value2&Param-3=Value3");

        const SigV4Pair q3[] = {
                { "prefix", "photos/2024 trip/" }, { "key+plus", "a+b=c&d" }, { "tilde~", "~" },
                { "pct", "100%" },
        };
        ASSERT_EQ(sigv4_canonical_query(q3, ELEMENTSOF(q3), &c), 0);
        ASSERT_STREQ(c, "key%2Bplus=a%2Bb%3Dc%26d&pct=100%25&prefix=photos%2F2024%20trip%2F&tilde~=~");

        ASSERT_EQ(sigv4_canonical_query(NULL, 0, &d), 0);
        ASSERT_STREQ(d, "");

        const SigV4Pair bad[] = { { NULL, "x" } };
        ASSERT_EQ(sigv4_canonical_query(bad, 1, &e), -EINVAL);
}

static void test_canonical_headers(void) {
        _cleanup_free_ char *ch = NULL, *sh = NULL;

        const SigV4Pair h[] = {
                { "Host", "example.amazonaws.com" },
                { "My-Header1", "value4" },
                { "X-Amz-Meta-Note", "  two  words\t\tand   tabs  " },
                { "my-header1", " value1 " },
                { "Content-Type", "text/plain; charset=utf-8" },
                { "X-Empty", "" },
                { "X-Blank", "   " },
        };
        ASSERT_EQ(sigv4_canonical_headers(h, ELEMENTSOF(h), &ch, &sh), 0);
        ASSERT_STREQ(ch, "content-type:text/plain; charset=utf-8\n"
                         "host:example.amazonaws.com\n"
                         "my-header1:value4,value1\n"
                         "x-amz-meta-note:two words and tabs\n"
                         "x-blank:\n"
                         "x-empty:\n");
        ASSERT_STREQ(sh, "content-type;host;my-header1;x-amz-meta-note;x-blank;x-empty");

        /* Header injection and invalid names are refused. */
        static const SigV4Pair bad[][1] = {
                { { "X-A", "a\r\nX-Evil: 1" } }, { { "X-A", "a\nb" } }, { { "X A", "a" } },
                { { "X-A:", "a" } }, { { "", "a" } }, { { "X-A", NULL } }, { { "X-A", "nul\x7f" } },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char *c = NULL, *s = NULL;
                ASSERT_EQ(sigv4_canonical_headers(bad[i], 1, &c, &s), -EINVAL);
                ASSERT_TRUE(!c && !s);
        }
}

static void test_amz_date(void) {
        char d[SIGV4_AMZ_DATE_LEN + 1];

        ASSERT_EQ(sigv4_format_amz_date(SUITE_TIME, d), 0);
        ASSERT_STREQ(d, "20150830T123600Z");
        ASSERT_EQ(sigv4_format_amz_date(0, d), 0);
        ASSERT_STREQ(d, "19700101T000000Z");
        ASSERT_EQ(sigv4_format_amz_date(-1, d), -ERANGE);
        ASSERT_EQ(sigv4_format_amz_date((time_t) 253402300800LL, d), -ERANGE); /* year 10000 */
}

static void test_signing_key(void) {
        /* AWS General Reference, "Examples of how to derive a signing key for Signature Version 4":
         * secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, 20120215, us-east-1, iam. */
        uint8_t k[SIGV4_SIGNING_KEY_SIZE];
        _cleanup_free_ char *hex = NULL;
        static const char expected[] = "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d";

        ASSERT_EQ(sigv4_signing_key(suite_creds.secret, "20120215", "us-east-1", "iam", k), 0);
        for (size_t i = 0; i < sizeof(k); i++) {
                char b[3];
                snprintf(b, sizeof(b), "%02x", k[i]);
                ASSERT_TRUE(strncmp(expected + 2 * i, b, 2) == 0);
        }
        ASSERT_EQ(sigv4_signing_key("", "20120215", "us-east-1", "iam", k), -EINVAL);
        ASSERT_EQ(sigv4_signing_key("s", "2012021", "us-east-1", "iam", k), -EINVAL);
        ASSERT_EQ(sigv4_signing_key("s", "20120215", "us/east", "iam", k), -EINVAL);
}

static void test_sha256(void) {
        _cleanup_free_ char *a = NULL, *b = NULL;

        ASSERT_EQ(sigv4_sha256_hex("", 0, &a), 0);
        ASSERT_STREQ(a, SIGV4_EMPTY_SHA256);
        ASSERT_EQ(sigv4_sha256_hex("Welcome to Amazon S3.", 21, &b), 0);
        ASSERT_STREQ(b, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

/* The AWS Signature Version 4 test suite (aws-sig-v4-test-suite, 2015-08-30 edition; the "normalized"
 * and "unnormalized" path variants and get-vanilla-query-order-encoded come from its successor in
 * awslabs/aws-c-auth tests/aws-signing-test-suite/v4). Credentials AKIDEXAMPLE, region us-east-1,
 * service "service", 20150830T123600Z. X-Amz-Date is added by the signer, so it is not an input. */
typedef struct SuiteVector {
        const char *name;
        const char *method;
        const char *path;
        bool normalize;
        SigV4Pair query[3];
        SigV4Pair headers[4];
        const char *body;
        const char *canonical_request;
        const char *string_to_sign;
        const char *signature;
} SuiteVector;

#define UNRESERVED "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#define CR_TAIL(signed) "\n\n" signed "\n" SIGV4_EMPTY_SHA256
#define STS_TOKEN                                                                               \
        "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpS" \
        "PfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQD" \
        "YwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+sc" \
        "qKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA=="
#define CR_VANILLA(method, uri, query)                                                          \
        method "\n" uri "\n" query "\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z" \
        CR_TAIL("host;x-amz-date")

static const SuiteVector suite[] = {
        {
                "get-vanilla", "GET", "/", true, {}, {}, NULL,
                CR_VANILLA("GET", "/", ""),
                SUITE_STS_PREFIX "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        {
                "get-vanilla-empty-query-key", "GET", "/", true, { { "Param1", "value1" } }, {}, NULL,
                CR_VANILLA("GET", "/", "Param1=value1"),
                SUITE_STS_PREFIX "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
                "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb",
        },
        {
                "get-vanilla-query-order-key-case", "GET", "/", true,
                { { "Param2", "value2" }, { "Param1", "value1" } }, {}, NULL,
                CR_VANILLA("GET", "/", "Param1=value1&Param2=value2"),
                SUITE_STS_PREFIX "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
                "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        },
        {
                "get-vanilla-query-order-encoded", "GET", "/", true,
                { { "Param-3", "Value3" }, { "Param", "Value2" }, { "ሴ", "Value1" } }, {}, NULL,
                CR_VANILLA("GET", "/", "%E1%88%B4=Value1&Param=Value2&Param-3=Value3"),
                SUITE_STS_PREFIX "868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71",
                "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
        },
        {
                "get-vanilla-query-unreserved", "GET", "/", true,
                { { UNRESERVED, UNRESERVED } }, {}, NULL,
                CR_VANILLA("GET", "/", UNRESERVED "=" UNRESERVED),
                SUITE_STS_PREFIX "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
                "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197",
        },
        {
                "get-vanilla-utf8-query", "GET", "/", true, { { "ሴ", "bar" } }, {}, NULL,
                CR_VANILLA("GET", "/", "%E1%88%B4=bar"),
                SUITE_STS_PREFIX "eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073",
                "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04",
        },
        {
                "get-unreserved", "GET", "/" UNRESERVED, true, {}, {}, NULL,
                CR_VANILLA("GET", "/" UNRESERVED, ""),
                SUITE_STS_PREFIX "6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9",
                "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f",
        },
        {
                "get-utf8", "GET", "/ሴ", true, {}, {}, NULL,
                CR_VANILLA("GET", "/%E1%88%B4", ""),
                SUITE_STS_PREFIX "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
                "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
        },
        {
                "get-space-normalized", "GET", "/example space/", true, {}, {}, NULL,
                CR_VANILLA("GET", "/example%20space/", ""),
                SUITE_STS_PREFIX "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
                "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
        },
        {
                "get-space-unnormalized", "GET", "/example space/", false, {}, {}, NULL,
                CR_VANILLA("GET", "/example%20space/", ""),
                SUITE_STS_PREFIX "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86",
                "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741",
        },
        {
                "get-relative-normalized", "GET", "/example/..", true, {}, {}, NULL,
                CR_VANILLA("GET", "/", ""),
                SUITE_STS_PREFIX "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        {
                "get-relative-unnormalized", "GET", "/example/..", false, {}, {}, NULL,
                CR_VANILLA("GET", "/example/..", ""),
                SUITE_STS_PREFIX "0511f456aa502b456d135fcb9d749374a55228f9dbeedda1eacf659e05b0615b",
                "eca7ead57bb5aa5c8e28007acd4ff04e1ff9a0ff3b237ec1554a184887ff9282",
        },
        {
                "get-relative-relative-normalized", "GET", "/example1/example2/../..", true, {}, {}, NULL,
                CR_VANILLA("GET", "/", ""),
                SUITE_STS_PREFIX "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        {
                "get-relative-relative-unnormalized", "GET", "/example1/example2/../..", false, {}, {}, NULL,
                CR_VANILLA("GET", "/example1/example2/../..", ""),
                SUITE_STS_PREFIX "76115030c0f3ff06c20fdff5ceb6d5e0b835a1743e00b94fea7c7f381269437b",
                "dc33e0856fd4baca4d7aa2146c38958283844764f38c74252a333df5e613003b",
        },
        {
                "get-slash-normalized", "GET", "//", true, {}, {}, NULL,
                CR_VANILLA("GET", "/", ""),
                SUITE_STS_PREFIX "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        {
                "get-slash-unnormalized", "GET", "//", false, {}, {}, NULL,
                CR_VANILLA("GET", "//", ""),
                SUITE_STS_PREFIX "80cb39203d058af815de2b79250ff56e1b73eb9b4718c86556cdc6f150c5d209",
                "c88bcd3d312d75078c0cd961d6deae3f4c754924b01669efcfcb439fd5e5b76e",
        },
        {
                "get-slash-dot-slash-normalized", "GET", "/./", true, {}, {}, NULL,
                CR_VANILLA("GET", "/", ""),
                SUITE_STS_PREFIX "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        },
        {
                "get-slash-dot-slash-unnormalized", "GET", "/./", false, {}, {}, NULL,
                CR_VANILLA("GET", "/./", ""),
                SUITE_STS_PREFIX "d67825e2268bd77a97c7688b8d72c31a3c1855b309808505ba0a9747d2465aa7",
                "68714168e6557f8f2de0ef956fc24dc2593a4bd2961f8df51898d8a134695145",
        },
        {
                "get-slash-pointless-dot-normalized", "GET", "/./example", true, {}, {}, NULL,
                CR_VANILLA("GET", "/example", ""),
                SUITE_STS_PREFIX "214d50c111a8edc4819da6a636336472c916b5240f51e9a51b5c3305180cf702",
                "ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5",
        },
        {
                "get-slash-pointless-dot-unnormalized", "GET", "/./example", false, {}, {}, NULL,
                CR_VANILLA("GET", "/./example", ""),
                SUITE_STS_PREFIX "73895e0e829507e28e39fd24669aedc2434a8e179e547e3c075b42921f952cdb",
                "beb03f223f7deae4146464f06e29eebbee9c8afbe15c290cf07aa8b119e14cff",
        },
        {
                "get-slashes-normalized", "GET", "//example//", true, {}, {}, NULL,
                CR_VANILLA("GET", "/example/", ""),
                SUITE_STS_PREFIX "cb96b4ac96d501f7c5c15bc6d67b3035061cfced4af6585ad927f7e6c985c015",
                "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
        },
        {
                "get-slashes-unnormalized", "GET", "//example//", false, {}, {}, NULL,
                CR_VANILLA("GET", "//example//", ""),
                SUITE_STS_PREFIX "528ec3105ee1f34ab014bb0a1a45da0ed2742a4fea3555149e5b4d5d201eb240",
                "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5",
        },
        {
                "get-header-key-duplicate", "GET", "/", true, {},
                { { "My-Header1", "value2" }, { "My-Header1", "value2" }, { "My-Header1", "value1" } }, NULL,
                "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\n"
                "x-amz-date:20150830T123600Z" CR_TAIL("host;my-header1;x-amz-date"),
                SUITE_STS_PREFIX "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
                "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
        },
        {
                "get-header-value-order", "GET", "/", true, {},
                { { "My-Header1", "value4" }, { "My-Header1", "value1" }, { "My-Header1", "value3" },
                  { "My-Header1", "value2" } }, NULL,
                "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value4,value1,value3,value2\n"
                "x-amz-date:20150830T123600Z" CR_TAIL("host;my-header1;x-amz-date"),
                SUITE_STS_PREFIX "31ce73cd3f3d9f66977ad3dd957dc47af14df92fcd8509f59b349e9137c58b86",
                "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01",
        },
        {
                "get-header-value-trim", "GET", "/", true, {},
                { { "My-Header1", " value1" }, { "My-Header2", " \"a   b   c\"" } }, NULL,
                "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\n"
                "x-amz-date:20150830T123600Z" CR_TAIL("host;my-header1;my-header2;x-amz-date"),
                SUITE_STS_PREFIX "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
                "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
        },
        {
                "post-vanilla", "POST", "/", true, {}, {}, NULL,
                CR_VANILLA("POST", "/", ""),
                SUITE_STS_PREFIX "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        },
        {
                "post-vanilla-query", "POST", "/", true, { { "Param1", "value1" } }, {}, NULL,
                CR_VANILLA("POST", "/", "Param1=value1"),
                SUITE_STS_PREFIX "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
                "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11",
        },
        {
                "post-vanilla-query-space", "POST", "/", true, { { "p", "" } }, {}, NULL,
                CR_VANILLA("POST", "/", "p="),
                SUITE_STS_PREFIX "64d815da3176ec9c192c391374e9d4084588659309187ce60e0fcffcbc8c81c5",
                "e71688addb58a26418614085fb730ba3faa623b461c17f48f2fbdb9361b94a9b",
        },
        {
                "post-vanilla-query-nonunreserved", "POST", "/", true,
                { { "@#$%^", "" }, { "+", "/,?><`\";:\\|][{}" } }, {}, NULL,
                CR_VANILLA("POST", "/",
                           "%2B=%2F%2C%3F%3E%3C%60%22%3B%3A%5C%7C%5D%5B%7B%7D&%40%23%24%25%5E="),
                SUITE_STS_PREFIX "13c1a9775a543ebd153fdebba799dc0572ea298c6aac14eb1a86998b980c2a34",
                "66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e",
        },
        {
                "post-header-key-case", "POST", "/", true, {}, {}, NULL,
                CR_VANILLA("POST", "/", ""),
                SUITE_STS_PREFIX "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        },
        {
                "post-header-key-sort", "POST", "/", true, {}, { { "My-Header1", "value1" } }, NULL,
                "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nx-amz-date:20150830T123600Z"
                CR_TAIL("host;my-header1;x-amz-date"),
                SUITE_STS_PREFIX "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65",
                "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
        },
        {
                "post-header-value-case", "POST", "/", true, {}, { { "My-Header1", "VALUE1" } }, NULL,
                "POST\n/\n\nhost:example.amazonaws.com\nmy-header1:VALUE1\nx-amz-date:20150830T123600Z"
                CR_TAIL("host;my-header1;x-amz-date"),
                SUITE_STS_PREFIX "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93",
                "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d",
        },
        {
                "post-x-www-form-urlencoded", "POST", "/", true, {},
                { { "Content-Type", "application/x-www-form-urlencoded" } }, "Param1=value1",
                "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:example.amazonaws.com\n"
                "x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
                "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
                SUITE_STS_PREFIX "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
                "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
        },
        {
                "post-x-www-form-urlencoded-parameters", "POST", "/", true, {},
                { { "Content-Type", "application/x-www-form-urlencoded; charset=utf8" } }, "Param1=value1",
                "POST\n/\n\ncontent-type:application/x-www-form-urlencoded; charset=utf8\n"
                "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
                "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
                SUITE_STS_PREFIX "2e1cf7ed91881a30569e46552437e4156c823447bf1781b921b5d486c568dd1c",
                "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe",
        },
        {
                /* The session token of post-sts-header-before is just one more signed header here. */
                "post-sts-header-before", "POST", "/", true, {},
                { { "X-Amz-Security-Token", STS_TOKEN } }, NULL,
                "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\nx-amz-security-token:"
                STS_TOKEN CR_TAIL("host;x-amz-date;x-amz-security-token"),
                SUITE_STS_PREFIX "c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6",
                "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead",
        },
};

static size_t pairs_len(const SigV4Pair *p, size_t max) {
        size_t n = 0;
        while (n < max && p[n].name)
                n++;
        return n;
}

static void test_suite(void) {
        for (size_t i = 0; i < ELEMENTSOF(suite); i++) {
                const SuiteVector *v = suite + i;
                _cleanup_(sigv4_result_done) SigV4Result r = {};
                _cleanup_free_ char *payload_hash = NULL, *authorization = NULL;

                if (v->body)
                        ASSERT_EQ(sigv4_sha256_hex(v->body, strlen(v->body), &payload_hash), 0);

                SigV4Request req = {
                        .method = v->method,
                        .host = "example.amazonaws.com",
                        .path = v->path,
                        .query = v->query,
                        .n_query = pairs_len(v->query, ELEMENTSOF(v->query)),
                        .headers = v->headers,
                        .n_headers = pairs_len(v->headers, ELEMENTSOF(v->headers)),
                        .payload_hash = payload_hash,
                        .region = "us-east-1",
                        .service = "service",
                        .flags = v->normalize ? SIGV4_NORMALIZE_PATH : 0,
                };
                fprintf(stderr, "suite: %s\n", v->name);
                ASSERT_EQ(sigv4_sign_headers(&req, &suite_creds, SUITE_TIME, &r), 0);
                ASSERT_STREQ(r.canonical_request, v->canonical_request);
                ASSERT_STREQ(r.string_to_sign, v->string_to_sign);
                ASSERT_STREQ(r.signature, v->signature);
                ASSERT_STREQ(r.amz_date, "20150830T123600Z");
                ASSERT_TRUE(!r.content_sha256 && !r.query);
                ASSERT_TRUE(asprintf(&authorization,
                                     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                                     "aws4_request, SignedHeaders=%s, Signature=%s",
                                     r.signed_headers, v->signature) > 0);
                ASSERT_STREQ(r.authorization, authorization);
        }
}

static void test_suite_refusals(void) {
        SigV4Result r = {};

        /* get-header-value-multiline: obsolete line folding is refused rather than unfolded. */
        const SigV4Pair folded[] = { { "My-Header1", "value1\n  value2\n     value3" } };
        SigV4Request req = {
                .method = "GET", .host = "example.amazonaws.com", .path = "/",
                .headers = folded, .n_headers = 1, .region = "us-east-1", .service = "service",
        };
        ASSERT_EQ(sigv4_sign_headers(&req, &suite_creds, SUITE_TIME, &r), -EINVAL);

        /* Headers the signer owns. */
        static const char *const owned[] = { "Host", "X-Amz-Date", "authorization", "x-amz-content-sha256" };
        for (size_t i = 0; i < ELEMENTSOF(owned); i++) {
                const SigV4Pair h[] = { { owned[i], "x" } };
                req.headers = h;
                ASSERT_EQ(sigv4_sign_headers(&req, &suite_creds, SUITE_TIME, &r), -EINVAL);
        }
        req.headers = NULL;
        req.n_headers = 0;

        /* Malformed inputs. */
        SigV4Request bad = req;
        bad.method = "GET /";
        ASSERT_EQ(sigv4_sign_headers(&bad, &suite_creds, SUITE_TIME, &r), -EINVAL);
        bad = req;
        bad.host = "evil.com/x";
        ASSERT_EQ(sigv4_sign_headers(&bad, &suite_creds, SUITE_TIME, &r), -EINVAL);
        bad = req;
        bad.region = "us-east-1/x";
        ASSERT_EQ(sigv4_sign_headers(&bad, &suite_creds, SUITE_TIME, &r), -EINVAL);
        bad = req;
        bad.payload_hash = "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855";
        ASSERT_EQ(sigv4_sign_headers(&bad, &suite_creds, SUITE_TIME, &r), -EINVAL);
        bad = req;
        bad.path = "no-slash";
        ASSERT_EQ(sigv4_sign_headers(&bad, &suite_creds, SUITE_TIME, &r), -EINVAL);
        const SigV4Credentials no_secret = { "AKIDEXAMPLE", "" }, bad_id = { "AKID/EXAMPLE", "s" };
        ASSERT_EQ(sigv4_sign_headers(&req, &no_secret, SUITE_TIME, &r), -EINVAL);
        ASSERT_EQ(sigv4_sign_headers(&req, &bad_id, SUITE_TIME, &r), -EINVAL);
        ASSERT_EQ(sigv4_sign_headers(&req, &suite_creds, -5, &r), -ERANGE);
        ASSERT_TRUE(!r.authorization && !r.canonical_request);
}

/* "Signature Calculations for the Authorization Header: Transferring Payload in a Single Chunk"
 * (S3 API reference, sig-v4-header-based-auth): examplebucket in us-east-1, AKIAIOSFODNN7EXAMPLE,
 * 20130524T000000Z, virtual-hosted host examplebucket.s3.amazonaws.com. */
static void check_s3_doc(const char *method, const char *key, const SigV4Pair *query, size_t n_query,
                         const SigV4Pair *headers, size_t n_headers, const char *payload_hash,
                         const char *canonical_request, const char *sts_hash, const char *signature,
                         const char *signed_headers) {
        _cleanup_(sigv4_result_done) SigV4Result r = {};
        _cleanup_free_ char *url = NULL, *authorization = NULL;

        const S3Location loc = {
                .endpoint = "https://s3.amazonaws.com",
                .region = "us-east-1",
                .bucket = "examplebucket",
                .key = key,
        };
        ASSERT_EQ(s3_sign_request(&loc, method, query, n_query, headers, n_headers, payload_hash,
                                  &s3_doc_creds, S3_DOC_TIME, &r, &url), 0);
        ASSERT_STREQ(r.canonical_request, canonical_request);
        ASSERT_TRUE(has_prefix(r.string_to_sign, S3_STS_PREFIX));
        ASSERT_STREQ(r.string_to_sign + strlen(S3_STS_PREFIX), sts_hash);
        ASSERT_STREQ(r.signature, signature);
        ASSERT_STREQ(r.signed_headers, signed_headers);
        ASSERT_STREQ(r.amz_date, "20130524T000000Z");
        ASSERT_STREQ(r.content_sha256, payload_hash ?: SIGV4_EMPTY_SHA256);
        ASSERT_TRUE(asprintf(&authorization, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
                             "us-east-1/s3/aws4_request, SignedHeaders=%s, Signature=%s", signed_headers,
                             signature) > 0);
        ASSERT_STREQ(r.authorization, authorization);
        ASSERT_TRUE(has_prefix(url, "https://examplebucket.s3.amazonaws.com/"));
}

static void test_s3_doc_get_object(void) {
        const SigV4Pair h[] = { { "Range", "bytes=0-9" } };
        check_s3_doc("GET", "test.txt", NULL, 0, h, 1, NULL,
                     "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                     "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\nx-amz-date:20130524T000000Z\n\n"
                     "host;range;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
                     "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
                     "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                     "host;range;x-amz-content-sha256;x-amz-date");
}

static void test_s3_doc_put_object(void) {
        _cleanup_free_ char *hash = NULL;
        const SigV4Pair h[] = {
                { "Date", "Fri, 24 May 2013 00:00:00 GMT" }, { "x-amz-storage-class", "REDUCED_REDUNDANCY" },
        };

        ASSERT_EQ(sigv4_sha256_hex("Welcome to Amazon S3.", 21, &hash), 0);
        check_s3_doc("PUT", "test$file.text", NULL, 0, h, ELEMENTSOF(h), hash,
                     "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
                     "host:examplebucket.s3.amazonaws.com\n"
                     "x-amz-content-sha256:"
                     "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
                     "x-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
                     "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
                     "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
                     "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
                     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
                     "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
}

static void test_s3_doc_get_bucket_lifecycle(void) {
        const SigV4Pair q[] = { { "lifecycle", NULL } };
        check_s3_doc("GET", NULL, q, 1, NULL, 0, NULL,
                     "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
                     "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\nx-amz-date:20130524T000000Z\n\n"
                     "host;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
                     "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
                     "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
                     "host;x-amz-content-sha256;x-amz-date");
}

static void test_s3_doc_list_objects(void) {
        const SigV4Pair q[] = { { "prefix", "J" }, { "max-keys", "2" } };
        check_s3_doc("GET", NULL, q, 2, NULL, 0, NULL,
                     "GET\n/\nmax-keys=2&prefix=J\nhost:examplebucket.s3.amazonaws.com\n"
                     "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\nx-amz-date:20130524T000000Z\n\n"
                     "host;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
                     "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
                     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
                     "host;x-amz-content-sha256;x-amz-date");
}

/* "Authenticating Requests: Using Query Parameters (AWS Signature Version 4)", the GET Object example. */
static void test_s3_doc_presigned_url(void) {
        _cleanup_(sigv4_result_done) SigV4Result r = {};
        _cleanup_free_ char *url = NULL;

        const SigV4Request req = {
                .method = "GET",
                .host = "examplebucket.s3.amazonaws.com",
                .path = "/test.txt",
                .region = "us-east-1",
                .service = "s3",
        };
        ASSERT_EQ(sigv4_presign(&req, &s3_doc_creds, S3_DOC_TIME, 86400, &r), 0);
        ASSERT_STREQ(r.canonical_request,
                     "GET\n/test.txt\n"
                     "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
                     "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
                     "X-Amz-SignedHeaders=host\n"
                     "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD");
        ASSERT_STREQ(r.string_to_sign,
                     S3_STS_PREFIX "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");
        ASSERT_STREQ(r.signature, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
        ASSERT_TRUE(!r.authorization);
        ASSERT_STREQ(r.query,
                     "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
                     "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
                     "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404&"
                     "X-Amz-SignedHeaders=host");

        /* The same through the S3 helper: custom endpoint s3.amazonaws.com, virtual-hosted. */
        const S3Location loc = {
                .endpoint = "https://s3.amazonaws.com",
                .region = "us-east-1",
                .bucket = "examplebucket",
                .key = "test.txt",
        };
        ASSERT_EQ(s3_presign_url(&loc, "GET", NULL, 0, NULL, 0, &s3_doc_creds, S3_DOC_TIME, 86400, 0, &url),
                  0);
        ASSERT_STREQ(url, "https://examplebucket.s3.amazonaws.com/test.txt?"
                          "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"
                          "20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&"
                          "X-Amz-Expires=86400&"
                          "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404&"
                          "X-Amz-SignedHeaders=host");
}

static void test_presign_refusals(void) {
        SigV4Result r = {};
        char *url = NULL;
        const S3Location loc = { .region = "us-east-1", .bucket = "examplebucket", .key = "k" };

        ASSERT_EQ(s3_presign_url(&loc, "GET", NULL, 0, NULL, 0, &s3_doc_creds, S3_DOC_TIME, 0, 0, &url),
                  -EINVAL);
        ASSERT_EQ(s3_presign_url(&loc, "GET", NULL, 0, NULL, 0, &s3_doc_creds, S3_DOC_TIME,
                                 SIGV4_PRESIGN_EXPIRES_MAX + 1, 0, &url), -EINVAL);
        ASSERT_EQ(s3_presign_url(&loc, "GET", NULL, 0, NULL, 0, &s3_doc_creds, S3_DOC_TIME,
                                 SIGV4_PRESIGN_EXPIRES_MAX, 0, &url), 0);
        free(url);
        url = NULL;
        const SigV4Pair q[] = { { "x-amz-signature", "forged" } };
        ASSERT_EQ(s3_presign_url(&loc, "GET", q, 1, NULL, 0, &s3_doc_creds, S3_DOC_TIME, 60, 0, &url),
                  -EINVAL);
        ASSERT_TRUE(!url);

        const SigV4Request req = {
                .method = "PUT", .host = "h", .path = "/k", .region = "us-east-1", .service = "s3",
                .payload_hash = "UNSIGNED",
        };
        ASSERT_EQ(sigv4_presign(&req, &s3_doc_creds, S3_DOC_TIME, 60, &r), -EINVAL);
        ASSERT_TRUE(!r.query && !r.signature);
}

static void test_presign_extras(void) {
        _cleanup_free_ char *url = NULL, *url2 = NULL;

        /* What @aws-sdk/s3-request-presigner adds: X-Amz-Content-Sha256 and x-id; a signed
         * content-type; a key that needs encoding. */
        const S3Location loc = { .region = "eu-west-1", .bucket = "my-bucket", .key = "dir/a b+c~ü.txt" };
        const SigV4Pair q[] = { { "x-id", "PutObject" } };
        const SigV4Pair h[] = { { "Content-Type", "text/plain" } };
        ASSERT_EQ(s3_presign_url(&loc, "PUT", q, 1, h, 1, &s3_doc_creds, S3_DOC_TIME, 3600,
                                 SIGV4_PRESIGN_CONTENT_SHA256_PARAM, &url), 0);
        ASSERT_TRUE(has_prefix(url, "https://my-bucket.s3.eu-west-1.amazonaws.com/dir/a%20b%2Bc~%C3%BC.txt?"
                                    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD&"
                                    "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Feu-west-1%2Fs3%2F"
                                    "aws4_request&"
                                    "X-Amz-Date=20130524T000000Z&X-Amz-Expires=3600&X-Amz-Signature="));
        ASSERT_TRUE(strstr(url, "&X-Amz-SignedHeaders=content-type%3Bhost&x-id=PutObject"));

        /* Path style on a custom endpoint with a port. */
        const S3Location minio = {
                .endpoint = "http://127.0.0.1:9000", .region = "us-east-1", .bucket = "bkt", .key = "k",
        };
        ASSERT_EQ(s3_presign_url(&minio, "GET", NULL, 0, NULL, 0, &s3_doc_creds, S3_DOC_TIME, 60, 0, &url2),
                  0);
        ASSERT_TRUE(has_prefix(url2, "http://127.0.0.1:9000/bkt/k?X-Amz-Algorithm="));
}

static void check_resolve(const S3Location *loc, const char *origin, const char *host, const char *path) {
        _cleanup_(s3_target_done) S3Target t = {};

        ASSERT_EQ(s3_location_resolve(loc, &t), 0);
        ASSERT_STREQ(t.origin, origin);
        ASSERT_STREQ(t.host, host);
        ASSERT_STREQ(t.path, path);
}

static void test_s3_location(void) {
        /* The choices @aws-sdk/client-s3 makes for the same inputs. */
        check_resolve(&(S3Location) { .region = "us-east-1", .bucket = "bkt", .key = "k" },
                      "https://bkt.s3.us-east-1.amazonaws.com", "bkt.s3.us-east-1.amazonaws.com", "/k");
        check_resolve(&(S3Location) { .region = "us-east-1", .bucket = "bkt", .key = "k",
                                      .path_style = true },
                      "https://s3.us-east-1.amazonaws.com", "s3.us-east-1.amazonaws.com", "/bkt/k");
        check_resolve(&(S3Location) { .region = "eu-west-1", .bucket = "my.bucket", .key = "a/b" },
                      "https://s3.eu-west-1.amazonaws.com", "s3.eu-west-1.amazonaws.com", "/my.bucket/a/b");
        check_resolve(&(S3Location) { .region = "cn-north-1", .bucket = "bkt", .key = "k" },
                      "https://bkt.s3.cn-north-1.amazonaws.com.cn", "bkt.s3.cn-north-1.amazonaws.com.cn",
                      "/k");
        check_resolve(&(S3Location) { .region = "us-west-2", .bucket = "bkt" },
                      "https://bkt.s3.us-west-2.amazonaws.com", "bkt.s3.us-west-2.amazonaws.com", "/");
        check_resolve(&(S3Location) { .region = "us-west-2", .bucket = "bkt", .path_style = true },
                      "https://s3.us-west-2.amazonaws.com", "s3.us-west-2.amazonaws.com", "/bkt/");
        check_resolve(&(S3Location) { .region = "us-west-2" },
                      "https://s3.us-west-2.amazonaws.com", "s3.us-west-2.amazonaws.com", "/");
        check_resolve(&(S3Location) { .region = "us-west-2", .bucket = "bkt", .key = "/lead//x/" },
                      "https://bkt.s3.us-west-2.amazonaws.com", "bkt.s3.us-west-2.amazonaws.com",
                      "//lead//x/");
        check_resolve(&(S3Location) { .endpoint = "http://minio.example.com:9000", .region = "us-east-1",
                                      .bucket = "bkt", .key = "k" },
                      "http://bkt.minio.example.com:9000", "bkt.minio.example.com:9000", "/k");
        check_resolve(&(S3Location) { .endpoint = "http://127.0.0.1:9000", .region = "us-east-1",
                                      .bucket = "bkt", .key = "k" },
                      "http://127.0.0.1:9000", "127.0.0.1:9000", "/bkt/k");
        check_resolve(&(S3Location) { .endpoint = "https://[::1]:9000", .region = "us-east-1",
                                      .bucket = "bkt", .key = "k" },
                      "https://[::1]:9000", "[::1]:9000", "/bkt/k");
        check_resolve(&(S3Location) { .endpoint = "https://H.Example.com:443/base/", .region = "us-east-1",
                                      .bucket = "bkt", .key = "k", .path_style = true },
                      "https://h.example.com", "h.example.com", "/base/bkt/k");
        check_resolve(&(S3Location) { .endpoint = "storage.example.com", .region = "auto",
                                      .bucket = "Upper_Case", .key = "k" },
                      "https://storage.example.com", "storage.example.com", "/Upper_Case/k");

        static const S3Location bad[] = {
                { .region = "us-east-1", .key = "k" },                             /* key without bucket */
                { .region = "us-east-1", .bucket = "a/b", .key = "k" },
                { .region = "us-east-1", .bucket = "bkt", .key = "bad\xff" },      /* not UTF-8 */
                { .region = "us east", .bucket = "bkt" },
                { .endpoint = "ftp://h", .region = "r", .bucket = "bkt" },
                { .endpoint = "https://h:99999", .region = "r", .bucket = "bkt" },
                { .endpoint = "https://user@h", .region = "r", .bucket = "bkt" },
                { .endpoint = "https://h/?x", .region = "r", .bucket = "bkt" },
                { .endpoint = "https://", .region = "r", .bucket = "bkt" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                S3Target t = {};
                ASSERT_EQ(s3_location_resolve(bad + i, &t), -EINVAL);
                ASSERT_TRUE(!t.origin && !t.host && !t.path);
        }
}

/* The URL a request is sent to names the host that was signed, whatever the endpoint looked like. */
static void test_url_names_signed_host(void) {
        static const char *const endpoints[] = {
                "http://127.0.0.1:9000", "https://[::1]:9000/", "HTTPS://Minio.Example.COM:443/base//",
                "minio.example.com:8443", "http://h.example.com:80", "https://h.example.com/a/../b",
        };
        for (size_t i = 0; i < ELEMENTSOF(endpoints); i++) {
                _cleanup_(s3_target_done) S3Target t = {};
                _cleanup_free_ char *url = NULL, *host = NULL, *port = NULL, *authority = NULL;
                const S3Location loc = { .endpoint = endpoints[i], .region = "us-east-1", .bucket = "bkt",
                                         .key = "a/../b c+%.tgz" };
                CURLU *u = curl_url();

                ASSERT_EQ(s3_location_resolve(&loc, &t), 0);
                ASSERT_EQ(s3_target_url(&t, "x=%2F", &url), 0);
                ASSERT_TRUE(u && curl_url_set(u, CURLUPART_URL, url, CURLU_PATH_AS_IS) == CURLUE_OK);
                ASSERT_TRUE(curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK);
                if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_NO_DEFAULT_PORT) == CURLUE_OK)
                        ASSERT_TRUE(asprintf(&authority, "%s:%s", host, port) > 0);
                else
                        ASSERT_TRUE(asprintf(&authority, "%s", host) > 0);
                ASSERT_STREQ(authority, t.host);
                /* Dot segments and the escapes' case as signed. */
                ASSERT_TRUE(strstr(url, "/a/../b%20c%2B%25.tgz?x=%2F"));
                curl_free(host);
                curl_free(port);
                host = port = NULL;
                curl_url_cleanup(u);
        }

        static const char *const bad[] = {
                "https://h#frag", "https://[fe80::1%25eth0]", "https://h:0", "https://h\\x",
                "https://h x", "https://h:pass@h", "https://h/?", "https://ex\xc3\xa4mple.com",
                "file:///etc", "https://h;x",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                S3Target t = {};
                const S3Location loc = { .endpoint = bad[i], .region = "us-east-1", .bucket = "bkt" };
                if (s3_location_resolve(&loc, &t) != -EINVAL) {
                        fprintf(stderr, "accepted endpoint '%s'\n", bad[i]);
                        abort();
                }
        }
}

/* One table for the two checks of an endpoint: the gateway's and session manager's, without libcurl
 * (storage_endpoint_is_valid()), and the agent's, by libcurl's parser (storage_endpoint_check()).
 * What the first accepts the second must accept too, or the client would hear 502 for its own
 * mistake instead of 400. */
static void test_endpoint_checks_agree(void) {
        static const struct {
                const char *endpoint;
                bool s3, oss;           /* storage_endpoint_is_valid(endpoint, true / false) */
        } table[] = {
                { "https://s3.amazonaws.com", true, true },
                { "http://127.0.0.1:9000", true, true },
                { "http://127.0.0.1:9000/", true, true },
                { "https://oss-cn-hangzhou.aliyuncs.com", true, true },
                { "https://Minio.Example.COM:443/base//", true, false },
                { "http://h.example.com:80", true, true },
                { "https://h.example.com/a/../b", true, false },
                { "https://h_x.example.com:65535/", true, true },
                { "https://[::1]:9000/", true, true },
                { "https://[2001:db8::1]", true, true },
                { "http://h:/", true, true },
                { "http://h:0", false, false },
                { "http://h:65536", false, false },
                { "http://h:99999", false, false },
                { "http://h:80x", false, false },
                { "http://h:80:90", false, false },
                { "http://h:+80", false, false },
                { "http://:80", false, false },
                { "http://", false, false },
                { "http:///etc", false, false },
                { "https://[fe80::1%25eth0]", false, false },
                { "https://[zzz]", false, false },
                { "https://[::1", false, false },
                { "https://[::1]x", false, false },
                { "https://::1", false, false },
                { "https://ex\xc3\xa4mple.com", false, false },
                { "https://h%41.example.com", false, false }, /* libcurl decodes it, we don't */
                { "https://h;x", false, false },
                { "https://h,x", false, false },
                { "https://h!x", false, false },
                { "https://h*x", false, false },
                { "https://h$x", false, false },
                { "https://h'x", false, false },
                { "https://h=x", false, false },
                { "https://h(x)", false, false },
                { "https://h&x", false, false },
                { "https://h+x", false, false },
                { "https://h~x", false, false },
                { "https://h{x}", false, false },
                { "https://h|x", false, false },
                { "https://h^x", false, false },
                { "https://h`x", false, false },
                { "https://h\"x", false, false },
                { "https://h<x>", false, false },
                { "https://h#frag", false, false },
                { "https://h/?", false, false },
                { "https://h:pass@h", false, false },
                { "https://h\\x", false, false },
                { "https://h x", false, false },
                { "https://h/\x01", false, false },
                { "https://h/\x7f", false, false },
                { "https://h/a b", false, false },
                { "https://h/base\xc3\xa4", true, false },
                { "file:///etc", false, false },
                { "ftp://h", false, false },
                { "storage.example.com", false, false },   /* the agent's parser would take it */
                { "HTTPS://h", false, false },             /* likewise */
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                for (int base_path = 0; base_path <= 1; base_path++) {
                        const char *e = table[i].endpoint;
                        bool want = base_path ? table[i].s3 : table[i].oss;
                        bool valid = storage_endpoint_is_valid(e, base_path);
                        int agent = storage_endpoint_check(e, base_path);

                        if (valid != want || (valid && agent != 0)) {
                                fprintf(stderr, "endpoint '%s' (base path %s): valid %s, agent %d\n", e,
                                        base_path ? "allowed" : "refused", valid ? "yes" : "no", agent);
                                abort();
                        }
                }
}

int main(void) {
        RUN(test_endpoint_checks_agree);
        RUN(test_url_names_signed_host);
        RUN(test_uri_encode);
        RUN(test_canonical_uri);
        RUN(test_canonical_query);
        RUN(test_canonical_headers);
        RUN(test_amz_date);
        RUN(test_signing_key);
        RUN(test_sha256);
        RUN(test_suite);
        RUN(test_suite_refusals);
        RUN(test_s3_doc_get_object);
        RUN(test_s3_doc_put_object);
        RUN(test_s3_doc_get_bucket_lifecycle);
        RUN(test_s3_doc_list_objects);
        RUN(test_s3_doc_presigned_url);
        RUN(test_presign_refusals);
        RUN(test_presign_extras);
        RUN(test_s3_location);
        return EXIT_SUCCESS;
}
