/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The "storage" block of the sidecar API: parsing, when it is effective, and object key rules. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json-util.h"
#include "storage-config.h"
#include "string-table.h"
#include "string-util.h"

static const char *const storage_provider_table[_STORAGE_PROVIDER_MAX] = {
        [STORAGE_LOCAL] = "local",
        [STORAGE_S3] = "s3",
        [STORAGE_ALIYUN_OSS] = "aliyun_oss",
};

DEFINE_STRING_TABLE_LOOKUP_TO_STRING(storage_provider, StorageProvider)
DEFINE_STRING_TABLE_LOOKUP_FROM_STRING(storage_provider, StorageProvider)

void storage_config_done(StorageConfig *c) {
        char **secrets[] = { &c->s3_secret_key, &c->oss_access_key_secret };

        for (size_t i = 0; i < ELEMENTSOF(secrets); i++)
                if (*secrets[i])
                        explicit_bzero(*secrets[i], strlen(*secrets[i]));
        free(c->prefix);
        free(c->s3_bucket);
        free(c->s3_region);
        free(c->s3_endpoint);
        free(c->s3_access_key);
        free(c->s3_secret_key);
        free(c->oss_bucket);
        free(c->oss_endpoint);
        free(c->oss_access_key_id);
        free(c->oss_access_key_secret);
        *c = (StorageConfig) { .provider = _STORAGE_PROVIDER_INVALID };
}

/* A port libcurl takes and the agent keeps: decimal, 1…65535, or none at all ("h:" is "h"). */
static bool endpoint_port_is_valid(const char *p, size_t n) {
        unsigned long v = 0;

        if (n == 0)
                return true;
        for (size_t i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return false;
                v = v * 10 + (unsigned long) (p[i] - '0');
                if (v > 65535)
                        return false;
        }
        return v > 0;
}

bool storage_endpoint_is_valid(const char *endpoint, bool base_path) {
        const char *rest, *path, *port = NULL;
        size_t host_len;

        if (!endpoint)
                return false;
        rest = startswith(endpoint, "https://") ?: startswith(endpoint, "http://");
        if (!rest)
                return false;
        /* Nothing that could hide another host from the allowlist ('@' userinfo, '?' or '#', a
         * backslash), no blanks and no control characters, which libcurl refuses. */
        for (const unsigned char *c = (const unsigned char *) rest; *c; c++)
                if (*c < 0x20 || *c == 0x7f || strchr("?#@\\ ", *c))
                        return false;

        path = rest + strcspn(rest, "/");
        if (rest[0] == '[') {
                /* An IPv6 address in brackets, without a zone ("%25eth0"). */
                char addr[INET6_ADDRSTRLEN];
                struct in6_addr a;
                const char *end = memchr(rest, ']', (size_t) (path - rest));

                if (!end || (size_t) (end - rest - 1) >= sizeof(addr))
                        return false;
                memcpy(addr, rest + 1, (size_t) (end - rest - 1));
                addr[end - rest - 1] = 0;
                if (inet_pton(AF_INET6, addr, &a) != 1)
                        return false;
                host_len = (size_t) (end + 1 - rest);
        } else {
                /* A name of DNS label characters (or an IPv4 address). */
                host_len = strspn(rest, NAME_CHARS);
                if (host_len == 0)
                        return false;
        }
        if (rest[host_len] == ':')
                port = rest + host_len + 1;
        else if (rest + host_len != path)
                return false;
        if (port && !endpoint_port_is_valid(port, (size_t) (path - port)))
                return false;

        /* OSS endpoints have no base path: the bucket and key are all of it. */
        return base_path || path[strspn(path, "/")] == 0;
}

bool storage_region_is_valid(const char *s) {
        return strlen(s) <= STORAGE_REGION_MAX && name_is_valid(s);
}

