/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The E2B API's credentials (docs/e2b.md, docs/security.md "The E2B API"): the control plane's key,
 * and each sandbox's access tokens, derived from the API key and the sandbox id so that any
 * gateway of the node knows them without storing them, and none is valid without the key. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "gateway-server.h"
#include "http-request.h"
#include "id.h"

#define E2B_KEY_PREFIX "e2b_"
/* Tokens are 64 lowercase hex digits (HMAC-SHA256). */
#define E2B_TOKEN_LEN 64U

typedef enum E2bTokenKind {
        E2B_TOKEN_ENVD, /* envdAccessToken: X-Access-Token */
        E2B_TOKEN_TRAFFIC, /* trafficAccessToken: E2B-Traffic-Access-Token */
} E2bTokenKind;

/* "e2b_" followed by the hex of the key's bytes: the spelling of the key the E2B Python SDK
 * accepts (it checks for e2b_ and hex digits). */
int e2b_key_from_api_key(const char *key, size_t size, char **ret, size_t *ret_size);

/* The token of 'kind' for the sandbox 'id' (a session id, validated by the caller). */
int e2b_token(const Server *s, E2bTokenKind kind, const char *id, char ret[static E2B_TOKEN_LEN + 1]);

/* X-API-Key: the API key itself or its e2b_ spelling; exactly one such header. */
bool e2b_key_matches(const Server *s, const HttpRequestHeaders *h);
/* The request names one sandbox (E2b-Sandbox-Id, a valid session id) and carries its envd or its
 * traffic token (exactly one header of each kind it sends). */
bool e2b_token_matches(const Server *s, const HttpRequestHeaders *h);

/* Host routing (SANDBOX_E2B_DOMAIN): a request without E2b-Sandbox-Id whose Host is
 * "<port>-<id>.<domain>" (a port after it allowed) names that sandbox and port, as the SDKs address
 * a sandbox without E2B_SANDBOX_URL. */
void e2b_route_by_host(const Server *s, HttpRequestHeaders *h);
/* The parts of a Host value "<port>-<id>.<domain>[:<port>]" with 'domain': 0, or -EINVAL. */
int e2b_host_parse(const char *host, size_t n, const char *domain, const char **ret_port,
                   char ret_id[static SESSION_ID_LEN + 1]);

/* A signed file URL (the SDKs' downloadUrl/uploadUrl) of the sandbox the request names, without a
 * token header: GET (read) or POST (write) /files whose "signature" is "v1_" and the unpadded
 * base64 of SHA-256("<path>:<read|write>:<username or ''>:<envd token>[:<signature_expiration>]"),
 * not expired. */
bool e2b_signature_matches(const HttpRequest *req, const HttpRequestHeaders *h);
/* That signature, for tests and the check. */
int e2b_signature(const Server *s, const char *id, const char *path, const char *operation, const char *user,
                  const char *expiration, char **ret);
