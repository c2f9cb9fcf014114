/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The dify network filter's programs (net-filter-bpf.c) on a cgroup of the test's own, as a run's
 * slirp4netns would meet them: with an EMPTY deny map a connection to any local address (an
 * interface's, a prefix on lo, the loopback) still never happens (the loopback drop alone); with the
 * address in the map, connect() and sendto() fail at once with EPERM, also for an IPv4-mapped IPv6
 * destination; an allowed prefix passes through the loopback; another destination is untouched.
 * And the manager's maps: what DENY holds as routes come and go.
 * Needs root and the unified cgroup hierarchy (at /sys/fs/cgroup or /sys/fs/cgroup/unified). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <linux/magic.h>

#include "address-policy.h"
#include "macro.h"
#include "net-filter-bpf.h"
#include "net-filter.h"
#include "netns.h"
#include "tests.h"

#define SKIP 77

static NetFilterMaps maps = NET_FILTER_MAPS_NULL;
static int cgroup_procs_fd = -EBADF;

/* Network of the namespace the checks run in: an interface address (on a veth), a prefix on lo. */
#define NETNS_SETUP                                                                               \
        "ip link set lo up && ip link add d0 type veth peer name d1 && ip link set d1 up && "     \
        "ip link set d0 up && ip addr add 10.77.0.1/24 dev d0 && "                                \
        "ip -6 addr add fd00:77::1/64 dev d0 nodad && ip addr add 11.99.0.0/24 dev lo"

static void sockaddr_of(const char *addr, uint16_t port, struct sockaddr_storage *ret, socklen_t *ret_len) {
        struct sockaddr_in *in = (struct sockaddr_in *) ret;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) ret;

        memset(ret, 0, sizeof(*ret));
        if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons(port);
                *ret_len = sizeof(*in);
                return;
        }
        ASSERT_EQ(inet_pton(AF_INET6, addr, &in6->sin6_addr), 1);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        *ret_len = sizeof(*in6);
}

static int listener(const char *addr, uint16_t port) {
        struct sockaddr_storage sa;
        socklen_t len;
        int one = 1, fd;

        sockaddr_of(addr, port, &sa, &len);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &sa, len), 0);
        ASSERT_EQ(listen(fd, 16), 0);
        return fd;
}

typedef enum Outcome {
        CONNECTED,
        REFUSED_AT_ONCE,  /* connect() itself failed with EPERM */
        NEVER_CONNECTED,  /* still in progress after the wait: the packets were dropped */
} Outcome;

/* A non-blocking connect(), from the socket's family ('v6' for an IPv4 address: IPv4-mapped). */
static Outcome try_connect(const char *addr, uint16_t port, int wait_ms) {
        struct sockaddr_storage sa;
        struct pollfd p;
        socklen_t len;
        int fd, r, err = 0;

        sockaddr_of(addr, port, &sa, &len);
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ASSERT_TRUE(fd >= 0);
        r = connect(fd, (struct sockaddr *) &sa, len);
        if (r < 0 && errno == EPERM) {
                close(fd);
                return REFUSED_AT_ONCE;
        }
        ASSERT_TRUE(r == 0 || errno == EINPROGRESS);
        p = (struct pollfd) { .fd = fd, .events = POLLOUT };
        r = r == 0 ? 1 : poll(&p, 1, wait_ms);
        ASSERT_TRUE(r >= 0);
        if (r > 0) {
                len = sizeof(err);
                ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
                /* Neither refused nor reset: the packets of a connection never come back as errors. */
                ASSERT_EQ(err, 0);
        }
        close(fd);
        return r > 0 ? CONNECTED : NEVER_CONNECTED;
}

