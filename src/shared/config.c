/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The SANDBOX_* settings shared by all daemons: /etc/scopebox/scopebox.conf, then the environment. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "id.h"
#include "macro.h"
#include "parse-util.h"
#include "string-util.h"

typedef enum ConfigType {
        CONFIG_SIZE,    /* bytes, with optional K/M/G suffix */
        CONFIG_UINT,
        CONFIG_INT,
        CONFIG_BOOL,
        CONFIG_CPUS,    /* number of CPUs, fractional, stored as percent */
        CONFIG_STRING,
} ConfigType;

typedef struct ConfigItem {
        ConfigItemInfo info;
        ConfigType type;
        size_t offset;
        uint64_t min, max; /* for numbers, inclusive */
} ConfigItem;

#define ITEM(n, t, f, d, lo, hi, desc) \
        { { n, d, desc }, t, offsetof(Config, f), lo, hi }

/* A DNS name the gateway compares Host headers with: lowercase labels of letters, digits and '-'. */
static bool e2b_domain_is_valid(const char *d) {
        size_t n = d ? strlen(d) : 0, label = 0;

        if (n == 0)
                return true;
        if (n > 200 || d[0] == '.' || d[n - 1] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                if (d[i] == '.') {
                        if (label == 0)
                                return false;
                        label = 0;
                } else if ((d[i] >= 'a' && d[i] <= 'z') || (d[i] >= '0' && d[i] <= '9') || d[i] == '-') {
                        if (++label > 63)
                                return false;
                } else
                        return false;
        }
        return true;
}

