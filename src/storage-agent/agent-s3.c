/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The agent's S3 and OSS operations: put with a presigned URL, delete, garbage collection over paginated
 * listings, and archive upload/download through spool files. Each answers its bus call when the
 * transfers are done; failures are StorageFailed (502), never blocking anyone. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "archive-verify.h"
#include "backend-s3.h"
#include "base64.h"
#include "bus-util.h"
#include "log.h"
#include "macro.h"
#include "quarantine.h"
#include "s3-listing.h"
#include "sigv4.h"
#include "string-util.h"

#define S3_LIST_PAGE STRINGIFY(S3_LISTING_ENTRIES_MAX) /* what a page may hold, see s3-listing.h */
#define S3_PRESIGN_DEFAULT 3600U

int storage_config_copy(const StorageConfig *c, StorageConfig *ret) {
        StorageConfig n = { .provider = c->provider };
        char *const *src[] = { &c->prefix, &c->s3_bucket, &c->s3_region, &c->s3_endpoint, &c->s3_access_key,
                               &c->s3_secret_key, &c->oss_bucket, &c->oss_endpoint, &c->oss_access_key_id,
                               &c->oss_access_key_secret };
        char **dst[] = { &n.prefix,
                         &n.s3_bucket,
                         &n.s3_region,
                         &n.s3_endpoint,
                         &n.s3_access_key,
                         &n.s3_secret_key,
                         &n.oss_bucket,
                         &n.oss_endpoint,
                         &n.oss_access_key_id,
                         &n.oss_access_key_secret };

        for (size_t i = 0; i < ELEMENTSOF(src); i++)
                if (*src[i] && !(*dst[i] = strdup(*src[i]))) {
                        storage_config_done(&n);
                        return -ENOMEM;
                }
        *ret = n;
        return 0;
}

/* The address policy's answer for a transfer it stopped (curl-driver.h), by name: a refused endpoint
 * can never succeed with the same block (StorageRefused, like one the allowlist does not name); one
 * whose address could not be judged may (PolicyUnavailable). Returns 0 for any other error. */
static int reply_policy_error(sd_bus_message *m, int error) {
        int r;

        if (error == TRANSFER_REFUSED)
                r = sd_bus_reply_method_errorf(m, BUS_ERROR_STORAGE_REFUSED, STORAGE_ENDPOINT_NOT_ALLOWED);
        else if (error == TRANSFER_POLICY_UNAVAILABLE)
                r = sd_bus_reply_method_errorf(m, BUS_ERROR_POLICY_UNAVAILABLE, STORAGE_POLICY_UNAVAILABLE);
        else
                return 0;
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
        return 1;
}

static void reply_failed(sd_bus_message *m, int error, long status, const char *what) {
        int r;

        if (reply_policy_error(m, error))
                return;
        if (error == -EFBIG)
                r = sd_bus_reply_method_errorf(m, BUS_ERROR_STORAGE_FAILED,
                                               "%s: larger than SANDBOX_MAX_ARCHIVE_BYTES", what);
        else if (error < 0)
                r = sd_bus_reply_method_errorf(m, BUS_ERROR_STORAGE_FAILED,
                                               "%s: storage server unreachable (%s)", what,
                                               strerror(-error));
        else
                r = sd_bus_reply_method_errorf(m, BUS_ERROR_STORAGE_FAILED,
                                               "%s: storage server answered HTTP %ld", what, status);
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
}

/* Why the address policy refused the last address a transfer tried. */
static const char *refusal_reason(const Transfer *t) {
        switch (t ? t->refused_route : _ADDRESS_ROUTE_INVALID) {
        case ADDRESS_ROUTE_LOCAL:
                return "the kernel routes it to this host itself (an address of its own, on the loopback, "
                       "or in a local route)";
        case ADDRESS_ROUTE_NOT_UNICAST:
                return "it is a broadcast or multicast address";
        case ADDRESS_ROUTE_UNROUTABLE:
                return "the kernel has a blackhole, unreachable or prohibit route for it";
        default:
                return "it is internal (loopback, private, link-local or reserved), and "
                       "SANDBOX_STORAGE_ALLOWED_NETWORKS does not allow it";
        }
}

/* One line per failed operation. A refused address is the client's doing: info, not a warning. */
static void log_failed(const char *what, const char *key, const Transfer *t, int error, long status) {
        if (error == TRANSFER_REFUSED)
                log_info("%s '%s' refused: the storage endpoint's address is not allowed: %s.", what, key,
                         refusal_reason(t));
        else if (error == TRANSFER_POLICY_UNAVAILABLE)
                log_warning("%s '%s' not attempted: the storage endpoint's address could not be checked "
                            "(route lookup: %s); it is not connected to unchecked.",
                            what, key, strerror(t && t->policy_error < 0 ? -t->policy_error : ENETDOWN));
        else if (error < 0)
                log_warning("%s '%s' failed: %s", what, key, strerror(-error));
        else
                log_warning("%s '%s' failed: HTTP %ld", what, key, status);
}

/* Endpoints the operator listed may be anywhere; the others must not be internal addresses. */
static int agent_s3_call(Agent *a, const StorageConfig *c, S3CallParams *p, S3Callback cb, void *userdata) {
        p->policy =
                storage_endpoint_listed(c, a->config.storage_allowed_endpoints) ? NULL : &a->address_policy;
        return s3_call(a->curl, c, p, cb, userdata);
}

/* A method call answered once its transfer is done, counted as a job until then: the first member
 * of each kind of call below. */
typedef struct AgentCall {
        Agent *agent;
        sd_bus_message *message;      /* the call to answer */
        StorageConfig config;         /* the storage block's fields the transfer needs, copied */
        char *key;                    /* the object's; NULL when out of memory, or for a sweep */
} AgentCall;

static AgentCall agent_call_start(Agent *a, sd_bus_message *m, const char *key) {
        agent_job_begin(a);
        return (AgentCall) {
                .agent = a,
                .message = sd_bus_message_ref(m),
                .config = { .provider = _STORAGE_PROVIDER_INVALID },
                .key = key ? strdup(key) : NULL,
        };
}

