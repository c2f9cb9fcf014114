/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the S3 (SigV4) and OSS signers share. */
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "sign-util.h"
#include "string-util.h"

bool sign_credentials_ok(const SignCredentials *c, const char *separators) {
        if (!c || isempty(c->access_key_id) || isempty(c->secret))
                return false;
        for (const unsigned char *p = (const unsigned char *) c->access_key_id; *p; p++)
                if (*p <= 0x20 || *p == 0x7f || strchr(separators, *p))
                        return false;
        return true;
}

SignEntry *sign_entries_new(size_t n) {
        return calloc(MAX(n, (size_t) 1), sizeof(SignEntry));
}

void sign_entries_free(SignEntry *e, size_t n) {
        if (!e)
                return;
        for (size_t i = 0; i < n; i++) {
                free(e[i].name);
                free(e[i].value);
        }
        free(e);
}

int sign_entry_cmp_name_index(const void *a, const void *b) {
        const SignEntry *x = a, *y = b;
        int r;

        r = strcmp(x->name, y->name);
        if (r != 0)
                return r;
        return x->index < y->index ? -1 : x->index > y->index;
}

