/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The dify network filter's maps and programs (net-filter-bpf.h), written as raw BPF instructions
 * and loaded with the bpf() syscall: no library, no compiler, a few dozen instructions. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>

#include "macro.h"
#include "net-filter-bpf.h"

static int bpf_call(int cmd, union bpf_attr *attr) {
        long r = syscall(SYS_bpf, cmd, attr, sizeof(*attr));

        return r < 0 ? -errno : (int) r;
}

/* ---- maps ---- */

/* An LPM trie's key: the prefix length, then the address (network order). */
typedef struct LpmKey {
        uint32_t length;
        uint8_t bytes[16];
} LpmKey;

static int lpm_map_new(const char *name, unsigned address_size, size_t max_entries) {
        union bpf_attr attr = {
                .map_type = BPF_MAP_TYPE_LPM_TRIE,
                .key_size = sizeof(uint32_t) + address_size,
                .value_size = sizeof(uint8_t),
                .max_entries = max_entries,
                .map_flags = BPF_F_NO_PREALLOC,
        };

        strncpy(attr.map_name, name, sizeof(attr.map_name) - 1);
        return bpf_call(BPF_MAP_CREATE, &attr);
}

int net_filter_maps_new(size_t n_allow, NetFilterMaps *ret) {
        _cleanup_(net_filter_maps_done) NetFilterMaps m = NET_FILTER_MAPS_NULL;
        /* An empty map is still a map the programs can look into. IPv6 maps hold IPv4 keys too. */
        size_t allow_max = MAX(n_allow, (size_t) 1);
        const struct {
                int *fd;
                const char *name;
                unsigned address_size;
                size_t max_entries;
        } maps[] = {
                { &m.allow4, "sbx_allow4", 4, allow_max },
                { &m.allow6, "sbx_allow6", 16, 2 * allow_max },
                { &m.deny4, "sbx_deny4", 4, NET_FILTER_DENY_MAX },
                { &m.deny6, "sbx_deny6", 16, 2 * NET_FILTER_DENY_MAX },
        };

        for (size_t i = 0; i < ELEMENTSOF(maps); i++) {
                *maps[i].fd = lpm_map_new(maps[i].name, maps[i].address_size, maps[i].max_entries);
                if (*maps[i].fd < 0)
                        return *maps[i].fd;
        }
        *ret = m;
        m = NET_FILTER_MAPS_NULL;
        return 0;
}

void net_filter_maps_done(NetFilterMaps *maps) {
        if (!maps)
                return;
        safe_close(maps->allow4);
        safe_close(maps->allow6);
        safe_close(maps->deny4);
        safe_close(maps->deny6);
        *maps = NET_FILTER_MAPS_NULL;
}

/* The key of 'p' in its own family's map; with 'mapped', an IPv4 prefix as ::ffff:a.b.c.d/96+n. The
 * bits beyond the prefix are cleared, so that one prefix is always one key. */
static int lpm_key(const AddressPrefix *p, bool mapped, LpmKey *ret, size_t *ret_size) {
        unsigned bits = p->family == AF_INET ? 32 : 128;
        LpmKey k = {};
        uint8_t *a = k.bytes;

        if ((p->family != AF_INET && p->family != AF_INET6) || p->length > bits ||
            (mapped && p->family != AF_INET))
                return -EINVAL;
        if (mapped) {
                k.bytes[10] = k.bytes[11] = 0xff;
                a = k.bytes + 12;
        }
        memcpy(a, p->bytes, bits / 8);
        for (unsigned i = p->length; i < bits; i++)
                a[i / 8] &= (uint8_t) ~(0x80U >> (i % 8));
        k.length = p->length + (mapped ? 96 : 0);
        *ret = k;
        *ret_size = sizeof(uint32_t) + (p->family == AF_INET && !mapped ? 4 : 16);
        return 0;
}