static void agent_call_done(AgentCall *c) {
        agent_job_end(c->agent);
        sd_bus_message_unref(c->message);
        storage_config_done(&c->config);
        free(c->key);
}

/* ---- put ---- */

typedef struct PutCall {
        AgentCall call;
        int data_fd;
        unsigned expires;
} PutCall;

static void put_call_free(PutCall *p) {
        agent_call_done(&p->call);
        safe_close(p->data_fd);
        free(p);
}

static void on_put_done(S3Call *call, int error, long status, const char *body, void *userdata) {
        PutCall *p = userdata;
        _cleanup_free_ char *url = NULL;
        int r;

        if (error < 0 || status < 200 || status >= 300) {
                log_failed("Upload of", p->call.key, s3_call_transfer(call), error, status);
                reply_failed(p->call.message, error, status, "upload failed");
        } else if ((r = s3_presigned_get(&p->call.config, p->call.key, p->expires, &url)) < 0) {
                log_warning_errno(r, "Failed to presign '%s': %m", p->call.key);
                reply_failed(p->call.message, r, 0, "presigning failed");
        } else {
                log_info("Stored object '%s'.", p->call.key);
                r = sd_bus_reply_method_return(p->call.message, "ssst",
                                               storage_provider_to_string(p->call.config.provider),
                                               p->call.key, url, (uint64_t) p->expires);
                if (r < 0)
                        log_debug_errno(r, "Failed to reply, ignoring: %m");
        }
        put_call_free(p);
}

int agent_s3_put(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key,
                 const char *content_type, int data_fd, uint64_t expires_in) {
        PutCall *p;
        int r;

        /* Like the upstream SDK's missing-credentials failure: a provider error, 502. */
        if (c->provider == STORAGE_S3 && (!c->s3_access_key || !c->s3_secret_key))
                return sd_bus_reply_method_errorf(m, BUS_ERROR_STORAGE_FAILED,
                                                  "presigned URLs need s3 credentials");
        p = calloc(1, sizeof(PutCall));
        if (!p)
                return -ENOMEM;
        *p = (PutCall) { .call = agent_call_start(a, m, key),
                         .data_fd = fcntl(data_fd, F_DUPFD_CLOEXEC, 3) };
        p->expires = expires_in == 0 ? S3_PRESIGN_DEFAULT
                                     : (unsigned) MIN(expires_in, a->config.storage_max_ttl_sec);
        p->expires = MIN(p->expires, 604800U);
        if (p->data_fd < 0 || !p->call.key || storage_config_copy(c, &p->call.config) < 0) {
                put_call_free(p);
                return -ENOMEM;
        }
        S3CallParams params = {
                .method = "PUT",
                .key = p->call.key,
                .upload_fd = p->data_fd,
                .download_fd = -1,
                .headers = { { "Content-Type",
                               isempty(content_type) ? "application/octet-stream" : content_type } },
        };
        r = agent_s3_call(a, &p->call.config, &params, on_put_done, p);
        if (r < 0) {
                put_call_free(p);
                return r;
        }
        return 1;
}

/* ---- delete ---- */

typedef struct DeleteCall {
        AgentCall call;
        bool reply_key;
} DeleteCall;

static void on_delete_done(S3Call *call, int error, long status, const char *body, void *userdata) {
        DeleteCall *d = userdata;
        int r;

        /* Not found is success: the object is gone either way. */
        if (error >= 0 && ((status >= 200 && status < 300) || status == 404)) {
                log_info("Deleted %s '%s'.", d->reply_key ? "object" : "archive", d->call.key);
                r = d->reply_key ? sd_bus_reply_method_return(d->call.message, "s", d->call.key)
                                 : sd_bus_reply_method_return(d->call.message, NULL);
                if (r < 0)
                        log_debug_errno(r, "Failed to reply, ignoring: %m");
        } else {
                log_failed("Deletion of", d->call.key, s3_call_transfer(call), error, status);
                reply_failed(d->call.message, error, status, "delete failed");
        }
        agent_call_done(&d->call);
        free(d);
}

int agent_s3_delete(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key, bool reply_key) {
        DeleteCall *d;
        int r;

        d = calloc(1, sizeof(DeleteCall));
        if (!d)
                return -ENOMEM;
        *d = (DeleteCall) { .call = agent_call_start(a, m, key), .reply_key = reply_key };
        S3CallParams params = { .method = "DELETE", .key = key, .upload_fd = -1, .download_fd = -1 };
        r = d->call.key ? agent_s3_call(a, c, &params, on_delete_done, d) : -ENOMEM;
        if (r < 0) {
                on_delete_done(NULL, r, 0, NULL, d);
                return 1;
        }
        return 1;
}

/* ---- garbage collection ---- */

/* The pages of one prefix's listing, asked for one after the other. */
typedef struct ListingPager {
        const char *prefix;           /* borrowed from the job */
        char *continuation;           /* the token for the next page */
        bool listed;                  /* the first page has been asked for */
        bool more;                    /* the last page said there are more */
} ListingPager;

static bool pager_has_next(const ListingPager *p) {
        return !p->listed || p->more;
}

static void pager_reset(ListingPager *p, const char *prefix) {
        free(p->continuation);
        *p = (ListingPager) { .prefix = prefix };
}

/* Asks for the first or the next page of the pager's prefix. */
static int pager_request(ListingPager *p, AgentCall *call, S3Callback cb, void *userdata) {
        S3CallParams params = {
                .method = "GET",
                .key = NULL,
                .upload_fd = -1,
                .download_fd = -1,
                .query = { { "list-type", "2" },
                           { "prefix", p->prefix },
                           { "max-keys", S3_LIST_PAGE },
                           { p->continuation ? "continuation-token" : NULL, p->continuation } },
        };
        /* Keys as %-escapes: XML 1.0 can't carry every character a key may have. S3 only: OSS
         * escapes another set of elements in that mode (its V1 docs name NextMarker, not
         * NextContinuationToken), so its pages keep plain keys, entities decoded. */
        if (call->config.provider == STORAGE_S3) {
                size_t i = p->continuation ? 4 : 3;
                params.query[i][0] = "encoding-type";
                params.query[i][1] = "url";
        }
        p->listed = true;
        return agent_s3_call(call->agent, &call->config, &params, cb, userdata);
}