int storage_config_parse(json_object *o, StorageConfig *ret, const char **ret_error) {
        struct {
                const char *provider, *prefix, *s3_bucket, *s3_region, *s3_endpoint, *s3_access_key,
                        *s3_secret_key, *oss_bucket, *oss_endpoint, *oss_access_key_id,
                        *oss_access_key_secret;
        } p = {};
        static const JsonField fields[] = {
                { "provider", JSON_FIELD_STRING, offsetof(typeof(p), provider), JSON_NULLABLE },
                { "prefix", JSON_FIELD_STRING, offsetof(typeof(p), prefix), JSON_NULLABLE },
                { "s3_bucket", JSON_FIELD_STRING, offsetof(typeof(p), s3_bucket), JSON_NULLABLE },
                { "s3_region", JSON_FIELD_STRING, offsetof(typeof(p), s3_region), JSON_NULLABLE },
                { "s3_endpoint", JSON_FIELD_STRING, offsetof(typeof(p), s3_endpoint), JSON_NULLABLE },
                { "s3_access_key", JSON_FIELD_STRING, offsetof(typeof(p), s3_access_key), JSON_NULLABLE },
                { "s3_secret_key", JSON_FIELD_STRING, offsetof(typeof(p), s3_secret_key), JSON_NULLABLE },
                { "oss_bucket", JSON_FIELD_STRING, offsetof(typeof(p), oss_bucket), JSON_NULLABLE },
                { "oss_endpoint", JSON_FIELD_STRING, offsetof(typeof(p), oss_endpoint), JSON_NULLABLE },
                { "oss_access_key_id", JSON_FIELD_STRING, offsetof(typeof(p), oss_access_key_id),
                  JSON_NULLABLE },
                { "oss_access_key_secret", JSON_FIELD_STRING, offsetof(typeof(p), oss_access_key_secret),
                  JSON_NULLABLE },
                {},
        };
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        JsonDispatchError jerr;
        const char *prefix;
        size_t l;

        *ret_error = "invalid storage config";
        if (json_dispatch(o, fields, &p, &jerr) < 0)
                return -EINVAL;

        /* A NUL inside a string would silently cut it (and name another prefix). */
        json_object_object_foreach(o, name, value)
                if (json_object_is_type(value, json_type_string) &&
                    strlen(json_object_get_string(value)) != (size_t) json_object_get_string_len(value)) {
                *ret_error = streq(name, "prefix") ? "invalid storage prefix" : "invalid storage config";
                return -EINVAL;
                }

        c.provider = storage_provider_from_string(p.provider ?: "local");
        if (c.provider < 0) {
                *ret_error = "unsupported storage provider";
                return -EINVAL;
        }

        prefix = isempty(p.prefix) ? STORAGE_DEFAULT_PREFIX : p.prefix;
        l = strlen(prefix);
        while (l > 0 && prefix[l - 1] == '/')
                l--;
        c.prefix = strndup(prefix, l);
        if (!c.prefix)
                return -ENOMEM;
        /* The prefix joins keys: it obeys the key rules itself. */
        if (*c.prefix && !storage_key_is_valid(c.prefix)) {
                *ret_error = "invalid storage prefix";
                return -EINVAL;
        }

#define DUP(field)                                                      \
        do {                                                            \
                if (!isempty(p.field) && !(c.field = strdup(p.field)))  \
                        return -ENOMEM;                                 \
        } while (0)
        DUP(s3_bucket);
        DUP(s3_region);
        DUP(s3_endpoint);
        DUP(s3_access_key);
        DUP(s3_secret_key);
        DUP(oss_bucket);
        DUP(oss_endpoint);
        DUP(oss_access_key_id);
        DUP(oss_access_key_secret);
#undef DUP

        /* The region names the host and signs the request (SigV4's credential scope): of the
         * characters the signer takes, as boto3 refuses other names before any request. */
        if (c.provider == STORAGE_S3 && c.s3_region && !storage_region_is_valid(c.s3_region))
                return -EINVAL;

        /* Endpoints are URLs with a scheme; nothing else is fetched. */
        if ((c.s3_endpoint && !storage_endpoint_is_valid(c.s3_endpoint, true)) ||
            (c.oss_endpoint && !storage_endpoint_is_valid(c.oss_endpoint, false))) {
                *ret_error = STORAGE_ENDPOINT_INVALID;
                return -EINVAL;
        }

        *ret_error = NULL;
        *ret = c;
        c = (StorageConfig) { .provider = _STORAGE_PROVIDER_INVALID };
        return 0;
}

const char *storage_config_endpoint(const StorageConfig *c) {
        return c->provider == STORAGE_S3           ? c->s3_endpoint
               : c->provider == STORAGE_ALIYUN_OSS ? c->oss_endpoint
                                                   : NULL;
}

bool storage_config_effective(const StorageConfig *c, const char *local_storage_dir) {
        struct stat st;

        switch (c->provider) {
        case STORAGE_LOCAL:
                return !isempty(local_storage_dir) && stat(local_storage_dir, &st) >= 0 &&
                       S_ISDIR(st.st_mode);
        case STORAGE_S3:
                return c->s3_bucket != NULL;
        case STORAGE_ALIYUN_OSS:
                return c->oss_bucket && c->oss_endpoint && c->oss_access_key_id && c->oss_access_key_secret;
        default:
                return false;
        }
}

