/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The session manager's dify network filter: its maps and programs (net-filter-bpf.h), made once at
 * start, and what DENY holds — the fixed host ranges and every prefix the kernel routes to this host
 * (host-watch.c keeps it in step with the routing tables). Runners get the programs' fds. */
#pragma once

#include <stddef.h>

#include "address-policy.h"
#include "macro.h"
#include "net-filter-bpf.h"

typedef struct NetFilter {
        NetFilterMaps maps;
        int programs[_NET_FILTER_PROGRAM_MAX];
        AddressPrefix *deny;          /* what the DENY maps hold now, the fixed ranges first */
        size_t n_deny;
} NetFilter;

/* The maps (ALLOW filled from 'allow', DENY with the fixed ranges) and the programs. */
int net_filter_new(const AddressPolicy *allow, NetFilter **ret);
NetFilter *net_filter_free(NetFilter *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(NetFilter *, net_filter_free);

/* One more prefix to deny (a route that just appeared). */
int net_filter_deny(NetFilter *f, const AddressPrefix *p);
/* DENY becomes the fixed ranges plus 'routes': what is new goes in first, what is gone leaves after. */
int net_filter_set_routes(NetFilter *f, const AddressPrefix *routes, size_t n_routes);

typedef struct Manager Manager;
/* The manager's filter (host-watch.c keeps it), or NULL when it could not be loaded. */
NetFilter *manager_net_filter(Manager *m);