/* The page that arrived, parsed; the pager moves on to the next. A listing that can't be read
 * completely is refused, never used in part: then *ret_reason says why (-EBADMSG and the like). */
static int pager_parse(ListingPager *p, S3Call *call, const char *body, S3Listing *ret,
                       const char **ret_reason) {
        const Transfer *t = s3_call_transfer(call);
        _cleanup_(s3_listing_done) S3Listing l = {};
        int r;

        /* The whole body, not up to a NUL in it. */
        r = s3_listing_parse(body, t ? t->body_size : strlen(body), &l, ret_reason);
        if (r < 0)
                return r;
        /* A page that hands back the token we just sent would be listed again and again. */
        if (l.continuation && p->continuation && streq(l.continuation, p->continuation)) {
                *ret_reason = "the continuation token it was asked with";
                return -EBADMSG;
        }
        p->more = l.truncated;
        free(p->continuation);
        p->continuation = TAKE_PTR(l.continuation);
        *ret = l;
        l = (S3Listing) {};
        return 0;
}

/* A malformed listing, said once: what failed, and how the listing was malformed. */
static void reply_malformed_listing(AgentCall *call, const char *what, const char *reason) {
        int r;

        log_warning("%s under '%s' failed: the listing holds %s.", what, call->config.prefix, strna(reason));
        r = sd_bus_reply_method_errorf(call->message, BUS_ERROR_STORAGE_FAILED,
                                       "%s failed: malformed listing (%s)", what, strna(reason));
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
}

typedef struct GcJob {
        AgentCall call;
        char *prefixes[2];            /* "<prefix>/workspaces/", "<prefix>/mineru/" */
        unsigned current;
        ListingPager pager;           /* of prefixes[current] */
        char **victims;               /* keys of the current page to delete */
        uint64_t *victim_sizes;
        size_t n_victims, next_victim;
        time_t cutoff;
        uint64_t deleted, scanned, freed;
} GcJob;

static void gc_job_free(GcJob *g) {
        agent_call_done(&g->call);
        free(g->prefixes[0]);
        free(g->prefixes[1]);
        free(g->pager.continuation);
        for (size_t i = 0; i < g->n_victims; i++)
                free(g->victims[i]);
        free(g->victims);
        free(g->victim_sizes);
        free(g);
}

static void gc_step(GcJob *g);

static void gc_fail(GcJob *g, const Transfer *t, int error, long status) {
        int r = 0;

        log_failed("Garbage collection under", g->call.config.prefix, t, error, status);
        /* Like a block naming an endpoint that is not allowed: nothing to sweep. */
        if (error == TRANSFER_REFUSED)
                r = sd_bus_reply_method_return(g->call.message, "ttt", (uint64_t) 0, (uint64_t) 0,
                                               (uint64_t) 0);
        else
                reply_failed(g->call.message, error, status, "garbage collection failed");
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
        gc_job_free(g);
}

static void on_gc_deleted(S3Call *call, int error, long status, const char *body, void *userdata) {
        GcJob *g = userdata;

        if (error < 0 || (status >= 300 && status != 404)) {
                gc_fail(g, s3_call_transfer(call), error, status);
                return;
        }
        g->deleted++;
        g->freed += g->victim_sizes[g->next_victim];
        g->next_victim++;
        gc_step(g);
}

static void on_gc_listed(S3Call *call, int error, long status, const char *body, void *userdata) {
        GcJob *g = userdata;
        _cleanup_(s3_listing_done) S3Listing l = {};
        const char *reason = NULL;
        int r;

        if (error < 0 || status != 200) {
                gc_fail(g, s3_call_transfer(call), error, status);
                return;
        }
        for (size_t i = 0; i < g->n_victims; i++)
                free(g->victims[i]);
        g->n_victims = g->next_victim = 0;

        r = pager_parse(&g->pager, call, body, &l, &reason);
        if (r == -ENOMEM) {
                gc_fail(g, NULL, r, 0);
                return;
        }
        if (r < 0) {
                reply_malformed_listing(&g->call, "Garbage collection", reason);
                gc_job_free(g);
                return;
        }

        free(g->victims);
        free(g->victim_sizes);
        g->victims = calloc(MAX(l.n_entries, (size_t) 1), sizeof(char *));
        g->victim_sizes = calloc(MAX(l.n_entries, (size_t) 1), sizeof(uint64_t));
        if (!g->victims || !g->victim_sizes) {
                gc_fail(g, NULL, -ENOMEM, 0);
                return;
        }
        for (size_t i = 0; i < l.n_entries; i++) {
                S3ListingEntry *e = l.entries + i;

                g->scanned++;
                /* Only archives under workspaces/; unknown timestamps are kept, and so is any damaged
                 * archive moved aside (under either prefix: the service deletes none). */
                if ((g->current == 0 && !endswith(e->key, ".tgz")) || quarantine_key_is(e->key))
                        continue;
                if (e->modified < 0 || e->modified >= (int64_t) g->cutoff)
                        continue;
                g->victim_sizes[g->n_victims] = e->size;
                g->victims[g->n_victims++] = TAKE_PTR(e->key);
        }
        gc_step(g);
}

static void gc_step(GcJob *g) {
        int r;

        /* This page's old objects first, one by one. */
        if (g->next_victim < g->n_victims) {
                S3CallParams params = { .method = "DELETE",
                                        .key = g->victims[g->next_victim],
                                        .upload_fd = -1,
                                        .download_fd = -1 };
                r = agent_s3_call(g->call.agent, &g->call.config, &params, on_gc_deleted, g);
                if (r < 0)
                        gc_fail(g, NULL, r, 0);
                return;
        }
        /* Then the first or the next page of this prefix. */
        if (pager_has_next(&g->pager)) {
                r = pager_request(&g->pager, &g->call, on_gc_listed, g);
                if (r < 0)
                        gc_fail(g, NULL, r, 0);
                return;
        }
        /* Then the next prefix. */
        if (g->current == 0) {
                g->current = 1;
                pager_reset(&g->pager, g->prefixes[1]);
                gc_step(g);
                return;
        }
        log_info("Garbage collection under '%s': %llu of %llu objects deleted, %llu bytes freed.",
                 g->call.config.prefix, (unsigned long long) g->deleted, (unsigned long long) g->scanned,
                 (unsigned long long) g->freed);
        r = sd_bus_reply_method_return(g->call.message, "ttt", g->deleted, g->scanned, g->freed);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
        gc_job_free(g);
}

