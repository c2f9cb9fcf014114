/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The io.scopebox.StorageAgent1 bus API (docs/dbus-api.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "alloc-util.h"
#include "bus-util.h"
#include "endpoint.h"
#include "id.h"
#include "json-util.h"
#include "log.h"
#include "message-ids.h"
#include "quarantine.h"
#include "storage-config.h"

#define STAGED_EXPIRY_SLACK_USEC (60 * USEC_PER_SEC)

static bool storage_full_errno(int r) {
        return r == -ENOSPC || r == -EDQUOT;
}

/* Parses a storage block and checks it is effective; errors are set on 'error'. */
static int parse_storage(Agent *a, const char *json, StorageConfig *ret, sd_bus_error *error) {
        _cleanup_json_ json_object *o = NULL;
        const char *why = NULL, *endpoint;
        int r;

        if (json_parse(json, strlen(json), JSON_DEPTH_MAX, &o) < 0 ||
            !json_object_is_type(o, json_type_object))
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid storage config");
        r = storage_config_parse(o, ret, &why);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, why);
        /* That checked the endpoint without libcurl, by the rule of the parser requests use: should
         * the two ever part, the client still hears 400 here, not 502 from the transfer. */
        endpoint = storage_config_endpoint(ret);
        r = endpoint ? storage_endpoint_check(endpoint, ret->provider == STORAGE_S3) : 0;
        if (r < 0) {
                storage_config_done(ret);
                return r == -ENOMEM ? r
                                    : sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                                       STORAGE_ENDPOINT_INVALID);
        }
        if (!storage_config_effective(ret, a->config.local_storage_dir)) {
                storage_config_done(ret);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_NOT_CONFIGURED, STORAGE_NOT_CONFIGURED);
        }
        /* Our staging directory is no place for objects. */
        if (ret->provider == STORAGE_LOCAL && local_key_is_reserved(ret->prefix)) {
                storage_config_done(ret);
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid storage prefix");
        }
        /* Requests carry their storage block: the operator decides where we may connect. */
        if (!storage_endpoint_allowed(ret, a->config.storage_allowed_endpoints)) {
                log_info("Refusing a storage block naming an endpoint that "
                         "SANDBOX_STORAGE_ALLOWED_ENDPOINTS does not list.");
                storage_config_done(ret);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_REFUSED, STORAGE_ENDPOINT_NOT_ALLOWED);
        }
        return 0;
}

static int archive_key_from(Agent *a, const char *storage, const char *stem, StorageConfig *c, char **ret,
                            sd_bus_error *error) {
        int r;

        r = parse_storage(a, storage, c, error);
        if (r != 0)
                return r;
        r = storage_archive_key(c, stem, ret);
        if (r == -EINVAL)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid archive stem");
        return r;
}

/* The (storage, key) arguments of the object methods, as the full key; accept_full as for
 * storage_full_key(). */
static int object_key_from(Agent *a, const char *storage, const char *key, bool accept_full,
                           StorageConfig *c, char **ret, sd_bus_error *error) {
        int r;

        r = parse_storage(a, storage, c, error);
        if (r != 0)
                return r;
        r = storage_full_key(c, key, accept_full, ret);
        if (r == -EINVAL)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid storage key");
        return r;
}

/* The (storage, stem) arguments of the archive methods, or the (storage, key) of DeleteObject (which
 * takes full keys too), as the object key they name. */
static int read_storage_key(sd_bus_message *m, Agent *a, bool archive, StorageConfig *c, char **ret,
                            sd_bus_error *error) {
        const char *storage, *name;
        int r;

        agent_touch(a);
        r = sd_bus_message_read(m, "ss", &storage, &name);
        if (r < 0)
                return r;
        return archive ? archive_key_from(a, storage, name, c, ret, error)
                       : object_key_from(a, storage, name, true, c, ret, error);
}

static StagedArchive *staged_free(StagedArchive *s) {
        if (!s)
                return NULL;
        LIST_REMOVE(staged, s->agent->staged, s);
        local_abort(&s->local);
        safe_close(s->spool_fd);
        storage_config_done(&s->s3);
        s->expiry = sd_event_source_disable_unref(s->expiry);
        s->sync = sync_child_free(s->sync);
        sd_bus_message_unref(s->commit);
        free(s->full_key);
        agent_job_end(s->agent);
        free(s);
        return NULL;
}