static const ConfigItem config_table[] = {
        ITEM("SANDBOX_NODE_ID", CONFIG_STRING, node_id, "", 0, 0,
             "This node's tag, 1-8 lowercase hex digits: every session id it mints starts with it, "
             "ids with another start are unknown sessions here (docs/scale-out.md); empty: no tag."),
        ITEM("SANDBOX_E2B_DOMAIN", CONFIG_STRING, e2b_domain, "", 0, 0,
             "The E2B API's sandbox domain (docs/e2b.md \"Host routing\"): traffic to <port>-<id>.<domain> "
             "goes to that sandbox, and creates answer it as their domain; empty: off."),
        ITEM("SANDBOX_API_KEY", CONFIG_STRING, api_key, "", 0, 0,
             "Bearer key of the sidecar API. Prefer /etc/scopebox/api-key (LoadCredential=)."),
        ITEM("SANDBOX_ALLOW_NO_AUTH", CONFIG_BOOL, allow_no_auth, "0", 0, 1,
             "Allow starting without an API key (development only)."),
        ITEM("SANDBOX_MAX_BODY_BYTES", CONFIG_SIZE, max_body_bytes, "56M", 1024, 1ULL << 32,
             "Largest accepted request body."),
        ITEM("SANDBOX_MAX_STORAGE_BODY_BYTES", CONFIG_SIZE, max_storage_body_bytes, "300M", 1024, 1ULL << 34,
             "Largest accepted request body of /storage/put."),
        ITEM("SANDBOX_MAX_UPLOAD_BYTES", CONFIG_SIZE, max_upload_bytes, "40M", 1, 1ULL << 32,
             "Largest file written with /files (decoded size), or read with /files/get."),
        ITEM("SANDBOX_MAX_CODE_BYTES", CONFIG_SIZE, max_code_bytes, "1M", 1, 64ULL << 20,
             "Largest accepted /exec code, in UTF-8 bytes."),
        ITEM("SANDBOX_MAX_SESSIONS", CONFIG_INT, max_sessions, "16", 0, 0,
             "Most live sessions; 0 or less means unlimited."),
        ITEM("SANDBOX_IDLE_TTL_SECONDS", CONFIG_UINT, idle_ttl_sec, "1800", 1, 365ULL * 86400,
             "Idle time after which a session is reaped, when the client gives none."),
        ITEM("SANDBOX_IDLE_TTL_CAP_SECONDS", CONFIG_UINT, idle_ttl_cap_sec, "86400", 1, 365ULL * 86400,
             "Upper bound of a session's idle TTL."),
        ITEM("SANDBOX_EXEC_TIMEOUT_CAP_MS", CONFIG_UINT, exec_timeout_cap_ms, "600000", 1000, 86400000,
             "Upper bound of an exec's timeout_ms."),
        ITEM("SANDBOX_MAX_CONCURRENT_CREATES", CONFIG_UINT, max_concurrent_creates, "2", 1, 1024,
             "Sessions being created at once; more wait for a slot."),
        ITEM("SANDBOX_MAX_CONCURRENT_EXECS", CONFIG_UINT, max_concurrent_execs, "4", 1, 1024,
             "Execs running at once over all sessions; more wait for a slot."),
        ITEM("SANDBOX_QUEUE_TIMEOUT_SECONDS", CONFIG_UINT, queue_timeout_sec, "150", 1, 86400,
             "How long a call waits for a slot or its session before 429."),
        ITEM("SANDBOX_MEMORY_LIMIT", CONFIG_SIZE, memory_limit, "2G", 64ULL << 20, 1ULL << 50,
             "MemoryMax= of each runner scope."),
        ITEM("SANDBOX_CPUS", CONFIG_CPUS, cpu_quota_percent, "1", 1, 100000,
             "CPUs per runner scope (CPUQuota=, 1 = 100%)."),
        ITEM("SANDBOX_PIDS_LIMIT", CONFIG_UINT, pids_limit, "256", 8, 1000000,
             "TasksMax= of each runner scope."),
        ITEM("SANDBOX_UID_BASE", CONFIG_UINT, uid_base, "1879048192", 65536, 2147418112ULL,
             "First host uid/gid of the per-session pool (65536 ids, one per session)."),
        ITEM("SANDBOX_WORKSPACE_SIZE", CONFIG_SIZE, workspace_size, "512M", 1ULL << 20, 1ULL << 40,
             "Size of each session's /workspace (writes past it fail with ENOSPC)."),
        ITEM("SANDBOX_TMP_SIZE", CONFIG_SIZE, tmp_size, "256M", 1ULL << 20, 1ULL << 40,
             "Size of each session's /tmp and /home/sandbox."),
        ITEM("SANDBOX_PRELOAD", CONFIG_BOOL, preload, "1", 0, 1,
             "Fork python execs and dify runs from the template, an interpreter with the preload modules "
             "imported (scopebox-template.service); 0: every exec starts a new interpreter."),
        ITEM("SANDBOX_PRELOAD_MODULES", CONFIG_STRING, preload_modules,
             "numpy pandas matplotlib matplotlib.pyplot", 0, 0,
             "Modules the template imports (space-separated; ones that fail to import are skipped)."),
        ITEM("SANDBOX_TEMPLATE_MAX_AGE_SECONDS", CONFIG_UINT, template_max_age, "3600", 0, 31536000,
             "Age after which the template is replaced by a new one (a new hash secret); 0: never."),
        ITEM("SANDBOX_TEMPLATE_MAX_CHILDREN", CONFIG_UINT, template_max_children, "10000", 0, 100000000,
             "Execs forked from one template before it is replaced by a new one (new canary, pointer "
             "guard, addresses and hash secret); 0: no bound."),
        ITEM("SANDBOX_MAX_OUTPUT_BYTES", CONFIG_SIZE, max_output_bytes, "32768", 1024, 64ULL << 20,
             "Bytes of stdout and of stderr kept per exec."),
        ITEM("SANDBOX_MAX_ARTIFACT_BYTES", CONFIG_SIZE, max_artifact_bytes, "20M", 0, 1ULL << 30,
             "Largest output file returned by an exec."),
        ITEM("SANDBOX_MAX_FILES_PER_EXEC", CONFIG_UINT, max_files_per_exec, "20", 0, 1000,
             "Most output files returned by an exec."),
        ITEM("SANDBOX_MAX_TOTAL_ARTIFACT_BYTES", CONFIG_SIZE, max_total_artifact_bytes, "50M", 0, 1ULL << 30,
             "Most output bytes returned by an exec in total."),
        ITEM("SANDBOX_LOCAL_STORAGE_DIR", CONFIG_STRING, local_storage_dir, "", 0, 0,
             "Directory of the local storage provider (empty: local storage not configured)."),
        ITEM("SANDBOX_STORAGE_ALLOWED_ENDPOINTS", CONFIG_STRING, storage_allowed_endpoints, "", 0, 0,
             "Storage endpoints requests may name (origins, or aws); empty: any."),
        ITEM("SANDBOX_STORAGE_ALLOWED_NETWORKS", CONFIG_STRING, storage_allowed_networks, "", 0, 0,
             "Internal addresses (loopback, private...) that endpoints of requests may still connect to "
             "(CIDR)."),
        ITEM("SANDBOX_STORAGE_MAX_TTL", CONFIG_UINT, storage_max_ttl_sec, "86400", 1, 7ULL * 86400,
             "Upper bound of expires_in of presigned URLs, seconds."),
        ITEM("SANDBOX_MAX_ARCHIVE_BYTES", CONFIG_SIZE, max_archive_bytes, "200M", 0, 1ULL << 40,
             "Workspace archives larger than this are skipped (logged, not an error)."),
        ITEM("SANDBOX_ARCHIVE_TIMEOUT_S", CONFIG_UINT, archive_timeout_sec, "120", 1, 86400,
             "How long the runner may take to write a workspace archive; a slower attempt is retried."),
        ITEM("SANDBOX_ARCHIVE_RETRY_DEADLINE_SECONDS", CONFIG_UINT, archive_retry_deadline_sec, "86400", 0,
             30ULL * 86400,
             "How long a released session's workspace is kept while storing its archive fails; retried "
             "until then."),
        ITEM("SANDBOX_START_EMPTY_ON_RESTORE_FAILURE", CONFIG_BOOL, start_empty_on_restore_failure, "0", 0,
             1,
             "A create whose archive can't be fetched starts empty (restored: false, never archived over "
             "it) instead of failing."),
        /* The dify-sandbox API, under dify-sandbox's own names (COMPAT.md B). */
        ITEM("MAX_REQUESTS", CONFIG_UINT, dify_max_requests, "50", 1, 100000,
             "dify API: runs in flight (running or queued); more get 503 Too many requests."),
        ITEM("MAX_WORKERS", CONFIG_UINT, dify_max_workers, "4", 1, 1024,
             "dify API: runs executing at once; the others queue."),
        ITEM("WORKER_TIMEOUT", CONFIG_UINT, dify_worker_timeout_sec, "15", 1, 3600,
             "dify API: seconds a run may take before it is killed (exit code -1, error: timeout)."),
        ITEM("SANDBOX_DIFY_POOL_SIZE", CONFIG_UINT, dify_pool_size, "2", 0, 64,
             "dify API: never-used run sandboxes kept started after a run (at most MAX_WORKERS, gone after "
             "60 s without runs); 0: off."),
        ITEM("ENABLE_NETWORK", CONFIG_BOOL, dify_enable_network, "1", 0, 1,
             "dify API: whether a run that asks for enable_network gets a network."),
        ITEM("ENABLE_PRELOAD", CONFIG_BOOL, dify_enable_preload, "0", 0, 1,
             "dify API: run a request's preload (inside the sandbox, as user code) instead of ignoring it."),
        ITEM("HTTP_PROXY", CONFIG_STRING, dify_http_proxy, "", 0, 0,
             "dify API: HTTP_PROXY handed to runs that have a network."),
        ITEM("HTTPS_PROXY", CONFIG_STRING, dify_https_proxy, "", 0, 0,
             "dify API: HTTPS_PROXY handed to runs that have a network."),
        ITEM("SANDBOX_DIFY_NETWORK_ALLOW", CONFIG_STRING, dify_network_allow, "", 0, 0,
             "dify API: addresses of this host (CIDR, e.g. the proxy's) that runs with a network may still "
             "reach."),
        ITEM("SANDBOX_DIFY_MAX_CODE_BYTES", CONFIG_SIZE, dify_max_code_bytes, "16M", 1, 64ULL << 20,
             "dify API: largest accepted code (with preload), in UTF-8 bytes; Dify puts a node's inputs in "
             "it."),
        ITEM("SANDBOX_DIFY_MAX_OUTPUT_BYTES", CONFIG_SIZE, dify_max_output_bytes, "16M", 1024, 64ULL << 20,
             "dify API: bytes of stdout and of stderr kept per run (no 32 KiB cap there)."),
};