int agent_s3_gc(Agent *a, sd_bus_message *m, const StorageConfig *c, int64_t max_age) {
        GcJob *g;

        g = calloc(1, sizeof(GcJob));
        if (!g)
                return -ENOMEM;
        *g = (GcJob) { .call = agent_call_start(a, m, NULL), .cutoff = time(NULL) - (time_t) max_age };
        if (storage_config_copy(c, &g->call.config) < 0 ||
            asprintf(&g->prefixes[0], "%s%sworkspaces/", c->prefix, *c->prefix ? "/" : "") < 0 ||
            asprintf(&g->prefixes[1], "%s%smineru/", c->prefix, *c->prefix ? "/" : "") < 0) {
                gc_job_free(g);
                return -ENOMEM;
        }
        pager_reset(&g->pager, g->prefixes[0]);
        gc_step(g);
        return 1;
}

/* ---- archives ---- */

/* An upload: the spool is hashed first (a slice per loop iteration), then PUT with its length, MD5
 * and SHA-256 for the server to check, and the SHA-256 as metadata for our restores to check. A
 * download: fetched into a spool, its length checked against Content-Length and, when the object
 * carries our metadata, its SHA-256 against that, before anyone reads a byte of it. */
typedef struct ArchiveCall {
        AgentCall call;               /* config: (upload) where it goes once hashed */
        int fd;                       /* the spool file */
        uint64_t size;                /* upload: the bytes to send; download: the bytes received */
        ArchiveDigest *digest;
        char *expected_sha256;        /* download: the object's scopebox-sha256 metadata */
        unsigned downloads;           /* download: how many were started (a second after a mismatch) */
} ArchiveCall;

static void archive_call_free(ArchiveCall *c) {
        agent_call_done(&c->call);
        archive_digest_free(c->digest);
        free(c->expected_sha256);
        safe_close(c->fd);
        free(c);
}

static void reply_archive_error(ArchiveCall *c, const char *format, ...) _printf_(2, 3);
static void reply_archive_error(ArchiveCall *c, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = sd_bus_reply_method_errorfv(c->call.message, BUS_ERROR_STORAGE_FAILED, format, ap);
        va_end(ap);
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
}

/* The S3/OSS error code of an error body ("BadDigest", "NoSuchKey"), or NULL. */
static char *error_code(const char *body) {
        char *code = NULL;

        if (!body || xml_find_text(body, body + strlen(body), "Code", &code, NULL) <= 0)
                return NULL;
        return code;
}

/* A failed archive transfer, said the way an operator (and the session manager, which retries what
 * may succeed later) can act on. */
static void archive_failed(ArchiveCall *c, bool upload, const Transfer *t, int error, long status,
                           const char *body) {
        _cleanup_free_ char *code = error < 0 ? NULL : error_code(body);
        const char *what = upload ? "archive upload" : "archive download",
                   *log_what = upload ? "Upload of archive" : "Download of archive";

        if (code && (streq(code, "BadDigest") || streq(code, "XAmzContentSHA256Mismatch") ||
                     streq(code, "InvalidDigest"))) {
                log_struct(LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-checksum-mismatch"),
                           "%s '%s' refused by the storage server: %s (the data changed on the way).",
                           log_what, c->call.key, code);
                reply_archive_error(c, "%s failed: checksum mismatch", what);
        } else if (error >= 0 && (status == 507 || (code && (streq(code, "XMinioStorageFull") ||
                                                             streq(code, "QuotaExceeded"))))) {
                log_warning("%s '%s' failed: the storage server is full (HTTP %ld%s%s).", log_what,
                            c->call.key, status, code ? ", " : "", strempty(code));
                reply_archive_error(c, "%s failed: storage full", what);
        } else if (error == -EPIPE) {
                uint64_t got = t ? t->downloaded : 0, want = t ? t->response.content_length : 0;
                log_warning("%s '%s' failed: the connection ended after %llu of %llu bytes.", log_what,
                            c->call.key, (unsigned long long) got, (unsigned long long) want);
                reply_archive_error(c, "%s failed: short body (%llu of %llu bytes)", what,
                                    (unsigned long long) got, (unsigned long long) want);
        } else if (error == TRANSFER_REFUSED || error == TRANSFER_POLICY_UNAVAILABLE) {
                log_failed(log_what, c->call.key, t, error, status);
                (void) reply_policy_error(c->call.message, error);
        } else if (error < 0) {
                log_failed(log_what, c->call.key, t, error, status);
                reply_archive_error(c, "%s failed: storage server unreachable (%s)", what, strerror(-error));
        } else {
                if (code)
                        log_warning("%s '%s' failed: HTTP %ld (%s)", log_what, c->call.key, status, code);
                else
                        log_failed(log_what, c->call.key, t, error, status);
                reply_archive_error(c, "%s failed: storage server answered HTTP %ld", what, status);
        }
}

