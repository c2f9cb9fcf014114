/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's key and per-sandbox tokens. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "e2b-token.h"
#include "gateway-auth.h"
#include "id.h"
#include "string-util.h"

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
