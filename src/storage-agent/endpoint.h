/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Storage endpoints and request URLs through libcurl's URL API: one parser for what is signed and
 * what is connected to. */
#pragma once

#include <stdbool.h>

/* "scheme://host[:port][/base-path]" (a missing scheme means https), parsed by curl_url(), the parser
 * libcurl itself uses for the request: the host we put into the signature (S3's Host header, OSS's
 * bucket subdomain) is the host libcurl connects to and sends. No user, password, query, fragment or
 * IPv6 zone; only http and https. Errors: -EINVAL for a malformed or refused endpoint, -ENOMEM. */
typedef struct StorageEndpoint {
        char *scheme;                   /* "http", "https" */
        char *host;                     /* lowercased; an IPv6 address in brackets */
        char *port;                     /* NULL: the scheme's default (443, 80 are dropped) */
        char *authority;                /* the Host header libcurl sends: host or host:port */
        char *base_path;                /* unencoded, no trailing '/'; "" for none */
        bool ip;                        /* host is an IPv4 or IPv6 address */
} StorageEndpoint;

int storage_endpoint_parse(const char *endpoint, StorageEndpoint *ret);
void storage_endpoint_done(StorageEndpoint *e);

/* Whether requests can be made to an endpoint: it parses, and with base_path false (OSS) it names no
 * base path. 0 or -EINVAL (-ENOMEM). storage_endpoint_is_valid() (storage-config.h) is the same rule
 * without libcurl. */
int storage_endpoint_check(const char *endpoint, bool base_path);

/* The URL of a request, assembled by curl_url_set(): path and query already percent-encoded the way
 * they were signed, and kept as they are (no dot-segment removal: S3 signs the path as sent; the
 * transfer sets CURLOPT_PATH_AS_IS for the same reason). port NULL: the default; query NULL or "":
 * none. */
int storage_url(const char *scheme, const char *host, const char *port, const char *encoded_path,
                const char *encoded_query, char **ret);