static void on_archive_uploaded(S3Call *call, int error, long status, const char *body, void *userdata) {
        ArchiveCall *c = userdata;
        const Transfer *t = s3_call_transfer(call);

        if (error < 0 || status < 200 || status >= 300) {
                archive_failed(c, true, t, error, status, body);
                archive_call_free(c);
                return;
        }
        /* The server checked Content-MD5 (and S3 the SHA-256) already; a plain-MD5 ETag that is not
         * ours means something between us and the store is not what it says. Objects encrypted with
         * KMS or customer keys have ETags that are no MD5: nothing to compare there. */
        if (t && !response_headers_etag_is_opaque(&t->response) &&
            etag_matches_md5(t->response.etag, archive_digest_md5(c->digest)) == 0) {
                _cleanup_free_ char *md5 = hexmem(archive_digest_md5(c->digest), ARCHIVE_MD5_SIZE);
                log_struct(LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-checksum-mismatch"),
                           "Archive '%s' was stored with ETag %s, not the MD5 of what was sent (%s).",
                           c->call.key, t->response.etag, strna(md5));
                reply_archive_error(c, "archive upload failed: checksum mismatch");
                archive_call_free(c);
                return;
        }
        agent_reply_archive_stored(c->call.message, c->call.key, c->size);
        archive_call_free(c);
}

static void on_upload_hashed(ArchiveDigest *d, int error, void *userdata) {
        ArchiveCall *c = userdata;
        char md5[32], sha256[64], sha256_hex[ARCHIVE_SHA256_HEX_LEN + 1];
        bool oss = c->call.config.provider == STORAGE_ALIYUN_OSS;
        int r;

        if (error < 0) {
                log_warning_errno(error, "Failed to read the staged archive '%s': %m", c->call.key);
                reply_archive_error(c, "archive upload failed: the staged archive is unreadable (%s)",
                                    strerror(-error));
                archive_call_free(c);
                return;
        }
        (void) base64_encode_to(archive_digest_md5(d), ARCHIVE_MD5_SIZE, md5);
        (void) base64_encode_to(archive_digest_sha256(d), ARCHIVE_SHA256_SIZE, sha256);
        for (size_t i = 0; i < ARCHIVE_SHA256_SIZE; i++)
                snprintf(sha256_hex + 2 * i, 3, "%02x", archive_digest_sha256(d)[i]);

        /* Content-Length is the size committed; Content-MD5 (S3 and OSS) and x-amz-checksum-sha256
         * (S3) make the server refuse anything else; the signed payload hash covers the body too. */
        S3CallParams params = {
                .method = "PUT",
                .key = c->call.key,
                .upload_fd = c->fd,
                .download_fd = -1,
                .has_upload_size = true,
                .upload_size = c->size,
                .payload_hash = oss ? NULL : sha256_hex,
                .headers = { { "Content-Type", "application/gzip" },
                             { "Content-MD5", md5 },
                             { oss ? "x-oss-meta-" ARCHIVE_SHA256_METADATA
                                   : "x-amz-meta-" ARCHIVE_SHA256_METADATA,
                               sha256_hex },
                             { oss ? NULL : "x-amz-checksum-sha256", oss ? NULL : sha256 } },
        };
        r = agent_s3_call(c->call.agent, &c->call.config, &params, on_archive_uploaded, c);
        if (r < 0) {
                archive_failed(c, true, NULL, r, 0, NULL);
                archive_call_free(c);
        }
}

int agent_s3_upload_archive(Agent *a, sd_bus_message *m, StagedArchive *s, uint64_t size) {
        ArchiveCall *c;
        int r;

        c = calloc(1, sizeof(ArchiveCall));
        if (!c)
                return -ENOMEM;
        *c = (ArchiveCall) { .call = agent_call_start(a, m, s->full_key),
                             .fd = fcntl(s->spool_fd, F_DUPFD_CLOEXEC, 3),
                             .size = size };
        r = !c->call.key || c->fd < 0 ? -ENOMEM : storage_config_copy(&s->s3, &c->call.config);
        if (r >= 0)
                r = archive_digest_new(c->fd, size, &c->digest);
        if (r >= 0)
                r = archive_digest_start(c->digest, a->event, on_upload_hashed, c);
        if (r < 0) {
                archive_call_free(c);
                return r;
        }
        return 1;
}

static void archive_download_suspect(ArchiveCall *c, const char *why);
static void reply_archive_damaged(ArchiveCall *c, const char *why);

/* The download is in the spool and checked as far as the object allows: handed out from its first
 * byte. */
static void reply_archive_found(ArchiveCall *c) {
        int r;

        if (lseek(c->fd, 0, SEEK_SET) < 0) {
                r = -errno;
                log_warning_errno(r, "Failed to rewind the download of archive '%s': %m", c->call.key);
                reply_archive_error(c, "archive download failed: %s", strerror(-r));
                archive_call_free(c);
                return;
        }
        r = sd_bus_reply_method_return(c->call.message, "bh", true, c->fd);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
        archive_call_free(c);
}

static void on_download_hashed(ArchiveDigest *d, int error, void *userdata) {
        ArchiveCall *c = userdata;

        if (error < 0) {
                log_warning_errno(error, "Failed to read the download of archive '%s': %m", c->call.key);
                reply_archive_error(c, "archive download failed: %s", strerror(-error));
                archive_call_free(c);
        } else if (!sha256_hex_matches(c->expected_sha256, archive_digest_sha256(d))) {
                _cleanup_free_ char *got = hexmem(archive_digest_sha256(d), ARCHIVE_SHA256_SIZE);
                log_struct(
                        LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-checksum-mismatch"),
                        "Archive '%s' does not match its checksum (stored %s, downloaded %s), download %u "
                        "of 2.",
                        c->call.key, c->expected_sha256, strna(got), c->downloads);
                archive_download_suspect(c, ARCHIVE_DAMAGED_CHECKSUM);
        } else
                reply_archive_found(c);
}

