/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's dify network filter (net-filter.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "net-filter.h"

int net_filter_new(const AddressPolicy *allow, NetFilter **ret) {
        _cleanup_(net_filter_freep) NetFilter *f = NULL;
        _cleanup_free_ char *verifier_log = NULL;
        int r;

        f = calloc(1, sizeof(NetFilter));
        if (!f)
                return -ENOMEM;
        f->maps = NET_FILTER_MAPS_NULL;
        for (size_t i = 0; i < ELEMENTSOF(f->programs); i++)
                f->programs[i] = -EBADF;

        r = net_filter_maps_new(allow->n_allowed, &f->maps);
        if (r < 0)
                return r;
        for (size_t i = 0; i < allow->n_allowed; i++) {
                r = net_filter_maps_add(&f->maps, false, &allow->allowed[i]);
                if (r < 0)
                        return r;
        }
        r = net_filter_set_routes(f, NULL, 0);
        if (r < 0)
                return r;
        r = net_filter_programs_load(&f->maps, f->programs, &verifier_log);
        if (r < 0) {
                if (verifier_log)
                        log_debug("The kernel's verifier said: %s", verifier_log);
                return r;
        }
        *ret = TAKE_PTR(f);
        return 0;
}

NetFilter *net_filter_free(NetFilter *f) {
        if (!f)
                return NULL;
        net_filter_programs_close(f->programs);
        net_filter_maps_done(&f->maps);
        free(f->deny);
        free(f);
        return NULL;
}

int net_filter_deny(NetFilter *f, const AddressPrefix *p) {
        int r;

        if (address_prefixes_contain(f->deny, f->n_deny, p))
                return 0;
        /* In the maps before it is counted: a failure leaves the list as the maps are. */
        r = net_filter_maps_add(&f->maps, true, p);
        if (r < 0)
                return r;
        return address_prefixes_append(&f->deny, &f->n_deny, p);
}

int net_filter_set_routes(NetFilter *f, const AddressPrefix *routes, size_t n_routes) {
        _cleanup_free_ AddressPrefix *want = NULL;
        size_t n_want = 0;
        int r;

        r = host_address_prefixes(&want, &n_want);
        for (size_t i = 0; r >= 0 && i < n_routes; i++)
                r = address_prefixes_append(&want, &n_want, &routes[i]);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_want; i++) {
                r = net_filter_deny(f, &want[i]);
                if (r < 0)
                        return r;
        }
        /* Only now what no route leads to any more: there is no moment with less in the maps. */
        for (size_t i = 0; i < f->n_deny;) {
                if (address_prefixes_contain(want, n_want, &f->deny[i])) {
                        i++;
                        continue;
                }
                r = net_filter_maps_remove(&f->maps, true, &f->deny[i]);
                if (r < 0)
                        return r;
                f->deny[i] = f->deny[--f->n_deny];
        }
        return 0;
}