static int on_staged_expired(sd_event_source *source, uint64_t usec, void *userdata) {
        StagedArchive *s = userdata;
        log_warning("Archive '%s' was never committed; discarding it.", s->full_key);
        staged_free(s);
        return 0;
}

/* A staging being committed is no longer anyone's to commit or abort. */
static StagedArchive *staged_find(Agent *a, const char *token) {
        LIST_FOREACH(staged, s, a->staged)
                if (streq(s->token, token) && !s->commit)
                        return s;
        return NULL;
}

void agent_done(Agent *a) {
        while (a->staged)
                staged_free(a->staged);
        config_done(&a->config);
        address_policy_done(&a->address_policy);
}

static int method_get_version(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;

        agent_touch(a);
        return sd_bus_reply_method_return(m, "s", PROJECT_VERSION);
}

static int method_begin_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *key = NULL;
        StagedArchive *s;
        int r;

        r = read_storage_key(m, a, true, &c, &key, error);
        if (r != 0)
                return r;

        s = calloc(1, sizeof(StagedArchive));
        if (!s)
                return -ENOMEM;
        *s = (StagedArchive) { .agent = a, .local = LOCAL_STAGED_NULL, .spool_fd = -EBADF,
                               .s3 = { .provider = _STORAGE_PROVIDER_INVALID } };
        r = session_id_generate(s->token);
        if (r >= 0 && c.provider != STORAGE_LOCAL) {
                /* Spooled in our private /var/tmp, uploaded on commit: streamed, never in memory. */
                s->spool_fd = open("/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
                r = s->spool_fd < 0 ? -errno : storage_config_copy(&c, &s->s3);
        } else if (r >= 0)
                r = local_stage(a->config.local_storage_dir, key, s->token, &s->local);
        if (r < 0) {
                safe_close(s->spool_fd);
                storage_config_done(&s->s3);
                free(s);
                log_warning_errno(r, "Failed to stage archive '%s': %m", key);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED,
                                        c.provider == STORAGE_LOCAL && storage_full_errno(r)
                                                ? "storage full"
                                                : "failed to write to storage");
        }
        s->full_key = TAKE_PTR(key);
        LIST_PREPEND(staged, a->staged, s);
        agent_job_begin(a);
        r = sd_event_add_time_relative(a->event, &s->expiry, CLOCK_MONOTONIC,
                                       a->config.archive_timeout_sec * USEC_PER_SEC +
                                               STAGED_EXPIRY_SLACK_USEC,
                                       USEC_PER_SEC, on_staged_expired, s);
        if (r < 0) {
                staged_free(s);
                return r;
        }
        return sd_bus_reply_method_return(m, "sh", s->token, s->spool_fd >= 0 ? s->spool_fd : s->local.fd);
}

void agent_reply_archive_stored(sd_bus_message *m, const char *key, uint64_t size) {
        int r;

        log_info("Stored archive '%s' (%llu bytes).", key, (unsigned long long) size);
        r = sd_bus_reply_method_return(m, "t", size);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
}

/* The end of a local commit, said once: the staging is used up either way. */
static void local_commit_done(StagedArchive *s, int error) {
        int r;

        if (error < 0) {
                log_warning_errno(error, "Failed to publish archive '%s': %m", s->full_key);
                const char *what = storage_full_errno(error) ? "storage full" : "failed to write to storage";
                r = sd_bus_reply_method_error(s->commit,
                                              &SD_BUS_ERROR_MAKE_CONST(BUS_ERROR_STORAGE_FAILED, what));
                if (r < 0)
                        log_debug_errno(r, "Failed to reply, ignoring: %m");
        } else
                agent_reply_archive_stored(s->commit, s->full_key, s->size);
        staged_free(s);
}

/* The name is durable: the archive is stored. A failure here leaves the new archive in place, not
 * known to be durable, and is reported as a failure (the session manager keeps the workspace). */
static void on_dir_synced(SyncChild *c, int error, void *userdata) {
        StagedArchive *s = userdata;

        s->sync = sync_child_free(s->sync);
        local_staged_done(&s->local);
        local_commit_done(s, error);
}

/* The data is durable: now the name, then the name's durability. */
static void on_data_synced(SyncChild *c, int error, void *userdata) {
        StagedArchive *s = userdata;
        int r = error;

        s->sync = sync_child_free(s->sync);
        if (r >= 0)
                r = local_publish(&s->local, &s->size);
        else
                local_abort(&s->local);
        if (r >= 0)
                r = sync_child_start(s->agent->event, s->local.dir_fd, on_dir_synced, s, &s->sync);
        if (r < 0) {
                local_commit_done(s, r);
                return;
        }
}