static void on_archive_downloaded(S3Call *call, int error, long status, const char *body, void *userdata) {
        ArchiveCall *c = userdata;
        const Transfer *t = s3_call_transfer(call);
        _cleanup_free_ char *code = NULL;
        struct stat st;
        int r;

        if (error >= 0 && status == 404) {
                /* Only a missing object is "no archive"; a missing bucket is the storage block's mistake. */
                code = error_code(body);
                if (!code || !streq(code, "NoSuchBucket")) {
                        _cleanup_close_ int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                        r = null_fd < 0 ? -errno
                                        : sd_bus_reply_method_return(c->call.message, "bh", false, null_fd);
                        if (r < 0)
                                log_debug_errno(r, "Failed to reply, ignoring: %m");
                        archive_call_free(c);
                        return;
                }
        }
        if (error == -EFBIG) {
                /* Over the limit whatever the download: this install can never restore it. */
                log_struct(
                        LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-skipped"),
                        "Archive '%s' is larger than SANDBOX_MAX_ARCHIVE_BYTES (%llu bytes), not restoring "
                        "it.",
                        c->call.key, (unsigned long long) c->call.agent->config.max_archive_bytes);
                reply_archive_damaged(c, ARCHIVE_DAMAGED_TOO_LARGE);
                return;
        }
        if (error < 0 || status != 200 || !t) {
                (void) ftruncate(c->fd, 0);
                archive_failed(c, false, t, error, status, body);
                archive_call_free(c);
                return;
        }

        /* A body shorter (or longer) than announced is a failed transfer, never a smaller archive. */
        c->size = t->downloaded;
        if (fstat(c->fd, &st) < 0 || (uint64_t) st.st_size != c->size || t->response.bad_content_length ||
            (t->response.has_content_length && t->response.content_length != c->size)) {
                (void) ftruncate(c->fd, 0);
                log_warning("Download of archive '%s' failed: %llu bytes received, %s%llu announced.",
                            c->call.key, (unsigned long long) c->size,
                            t->response.has_content_length ? "" : "none ",
                            (unsigned long long) t->response.content_length);
                reply_archive_error(c, "archive download failed: short body (%llu of %llu bytes)",
                                    (unsigned long long) c->size,
                                    (unsigned long long) t->response.content_length);
                archive_call_free(c);
                return;
        }
        /* Ours carry their SHA-256; the upstream sidecar's don't (the runner's gzip and tar checks are
         * all there is for those). */
        if (!t->response.has_sha256) {
                reply_archive_found(c);
                return;
        }
        free(c->expected_sha256);
        c->expected_sha256 = strdup(t->response.sha256);
        c->digest = archive_digest_free(c->digest);
        r = c->expected_sha256 ? archive_digest_new(c->fd, c->size, &c->digest) : -ENOMEM;
        if (r >= 0)
                r = archive_digest_start(c->digest, c->call.agent->event, on_download_hashed, c);
        if (r < 0) {
                log_warning_errno(r, "Failed to check the download of archive '%s': %m", c->call.key);
                reply_archive_error(c, "archive download failed: %s", strerror(-r));
                archive_call_free(c);
        }
}

/* One download of the archive into the spool (which every attempt starts over). */
static int archive_download_start(ArchiveCall *c) {
        /* Bounded like the archives we write. */
        S3CallParams params = { .method = "GET", .key = c->call.key, .upload_fd = -1, .download_fd = c->fd,
                                .download_max = c->call.agent->config.max_archive_bytes };

        c->downloads++;
        return agent_s3_call(c->call.agent, &c->call.config, &params, on_archive_downloaded, c);
}

/* The download does not check out. Once, it may be the way here that changed it: fetched afresh. The
 * second time it is the stored object: damaged. Either way not a byte of it is handed out. */
static void archive_download_suspect(ArchiveCall *c, const char *why) {
        int r;

        (void) ftruncate(c->fd, 0);
        if (c->downloads >= 2) {
                reply_archive_damaged(c, why);
                return;
        }
        log_warning("Download of archive '%s' does not check out (%s); downloading it once more.",
                    c->call.key, why);
        r = archive_download_start(c);
        if (r < 0) {
                log_warning_errno(r, "Failed to download archive '%s' again: %m", c->call.key);
                reply_archive_error(c, "archive download failed: %s", strerror(-r));
                archive_call_free(c);
        }
}

/* The stored object can never be restored as it is: ArchiveDamaged, for the session manager to
 * quarantine (QuarantineArchive) rather than to retry forever. Frees the call. */
static void reply_archive_damaged(ArchiveCall *c, const char *why) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        int r;

        (void) ftruncate(c->fd, 0);
        (void) agent_archive_damaged(c->call.key, why, &error);
        r = sd_bus_reply_method_error(c->call.message, &error);
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
        archive_call_free(c);
}

int agent_s3_open_archive(Agent *a, sd_bus_message *m, const StorageConfig *conf, const char *key) {
        _cleanup_close_ int fd = -EBADF;
        ArchiveCall *c;
        int r;

        /* An unnamed file in our private /var/tmp: streamed to disk, never held in memory. */
        fd = open("/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        c = calloc(1, sizeof(ArchiveCall));
        if (!c)
                return -ENOMEM;
        *c = (ArchiveCall) { .call = agent_call_start(a, m, key), .fd = TAKE_FD(fd) };
        r = c->call.key ? storage_config_copy(conf, &c->call.config) : -ENOMEM;
        if (r >= 0)
                r = archive_download_start(c);
        if (r < 0) {
                archive_call_free(c);
                return r;
        }
        return 1;
}

/* ---- quarantine ---- */

/* A damaged archive moved aside on the server: copied next to itself (server-side), the copy checked
 * (its size and ETag, or our SHA-256 metadata, against the original's), and only then the original
 * deleted, once it is still the object that was copied. Any failure before the deletion leaves the
 * original where it was; the copy of a failed attempt stays too (it is named as quarantined, and
 * the service deletes none of those). */
typedef enum QuarantineStep {
        QUARANTINE_HEAD_SOURCE, /* the original: there at all, its size and ETag */
        QUARANTINE_HEAD_TARGET, /* the quarantine key: must not exist */
        QUARANTINE_COPY,
        QUARANTINE_VERIFY, /* the copy: as the original */
        QUARANTINE_RECHECK_SOURCE, /* the original: still the object copied */
        QUARANTINE_DELETE_SOURCE,
} QuarantineStep;

typedef struct QuarantineCall {
        AgentCall call; /* key: the archive's */
        char *target; /* the quarantine key */
        QuarantineStep step;
        uint64_t size;
        char etag[RESPONSE_HEADER_VALUE_MAX];
        char sha256[RESPONSE_HEADER_VALUE_MAX];
        bool has_sha256;
} QuarantineCall;

static void quarantine_call_free(QuarantineCall *q) {
        agent_call_done(&q->call);
        free(q->target);
        free(q);
}

/* These answer the call and free it; 0, for the step's "return". */
static int quarantine_reply_error(QuarantineCall *q, const char *name, const char *format, ...)
        _printf_(3, 4);
static int quarantine_reply_error(QuarantineCall *q, const char *name, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = sd_bus_reply_method_errorfv(q->call.message, name, format, ap);
        va_end(ap);
        if (r < 0)
                log_debug_errno(r, "Failed to send error reply, ignoring: %m");
        quarantine_call_free(q);
        return 0;
}

/* A transfer of step 'what' that did not get the answer it needed. */
static int quarantine_failed(QuarantineCall *q, const Transfer *t, const char *what, int error,
                             long status) {
        _cleanup_free_ char *log_what = NULL;

        if (asprintf(&log_what, "Quarantine (%s) of archive", what) < 0)
                log_what = NULL;
        log_failed(log_what ?: "Quarantine of archive", q->call.key, t, error, status);
        if (reply_policy_error(q->call.message, error)) {
                quarantine_call_free(q);
                return 0;
        }
        if (error < 0)
                return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                              "quarantine failed (%s): storage server unreachable (%s)",
                                              what, strerror(-error));
        return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                      "quarantine failed (%s): storage server answered HTTP %ld", what,
                                      status);
}

