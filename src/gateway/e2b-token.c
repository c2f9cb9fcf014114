/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's key and per-sandbox tokens. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <microhttpd.h>

#include "base64.h"
#include "e2b-token.h"
#include "gateway-auth.h"
#include "http-e2b.h"
#include "id.h"
#include "parse-util.h"
#include "string-util.h"
#include "time-util.h"

static const char hex_digits[] = "0123456789abcdef";

int e2b_key_from_api_key(const char *key, size_t size, char **ret, size_t *ret_size) {
        size_t n = strlen(E2B_KEY_PREFIX) + 2 * size;
        char *s;

        assert(key);
        assert(ret);

        s = malloc(n + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, E2B_KEY_PREFIX, strlen(E2B_KEY_PREFIX));
        for (size_t i = 0; i < size; i++) {
                s[strlen(E2B_KEY_PREFIX) + 2 * i] = hex_digits[(unsigned char) key[i] >> 4];
                s[strlen(E2B_KEY_PREFIX) + 2 * i + 1] = hex_digits[(unsigned char) key[i] & 0xf];
        }
        s[n] = 0;
        *ret = s;
        if (ret_size)
                *ret_size = n;
        return 0;
}

int e2b_token(const Server *s, E2bTokenKind kind, const char *id, char ret[static E2B_TOKEN_LEN + 1]) {
        /* Domain separation: the two kinds, and nothing else ever signed with the key. */
        static const char *const labels[] = {
                [E2B_TOKEN_ENVD] = "scopebox e2b envd token\n",
                [E2B_TOKEN_TRAFFIC] = "scopebox e2b traffic token\n",
        };
        unsigned char msg[64 + SESSION_ID_LEN], md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        size_t l, n;

        assert(s);
        assert(id);
        assert(kind == E2B_TOKEN_ENVD || kind == E2B_TOKEN_TRAFFIC);

        l = strlen(labels[kind]);
        n = strlen(id);
        if (n > SESSION_ID_LEN)
                return -EINVAL;
        memcpy(msg, labels[kind], l);
        memcpy(msg + l, id, n);
        if (!HMAC(EVP_sha256(), s->api_key ?: "", (int) s->api_key_size, msg, l + n, md, &md_len) ||
            md_len * 2 != E2B_TOKEN_LEN)
                return -EIO;
        for (unsigned i = 0; i < md_len; i++) {
                ret[2 * i] = hex_digits[md[i] >> 4];
                ret[2 * i + 1] = hex_digits[md[i] & 0xf];
        }
        ret[E2B_TOKEN_LEN] = 0;
        return 0;
}

bool e2b_key_matches(const Server *s, const HttpRequestHeaders *h) {
        const char *v = h->n_api_key == 1 ? h->api_key : NULL;

        assert(s);
        if (!v || !s->api_key)
                return false;
        /* Both compared, always: secret_equal() reveals neither length nor content. */
        return auth_header_matches(v, h->api_key_size, s->api_key, s->api_key_size) |
               (s->e2b_api_key &&
                auth_header_matches(v, h->api_key_size, s->e2b_api_key, s->e2b_api_key_size));
}

static bool token_matches(const Server *s, E2bTokenKind kind, const char *id, const char *value,
                          size_t size) {
        char token[E2B_TOKEN_LEN + 1];

        return value && e2b_token(s, kind, id, token) >= 0 &&
               auth_header_matches(value, size, token, E2B_TOKEN_LEN);
}

bool e2b_token_matches(const Server *s, const HttpRequestHeaders *h) {
        char id[SESSION_ID_LEN + 1];
        bool envd, traffic;

        assert(s);
        if (h->n_e2b_sandbox_id != 1 || h->e2b_sandbox_id_size != SESSION_ID_LEN || h->n_access_token > 1 ||
            h->n_traffic_token > 1)
                return false;
        memcpy(id, h->e2b_sandbox_id, SESSION_ID_LEN);
        id[SESSION_ID_LEN] = 0;
        if (!session_id_is_valid(id))
                return false;
        /* Every token sent must be the sandbox's, and one at least must be sent. */
        envd = h->n_access_token == 1 &&
               token_matches(s, E2B_TOKEN_ENVD, id, h->access_token, h->access_token_size);
        traffic = h->n_traffic_token == 1 &&
                  token_matches(s, E2B_TOKEN_TRAFFIC, id, h->traffic_token, h->traffic_token_size);
        if ((h->n_access_token == 1 && !envd) || (h->n_traffic_token == 1 && !traffic))
                return false;
        return envd || traffic;
}