/* Whether the file system of fd lacks room for 'missing' more bytes: a short staged archive there
 * is one the runner could not finish writing. */
static bool fs_lacks_room(int fd, uint64_t missing) {
        struct statvfs sv;

        return fstatvfs(fd, &sv) >= 0 && (uint64_t) sv.f_bavail * sv.f_frsize < missing;
}

static int method_commit_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        const char *token;
        StagedArchive *s;
        uint64_t size = 0, expected = 0;
        struct stat st;
        bool checked;
        int fd, r;

        agent_touch(a);
        /* "s": a session manager from before the size was part of the call (filter_legacy_commit). */
        checked = !streq_ptr(sd_bus_message_get_signature(m, true), "s");
        r = checked ? sd_bus_message_read(m, "st", &token, &expected) : sd_bus_message_read(m, "s", &token);
        if (r < 0)
                return r;
        s = staged_find(a, token);
        if (!s)
                return sd_bus_error_set(error, BUS_ERROR_UNKNOWN_TOKEN, "unknown archive token");

        /* Whatever happens now, the staging is used up: a failed commit is retried from BeginArchive. */
        fd = s->spool_fd >= 0 ? s->spool_fd : s->local.fd;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                log_warning_errno(r, "Failed to look at staged archive '%s': %m", s->full_key);
                staged_free(s);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "failed to write to storage");
        }
        size = (uint64_t) st.st_size;
        if (checked && size != expected) {
                bool full = s->spool_fd < 0 && size < expected && fs_lacks_room(fd, expected - size);

                log_struct(LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-incomplete"),
                           "Archive '%s' is incomplete (%llu of %llu bytes staged%s); not storing it.",
                           s->full_key, (unsigned long long) size, (unsigned long long) expected,
                           full ? ", the storage directory is full" : "");
                staged_free(s);
                return sd_bus_error_setf(error, BUS_ERROR_STORAGE_FAILED,
                                         full ? "storage full (archive incomplete: %llu of %llu bytes)"
                                              : "archive incomplete: %llu of %llu bytes",
                                         (unsigned long long) size, (unsigned long long) expected);
        }
        if (s->spool_fd >= 0) {
                r = agent_s3_upload_archive(a, m, s, size);
                staged_free(s);
                return r;
        }
        /* fsynced by a child while the loop goes on, then renamed (on_data_synced()). */
        s->expiry = sd_event_source_disable_unref(s->expiry);
        r = sync_child_start(a->event, s->local.fd, on_data_synced, s, &s->sync);
        if (r < 0) {
                log_warning_errno(r, "Failed to start writing archive '%s' to disk: %m", s->full_key);
                staged_free(s);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "failed to write to storage");
        }
        s->commit = sd_bus_message_ref(m);
        return 1;
}

static int method_abort_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        const char *token;
        StagedArchive *s;
        int r;

        agent_touch(a);
        r = sd_bus_message_read(m, "s", &token);
        if (r < 0)
                return r;
        /* Unknown (the agent restarted, or it expired), or being committed: not ours to discard. */
        s = staged_find(a, token);
        if (!s)
                return sd_bus_error_set(error, BUS_ERROR_UNKNOWN_TOKEN, "unknown archive token");
        staged_free(s);
        return sd_bus_reply_method_return(m, NULL);
}

/* A local archive as it is stored: 1 restorable as far as the agent can tell (it does not look into
 * archives: the runner unpacks them), 0 damaged (*ret_why says how), or a negative errno. */
static int local_archive_check(int fd, uint64_t max_bytes, const char **ret_why) {
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uint64_t) st.st_size > max_bytes) {
                *ret_why = ARCHIVE_DAMAGED_TOO_LARGE;
                return 0;
        }
        return 1;
}

int agent_archive_damaged(const char *key, const char *why, sd_bus_error *error) {
        log_struct(LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-damaged"),
                   "Stored archive '%s' is damaged (%s): it is not restored.", key, why);
        return sd_bus_error_setf(error, BUS_ERROR_ARCHIVE_DAMAGED, "stored archive is damaged: %s", why);
}

