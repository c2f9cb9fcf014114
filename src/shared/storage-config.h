/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "storage" block of the sidecar API: parsing, when it is effective, and object key rules. */
#pragma once

#include <stdbool.h>

#include <json-c/json.h>

#include "macro.h"

typedef enum StorageProvider {
        STORAGE_LOCAL,
        STORAGE_S3,
        STORAGE_ALIYUN_OSS,
        _STORAGE_PROVIDER_MAX,
        _STORAGE_PROVIDER_INVALID = -EINVAL,
} StorageProvider;

const char *storage_provider_to_string(StorageProvider p);
StorageProvider storage_provider_from_string(const char *s);

#define STORAGE_DEFAULT_PREFIX "workspaces/"
#define STORAGE_KEY_MAX 1024
/* The 400 for an endpoint the agent cannot use, from the gateway's check and the agent's alike. */
#define STORAGE_ENDPOINT_INVALID "storage endpoint must be an http(s) URL"
#define ARCHIVE_STEM_MAX 128

typedef struct StorageConfig {
        StorageProvider provider;
        char *prefix;             /* as given (default "workspaces/"), trailing '/' removed */
        char *s3_bucket;
        char *s3_region;
        char *s3_endpoint;        /* NULL: AWS */
        char *s3_access_key;
        char *s3_secret_key;
        char *oss_bucket;
        char *oss_endpoint;
        char *oss_access_key_id;
        char *oss_access_key_secret;
} StorageConfig;

/* The most bytes of an s3_region, and its characters: A-Z a-z 0-9 - . _ (what SigV4's scope takes). */
#define STORAGE_REGION_MAX 64U
bool storage_region_is_valid(const char *s);

/* Parses the block (a JSON object). -EINVAL with *ret_error set to a client-facing reason. */
int storage_config_parse(json_object *o, StorageConfig *ret, const char **ret_error);
void storage_config_done(StorageConfig *c);

/* Whether the storage agent can use an endpoint: "http(s)://host[:port][/base-path]", the host of
 * a-z A-Z 0-9 '-' '.' '_' (no %XX) or an IPv6 address in brackets (no zone), the port 1…65535, no user,
 * query or fragment, no blanks, backslashes or control characters; with base_path false (OSS)
 * nothing after the host and port but '/'. This is the agent's libcurl parser's rule
 * (storage_endpoint_check() in src/storage-agent/endpoint.c), written without libcurl so the daemons
 * that don't link it refuse the same endpoints; tests/unit/test-sigv4.c holds both to one table. */
bool storage_endpoint_is_valid(const char *endpoint, bool base_path);

/* The endpoint the block names for its provider: s3_endpoint or oss_endpoint; NULL for local storage,
 * and for AWS (an s3 block without one). */
const char *storage_config_endpoint(const StorageConfig *c);

/* Whether archives and the storage endpoints work with this block (COMPAT.md "Storage effective"). */
bool storage_config_effective(const StorageConfig *c, const char *local_storage_dir);

/* Whether the endpoint the block names is on the operator's list (SANDBOX_STORAGE_ALLOWED_ENDPOINTS:
 * origins "scheme://host[:port]" or "aws", separated by spaces or commas; empty allows any). */
bool storage_endpoint_allowed(const StorageConfig *c, const char *allowlist);
/* Whether the operator names this block's endpoint on a (non-empty) allowlist: such endpoints may be on
 * internal addresses; the others are subject to the agent's address policy. */
bool storage_endpoint_listed(const StorageConfig *c, const char *allowlist);

/* The same for a block given as JSON text (as it crosses the bus). */
bool storage_json_effective(const char *json, const char *local_storage_dir);

/* Object keys from clients: not empty, no "..", no NUL or control characters, not absolute,
 * at most STORAGE_KEY_MAX bytes. */
bool storage_key_is_valid(const char *key);
/* "<prefix>/<key>"; when 'key' already starts with "<prefix>/" it is taken as full (delete accepts
 * both). -EINVAL for invalid keys and for keys that would leave the prefix. */
int storage_full_key(const StorageConfig *c, const char *key, bool accept_full, char **ret);

/* Archive stems: ^[A-Za-z0-9_-]{1,128}$. */
bool archive_stem_is_valid(const char *stem);
/* "<prefix>/workspaces/<stem>.tgz" (the Aivory sidecar's layout: the default prefix makes it
 * "workspaces/workspaces/<stem>.tgz"). */
int storage_archive_key(const StorageConfig *c, const char *stem, char **ret);