/* "HTTPS://Host:443/base/" → "https://host:443": scheme and authority, lowercase. */
static char *endpoint_origin(const char *url) {
        const char *rest = strstr(url, "://");
        size_t l;
        char *o;

        if (!rest)
                return NULL;
        rest += 3;
        l = (size_t) (rest - url) + strcspn(rest, "/?#");
        o = strndup(url, l);
        if (!o)
                return NULL;
        ascii_strlower(o);
        return o;
}

bool storage_endpoint_listed(const StorageConfig *c, const char *allowlist) {
        _cleanup_free_ char *want = NULL, *list = NULL;
        const char *endpoint;
        char *save = NULL;

        if (isempty(allowlist) || c->provider == STORAGE_LOCAL)
                return false;
        endpoint = storage_config_endpoint(c);
        want = endpoint ? endpoint_origin(endpoint) : strdup("aws");
        list = strdup(allowlist);
        if (!want || !list)
                return false;
        for (char *e = strtok_r(list, " ,\t", &save); e; e = strtok_r(NULL, " ,\t", &save)) {
                _cleanup_free_ char *allowed = streq(e, "aws") ? strdup("aws") : endpoint_origin(e);
                if (allowed && streq(allowed, want))
                        return true;
        }
        return false;
}

bool storage_endpoint_allowed(const StorageConfig *c, const char *allowlist) {
        return isempty(allowlist) || c->provider == STORAGE_LOCAL || storage_endpoint_listed(c, allowlist);
}

bool storage_json_effective(const char *json, const char *local_storage_dir) {
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_json_ json_object *o = NULL;
        const char *why;

        if (!json || json_parse(json, strlen(json), JSON_DEPTH_MAX, &o) < 0 ||
            !json_object_is_type(o, json_type_object) || storage_config_parse(o, &c, &why) < 0)
                return false;
        return storage_config_effective(&c, local_storage_dir);
}

bool storage_key_is_valid(const char *key) {
        size_t l;

        if (isempty(key) || key[0] == '/')
                return false;
        l = strlen(key);
        if (l > STORAGE_KEY_MAX || strstr(key, ".."))
                return false;
        /* Control characters have no business in object names (and would corrupt logs). */
        for (size_t i = 0; i < l; i++)
                if ((unsigned char) key[i] < 0x20 || key[i] == 0x7f)
                        return false;
        /* Every component a plain name: no empty ones ("a//b", "a/"), no ".". Providers and the
         * local directory would each read such names differently. */
        for (const char *c = key; *c;) {
                size_t n = strcspn(c, "/");
                if (n == 0 || (n == 1 && c[0] == '.'))
                        return false;
                c += n;
                if (*c == '/' && *++c == 0)
                        return false;
        }
        return utf8_is_valid_n(key, l);
}

int storage_full_key(const StorageConfig *c, const char *key, bool accept_full, char **ret) {
        const char *rest;
        char *full;

        if (!storage_key_is_valid(key))
                return -EINVAL;
        if (isempty(c->prefix)) {
                full = strdup(key);
                if (!full)
                        return -ENOMEM;
                *ret = full;
                return 0;
        }
        if (accept_full && (rest = startswith(key, c->prefix)) && rest[0] == '/' && rest[1]) {
                full = strdup(key);
        } else if (asprintf(&full, "%s/%s", c->prefix, key) < 0)
                full = NULL;
        if (!full)
                return -ENOMEM;
        if (strlen(full) > STORAGE_KEY_MAX) {
                free(full);
                return -EINVAL;
        }
        *ret = full;
        return 0;
}

bool archive_stem_is_valid(const char *stem) {
        size_t l;

        if (isempty(stem))
                return false;
        l = strlen(stem);
        if (l > ARCHIVE_STEM_MAX)
                return false;
        for (size_t i = 0; i < l; i++) {
                char ch = stem[i];
                if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                      ch == '_' || ch == '-'))
                        return false;
        }
        return true;
}

int storage_archive_key(const StorageConfig *c, const char *stem, char **ret) {
        char *k;

        if (!archive_stem_is_valid(stem))
                return -EINVAL;
        if (asprintf(&k, "%s%sworkspaces/%s.tgz", strempty(c->prefix), isempty(c->prefix) ? "" : "/", stem) <
            0)
                return -ENOMEM;
        *ret = k;
        return 0;
}
