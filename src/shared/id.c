/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session identifiers: random UUIDv4 rendered as 32 lowercase hex digits. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "id.h"
#include "macro.h"

bool session_id_is_valid(const char *id) {
        if (!id)
                return false;
        for (size_t i = 0; i < SESSION_ID_LEN; i++)
                if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
                        return false;
        return id[SESSION_ID_LEN] == 0;
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
