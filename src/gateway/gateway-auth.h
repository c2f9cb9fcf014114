/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sidecar API's bearer key: loading it from the credential or the configuration, checking headers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Name of the credential (LoadCredential=api_key:/etc/scopebox/api-key). */
#define API_KEY_CREDENTIAL "api_key"
/* The optional scrape key: opens GET /metrics and nothing else (LoadCredential=scopebox-metrics-key,
 * from /etc/credstore/scopebox-metrics-key when the operator creates it). */
#define METRICS_KEY_CREDENTIAL "scopebox-metrics-key"
/* A key file larger than this is certainly not a key. */
#define API_KEY_SIZE_MAX 4096U

/* Whether 'key' (of 'size' bytes) can be used as a bearer key: not empty, no NUL or other control
 * characters (which cannot appear in a header value), no leading or trailing whitespace (which HTTP
 * strips from header values). On failure returns -EINVAL and a static reason. */
int api_key_validate(const char *key, size_t size, const char **ret_reason);

/* Reads the key from $CREDENTIALS_DIRECTORY/<name>, dropping one trailing newline. Returns 0 and
 * *ret = NULL if there is no such credential, 1 with the key otherwise. An unusable key fails with
 * -EINVAL and *ret_reason set. */
int key_load_credential(const char *name, char **ret, const char **ret_reason);

/* The scheme in front of the key in the Authorization value. */
#define AUTH_BEARER_PREFIX "Bearer "

/* Builds the exact Authorization value accepted: "Bearer <key>". */
int auth_header_expected(const char *key, char **ret, size_t *ret_size);

/* Constant-time check of an Authorization header value (as received, 'size' bytes, may contain
 * NULs) against the expected one. NULL means the header is absent. Also checks an X-Api-Key value
 * (the dify-sandbox API) against the bare key. */
bool auth_header_matches(const char *value, size_t size, const char *expected, size_t expected_size);