static int method_open_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *key = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *why = NULL;
        int r;

        r = read_storage_key(m, a, true, &c, &key, error);
        if (r != 0)
                return r;
        if (c.provider != STORAGE_LOCAL)
                return agent_s3_open_archive(a, m, &c, key);
        r = local_open(a->config.local_storage_dir, key, &fd);
        if (r == -EINVAL)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid archive stem");
        if (r == -ENOENT) {
                fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                return sd_bus_reply_method_return(m, "bh", false, fd);
        }
        if (r >= 0)
                r = local_archive_check(fd, a->config.max_archive_bytes, &why);
        if (r < 0) {
                log_warning_errno(r, "Failed to open archive '%s': %m", key);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "failed to read from storage");
        }
        if (r == 0)
                return agent_archive_damaged(key, why, error);
        return sd_bus_reply_method_return(m, "bh", true, fd);
}

/* DeleteArchive and DeleteObject: one deletion, told apart in the log and the reply (DeleteObject answers
 * the full key, and an invalid key there is the caller's mistake). */
static int delete_storage_key(sd_bus_message *m, Agent *a, bool object, sd_bus_error *error) {
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *key = NULL;
        const char *what = object ? "object" : "archive";
        int r;

        r = read_storage_key(m, a, !object, &c, &key, error);
        if (r != 0)
                return r;
        if (c.provider != STORAGE_LOCAL)
                return agent_s3_delete(a, m, &c, key, object);
        r = local_delete(a->config.local_storage_dir, key);
        if (r == -EINVAL && object)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "invalid storage key");
        if (r < 0) {
                log_warning_errno(r, "Failed to delete %s '%s': %m", what, key);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "failed to delete from storage");
        }
        log_info("Deleted %s '%s'.", what, key);
        return object ? sd_bus_reply_method_return(m, "s", key) : sd_bus_reply_method_return(m, NULL);
}

static int method_delete_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return delete_storage_key(m, userdata, false, error);
}

int quarantined_list_add(QuarantinedList *l, const char *key, uint64_t size, int64_t when) {
        char *k;

        if (l->n >= QUARANTINED_LIST_MAX) {
                l->truncated = true;
                return 0;
        }
        k = strdup(key);
        if (!k)
                return -ENOMEM;
        if (ARRAY_GROW(l->items, l->allocated, l->n, 16) < 0) {
                free(k);
                return -ENOMEM;
        }
        l->items[l->n++] = (QuarantinedArchive) { .key = k, .size = size, .when = when };
        return 0;
}

void quarantined_list_done(QuarantinedList *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i].key);
        l->items = mfree(l->items);
        l->n = l->allocated = 0;
}

void agent_reply_quarantined(sd_bus_message *m, const QuarantinedList *l) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(sstt)");
        for (size_t i = 0; r >= 0 && i < l->n; i++) {
                const char *name = strrchr(l->items[i].key, '/');
                size_t stem_len = 0;
                _cleanup_free_ char *stem = NULL;

                name = name ? name + 1 : l->items[i].key;
                (void) quarantine_key_parse(name, NULL, &stem_len);
                stem = strndup(name, stem_len);
                if (!stem) {
                        r = -ENOMEM;
                        break;
                }
                r = sd_bus_message_append(reply, "(sstt)", l->items[i].key, stem, l->items[i].size,
                                          (uint64_t) MAX(l->items[i].when, (int64_t) 0) * USEC_PER_SEC);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "b", l->truncated);
        if (r >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        if (r < 0) {
                log_warning_errno(r, "Failed to answer a listing of quarantined archives: %m");
                r = sd_bus_reply_method_errnof(m, r, "Failed to answer: %m");
                if (r < 0)
                        log_debug_errno(r, "Failed to reply, ignoring: %m");
        }
}

void agent_log_quarantined(const char *key, const char *target, uint64_t size, bool replaced) {
        log_struct(LOG_NOTICE, 0,
                   LOG_FIELDS(SCOPEBOX_MESSAGE_ARCHIVE_QUARANTINED, "SCOPEBOX_EVENT=archive-quarantined",
                              strjoina("SCOPEBOX_ARCHIVE_KEY=", key),
                              strjoina("SCOPEBOX_QUARANTINE_KEY=", target)),
                   "Damaged archive '%s' (%llu bytes) moved aside to '%s'%s: kept, never restored nor "
                   "collected.",
                   key, (unsigned long long) size, target,
                   replaced ? " (a newer archive took its name meanwhile, and stays)" : "");
}

/* The archive directory of a storage block: "<prefix>/workspaces", where each stem's archive is. */
static int archive_dir_key(const StorageConfig *c, char **ret) {
        return asprintf(ret, "%s%sworkspaces", c->prefix, *c->prefix ? "/" : "") < 0 ? -ENOMEM : 0;
}

