/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session identifiers: random UUIDv4 rendered as 32 lowercase hex digits, a node's tag first. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "id.h"
#include "macro.h"

static bool is_lower_hex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

bool session_id_is_valid(const char *id) {
        if (!id)
                return false;
        for (size_t i = 0; i < SESSION_ID_LEN; i++)
                if (!is_lower_hex(id[i]))
                        return false;
        return id[SESSION_ID_LEN] == 0;
}

bool node_id_is_valid(const char *tag) {
        size_t n = 0;

        if (!tag)
                return false;
        for (; tag[n]; n++)
                if (n >= NODE_ID_LEN_MAX || !is_lower_hex(tag[n]))
                        return false;
        return true; /* empty: no tag */
}

bool session_id_has_tag(const char *id, const char *tag) {
        if (!tag || !*tag)
                return true;
        return strncmp(id, tag, strlen(tag)) == 0;
}

int session_id_generate(char ret[SESSION_ID_LEN + 1]) {
        static const char hex[] = "0123456789abcdef";
        uint8_t b[16];
        size_t got = 0;

        while (got < sizeof(b)) {
                ssize_t k = getrandom(b + got, sizeof(b) - got, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t) k;
        }
        b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
        b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
        for (size_t i = 0; i < sizeof(b); i++) {
                ret[i * 2] = hex[b[i] >> 4];
                ret[i * 2 + 1] = hex[b[i] & 15];
        }
        ret[SESSION_ID_LEN] = 0;
        return 0;
}

int session_id_generate_tagged(const char *tag, char ret[SESSION_ID_LEN + 1]) {
        int r;

        assert(!tag || node_id_is_valid(tag));

        r = session_id_generate(ret);
        if (r < 0)
                return r;
        /* The tag takes the place of random digits: still 32 lowercase hex digits, and with at
         * most 8 of them taken, the version digit (the 13th) stays. */
        if (tag)
                memcpy(ret, tag, strlen(tag));
        return 0;
}
