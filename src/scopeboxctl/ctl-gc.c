/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl gc: the sweep of POST /storage/gc over the configured (local) storage. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "bus-client.h"
#include "bus-util.h"
#include "ctl.h"
#include "json-util.h"
#include "storage-config.h"

/* The operator's storage: the local provider under its default prefix. S3 and OSS blocks come with
 * requests and are not configured on the host. */
#define CTL_GC_STORAGE "{\"provider\":\"local\",\"prefix\":\"" STORAGE_DEFAULT_PREFIX "\"}"

int verb_gc(Ctl *c) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_free_ char *config_error = NULL;
        _cleanup_(config_done) Config cfg = {};
        uint64_t deleted, scanned, freed;
        char age[32], bytes[32];
        sd_bus *bus;
        int r;

        r = ctl_load_config(&cfg, &config_error);
        if (r < 0)
                return ctl_error(r, "Invalid configuration: %s", strempty(config_error));
        if (!storage_json_effective(CTL_GC_STORAGE, cfg.local_storage_dir))
                return ctl_error(ENOENT,
                                 "No storage to sweep: SANDBOX_LOCAL_STORAGE_DIR is not set or missing.");

        r = ctl_bus(c, &bus);
        if (r < 0)
                return r;
        r = storage_agent_new_call(bus, "CollectGarbage", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sx", CTL_GC_STORAGE, c->max_age_sec);
        if (r < 0)
                return ctl_error(r, "Failed to build the call: %m");
        r = sd_bus_call(bus, m, bus_timeout_storage_gc_usec(&cfg), &e, &reply);
        if (r < 0)
                return ctl_bus_error(&e, r, "Failed to collect garbage");
        r = sd_bus_message_read(reply, "ttt", &deleted, &scanned, &freed);
        if (r < 0)
                return ctl_error(r, "Failed to read the storage agent's answer: %m");

        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "provider", json_object_new_string("local"));
                json_object_object_add(o, "local_dir", json_object_new_string(cfg.local_storage_dir));
                json_object_object_add(o, "prefix", json_object_new_string(STORAGE_DEFAULT_PREFIX));
                json_object_object_add(o, "max_age_sec", json_object_new_int64(c->max_age_sec));
                json_object_object_add(o, "deleted", json_object_new_uint64(deleted));
                json_object_object_add(o, "scanned", json_object_new_uint64(scanned));
                json_object_object_add(o, "freed_bytes", json_object_new_uint64(freed));
                json_print(o);
        } else
                printf("Deleted %" PRIu64 " of %" PRIu64
                       " objects (%s) older than %s under local:%s in %s.\n",
                       deleted, scanned, format_bytes(bytes, sizeof(bytes), freed),
                       format_duration(age, sizeof(age), (uint64_t) c->max_age_sec * USEC_PER_SEC),
                       STORAGE_DEFAULT_PREFIX, cfg.local_storage_dir);
        return 0;
}
