/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session identifiers: random UUIDv4 rendered as 32 lowercase hex digits. */
#pragma once

#include <stdbool.h>

#define SESSION_ID_LEN 32

bool session_id_is_valid(const char *id);
/* Writes SESSION_ID_LEN + 1 bytes. */
int session_id_generate(char ret[SESSION_ID_LEN + 1]);

/* The node tag (SANDBOX_NODE_ID): 1 to NODE_ID_LEN_MAX lowercase hex digits, or empty (no tag).
 * A tagged node's session ids start with its tag, so that a balancer can route by the id alone. */
#define NODE_ID_LEN_MAX 8U
bool node_id_is_valid(const char *tag);
/* A session id that starts with 'tag' (NULL or empty: none), the rest random as above. */
int session_id_generate_tagged(const char *tag, char ret[SESSION_ID_LEN + 1]);
/* Whether 'id' (a valid session id) was minted by the node 'tag': always true without a tag. */
bool session_id_has_tag(const char *id, const char *tag);