static int lpm_update(int map_fd, const AddressPrefix *p, bool mapped, bool add) {
        static const uint8_t value = 1;
        union bpf_attr attr = { .map_fd = map_fd };
        size_t size;
        LpmKey k;
        int r;

        r = lpm_key(p, mapped, &k, &size);
        if (r < 0)
                return r;
        attr.key = (uint64_t) (uintptr_t) &k;
        if (add) {
                attr.value = (uint64_t) (uintptr_t) &value;
                attr.flags = BPF_ANY;
                return bpf_call(BPF_MAP_UPDATE_ELEM, &attr);
        }
        r = bpf_call(BPF_MAP_DELETE_ELEM, &attr);
        return r == -ENOENT ? 0 : r;
}

static int maps_update(const NetFilterMaps *maps, bool deny, const AddressPrefix *p, bool add) {
        int map4 = deny ? maps->deny4 : maps->allow4, map6 = deny ? maps->deny6 : maps->allow6;
        int r;

        if (p->family == AF_INET6)
                return lpm_update(map6, p, false, add);
        r = lpm_update(map4, p, false, add);
        if (r >= 0)
                r = lpm_update(map6, p, true, add);
        return r;
}

int net_filter_maps_add(const NetFilterMaps *maps, bool deny, const AddressPrefix *p) {
        return maps_update(maps, deny, p, true);
}

int net_filter_maps_remove(const NetFilterMaps *maps, bool deny, const AddressPrefix *p) {
        return maps_update(maps, deny, p, false);
}

/* ---- programs ---- */

#define INSN(c, d, s, o, i) \
        ((struct bpf_insn) { .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
/* A 32-bit field of the program's context (r6) into a register. */
#define LOAD_SKB_FIELD(reg, field) \
        INSN(BPF_LDX | BPF_MEM | BPF_W, (reg), BPF_REG_6, offsetof(struct __sk_buff, field), 0)

/* What a program is built in: a few dozen instructions, jumps patched once their target is known. */
typedef struct Program {
        struct bpf_insn insn[128];
        size_t n;
        bool overflow;
} Program;

static size_t emit(Program *p, struct bpf_insn insn) {
        if (p->n >= ELEMENTSOF(p->insn)) {
                p->overflow = true;
                return p->n;
        }
        p->insn[p->n] = insn;
        return p->n++;
}

/* A forward jump whose target is set later with jump_here(). */
static size_t emit_jump(Program *p, uint8_t op, uint8_t reg, int32_t imm) {
        return emit(p, INSN(BPF_JMP | op | BPF_K, reg, 0, 0, imm));
}

static void jump_here(Program *p, size_t from) {
        if (from < p->n)
                p->insn[from].off = (int16_t) (p->n - from - 1);
}

static void emit_return(Program *p, int32_t verdict) {
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, verdict));
        emit(p, INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
}

/* r0 = lookup of the key at r10+key_off in the map: non-zero when the address is in it. */
static void emit_lookup(Program *p, int map_fd, int16_t key_off) {
        emit(p, INSN(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map_fd));
        emit(p, INSN(0, 0, 0, 0, 0));
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0));
        emit(p, INSN(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, key_off));
        emit(p, INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem));
}

/* The key's stack slot: the length at r10+key_off, the address right after it. */
static int16_t key_offset(unsigned address_size) {
        return (int16_t) -(int) (sizeof(uint32_t) + address_size);
}

/* connect()/sendmsg(): the destination (the caller's sockaddr, in the context) in ALLOW → 1; in DENY
 * → 0, which the call answers with EPERM; anything else → 1. */
static void build_sock_addr(Program *p, bool ipv6, const NetFilterMaps *maps) {
        unsigned size = ipv6 ? 16 : 4;
        int16_t key = key_offset(size);
        size_t to_allow, to_deny;

        for (unsigned i = 0; i < size / 4; i++) {
                int16_t field = ipv6 ? (int16_t) (offsetof(struct bpf_sock_addr, user_ip6) + 4 * i)
                                     : (int16_t) offsetof(struct bpf_sock_addr, user_ip4);

                emit(p, INSN(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, field, 0));
                emit(p, INSN(BPF_STX | BPF_MEM | BPF_W, BPF_REG_10, BPF_REG_2, key + 4 + 4 * i, 0));
        }
        emit(p, INSN(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, key, size * 8));
        emit_lookup(p, ipv6 ? maps->allow6 : maps->allow4, key);
        to_allow = emit_jump(p, BPF_JNE, BPF_REG_0, 0);
        emit_lookup(p, ipv6 ? maps->deny6 : maps->deny4, key);
        to_deny = emit_jump(p, BPF_JNE, BPF_REG_0, 0);
        jump_here(p, to_allow);
        emit_return(p, 1);
        jump_here(p, to_deny);
        emit_return(p, 0);
}