static void on_quarantine_step(S3Call *call, int error, long status, const char *body, void *userdata);

static int quarantine_request(QuarantineCall *q, const char *method, const char *key) {
        S3CallParams params = { .method = method, .key = key, .upload_fd = -1, .download_fd = -1 };
        return agent_s3_call(q->call.agent, &q->call.config, &params, on_quarantine_step, q);
}

/* The server-side copy: "/<bucket>/<key, encoded>" as the source, only if it is still the version we
 * looked at, its metadata (our SHA-256) along with it; OSS also refuses to overwrite. */
static int quarantine_copy(QuarantineCall *q) {
        bool oss = q->call.config.provider == STORAGE_ALIYUN_OSS;
        _cleanup_free_ char *encoded = NULL, *source = NULL;
        int r;

        r = sigv4_uri_encode(q->call.key, true, &encoded);
        if (r < 0)
                return r;
        if (asprintf(&source, "/%s/%s", oss ? q->call.config.oss_bucket : q->call.config.s3_bucket,
                     encoded) < 0)
                return -ENOMEM;
        S3CallParams params = {
                .method = "PUT",
                .key = q->target,
                .upload_fd = -1,
                .download_fd = -1,
                .headers = { { oss ? "x-oss-copy-source" : "x-amz-copy-source", source },
                             { oss ? "x-oss-copy-source-if-match" : "x-amz-copy-source-if-match", q->etag },
                             { oss ? "x-oss-metadata-directive" : "x-amz-metadata-directive", "COPY" },
                             { "Content-Length", "0" },
                             { oss ? "x-oss-forbid-overwrite" : NULL, oss ? "true" : NULL } },
        };
        return agent_s3_call(q->call.agent, &q->call.config, &params, on_quarantine_step, q);
}

static int quarantine_done(QuarantineCall *q, bool deleted) {
        int r;

        agent_log_quarantined(q->call.key, q->target, q->size, !deleted);
        r = sd_bus_reply_method_return(q->call.message, "s", q->target);
        if (r < 0)
                log_debug_errno(r, "Failed to reply, ignoring: %m");
        quarantine_call_free(q);
        return 0;
}

/* One step's answer: the next step's request made (0), or the call answered and freed (0 as well),
 * or a negative errno when the next request could not be made. */
static int quarantine_step(QuarantineCall *q, const Transfer *t, int error, long status) {
        bool ok = error >= 0 && status >= 200 && status < 300 && t;

        switch (q->step) {
        case QUARANTINE_HEAD_SOURCE:
                if (error >= 0 && status == 404)
                        return quarantine_reply_error(q, BUS_ERROR_NOT_FOUND,
                                                      "no stored archive to quarantine");
                if (!ok)
                        return quarantine_failed(q, t, "looking at the archive", error, status);
                if (!t->response.has_content_length || t->response.bad_content_length ||
                    isempty(t->response.etag)) {
                        log_warning("Quarantine of archive '%s' failed: the server gives no size or ETag "
                                    "for it.",
                                    q->call.key);
                        return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                                      "quarantine failed: the archive has no size or ETag");
                }
                q->size = t->response.content_length;
                memcpy(q->etag, t->response.etag, sizeof(q->etag));
                q->has_sha256 = t->response.has_sha256;
                memcpy(q->sha256, t->response.sha256, sizeof(q->sha256));
                q->step = QUARANTINE_HEAD_TARGET;
                return quarantine_request(q, "HEAD", q->target);

        case QUARANTINE_HEAD_TARGET:
                if (ok) {
                        log_warning("Quarantine of archive '%s' failed: '%s' exists already.", q->call.key,
                                    q->target);
                        return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                                      "quarantine failed: the quarantine key exists");
                }
                if (error < 0 || status != 404)
                        return quarantine_failed(q, t, "looking at the quarantine key", error, status);
                q->step = QUARANTINE_COPY;
                return quarantine_copy(q);

        case QUARANTINE_COPY:
                /* A 2xx may still carry an error (S3 says so of CopyObject): the copy is checked next. */
                if (error >= 0 && status == 412) {
                        log_warning("Quarantine of archive '%s' failed: it changed while being copied.",
                                    q->call.key);
                        return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                                      "quarantine failed: the archive changed meanwhile");
                }
                if (!ok)
                        return quarantine_failed(q, t, "copying", error, status);
                q->step = QUARANTINE_VERIFY;
                return quarantine_request(q, "HEAD", q->target);

        case QUARANTINE_VERIFY:
                if (!ok)
                        return quarantine_failed(q, t, "checking the copy", error, status);
                /* The same size, and the same ETag (a copy of a single-part object keeps it) or, for
                 * ETags that are no MD5 (multipart, KMS), the same SHA-256 of ours. */
                if (!t->response.has_content_length || t->response.content_length != q->size ||
                    !(etag_equal(t->response.etag, q->etag) ||
                      (q->has_sha256 && t->response.has_sha256 && streq(t->response.sha256, q->sha256)))) {
                        log_struct(
                                LOG_WARNING, 0, LOG_FIELDS("SCOPEBOX_EVENT=archive-quarantine-unverified"),
                                "Quarantine of archive '%s' failed: its copy '%s' is not what was copied "
                                "(%llu bytes, ETag %s; the original: %llu bytes, ETag %s). The original is "
                                "kept where it is.",
                                q->call.key, q->target, (unsigned long long) t->response.content_length,
                                t->response.etag, (unsigned long long) q->size, q->etag);
                        return quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED,
                                                      "quarantine failed: the copy could not be verified");
                }
                q->step = QUARANTINE_RECHECK_SOURCE;
                return quarantine_request(q, "HEAD", q->call.key);

        case QUARANTINE_RECHECK_SOURCE:
                /* Gone, or replaced by a newer archive since: the copy is what was damaged; nothing
                 * to delete. */
                if (error >= 0 && status == 404)
                        return quarantine_done(q, true);
                if (!ok)
                        return quarantine_failed(q, t, "looking at the archive again", error, status);
                if (!etag_equal(t->response.etag, q->etag) || t->response.content_length != q->size)
                        return quarantine_done(q, false);
                q->step = QUARANTINE_DELETE_SOURCE;
                return quarantine_request(q, "DELETE", q->call.key);

        case QUARANTINE_DELETE_SOURCE:
                if (error < 0 || (status >= 300 && status != 404))
                        return quarantine_failed(q, t, "deleting the original after its verified copy",
                                                 error, status);
                return quarantine_done(q, true);
        }
        return -EINVAL;
}