const ConfigItemInfo *config_items(unsigned *ret_n) {
        static ConfigItemInfo infos[ELEMENTSOF(config_table)];
        for (size_t i = 0; i < ELEMENTSOF(config_table); i++)
                infos[i] = config_table[i].info;
        *ret_n = ELEMENTSOF(config_table);
        return infos;
}

/* Returns r, with *ret_error the message (NULL when out of memory). */
_printf_(3, 4) static int config_fail(char **ret_error, int r, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        if (vasprintf(ret_error, format, ap) < 0)
                *ret_error = NULL;
        va_end(ap);
        return r;
}

static int config_set(Config *c, const ConfigItem *item, const char *value, char **ret_error) {
        void *p = (uint8_t *) c + item->offset;
        uint64_t u = 0;
        int64_t i;
        int r;

        switch (item->type) {
        case CONFIG_STRING: {
                char *s = strdup(value);
                if (!s)
                        return -ENOMEM;
                free(*(char **) p);
                *(char **) p = s;
                return 0;
        }
        case CONFIG_BOOL:
                r = parse_boolean(value);
                if (r < 0)
                        goto invalid;
                *(bool *) p = r;
                return 0;
        case CONFIG_INT:
                r = safe_atoi64(value, &i);
                if (r < 0)
                        goto invalid;
                *(int64_t *) p = i;
                return 0;
        case CONFIG_SIZE:
                r = parse_size(value, &u);
                break;
        case CONFIG_UINT:
                r = safe_atou64(value, &u);
                break;
        case CONFIG_CPUS:
                r = parse_cpus(value, &u);
                break;
        default:
                return -EINVAL;
        }
        if (r < 0)
                goto invalid;
        if (u < item->min || u > item->max)
                return config_fail(ret_error, -ERANGE, "%s=%s is out of range [%llu, %llu]", item->info.name,
                                   value, (unsigned long long) item->min, (unsigned long long) item->max);
        *(uint64_t *) p = u;
        return 0;

invalid:
        return config_fail(ret_error, -EINVAL, "%s=%s is not a valid value", item->info.name, value);
}