/* The packet's address (the destination on egress, the source on ingress) judged for one family:
 * jumps to *pass or *drop are collected for build_skb() to patch. */
static void build_skb_family(Program *p, bool ipv6, bool egress, const NetFilterMaps *maps, size_t *jumps,
                             size_t *n_jumps, size_t *drops, size_t *n_drops) {
        unsigned size = ipv6 ? 16 : 4;
        int16_t key = key_offset(size);
        /* Offsets in the IP header, where the cgroup hooks' packet data begins. */
        int32_t field = ipv6 ? (egress ? 24 : 8) : (egress ? 16 : 12);

        /* bpf_skb_load_bytes(skb, field, r10 + key + 4, size): a short packet is dropped. */
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0));
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_2, 0, 0, field));
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_3, BPF_REG_10, 0, 0));
        emit(p, INSN(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_3, 0, 0, key + 4));
        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_4, 0, 0, size));
        emit(p, INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_skb_load_bytes));
        drops[(*n_drops)++] = emit_jump(p, BPF_JNE, BPF_REG_0, 0);
        emit(p, INSN(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, key, size * 8));
        emit_lookup(p, ipv6 ? maps->allow6 : maps->allow4, key);
        jumps[(*n_jumps)++] = emit_jump(p, BPF_JNE, BPF_REG_0, 0);
        /* Through the loopback: to or from this host, whichever address it has. */
        emit(p, LOAD_SKB_FIELD(BPF_REG_7, ifindex));
        drops[(*n_drops)++] = emit_jump(p, BPF_JEQ, BPF_REG_7, 1);
        emit_lookup(p, ipv6 ? maps->deny6 : maps->deny4, key);
        drops[(*n_drops)++] = emit_jump(p, BPF_JNE, BPF_REG_0, 0);
        jumps[(*n_jumps)++] = emit(p, INSN(BPF_JMP | BPF_JA, 0, 0, 0, 0));
}

/* Packets of the cgroup's sockets: 1 passes, 0 drops. Neither IPv4 nor IPv6: passes. */
static void build_skb(Program *p, bool egress, const NetFilterMaps *maps) {
        size_t pass[8], n_pass = 0, drop[8], n_drop = 0, to_v4, to_v6;

        emit(p, INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0));
        emit(p, LOAD_SKB_FIELD(BPF_REG_7, protocol));
        to_v4 = emit_jump(p, BPF_JEQ, BPF_REG_7, htons(ETH_P_IP));
        to_v6 = emit_jump(p, BPF_JEQ, BPF_REG_7, htons(ETH_P_IPV6));
        pass[n_pass++] = emit(p, INSN(BPF_JMP | BPF_JA, 0, 0, 0, 0));
        jump_here(p, to_v4);
        build_skb_family(p, false, egress, maps, pass, &n_pass, drop, &n_drop);
        jump_here(p, to_v6);
        build_skb_family(p, true, egress, maps, pass, &n_pass, drop, &n_drop);
        for (size_t i = 0; i < n_pass; i++)
                jump_here(p, pass[i]);
        emit_return(p, 1);
        for (size_t i = 0; i < n_drop; i++)
                jump_here(p, drop[i]);
        emit_return(p, 0);
}

