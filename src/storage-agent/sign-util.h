/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the S3 (SigV4) and OSS signers share: their inputs, the sorted copies they canonicalize and the
 * checks of access keys. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* A header or a query parameter (name, value), unencoded. */
typedef struct SignPair {
        const char *name;
        const char *value;
} SignPair;

/* An access key: its id goes into the request (Authorization header or URL), the secret signs it. */
typedef struct SignCredentials {
        const char *access_key_id;
        const char *secret;
} SignCredentials;

/* Whether the id can stand in the Authorization header between the given separators (AWS: '/' and
 * ',', OSS: ':'): printable ASCII without blanks, and a secret is set. */
bool sign_credentials_ok(const SignCredentials *c, const char *separators);

/* A pair copied for canonicalization (lowercased, trimmed or encoded), with its place in the input. */
typedef struct SignEntry {
        char *name;
        char *value;
        size_t index;
} SignEntry;

/* n zeroed entries; one when n is 0, so that success is never NULL. */
SignEntry *sign_entries_new(size_t n);
void sign_entries_free(SignEntry *e, size_t n);
/* qsort() order of headers: by name, and equal names in the order given (their values are joined in
 * that order). */
int sign_entry_cmp_name_index(const void *a, const void *b);

