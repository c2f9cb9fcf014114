/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Keeps the dify network filter's DENY maps (net-filter.h) in step with what the kernel routes to
 * this host: every route of type local, broadcast, anycast or multicast and every route out through
 * the loopback, in any table (an interface's addresses, a prefix on lo, an AnyIP `local` route).
 *
 * The notification socket is bound before the first dump, so no route falls between the two. A new
 * route goes into the maps as its notification arrives; a route that goes away (or a notification
 * that was lost, ENOBUFS) makes us dump the tables again, so that a prefix still reached by another
 * route stays denied. The maps are the fast refusal only: until a route is in them, packets its
 * way still leave through the loopback, where the programs drop them. */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include "address-policy.h"
#include "event-source-util.h"
#include "log.h"
#include "manager.h"
#include "net-filter.h"

#define ROUTE_BUFFER_SIZE (64U * 1024U)

typedef struct RouteList {
        AddressPrefix *prefixes;
        size_t n;
} RouteList;

/* The prefixes of new routes to this host in one batch of notifications; *ret_changed set when a
 * route to this host went away or was replaced (or a message could not be judged). */
static int route_events_parse(int fd, const uint8_t *buf, size_t n, RouteList *list, bool *ret_changed) {
        size_t left = n;

        for (const struct nlmsghdr *h = (const struct nlmsghdr *) buf; NLMSG_OK(h, left);
             h = NLMSG_NEXT(h, left)) {
                AddressPrefix p, *l;
                int r;

                if (h->nlmsg_type != RTM_NEWROUTE && h->nlmsg_type != RTM_DELROUTE)
                        continue;
                r = route_message_host_prefix(fd, h, &p);
                /* Gone, replaced or not understood: only a dump tells what is left. */
                if (r < 0 || (r > 0 && h->nlmsg_type == RTM_DELROUTE) ||
                    (h->nlmsg_type == RTM_NEWROUTE && (h->nlmsg_flags & NLM_F_REPLACE)))
                        *ret_changed = true;
                if (r <= 0 || h->nlmsg_type != RTM_NEWROUTE)
                        continue;
                l = reallocarray(list->prefixes, list->n + 1, sizeof(AddressPrefix));
                if (!l)
                        return -ENOMEM;
                l[list->n++] = p;
                list->prefixes = l;
        }
        return 0;
}

static int net_filter_resync(NetFilter *f) {
        _cleanup_free_ AddressPrefix *routes = NULL;
        size_t n_routes = 0;
        int r;

        r = host_route_prefixes(&routes, &n_routes);
        if (r < 0)
                return r;
        return net_filter_set_routes(f, routes, n_routes);
}

static int on_route_event(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        _cleanup_free_ uint8_t *buf = NULL;
        NetFilter *f = userdata;
        RouteList routes = {};
        bool changed = false;
        int r = 0;

        buf = malloc(ROUTE_BUFFER_SIZE);
        if (!buf)
                changed = true;
        while (buf) {
                ssize_t n = recv(fd, buf, ROUTE_BUFFER_SIZE, MSG_DONTWAIT | MSG_TRUNC);

                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        /* ENOBUFS: notifications were lost, so anything may have changed. */
                        changed = true;
                        if (errno != ENOBUFS)
                                break;
                        continue;
                }
                if (n == 0)
                        break;
                if ((size_t) n > ROUTE_BUFFER_SIZE) {
                        changed = true;
                        continue;
                }
                r = route_events_parse(fd, buf, (size_t) n, &routes, &changed);
                if (r < 0)
                        changed = true;
        }
        /* What appeared is denied at once; a dump follows when something may have gone. */
        for (size_t i = 0; i < routes.n; i++) {
                r = net_filter_deny(f, &routes.prefixes[i]);
                if (r < 0)
                        log_warning_errno(r, "Failed to deny a new route to this host to dify runs "
                                          "(the loopback drop still holds): %m");
        }
        free(routes.prefixes);
        if (changed) {
                r = net_filter_resync(f);
                if (r < 0)
                        log_warning_errno(r, "Failed to renew the dify network filter from the routing "
                                          "tables (the loopback drop still holds): %m");
        }
        return 0;
}

NetFilter *manager_net_filter(Manager *m) {
        return m->net_filter;
}

int manager_watch_host_routes(Manager *m) {
        struct sockaddr_nl sa = {
                .nl_family = AF_NETLINK,
                .nl_groups = RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE,
        };
        _cleanup_(net_filter_freep) NetFilter *f = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r;

        /* Without the filter the manager still serves everything but dify runs with a network,
         * which then fail (their runners get no programs, runner-network.c). */
        r = net_filter_new(&m->dify_network_allow, &f);
        if (r < 0) {
                log_error_errno(r, "Failed to load the dify network filter (BPF), dify runs with a network "
                                "will fail: %m");
                return 0;
        }
        fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        r = net_filter_resync(f);
        if (r < 0)
                return log_error_errno(r, "Failed to read the routing tables: %m");
        r = event_add_io_owned(m->event, &m->route_watch_source, TAKE_FD(fd), EPOLLIN, on_route_event, f);
        if (r < 0)
                return r;
        m->net_filter = TAKE_PTR(f);
        return 0;
}
