/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The storage agent: bus service for object storage and archives; exits when idle. */
#pragma once

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "address-policy.h"
#include "backend-local.h"
#include "curl-driver.h"
#include "storage-config.h"
#include "sync-child.h"
#include "config.h"
#include "list.h"
#include "macro.h"

#define AGENT_IDLE_EXIT_USEC (30 * USEC_PER_SEC)

/* The messages of the answers a client sees as they are (docs/dbus-api.md); the decision is the error
 * name (bus-contract.h), never the text. */
#define STORAGE_NOT_CONFIGURED "storage backend not configured"       /* StorageNotConfigured */
#define STORAGE_ENDPOINT_NOT_ALLOWED "storage endpoint not allowed"    /* StorageRefused */
#define STORAGE_POLICY_UNAVAILABLE                                     /* PolicyUnavailable */ \
        "storage endpoint policy unavailable: cannot check the endpoint's address, retry later"

/* An archive being written by a runner, published on commit. */
typedef struct StagedArchive {
        struct Agent *agent;
        LIST_FIELDS(struct StagedArchive, staged); /* Agent.staged */
        char token[33];
        char *full_key;
        LocalStaged local;
        int spool_fd;                 /* s3: the archive is spooled here, then uploaded */
        StorageConfig s3;             /* s3: where it goes */
        sd_event_source *expiry;      /* abandoned stagings are removed */
        sd_bus_message *commit;       /* local: the CommitArchive call waiting for the write-back */
        SyncChild *sync;              /* local: the fsync of the data, then of the directory, running */
        uint64_t size;                /* local: the size committed, once published */
} StagedArchive;

typedef struct Agent {
        sd_event *event;
        sd_bus *bus;
        Config config;
        sd_event_source *idle_source;
        struct BusIdleExit *idle_exit; /* idle: the name given back, queued calls being answered */
        unsigned n_jobs;              /* transfers and stagings in progress */
        uint64_t n_calls;             /* method calls since start */
        StagedArchive *staged;
        CurlDriver *curl;
        AddressPolicy address_policy; /* for endpoints the operator did not list */
} Agent;

/* S3 operations (agent-s3.c). Each replies to 'm' itself, later. */
int agent_s3_put(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key,
                 const char *content_type, int data_fd, uint64_t expires_in);
int agent_s3_delete(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key, bool reply_key);
int agent_s3_gc(Agent *a, sd_bus_message *m, const StorageConfig *c, int64_t max_age);
/* QuarantineArchive: moves the object 'key' aside to 'target' (copy, verify, delete). */
int agent_s3_quarantine(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key,
                        const char *target);
/* ListQuarantinedArchives: the quarantined archives directly under 'dir_key' ("<prefix>/workspaces"). */
int agent_s3_list_quarantined(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *dir_key);
/* Uploads the first 'size' bytes of s's spool (the size committed), verified end to end. */
int agent_s3_upload_archive(Agent *a, sd_bus_message *m, StagedArchive *s, uint64_t size);
int agent_s3_open_archive(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key);
/* CommitArchive's answer once the archive is stored, wherever that is: logged and replied with its size. */
void agent_reply_archive_stored(sd_bus_message *m, const char *key, uint64_t size);
/* The quarantined archives a listing found, at most QUARANTINED_LIST_MAX (a bus message's worth). */
#define QUARANTINED_LIST_MAX 10000U
typedef struct QuarantinedArchive {
        char *key;                    /* the full key */
        uint64_t size;
        int64_t when;                 /* quarantined at (Unix seconds, from the name) */
} QuarantinedArchive;
typedef struct QuarantinedList {
        QuarantinedArchive *items;
        size_t n, allocated;
        bool truncated;               /* more were there than QUARANTINED_LIST_MAX */
} QuarantinedList;
/* Adds one (a copy of 'key'); past QUARANTINED_LIST_MAX only sets 'truncated'. */
int quarantined_list_add(QuarantinedList *l, const char *key, uint64_t size, int64_t when);
void quarantined_list_done(QuarantinedList *l);
/* The journal entry of a quarantine (SCOPEBOX_MESSAGE_ARCHIVE_QUARANTINED). 'replaced': a newer
 * archive took the original's name meanwhile, so the original was not deleted. */
void agent_log_quarantined(const char *key, const char *target, uint64_t size, bool replaced);
/* ListQuarantinedArchives' answer. */
void agent_reply_quarantined(sd_bus_message *m, const QuarantinedList *l);

/* How a stored archive is damaged (ArchiveDamaged, docs/dbus-api.md). */
#define ARCHIVE_DAMAGED_TOO_LARGE "larger than SANDBOX_MAX_ARCHIVE_BYTES"
#define ARCHIVE_DAMAGED_CHECKSUM "checksum mismatch"
/* Logs that the stored archive 'key' is damaged and sets ArchiveDamaged on 'error' (returns its result). */
int agent_archive_damaged(const char *key, const char *why, sd_bus_error *error);
/* Copies the fields a request needs into a config that outlives the call. */
int storage_config_copy(const StorageConfig *c, StorageConfig *ret);

void agent_done(Agent *a);

int agent_add_bus_objects(Agent *a);
/* io.scopebox.StorageAgent1's methods (--bus-introspect). */
const sd_bus_vtable *agent_get_vtable(void);
/* Called on every call: counts it (STATUS=) and pushes the idle exit further out. */
void agent_touch(Agent *a);
/* A transfer or staging started or ended: counted for the idle exit and the STATUS= line. */
void agent_job_begin(Agent *a);
void agent_job_end(Agent *a);