static int method_quarantine_archive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *key = NULL, *target = NULL;
        struct stat st = {};
        int r;

        r = read_storage_key(m, a, true, &c, &key, error);
        if (r != 0)
                return r;
        r = quarantine_key(key, time(NULL), &target);
        if (r < 0)
                return r;
        /* Where the object is, there is room for its quarantine key (S3 and OSS: 1024 bytes). */
        if (strlen(target) > STORAGE_KEY_MAX)
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED,
                                        "quarantine failed: the quarantine key would be too long");
        if (c.provider != STORAGE_LOCAL)
                return agent_s3_quarantine(a, m, &c, key, target);

        {
                _cleanup_close_ int fd = -EBADF;
                if (local_open(a->config.local_storage_dir, key, &fd) >= 0)
                        (void) fstat(fd, &st);
        }
        r = local_quarantine(a->config.local_storage_dir, key, target);
        if (r == -ENOENT)
                return sd_bus_error_set(error, BUS_ERROR_NOT_FOUND, "no stored archive to quarantine");
        if (r < 0) {
                log_warning_errno(r, "Failed to move damaged archive '%s' aside to '%s': %m", key, target);
                return sd_bus_error_setf(error, BUS_ERROR_STORAGE_FAILED, "quarantine failed: %s",
                                         r == -EEXIST ? "the quarantine key exists" : strerror(-r));
        }
        agent_log_quarantined(key, target, (uint64_t) st.st_size, false);
        return sd_bus_reply_method_return(m, "s", target);
}

static int local_quarantined_add(const char *name, uint64_t size, int64_t when, void *userdata) {
        struct {
                const char *dir;
                QuarantinedList *list;
        } *ctx = userdata;
        _cleanup_free_ char *key = NULL;

        if (asprintf(&key, "%s/%s", ctx->dir, name) < 0)
                return -ENOMEM;
        return quarantined_list_add(ctx->list, key, size, when);
}

static int method_list_quarantined_archives(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_(quarantined_list_done) QuarantinedList list = {};
        _cleanup_free_ char *dir = NULL;
        const char *storage;
        int r;

        agent_touch(a);
        r = sd_bus_message_read(m, "s", &storage);
        if (r < 0)
                return r;
        r = parse_storage(a, storage, &c, error);
        if (r != 0)
                return r;
        r = archive_dir_key(&c, &dir);
        if (r < 0)
                return r;
        if (c.provider != STORAGE_LOCAL)
                return agent_s3_list_quarantined(a, m, &c, dir);
        struct {
                const char *dir;
                QuarantinedList *list;
        } ctx = { dir, &list };
        r = local_list_quarantined(a->config.local_storage_dir, dir, local_quarantined_add, &ctx);
        if (r < 0) {
                log_warning_errno(r, "Failed to list quarantined archives under '%s': %m", dir);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED, "failed to read from storage");
        }
        agent_reply_quarantined(m, &list);
        return 1;
}

static int method_put_object(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *key = NULL;
        const char *storage, *k, *content_type;
        uint64_t expires_in;
        int fd, r;

        agent_touch(a);
        r = sd_bus_message_read(m, "sssht", &storage, &k, &content_type, &fd, &expires_in);
        if (r < 0)
                return r;
        r = object_key_from(a, storage, k, false, &c, &key, error);
        if (r != 0)
                return r;
        if (c.provider == STORAGE_LOCAL)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                        "presigned URLs are unsupported for local storage");
        return agent_s3_put(a, m, &c, key, content_type, fd, expires_in);
}

static int method_delete_object(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return delete_storage_key(m, userdata, true, error);
}

