/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Keeps the IP filters of dify runs' scopes in step with the host's addresses.
 *
 * A run's scope is created with IPAddressDeny= listing every address of the host at that moment
 * (session.c). An address that appears later (a bridge coming up, DHCP, an operator's alias)
 * must not be reachable from a run that is already going: the kernel tells us of every new
 * address (rtnetlink), and each live run's scope gets the whole list again (systemd merges it
 * into the unit's, at runtime). The notification socket exists before the first run's list is
 * taken, so no address can fall between the two. */
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
#include "session.h"
#include "systemd-client.h"

static void manager_refresh_run_filters(Manager *m) {
        _cleanup_free_ AddressPrefix *host = NULL;
        size_t n_host = 0;
        int r;

        r = host_address_prefixes(&host, &n_host);
        if (r < 0) {
                log_warning_errno(r, "Failed to list the host's addresses, runs keep their filters: %m");
                return;
        }
        LIST_FOREACH(sessions, s, m->sessions) {
                if (!s->ephemeral || !s->unit || s->state == SESSION_STOPPING)
                        continue;
                r = systemd_add_ip_deny(m, s->unit, host, n_host);
                if (r < 0)
                        log_warning_errno(r, "Failed to update the IP filter of %s: %m", s->unit);
        }
}

static int on_address_event(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        bool changed = false;
        char buf[8192];

        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        /* ENOBUFS: events were lost, so anything may have changed. */
                        changed = true;
                        if (errno != ENOBUFS)
                                break;
                        continue;
                }
                if (n == 0)
                        break;
                for (struct nlmsghdr *h = (struct nlmsghdr *) buf; NLMSG_OK(h, (size_t) n);
                     h = NLMSG_NEXT(h, n))
                        if (h->nlmsg_type == RTM_NEWADDR)
                                changed = true;
        }
        if (changed)
                manager_refresh_run_filters(m);
        return 0;
}

int manager_watch_host_addresses(Manager *m) {
        struct sockaddr_nl sa = {
                .nl_family = AF_NETLINK,
                .nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
        };
        _cleanup_close_ int fd = -EBADF;

        fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -errno;
        return event_add_io_owned(m->event, &m->address_watch_source, TAKE_FD(fd), EPOLLIN, on_address_event,
                                  m);
}