static const ConfigItem *config_find(const char *name, size_t len) {
        for (size_t i = 0; i < ELEMENTSOF(config_table); i++)
                if (strlen(config_table[i].info.name) == len && strneq(config_table[i].info.name, name, len))
                        return &config_table[i];
        return NULL;
}

static char *strip(char *s) {
        char *e;
        while (isspace((unsigned char) *s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

static int config_load_file(Config *c, const char *path, char **ret_error) {
        _cleanup_fclose_ FILE *f = NULL;
        _cleanup_free_ char *line = NULL;
        size_t allocated = 0;
        unsigned lineno = 0;

        f = fopen(path, "re");
        if (!f)
                return errno == ENOENT ? 0 : -errno;

        for (;;) {
                const ConfigItem *item;
                char *l, *eq, *value;
                ssize_t n;
                int r;

                n = getline(&line, &allocated, f);
                if (n < 0)
                        break;
                lineno++;
                l = strip(line);
                if (*l == 0 || *l == '#' || *l == ';')
                        continue;
                l = (char *) (startswith(l, "export ") ?: l);
                eq = strchr(l, '=');
                if (!eq)
                        return config_fail(ret_error, -EINVAL, "%s:%u: expected KEY=VALUE", path, lineno);
                *eq = 0;
                l = strip(l);
                value = strip(eq + 1);
                n = (ssize_t) strlen(value);
                if (n >= 2 && ((value[0] == '"' && value[n - 1] == '"') ||
                               (value[0] == '\'' && value[n - 1] == '\''))) {
                        value[n - 1] = 0;
                        value++;
                }
                item = config_find(l, strlen(l));
                if (!item)
                        continue; /* Other components' settings (dify's names, future ones) live here too. */
                r = config_set(c, item, value, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

int config_load(Config *c, const char *path, char **ret_error) {
        int r;

        *c = (Config) {};
        *ret_error = NULL;
        for (size_t i = 0; i < ELEMENTSOF(config_table); i++) {
                r = config_set(c, &config_table[i], config_table[i].info.default_value, ret_error);
                if (r < 0)
                        return r;
        }

        r = config_load_file(c, path ?: SCOPEBOX_CONFIG_FILE, ret_error);
        if (r < 0 && !*ret_error)
                return config_fail(ret_error, r, "Failed to read %s: %s", path ?: SCOPEBOX_CONFIG_FILE,
                                   strerror(-r));
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(config_table); i++) {
                const char *v = getenv(config_table[i].info.name);
                if (!v)
                        continue;
                r = config_set(c, &config_table[i], v, ret_error);
                if (r < 0)
                        return r;
        }

        if (!node_id_is_valid(c->node_id))
                return config_fail(ret_error, -EINVAL,
                                   "SANDBOX_NODE_ID=%s is not a valid value (1-%u lowercase hex digits, "
                                   "or empty)",
                                   c->node_id, NODE_ID_LEN_MAX);

        if (!e2b_domain_is_valid(c->e2b_domain))
                return config_fail(ret_error, -EINVAL,
                                   "SANDBOX_E2B_DOMAIN=%s is not a valid value (a DNS name of lowercase "
                                   "letters, digits, '-' and '.', at most 200 characters, or empty)",
                                   c->e2b_domain);

        if (c->idle_ttl_sec > c->idle_ttl_cap_sec)
                return config_fail(ret_error, -EINVAL,
                                   "SANDBOX_IDLE_TTL_SECONDS=%llu exceeds SANDBOX_IDLE_TTL_CAP_SECONDS=%llu",
                                   (unsigned long long) c->idle_ttl_sec,
                                   (unsigned long long) c->idle_ttl_cap_sec);
        return 0;
}

void config_done(Config *c) {
        /* The table knows the strings; each is erased, as the API key must be. */
        for (size_t i = 0; i < ELEMENTSOF(config_table); i++) {
                char **s = (char **) ((uint8_t *) c + config_table[i].offset);

                if (config_table[i].type != CONFIG_STRING || !*s)
                        continue;
                explicit_bzero(*s, strlen(*s));
                free(*s);
        }
        *c = (Config) {};
}
