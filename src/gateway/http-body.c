/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The JSON request bodies of the sidecar API: reading them, and the checks every route that names a
 * session makes. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "bus-contract.h"
#include "http-body.h"
#include "id.h"

int sidecar_body_read(json_object *body, const JsonField fields[], SidecarBody *ret,
                      HttpResponse **ret_error) {
        JsonDispatchError e = {};
        int r;

        assert(fields);
        assert(ret);
        assert(ret_error);

        *ret_error = NULL;
        if (!body)
                r = http_response_new_body_missing(ret_error);
        else if (json_dispatch(body, fields, ret, &e) < 0)
                r = http_response_new_validation(&e, ret_error);
        else
                return 1;
        return r < 0 ? r : 0;
}

int sidecar_body_check_session_id(json_object *body, const SidecarBody *b, HttpResponse **ret_error) {
        int r;

        assert(b);
        assert(ret_error);

        if (session_id_is_valid(b->session_id) &&
            json_member_string_length(body, "session_id") == strlen(b->session_id))
                return 1;
        r = http_response_new_detail(HTTP_BAD_REQUEST, BUS_MESSAGE_INVALID_SESSION_ID, ret_error);
        return r < 0 ? r : 0;
}
