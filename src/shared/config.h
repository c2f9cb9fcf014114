/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The SANDBOX_* settings shared by all daemons: /etc/scopebox/scopebox.conf, then the environment. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define SCOPEBOX_CONFIG_FILE "/etc/scopebox/scopebox.conf"

typedef struct Config {
        /* Node (scale-out) */
        char *node_id;
        char *e2b_domain;

        /* Gateway */
        char *api_key;
        bool allow_no_auth;
        uint64_t max_body_bytes;
        uint64_t max_storage_body_bytes;
        uint64_t max_code_bytes;
        uint64_t max_upload_bytes;

        /* Sessions */
        int64_t max_sessions;
        uint64_t idle_ttl_sec;
        uint64_t idle_ttl_cap_sec;
        uint64_t exec_timeout_cap_ms;
        uint64_t max_concurrent_creates;
        uint64_t max_concurrent_execs;
        uint64_t queue_timeout_sec;

        /* Runner resources */
        uint64_t memory_limit;
        uint64_t cpu_quota_percent;
        uint64_t pids_limit;
        uint64_t uid_base;
        bool preload;
        char *preload_modules;
        uint64_t template_max_age;
        uint64_t template_max_children;
        uint64_t workspace_size;
        uint64_t tmp_size;

        /* Exec results */
        uint64_t max_output_bytes;
        uint64_t max_artifact_bytes;
        uint64_t max_files_per_exec;
        uint64_t max_total_artifact_bytes;

        /* Storage and archives */
        char *local_storage_dir;
        char *storage_allowed_endpoints;
        char *storage_allowed_networks;
        uint64_t storage_max_ttl_sec;
        uint64_t max_archive_bytes;
        uint64_t archive_timeout_sec;
        uint64_t archive_retry_deadline_sec;
        bool start_empty_on_restore_failure;
        uint64_t dify_max_requests;
        uint64_t dify_max_workers;
        uint64_t dify_worker_timeout_sec;
        uint64_t dify_pool_size;
        bool dify_enable_network;
        bool dify_enable_preload;
        char *dify_http_proxy;
        char *dify_https_proxy;
        char *dify_network_allow;
        uint64_t dify_max_code_bytes;
        uint64_t dify_max_output_bytes;
} Config;

/* Load defaults, then the file (if present), then the environment. On a bad value, returns
 * -EINVAL and points *ret_bad at a static string naming the variable and the value's problem. */
int config_load(Config *c, const char *path, char **ret_error);
void config_done(Config *c);

/* For docs and tests: iterate the table. */
typedef struct ConfigItemInfo {
        const char *name;
        const char *default_value;
        const char *description;
} ConfigItemInfo;
const ConfigItemInfo *config_items(unsigned *ret_n);
