/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session identifiers: random UUIDv4 rendered as 32 lowercase hex digits. */
#pragma once

#include <stdbool.h>

#define SESSION_ID_LEN 32

bool session_id_is_valid(const char *id);
/* Writes SESSION_ID_LEN + 1 bytes. */
int session_id_generate(char ret[SESSION_ID_LEN + 1]);