static int method_collect_garbage(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Agent *a = userdata;
        _cleanup_(storage_config_done) StorageConfig c = { .provider = _STORAGE_PROVIDER_INVALID };
        _cleanup_free_ char *workspaces = NULL, *mineru = NULL;
        GcCounters counters = {};
        const char *storage;
        int64_t max_age;
        int r;

        agent_touch(a);
        r = sd_bus_message_read(m, "sx", &storage, &max_age);
        if (r < 0)
                return r;
        /* Nothing to do, or nowhere to do it: all zeros, as the contract says. */
        if (max_age <= 0 || parse_storage(a, storage, &c, NULL) != 0)
                return sd_bus_reply_method_return(m, "ttt", (uint64_t) 0, (uint64_t) 0, (uint64_t) 0);
        if (c.provider != STORAGE_LOCAL)
                return agent_s3_gc(a, m, &c, max_age);

        if (asprintf(&workspaces, "%s%sworkspaces", c.prefix, *c.prefix ? "/" : "") < 0 ||
            asprintf(&mineru, "%s%smineru", c.prefix, *c.prefix ? "/" : "") < 0)
                return -ENOMEM;
        int64_t cutoff = (int64_t) time(NULL) - max_age;
        r = local_gc(a->config.local_storage_dir, workspaces, ".tgz", cutoff, &counters);
        if (r >= 0)
                r = local_gc(a->config.local_storage_dir, mineru, NULL, cutoff, &counters);
        if (r < 0) {
                log_warning_errno(r, "Garbage collection under '%s' failed: %m", c.prefix);
                return sd_bus_error_set(error, BUS_ERROR_STORAGE_FAILED,
                                        "storage garbage collection failed");
        }
        log_info("Garbage collection under '%s': %llu of %llu objects deleted, %llu bytes freed.", c.prefix,
                 (unsigned long long) counters.deleted, (unsigned long long) counters.scanned,
                 (unsigned long long) counters.freed_bytes);
        return sd_bus_reply_method_return(m, "ttt", counters.deleted, counters.scanned,
                                          counters.freed_bytes);
}

static const sd_bus_vtable agent_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("GetVersion", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", version),
                                method_get_version, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("BeginArchive", SD_BUS_ARGS("s", storage, "s", stem),
                                SD_BUS_RESULT("s", token, "h", sink), method_begin_archive,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CommitArchive", SD_BUS_ARGS("s", token, "t", size),
                                SD_BUS_RESULT("t", size), method_commit_archive, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("AbortArchive", SD_BUS_ARGS("s", token), SD_BUS_NO_RESULT,
                                method_abort_archive, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenArchive", SD_BUS_ARGS("s", storage, "s", stem),
                                SD_BUS_RESULT("b", found, "h", source), method_open_archive,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS(
                "PutObject",
                SD_BUS_ARGS("s", storage, "s", key, "s", content_type, "h", data, "t", expires_in),
                SD_BUS_RESULT("s", provider, "s", full_key, "s", url, "t", expires_in), method_put_object,
                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("DeleteObject", SD_BUS_ARGS("s", storage, "s", key),
                                SD_BUS_RESULT("s", full_key), method_delete_object,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CollectGarbage", SD_BUS_ARGS("s", storage, "x", max_age_seconds),
                                SD_BUS_RESULT("t", deleted, "t", scanned, "t", freed_bytes),
                                method_collect_garbage, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("DeleteArchive", SD_BUS_ARGS("s", storage, "s", stem), SD_BUS_NO_RESULT,
                                method_delete_archive, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("QuarantineArchive", SD_BUS_ARGS("s", storage, "s", stem),
                                SD_BUS_RESULT("s", quarantine_key), method_quarantine_archive,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListQuarantinedArchives", SD_BUS_ARGS("s", storage),
                                SD_BUS_RESULT("a(sstt)", archives, "b", truncated),
                                method_list_quarantined_archives, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

/* Transitional: session managers of the previous release (still running while a package upgrade
 * restarts the daemons one by one) call CommitArchive(s token). sd-bus
 * refuses a call whose signature is not the vtable's before any handler sees it, so this filter
 * serves that one shape (without the size check). */
static int filter_legacy_commit(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        int r;

        if (!sd_bus_message_is_method_call(m, STORAGE_AGENT_INTERFACE, "CommitArchive") ||
            !streq_ptr(sd_bus_message_get_path(m), STORAGE_AGENT_OBJECT_PATH) ||
            !streq_ptr(sd_bus_message_get_signature(m, true), "s"))
                return 0;
        r = method_commit_archive(m, userdata, &error);
        if (sd_bus_error_is_set(&error))
                r = sd_bus_reply_method_error(m, &error);
        else if (r < 0)
                r = sd_bus_reply_method_errno(m, r, NULL);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
        return 1;
}

const sd_bus_vtable *agent_get_vtable(void) {
        return agent_vtable;
}

int agent_add_bus_objects(Agent *a) {
        int r;

        r = sd_bus_add_filter(a->bus, NULL, filter_legacy_commit, a);
        if (r < 0)
                return r;
        return sd_bus_add_object_vtable(a->bus, NULL, STORAGE_AGENT_OBJECT_PATH, STORAGE_AGENT_INTERFACE,
                                        agent_vtable, a);
}