static const struct {
        const char *name;
        enum bpf_prog_type type;
        enum bpf_attach_type attach;
} programs[_NET_FILTER_PROGRAM_MAX] = {
        [NET_FILTER_CONNECT4] = { "sbx_connect4", BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_INET4_CONNECT },
        [NET_FILTER_CONNECT6] = { "sbx_connect6", BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_INET6_CONNECT },
        [NET_FILTER_SENDMSG4] = { "sbx_sendmsg4", BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_UDP4_SENDMSG },
        [NET_FILTER_SENDMSG6] = { "sbx_sendmsg6", BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_UDP6_SENDMSG },
        [NET_FILTER_EGRESS] = { "sbx_egress", BPF_PROG_TYPE_CGROUP_SKB, BPF_CGROUP_INET_EGRESS },
        [NET_FILTER_INGRESS] = { "sbx_ingress", BPF_PROG_TYPE_CGROUP_SKB, BPF_CGROUP_INET_INGRESS },
};

#define VERIFIER_LOG_SIZE (64U * 1024U)

static int program_load(NetFilterProgram which, const Program *p, char **ret_log) {
        union bpf_attr attr = {
                .prog_type = programs[which].type,
                .insn_cnt = p->n,
                .insns = (uint64_t) (uintptr_t) p->insn,
                .license = (uint64_t) (uintptr_t) "LGPL-2.1-or-later",
                .expected_attach_type = programs[which].attach,
        };
        _cleanup_free_ char *log = NULL;
        int fd;

        if (p->overflow)
                return -E2BIG;
        strncpy(attr.prog_name, programs[which].name, sizeof(attr.prog_name) - 1);
        fd = bpf_call(BPF_PROG_LOAD, &attr);
        if (fd >= 0 || !ret_log || fd == -EPERM || fd == -ENOSYS)
                return fd;
        /* Again, to tell why. */
        log = calloc(1, VERIFIER_LOG_SIZE);
        if (!log)
                return fd;
        attr.log_level = 1;
        attr.log_size = VERIFIER_LOG_SIZE;
        attr.log_buf = (uint64_t) (uintptr_t) log;
        if (bpf_call(BPF_PROG_LOAD, &attr) < 0) {
                free(*ret_log);
                *ret_log = TAKE_PTR(log);
        }
        return fd;
}

int net_filter_programs_load(const NetFilterMaps *maps, int ret_fds[static _NET_FILTER_PROGRAM_MAX],
                             char **ret_log) {
        int fds[_NET_FILTER_PROGRAM_MAX];

        for (int i = 0; i < _NET_FILTER_PROGRAM_MAX; i++) {
                Program p = {};

                if (i == NET_FILTER_EGRESS || i == NET_FILTER_INGRESS)
                        build_skb(&p, i == NET_FILTER_EGRESS, maps);
                else
                        build_sock_addr(&p, i == NET_FILTER_CONNECT6 || i == NET_FILTER_SENDMSG6, maps);
                fds[i] = program_load(i, &p, ret_log);
                if (fds[i] < 0) {
                        int r = fds[i];

                        for (int j = 0; j < i; j++)
                                safe_close(fds[j]);
                        return r;
                }
        }
        memcpy(ret_fds, fds, sizeof(fds));
        return 0;
}

void net_filter_programs_close(int fds[static _NET_FILTER_PROGRAM_MAX]) {
        for (int i = 0; i < _NET_FILTER_PROGRAM_MAX; i++)
                fds[i] = safe_close(fds[i]);
}

static int program_attach(int cgroup_fd, int prog_fd, enum bpf_attach_type type, bool attach) {
        union bpf_attr attr = {
                .target_fd = cgroup_fd,
                .attach_bpf_fd = prog_fd,
                .attach_type = type,
                .attach_flags = attach ? BPF_F_ALLOW_MULTI : 0,
        };

        return bpf_call(attach ? BPF_PROG_ATTACH : BPF_PROG_DETACH, &attr);
}

int net_filter_programs_attach(int cgroup_fd, const int fds[static _NET_FILTER_PROGRAM_MAX]) {
        for (int i = 0; i < _NET_FILTER_PROGRAM_MAX; i++) {
                int r = fds[i] < 0 ? -EBADF : program_attach(cgroup_fd, fds[i], programs[i].attach, true);

                if (r < 0) {
                        for (int j = 0; j < i; j++)
                                (void) program_attach(cgroup_fd, fds[j], programs[j].attach, false);
                        return r;
                }
        }
        return 0;
}
