/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Listing pages from hostile endpoints: XML references, encoding-type=url keys, bounds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "s3-listing.h"
#include "tests.h"

static void check_xml(const char *in, const char *want) {
        _cleanup_free_ char *out = NULL;

        ASSERT_EQ(xml_text_decode(in, strlen(in), &out), 0);
        ASSERT_STREQ(out, want);
}

static void check_xml_error(const char *in, size_t n, int error) {
        char *out = NULL;

        ASSERT_EQ(xml_text_decode(in, n, &out), error);
        ASSERT_TRUE(!out);
}

static void test_xml_text_decode(void) {
        check_xml("", "");
        check_xml("plain/key.tgz", "plain/key.tgz");
        check_xml("a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos;", "a & b <c> \"d\" 'e'");
        /* What S3 writes for keys with control characters, and any other character. */
        check_xml("cr&#13;lf&#x0A;one&#x1;tab&#9;", "cr\rlf\none\x01tab\t");
        check_xml("&#xe9;&#233;&#x4e2d;&#x1F600;&#x10FFFF;",
                  "\xc3\xa9\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
        check_xml("&#x0000000041;", "A");
        check_xml("&amp;#x41;", "&#x41;"); /* decoded once, not twice */
        check_xml("\xc3\xbc raw UTF-8", "\xc3\xbc raw UTF-8");

        /* Malformed: a bare '&', unknown entities, no ';', empty and bad digits, uppercase 'X'. */
        check_xml_error("a & b", 5, -EBADMSG);
        check_xml_error("&nbsp;", 6, -EBADMSG);
        check_xml_error("&amp", 4, -EBADMSG);
        check_xml_error("&;", 2, -EBADMSG);
        check_xml_error("&#;", 3, -EBADMSG);
        check_xml_error("&#x;", 4, -EBADMSG);
        check_xml_error("&#12a;", 6, -EBADMSG);
        check_xml_error("&#xg1;", 6, -EBADMSG);
        check_xml_error("&#X41;", 6, -EBADMSG);
        check_xml_error("&#-1;", 5, -EBADMSG);
        /* A reference longer than any valid one is not looked at beyond the bound. */
        check_xml_error("&#x000000000000000041;", 22, -EBADMSG);

        /* No character: NUL, surrogates, beyond Unicode, huge numbers that would overflow. */
        check_xml_error("&#0;", 4, -ERANGE);
        check_xml_error("&#x0;", 5, -ERANGE);
        check_xml_error("&#xD800;", 8, -ERANGE);
        check_xml_error("&#57343;", 8, -ERANGE);
        check_xml_error("&#x110000;", 10, -ERANGE);
        check_xml_error("&#99999999999;", 14, -ERANGE);
        check_xml_error("&#xFFFFFFFFFFF;", 15, -ERANGE);

        /* A raw NUL, invalid UTF-8 raw or after decoding. */
        check_xml_error("a\0b", 3, -EILSEQ);
        check_xml_error("\xff", 1, -EILSEQ);
        check_xml_error("\xc3", 1, -EILSEQ);
}

static void check_url(const char *in, const char *want) {
        _cleanup_free_ char *out = NULL;

        ASSERT_EQ(s3_url_decode(in, strlen(in), &out), 0);
        ASSERT_STREQ(out, want);
}

static void check_url_error(const char *in, int error) {
        char *out = NULL;

        ASSERT_EQ(s3_url_decode(in, strlen(in), &out), error);
        ASSERT_TRUE(!out);
}

static void test_url_decode(void) {
        check_url("", "");
        check_url("workspaces/a.tgz", "workspaces/a.tgz");
        check_url("a%20b+c%2Bd%25e%26f", "a b c+d%e&f");
        check_url("%C3%BC%e4%b8%ad", "\xc3\xbc\xe4\xb8\xad");
        check_url("%01%7F%0A", "\x01\x7f\n");
        check_url("%2525", "%25"); /* decoded once */

        check_url_error("%", -EBADMSG);
        check_url_error("a%2", -EBADMSG);
        check_url_error("%zz", -EBADMSG);
        check_url_error("%g0", -EBADMSG);
        check_url_error("100%", -EBADMSG);
        check_url_error("a%00b", -EILSEQ);
        check_url_error("%FF", -EILSEQ);
        check_url_error("%C3", -EILSEQ);
}

static void test_listing(void) {
        static const char page[] =
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                "<Name>b</Name><Prefix>p%2Fworkspaces%2F</Prefix><KeyCount>3</KeyCount>"
                "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
                "<NextContinuationToken>AbC+/=</NextContinuationToken>"
                "<Contents><Key>p/workspaces/a+b%2Bc%25.tgz</Key>"
                "<LastModified>2024-03-01T12:34:56.000Z</LastModified><Size>42</Size></Contents>"
                "<Contents><Key>p/workspaces/%E4%B8%AD%01%26.tgz</Key>"
                "<LastModified>garbage</LastModified><Size>-1</Size></Contents>"
                "<Contents><Size>1</Size></Contents>"
                "<Contents><Key>p/x&amp;y</Key></Contents>"
                "</ListBucketResult>";
        _cleanup_(s3_listing_done) S3Listing l = {};
        const char *error = NULL;

        ASSERT_EQ(s3_listing_parse(page, strlen(page), &l, &error), 0);
        ASSERT_EQ(l.n_entries, 3);
        ASSERT_STREQ(l.entries[0].key, "p/workspaces/a b+c%.tgz");
        ASSERT_EQ(l.entries[0].modified, 1709296496);
        ASSERT_EQ(l.entries[0].size, 42);
        ASSERT_STREQ(l.entries[1].key, "p/workspaces/\xe4\xb8\xad\x01&.tgz");
        ASSERT_EQ(l.entries[1].modified, -1);
        ASSERT_EQ(l.entries[1].size, 0);
        ASSERT_STREQ(l.entries[2].key, "p/x&y");
        ASSERT_TRUE(l.truncated);
        /* The token is opaque: not URL-decoded ('+' stays). */
        ASSERT_STREQ(l.continuation, "AbC+/=");
}

static void test_listing_not_url_encoded(void) {
        /* A server that ignores encoding-type: '%' and '+' are the key's own. */
        static const char page[] = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                                   "<Contents><Key>a%20b+c&#x1;</Key></Contents></ListBucketResult>";
        _cleanup_(s3_listing_done) S3Listing l = {};

        ASSERT_EQ(s3_listing_parse(page, strlen(page), &l, NULL), 0);
        ASSERT_EQ(l.n_entries, 1);
        ASSERT_STREQ(l.entries[0].key, "a%20b+c\x01");
        ASSERT_TRUE(!l.truncated);
        ASSERT_TRUE(!l.continuation);
}

static void check_listing_error(const char *page, size_t n, int error) {
        S3Listing l = {};
        const char *reason = NULL;

        ASSERT_EQ(s3_listing_parse(page, n, &l, &reason), error);
        ASSERT_TRUE(reason != NULL);
        ASSERT_TRUE(!l.entries && l.n_entries == 0 && !l.continuation);
}

static void test_listing_errors(void) {
        static const char nul[] = "<Contents><Key>a</Key></Contents>\0<Contents><Key>b</Key></Contents>";
        char *big;
        size_t n = 0;

        check_listing_error(nul, sizeof(nul) - 1, -EILSEQ);
        check_listing_error("<Contents><Key>&#0;</Key></Contents>", 36, -ERANGE);
        check_listing_error("<Contents><Key>a & b</Key></Contents>", 37, -EBADMSG);
#define URL_PAGE(key) "<EncodingType>url</EncodingType><Contents><Key>" key "</Key></Contents>"
        check_listing_error(URL_PAGE("%zz"), strlen(URL_PAGE("%zz")), -EBADMSG);
        check_listing_error(URL_PAGE("%00"), strlen(URL_PAGE("%00")), -EILSEQ);
#define EMPTY_TOKEN "<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>"
        check_listing_error(EMPTY_TOKEN, strlen(EMPTY_TOKEN), -EBADMSG);

        /* One entry more than a page may have. */
        big = malloc(64 * (S3_LISTING_ENTRIES_MAX + 1) + 1);
        ASSERT_TRUE(big);
        for (unsigned i = 0; i <= S3_LISTING_ENTRIES_MAX; i++)
                n += (size_t) sprintf(big + n, "<Contents><Key>k%u</Key></Contents>", i);
        check_listing_error(big, n, -EBADMSG);
        free(big);
}

int main(void) {
        RUN(test_xml_text_decode);
        RUN(test_url_decode);
        RUN(test_listing);
        RUN(test_listing_not_url_encoded);
        RUN(test_listing_errors);
        return 0;
}