int e2b_host_parse(const char *host, size_t n, const char *domain, const char **ret_port,
                   char ret_id[static SESSION_ID_LEN + 1]) {
        const char *dash, *dot, *colon, *end = host + n;
        size_t d = strlen(domain);

        if (!host || d == 0)
                return -EINVAL;
        /* A port after the name (a proxy in front on another port) is not the sandbox's. */
        colon = memchr(host, ':', n);
        if (colon)
                end = colon;
        dash = memchr(host, '-', (size_t) (end - host));
        if (!dash || dash == host || dash - host > 5)
                return -EINVAL;
        for (const char *p = host; p < dash; p++)
                if (*p < '0' || *p > '9')
                        return -EINVAL;
        dot = dash + 1 + SESSION_ID_LEN;
        if (dot >= end || *dot != '.' || (size_t) (end - dot - 1) != d ||
            strncasecmp(dot + 1, domain, d) != 0)
                return -EINVAL;
        memcpy(ret_id, dash + 1, SESSION_ID_LEN);
        ret_id[SESSION_ID_LEN] = 0;
        if (!session_id_is_valid(ret_id))
                return -EINVAL;
        /* Static strings: the headers are copied, and so is this pointer. */
        *ret_port = (size_t) (dash - host) == strlen(E2B_PORT_ENVD) && memcmp(host, E2B_PORT_ENVD, 5) == 0
                            ? E2B_PORT_ENVD
                    : (size_t) (dash - host) == strlen(E2B_PORT_JUPYTER) &&
                                    memcmp(host, E2B_PORT_JUPYTER, 5) == 0
                            ? E2B_PORT_JUPYTER
                            : "0";
        return 0;
}

void e2b_route_by_host(const Server *s, HttpRequestHeaders *h) {
        char id[SESSION_ID_LEN + 1];
        const char *port;

        if (isempty(s->config.e2b_domain) || h->n_e2b_sandbox_id > 0 || h->n_host != 1 ||
            e2b_host_parse(h->host, h->host_size, s->config.e2b_domain, &port, id) < 0)
                return;
        /* The id's bytes in the Host value itself, which lives as long as the request. */
        h->n_e2b_sandbox_id = 1;
        h->e2b_sandbox_id = memchr(h->host, '-', h->host_size) + 1;
        h->e2b_sandbox_id_size = SESSION_ID_LEN;
        h->n_e2b_sandbox_port = 1;
        h->e2b_sandbox_port = port;
        h->e2b_by_host = true;
}

int e2b_signature(const Server *s, const char *id, const char *path, const char *operation, const char *user,
                  const char *expiration, char **ret) {
        _cleanup_free_ char *raw = NULL, *b64 = NULL;
        char token[E2B_TOKEN_LEN + 1];
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        size_t n;
        int r;

        r = e2b_token(s, E2B_TOKEN_ENVD, id, token);
        if (r < 0)
                return r;
        if (asprintf(&raw, "%s:%s:%s:%s%s%s", path, operation, user, token, expiration ? ":" : "",
                     strempty(expiration)) < 0)
                return -ENOMEM;
        if (!EVP_Digest(raw, strlen(raw), md, &md_len, EVP_sha256(), NULL))
                return -EIO;
        explicit_bzero(raw, strlen(raw));
        b64 = base64_encode(md, md_len);
        if (!b64)
                return -ENOMEM;
        n = strlen(b64);
        while (n > 0 && b64[n - 1] == '=')
                b64[--n] = 0;
        if (asprintf(ret, "v1_%s", b64) < 0)
                return -ENOMEM;
        return 0;
}

static const char *query(const HttpRequest *req, const char *name) {
        return req->connection ? MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, name)
                               : NULL;
}

bool e2b_signature_matches(const HttpRequest *req, const HttpRequestHeaders *h) {
        const char *signature = query(req, "signature"), *expiration = query(req, "signature_expiration");
        _cleanup_free_ char *expected = NULL;
        char id[SESSION_ID_LEN + 1];
        uint64_t until;
        bool get;

        /* Only a file's URL, and only without a token: a token sent must be right (the header
         * check said it is not). */
        if (!signature || !streq(req->path, "/files") || h->n_access_token > 0 || h->n_traffic_token > 0)
                return false;
        get = streq(req->method, "GET") || streq(req->method, "HEAD");
        if (!get && !streq(req->method, "POST"))
                return false;
        if (h->n_e2b_sandbox_id != 1 || h->e2b_sandbox_id_size != SESSION_ID_LEN)
                return false;
        memcpy(id, h->e2b_sandbox_id, SESSION_ID_LEN);
        id[SESSION_ID_LEN] = 0;
        if (!session_id_is_valid(id))
                return false;
        if (expiration &&
            (safe_atou64(expiration, &until) < 0 || expiration[0] < '0' || expiration[0] > '9' ||
             until < now_usec(CLOCK_REALTIME) / USEC_PER_SEC))
                return false;
        if (e2b_signature(req->server, id, strempty(query(req, "path")), get ? "read" : "write",
                          strempty(query(req, "username")), expiration, &expected) < 0)
                return false;
        return auth_header_matches(signature, strlen(signature), expected, strlen(expected));
}
