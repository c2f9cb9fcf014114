/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The network filter of dify runs as BPF: the maps of prefixes a run's slirp4netns may and may not
 * reach, and the cgroup programs that judge its sockets and packets by them. The session manager
 * makes the maps and loads the programs once (net-filter.c); each runner attaches them to the
 * cgroup its slirp4netns runs in (runner-network.c).
 *
 * A destination in ALLOW passes. Otherwise connect() and sendmsg() to one in DENY fail at once with
 * EPERM (sock_addr programs), and packets to or from one in DENY, or leaving or arriving through
 * the loopback device (ifindex 1: every destination the kernel routes to this host, whatever the
 * maps know), are dropped (cgroup_skb programs). IPv4 prefixes are also kept as IPv4-mapped IPv6
 * ones (::ffff:a.b.c.d), so a dual-stack socket's mapped destination is judged as the IPv4 one. */
#pragma once

#include <stddef.h>

#include "address-policy.h"

typedef enum NetFilterProgram {
        NET_FILTER_CONNECT4,
        NET_FILTER_CONNECT6,
        NET_FILTER_SENDMSG4,
        NET_FILTER_SENDMSG6,
        NET_FILTER_EGRESS,
        NET_FILTER_INGRESS,
        _NET_FILTER_PROGRAM_MAX,
        _NET_FILTER_PROGRAM_INVALID = -EINVAL,
} NetFilterProgram;

typedef struct NetFilterMaps {
        int allow4, allow6;     /* LPM tries: IPv4 keys, IPv6 keys (with IPv4 ones mapped) */
        int deny4, deny6;
} NetFilterMaps;

#define NET_FILTER_MAPS_NULL (NetFilterMaps) { -EBADF, -EBADF, -EBADF, -EBADF }

/* The fd of the first program in a runner that got them (--network-filter), in NetFilterProgram's
 * order. */
#define NET_FILTER_RUNNER_FD 4

/* How many prefixes each family's DENY map holds at most (memory is taken per entry). */
#define NET_FILTER_DENY_MAX 65536U

int net_filter_maps_new(size_t n_allow, NetFilterMaps *ret);
void net_filter_maps_done(NetFilterMaps *maps);

/* Enters or removes one prefix (an IPv4 one twice, as itself and IPv4-mapped). 'deny' chooses the
 * map pair. Removing what is not there is no error. */
int net_filter_maps_add(const NetFilterMaps *maps, bool deny, const AddressPrefix *p);
int net_filter_maps_remove(const NetFilterMaps *maps, bool deny, const AddressPrefix *p);

/* Loads the programs, with the maps' fds in them; ret_fds[] is indexed by NetFilterProgram. On a
 * verifier refusal, *ret_log (when given) gets the kernel's log (malloc'd). */
int net_filter_programs_load(const NetFilterMaps *maps, int ret_fds[static _NET_FILTER_PROGRAM_MAX],
                             char **ret_log);
void net_filter_programs_close(int fds[static _NET_FILTER_PROGRAM_MAX]);

/* Attaches every program to the cgroup v2 directory 'cgroup_fd' (BPF_F_ALLOW_MULTI): all or none. */
int net_filter_programs_attach(int cgroup_fd, const int fds[static _NET_FILTER_PROGRAM_MAX]);