static void on_quarantine_step(S3Call *call, int error, long status, const char *body, void *userdata) {
        QuarantineCall *q = userdata;
        int r;

        r = quarantine_step(q, s3_call_transfer(call), error, status);
        if (r < 0) {
                log_warning_errno(r, "Quarantine of archive '%s' failed: %m", q->call.key);
                (void) quarantine_reply_error(q, BUS_ERROR_STORAGE_FAILED, "quarantine failed: %s",
                                              strerror(-r));
        }
}

int agent_s3_quarantine(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *key,
                        const char *target) {
        QuarantineCall *q;
        int r;

        q = calloc(1, sizeof(QuarantineCall));
        if (!q)
                return -ENOMEM;
        *q = (QuarantineCall) { .call = agent_call_start(a, m, key),
                                .target = strdup(target),
                                .step = QUARANTINE_HEAD_SOURCE };
        r = !q->call.key || !q->target ? -ENOMEM : storage_config_copy(c, &q->call.config);
        if (r >= 0)
                r = quarantine_request(q, "HEAD", q->call.key);
        if (r < 0) {
                quarantine_call_free(q);
                return r;
        }
        return 1;
}

/* ---- the quarantined archives of a prefix ---- */

typedef struct QuarantineListJob {
        AgentCall call;
        char *prefix; /* "<prefix>/workspaces/" */
        ListingPager pager;
        QuarantinedList found;
} QuarantineListJob;

static void quarantine_list_job_free(QuarantineListJob *j) {
        agent_call_done(&j->call);
        free(j->prefix);
        free(j->pager.continuation);
        quarantined_list_done(&j->found);
        free(j);
}

static void quarantine_list_failed(QuarantineListJob *j, const Transfer *t, int error, long status) {
        log_failed("Listing quarantined archives under", j->prefix, t, error, status);
        reply_failed(j->call.message, error, status, "listing quarantined archives failed");
        quarantine_list_job_free(j);
}

static void on_quarantine_listed(S3Call *call, int error, long status, const char *body, void *userdata) {
        QuarantineListJob *j = userdata;
        _cleanup_(s3_listing_done) S3Listing l = {};
        const char *reason = NULL;
        int r;

        if (error < 0 || status != 200) {
                quarantine_list_failed(j, s3_call_transfer(call), error, status);
                return;
        }
        r = pager_parse(&j->pager, call, body, &l, &reason);
        if (r == -ENOMEM) {
                quarantine_list_failed(j, NULL, r, 0);
                return;
        }
        if (r < 0) {
                reply_malformed_listing(&j->call, "Listing quarantined archives", reason);
                quarantine_list_job_free(j);
                return;
        }
        for (size_t i = 0; i < l.n_entries; i++) {
                const char *name = startswith(l.entries[i].key, j->prefix);
                int64_t when;

                /* Directly under workspaces/, as archives are. */
                if (!name || strchr(name, '/') || !quarantine_key_parse(name, &when, NULL))
                        continue;
                r = quarantined_list_add(&j->found, l.entries[i].key, l.entries[i].size, when);
                if (r < 0) {
                        quarantine_list_failed(j, NULL, r, 0);
                        return;
                }
        }
        if (pager_has_next(&j->pager) && !j->found.truncated) {
                r = pager_request(&j->pager, &j->call, on_quarantine_listed, j);
                if (r < 0)
                        quarantine_list_failed(j, NULL, r, 0);
                return;
        }
        agent_reply_quarantined(j->call.message, &j->found);
        quarantine_list_job_free(j);
}

int agent_s3_list_quarantined(Agent *a, sd_bus_message *m, const StorageConfig *c, const char *dir_key) {
        QuarantineListJob *j;
        int r;

        j = calloc(1, sizeof(QuarantineListJob));
        if (!j)
                return -ENOMEM;
        *j = (QuarantineListJob) { .call = agent_call_start(a, m, NULL) };
        if (asprintf(&j->prefix, "%s/", dir_key) < 0) {
                j->prefix = NULL;
                r = -ENOMEM;
        } else
                r = storage_config_copy(c, &j->call.config);
        if (r >= 0) {
                pager_reset(&j->pager, j->prefix);
                r = pager_request(&j->pager, &j->call, on_quarantine_listed, j);
        }
        if (r < 0) {
                quarantine_list_job_free(j);
                return r;
        }
        return 1;
}