static int try_sendto(const char *addr, uint16_t port) {
        struct sockaddr_storage sa;
        socklen_t len;
        int fd, r;

        sockaddr_of(addr, port, &sa, &len);
        fd = socket(sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        r = sendto(fd, "x", 1, 0, (struct sockaddr *) &sa, len) < 0 ? -errno : 0;
        close(fd);
        return r;
}

static AddressPrefix prefix(const char *addr, unsigned length) {
        AddressPrefix p = { .length = length };

        if (inet_pton(AF_INET, addr, p.bytes) == 1)
                p.family = AF_INET;
        else {
                ASSERT_EQ(inet_pton(AF_INET6, addr, p.bytes), 1);
                p.family = AF_INET6;
        }
        return p;
}

static void checks_in_netns(void) {
        static const char *const local[] = { "10.77.0.1", "11.99.0.7", "127.0.0.1", "fd00:77::1", "::1" };
        int fds[ELEMENTSOF(local)];
        AddressPrefix p;

        for (size_t i = 0; i < ELEMENTSOF(local); i++) {
                fds[i] = listener(local[i], 4100);
                /* Outside the filter, each is reachable: the listeners work. */
                ASSERT_EQ(try_connect(local[i], 4100, 2000), CONNECTED);
        }

        /* From here on this process is where slirp4netns would be. */
        ASSERT_EQ(write(cgroup_procs_fd, "0", 1), 1);

        /* The deny maps know nothing: the loopback drop alone keeps every local address away. */
        for (size_t i = 0; i < ELEMENTSOF(local); i++) {
                ASSERT_EQ(try_connect(local[i], 4100, 1000), NEVER_CONNECTED);
                /* A datagram's drop is the sender's EPERM. */
                ASSERT_EQ(try_sendto(local[i], 4101), -EPERM);
        }
        ASSERT_EQ(try_connect("::ffff:10.77.0.1", 4100, 1000), NEVER_CONNECTED);

        /* In the maps, the same destinations fail at once. */
        p = prefix("10.77.0.1", 32);
        ASSERT_EQ(net_filter_maps_add(&maps, true, &p), 0);
        p = prefix("fd00:77::", 64);
        ASSERT_EQ(net_filter_maps_add(&maps, true, &p), 0);
        ASSERT_EQ(try_connect("10.77.0.1", 4100, 1000), REFUSED_AT_ONCE);
        ASSERT_EQ(try_connect("::ffff:10.77.0.1", 4100, 1000), REFUSED_AT_ONCE);
        ASSERT_EQ(try_connect("fd00:77::1", 4100, 1000), REFUSED_AT_ONCE);
        ASSERT_EQ(try_sendto("10.77.0.1", 4101), -EPERM);
        ASSERT_EQ(try_sendto("::ffff:10.77.0.1", 4101), -EPERM);
        /* Another address of the veth's network is no host address: it leaves (and is lost). */
        ASSERT_EQ(try_sendto("10.77.0.2", 4101), 0);
        ASSERT_EQ(try_sendto("fd00:78::2", 4101), -ENETUNREACH);

        /* Taken out again, back to the loopback drop. */
        p = prefix("10.77.0.1", 32);
        ASSERT_EQ(net_filter_maps_remove(&maps, true, &p), 0);
        ASSERT_EQ(try_connect("10.77.0.1", 4100, 1000), NEVER_CONNECTED);

        /* Allowed wins, also through the loopback and over a denied prefix. */
        p = prefix("11.99.0.0", 16);
        ASSERT_EQ(net_filter_maps_add(&maps, true, &p), 0);
        ASSERT_EQ(try_connect("11.99.0.7", 4100, 1000), REFUSED_AT_ONCE);
        p = prefix("11.99.0.0", 24);
        ASSERT_EQ(net_filter_maps_add(&maps, false, &p), 0);
        ASSERT_EQ(try_connect("11.99.0.7", 4100, 2000), CONNECTED);
        ASSERT_EQ(try_connect("::ffff:11.99.0.7", 4100, 2000), CONNECTED);
        ASSERT_EQ(try_connect("127.0.0.1", 4100, 1000), NEVER_CONNECTED);

        for (size_t i = 0; i < ELEMENTSOF(local); i++)
                close(fds[i]);
}

/* Whether the map holds a prefix that 'addr' (a whole address) falls in: the programs' lookup. */
static bool map_has(int map_fd, const char *addr) {
        struct {
                uint32_t length;
                uint8_t bytes[16];
        } key = {};
        union bpf_attr attr = { .map_fd = map_fd };
        uint8_t value;
        int family = strchr(addr, ':') ? AF_INET6 : AF_INET;

        ASSERT_EQ(inet_pton(family, addr, key.bytes), 1);
        key.length = family == AF_INET ? 32 : 128;
        attr.key = (uint64_t) (uintptr_t) &key;
        attr.value = (uint64_t) (uintptr_t) &value;
        if (syscall(SYS_bpf, BPF_MAP_LOOKUP_ELEM, &attr, sizeof(attr)) == 0)
                return true;
        ASSERT_EQ(errno, ENOENT);
        return false;
}

/* The manager's filter: ALLOW from the operator's list, DENY the fixed ranges plus the routes it is
 * given, a prefix no route leads to any more taken out again, the fixed ones never. */
static void test_net_filter_routes(void) {
        AddressPolicy allow = {};
        NetFilter *f = NULL;
        AddressPrefix routes[2] = { prefix("11.99.0.0", 24), prefix("fd00:77::1", 128) };

        ASSERT_EQ(address_policy_parse("11.99.0.7/32", &allow, NULL), 0);
        ASSERT_EQ(net_filter_new(&allow, &f), 0);
        for (size_t i = 0; i < ELEMENTSOF(f->programs); i++)
                ASSERT_TRUE(f->programs[i] >= 0);
        ASSERT_TRUE(map_has(f->maps.allow4, "11.99.0.7"));
        ASSERT_TRUE(map_has(f->maps.allow6, "::ffff:11.99.0.7"));
        ASSERT_TRUE(!map_has(f->maps.allow4, "11.99.0.8"));
        ASSERT_TRUE(map_has(f->maps.deny4, "127.0.0.53"));
        ASSERT_TRUE(map_has(f->maps.deny4, "169.254.169.254"));
        ASSERT_TRUE(map_has(f->maps.deny6, "::ffff:169.254.169.254"));
        ASSERT_TRUE(map_has(f->maps.deny6, "::1"));
        ASSERT_TRUE(!map_has(f->maps.deny4, "11.99.0.8"));

        ASSERT_EQ(net_filter_set_routes(f, routes, ELEMENTSOF(routes)), 0);
        ASSERT_TRUE(map_has(f->maps.deny4, "11.99.0.8"));
        ASSERT_TRUE(map_has(f->maps.deny6, "::ffff:11.99.0.8"));
        ASSERT_TRUE(map_has(f->maps.deny6, "fd00:77::1"));
        ASSERT_TRUE(!map_has(f->maps.deny6, "fd00:77::2"));

        /* A route notification adds; a re-read without the route takes it out, the rest stays. */
        routes[0] = prefix("11.98.0.0", 24);
        ASSERT_EQ(net_filter_deny(f, &routes[0]), 1);
        ASSERT_EQ(net_filter_deny(f, &routes[0]), 0);
        ASSERT_EQ(net_filter_set_routes(f, routes, 1), 0);
        ASSERT_TRUE(map_has(f->maps.deny4, "11.98.0.5"));
        ASSERT_TRUE(!map_has(f->maps.deny4, "11.99.0.8"));
        ASSERT_TRUE(!map_has(f->maps.deny6, "::ffff:11.99.0.8"));
        ASSERT_TRUE(!map_has(f->maps.deny6, "fd00:77::1"));
        ASSERT_EQ(net_filter_set_routes(f, NULL, 0), 0);
        ASSERT_TRUE(!map_has(f->maps.deny4, "11.98.0.5"));
        ASSERT_TRUE(map_has(f->maps.deny4, "127.0.0.1"));
        ASSERT_TRUE(map_has(f->maps.deny4, "0.0.0.0"));

        net_filter_free(f);
        address_policy_done(&allow);
}

static int unified_root(char *path, size_t size) {
        static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
        struct statfs sfs;

        for (size_t i = 0; i < ELEMENTSOF(roots); i++)
                if (statfs(roots[i], &sfs) >= 0 && sfs.f_type == CGROUP2_SUPER_MAGIC) {
                        snprintf(path, size, "%s/scopebox-test-net-filter-%i", roots[i], (int) getpid());
                        return 0;
                }
        return -ENOMEDIUM;
}

int main(void) {
        int programs[_NET_FILTER_PROGRAM_MAX];
        char dir[256], procs[300];
        int cgroup_fd, r;

        if (geteuid() != 0) {
                printf("1..0 # SKIP cgroup programs need root\n");
                return SKIP;
        }
        if (unified_root(dir, sizeof(dir)) < 0) {
                printf("1..0 # SKIP no unified cgroup hierarchy\n");
                return SKIP;
        }

        RUN(test_net_filter_routes);

        ASSERT_EQ(net_filter_maps_new(1, &maps), 0);
        r = net_filter_programs_load(&maps, programs, NULL);
        if (r < 0)
                fprintf(stderr, "loading the programs: %s\n", strerror(-r));
        ASSERT_EQ(r, 0);

        ASSERT_EQ(mkdir(dir, 0755), 0);
        cgroup_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_TRUE(cgroup_fd >= 0);
        ASSERT_EQ(net_filter_programs_attach(cgroup_fd, programs), 0);
        snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
        cgroup_procs_fd = open(procs, O_WRONLY | O_CLOEXEC);
        ASSERT_TRUE(cgroup_procs_fd >= 0);

        r = netns_run(NETNS_SETUP, checks_in_netns);
        ASSERT_EQ(rmdir(dir), 0);
        if (r == NETNS_UNAVAILABLE) {
                printf("1..0 # SKIP no network namespace\n");
                return SKIP;
        }
        printf("ok - checks_in_netns\n");
        close(cgroup_procs_fd);
        close(cgroup_fd);
        net_filter_programs_close(programs);
        net_filter_maps_done(&maps);
        return 0;
}
