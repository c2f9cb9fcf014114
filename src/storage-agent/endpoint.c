/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Storage endpoints and request URLs through libcurl's URL API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "endpoint.h"
#include "macro.h"
#include "string-util.h"

static void curl_url_cleanupp(CURLU **u) {
        if (*u)
                curl_url_cleanup(*u);
}

/* A part libcurl hands out, as our own malloc()ed string; NULL (and 0) when the URL has no such part. */
static int url_part(CURLU *u, CURLUPart what, unsigned flags, char **ret) {
        char *p = NULL, *copy;
        CURLUcode c;

        c = curl_url_get(u, what, &p, flags);
        if (c == CURLUE_OUT_OF_MEMORY)
                return -ENOMEM;
        if (c != CURLUE_OK || !p) {
                *ret = NULL;
                return 0;
        }
        copy = strdup(p);
        curl_free(p);
        if (!copy)
                return -ENOMEM;
        *ret = copy;
        return 1;
}

static int url_parse(const char *url, unsigned flags, CURLU **ret) {
        CURLU *u;
        CURLUcode c;

        u = curl_url();
        if (!u)
                return -ENOMEM;
        c = curl_url_set(u, CURLUPART_URL, url, flags);
        if (c != CURLUE_OK) {
                curl_url_cleanup(u);
                return c == CURLUE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
        }
        *ret = u;
        return 0;
}

static bool is_ipv4(const char *s) {
        unsigned parts = 0;

        for (;;) {
                size_t l = strspn(s, "0123456789");
                if (l == 0 || l > 3 || (l > 1 && s[0] == '0') || strtoul(s, NULL, 10) > 255)
                        return false;
                parts++;
                s += l;
                if (*s == 0)
                        return parts == 4;
                if (*s != '.')
                        return false;
                s++;
        }
}

void storage_endpoint_done(StorageEndpoint *e) {
        if (!e)
                return;
        free(e->scheme);
        free(e->host);
        free(e->port);
        free(e->authority);
        free(e->base_path);
        *e = (StorageEndpoint) {};
}

int storage_endpoint_parse(const char *endpoint, StorageEndpoint *ret) {
        _cleanup_(curl_url_cleanupp) CURLU *u = NULL;
        _cleanup_(storage_endpoint_done) StorageEndpoint e = {};
        _cleanup_free_ char *extra = NULL;
        CURLUPart refused[] = { CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS, CURLUPART_QUERY,
                                CURLUPART_FRAGMENT, CURLUPART_ZONEID };
        size_t l;
        int r;

        if (isempty(endpoint) || !ret)
                return -EINVAL;
        /* Blanks and backslashes are no part of an endpoint; libcurl would accept some of them. */
        if (strpbrk(endpoint, " \t\r\n\\"))
                return -EINVAL;
        /* Dot segments of a base path are kept, as S3 signs the path as sent. */
        r = url_parse(endpoint, CURLU_DEFAULT_SCHEME | CURLU_PATH_AS_IS, &u);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                r = url_part(u, refused[i], 0, &extra);
                if (r != 0)
                        return r < 0 ? r : -EINVAL;
        }

        r = url_part(u, CURLUPART_SCHEME, 0, &e.scheme);
        if (r > 0)
                r = url_part(u, CURLUPART_HOST, 0, &e.host);
        if (r <= 0)
                return r < 0 ? r : -EINVAL; /* file:///…: no host */
        ascii_strlower(e.scheme);
        if (!streq(e.scheme, "http") && !streq(e.scheme, "https"))
                return -EINVAL;
        ascii_strlower(e.host);
        if (e.host[0] == '[')
                e.ip = true; /* libcurl checked the address */
        else {
                /* Names of DNS labels only: what becomes a bucket's subdomain and a signed Host. */
                if (isempty(e.host) ||
                    strspn(e.host, "abcdefghijklmnopqrstuvwxyz0123456789-._") != strlen(e.host))
                        return -EINVAL;
                e.ip = is_ipv4(e.host);
        }

        /* Without CURLU_DEFAULT_PORT: only a port the endpoint names, and none that is the default. */
        r = url_part(u, CURLUPART_PORT, CURLU_NO_DEFAULT_PORT, &e.port);
        if (r < 0)
                return r;
        if (e.port && (strspn(e.port, "0123456789") != strlen(e.port) || strtoul(e.port, NULL, 10) == 0))
                return -EINVAL;
        if (e.port ? asprintf(&e.authority, "%s:%s", e.host, e.port) < 0 : !(e.authority = strdup(e.host))) {
                e.authority = NULL;
                return -ENOMEM;
        }

        r = url_part(u, CURLUPART_PATH, 0, &e.base_path);
        if (r < 0)
                return r;
        if (!e.base_path && !(e.base_path = strdup("")))
                return -ENOMEM;
        l = strlen(e.base_path);
        while (l > 0 && e.base_path[l - 1] == '/')
                e.base_path[--l] = 0;

        *ret = e;
        e = (StorageEndpoint) {};
        return 0;
}

int storage_endpoint_check(const char *endpoint, bool base_path) {
        _cleanup_(storage_endpoint_done) StorageEndpoint ep = {};
        int r;

        r = storage_endpoint_parse(endpoint, &ep);
        if (r < 0)
                return r;
        return base_path || isempty(ep.base_path) ? 0 : -EINVAL;
}

int storage_url(const char *scheme, const char *host, const char *port, const char *encoded_path,
                const char *encoded_query, char **ret) {
        _cleanup_(curl_url_cleanupp) CURLU *u = NULL;
        _cleanup_free_ char *url = NULL, *got_host = NULL, *got_port = NULL;
        int r;

        if (isempty(scheme) || isempty(host) || !encoded_path || encoded_path[0] != '/' || !ret)
                return -EINVAL;
        /* Assembled as text and parsed back: libcurl 7.88's curl_url_set() of a single path or query
         * part lowercases the hex of %XX escapes, which would no longer be what was signed. */
        if (asprintf(&url, "%s://%s%s%s%s%s%s", scheme, host, port ? ":" : "", strempty(port), encoded_path,
                     isempty(encoded_query) ? "" : "?", strempty(encoded_query)) < 0) {
                url = NULL;
                return -ENOMEM;
        }
        r = url_parse(url, CURLU_PATH_AS_IS, &u);
        if (r < 0)
                return r;
        /* The host and port libcurl will connect to and send must be the ones that were signed. */
        r = url_part(u, CURLUPART_HOST, 0, &got_host);
        if (r >= 0)
                r = url_part(u, CURLUPART_PORT, CURLU_NO_DEFAULT_PORT, &got_port);
        if (r < 0)
                return r;
        if (!streq_ptr(got_host, host) || !streq_ptr(got_port, port))
                return -EINVAL;
        r = url_part(u, CURLUPART_URL, 0, ret);
        return r < 0 ? r : r == 0 ? -EINVAL : 0;
}
