/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's GET and POST /files on an E2B sandbox (docs/e2b.md "Files"): files of the session's
 * workspace, which the sandbox sees as /workspace and as /home/user (the E2B user's home). The
 * session manager reads and writes them with the sidecar file API's rules (paths, links, sizes);
 * here only the E2B spelling of a path is turned into the workspace's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "bus-client.h"
#include "bus-util.h"
#include "e2b-fs.h"
#include "http-e2b.h"
#include "http-request.h"
#include "http-util.h"
#include "id.h"
#include "io-util.h"
#include "json-util.h"
#include "multipart.h"
#include "string-util.h"


/* {"code":status,"message":before + path + after}; a path is shown back only while short and text. */
static int e2b_files_reply(HttpRequest *req, unsigned status, const char *before, const char *path,
                           const char *after) {
        char message[512];
        HttpResponse *r = NULL;
        int k;

        (void) snprintf(message, sizeof(message), "%s%s%s", before,
                        !path                                                        ? ""
                        : strlen(path) <= 256 && utf8_is_valid_n(path, strlen(path)) ? path
                                                                                     : "…",
                        after);
        k = e2b_response_new_failure(status, message, &r);
        return http_request_reply_made(req, k, r);
}

/* What follows the directory 'dir' in 'path' ("" for the directory itself), or NULL if 'path' is
 * not in it ("/home/userx" is not in "/home/user"). */
static const char *path_in(const char *path, const char *dir) {
        const char *rest = startswith(path, dir);

        if (!rest || (*rest != 0 && *rest != '/'))
                return NULL;
        return rest + (*rest == '/');
}

/* The E2B path 'p' as the sandbox's absolute path (relative paths and "~" are the home's) and as
 * the workspace's (what WriteFile and ReadFile take, which judge it further: "..", links, the
 * names' bounds). -EPERM for a path outside the workspace. */
static int e2b_path(const char *p, char **ret_abs, char **ret_ws) {
        _cleanup_free_ char *abs = NULL;
        const char *rest;
        int r;

        if (isempty(p))
                return -EINVAL;
        if (streq(p, "~") || startswith(p, "~/"))
                r = asprintf(&abs, "%s%s", E2B_HOME, p + 1);
        else if (p[0] != '/')
                r = asprintf(&abs, "%s/%s", E2B_HOME, p);
        else
                r = asprintf(&abs, "%s", p);
        if (r < 0)
                return -ENOMEM;
        /* /home/user is /workspace (the sandbox has both); nothing else is the session's. */
        rest = path_in(abs, E2B_HOME) ?: path_in(abs, "/workspace");
        if (!rest)
                return -EPERM;
        if (asprintf(ret_ws, "/workspace/%s", rest) < 0)
                return -ENOMEM;
        *ret_abs = TAKE_PTR(abs);
        return 0;
}

static const char *e2b_query(HttpRequest *req, const char *name) {
        return req->connection ? MHD_lookup_connection_value(req->connection, MHD_GET_ARGUMENT_KIND, name)
                               : NULL;
}

/* The query's username: the one user of a sandbox, or none. 1 if fine, 0 when a 401 was prepared. */
static int e2b_check_user(HttpRequest *req) {
        const char *user = e2b_query(req, "username");

        if (!user || streq(user, E2B_USER))
                return 1;
        return e2b_files_reply(req, HTTP_UNAUTHORIZED, "invalid username: '", user,
                               "' (a scopebox sandbox has one user, 'user')");
}

/* The sandbox of a /files request and its user: 1 with the id, 0 when an answer was prepared. */
static int e2b_files_begin(HttpRequest *req, char id[static SESSION_ID_LEN + 1]) {
        int r = e2b_sandbox_of(req, E2B_PORT_ENVD, id);

        return r <= 0 ? r : e2b_check_user(req);
}

/* e2b_path(), or a 400 prepared (0). */
static int e2b_files_path(HttpRequest *req, const char *path, char **ret_abs, char **ret_ws) {
        int r = e2b_path(path, ret_abs, ret_ws);

        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return e2b_files_reply(req, HTTP_BAD_REQUEST, "path '", path,
                                       "' is outside /home/user (scopebox serves the workspace's files)");
        return 1;
}

static int e2b_files_call_error(HttpRequest *req, const sd_bus_error *e, const char *path) {
        if (sd_bus_error_has_names(e, BUS_ERROR_NO_SUCH_SESSION, BUS_ERROR_PAUSED))
                return e2b_reply_not_running(req);
        if (sd_bus_error_has_name(e, BUS_ERROR_NOT_FOUND))
                return e2b_files_reply(req, HTTP_NOT_FOUND, "path '", path, "' does not exist");
        if (sd_bus_error_has_name(e, BUS_ERROR_INVALID_PATH))
                return e2b_files_reply(req, HTTP_BAD_REQUEST, "path '", path,
                                       "' is not a file of the workspace");
        if (sd_bus_error_has_name(e, BUS_ERROR_TOO_LARGE))
                return e2b_files_reply(req, 507, "no room for '", path, "' (file or workspace too large)");
        return http_request_reply_call_error(req, e, bus_timeout_files_usec(&req->server->config),
                                             e2b_response_new_bus_error);
}

/* ---- GET /files ---- */

typedef struct E2bFiles {
        char *path; /* as the sandbox sees it, for messages and answers */
        char **paths; /* POST: the workspace paths still to write, and their data */
        int *fds;
        size_t n, next;
        JsonWriter answer;
} E2bFiles;

static void e2b_files_free(void *p) {
        E2bFiles *f = p;

        if (!f)
                return;
        free(f->path);
        for (size_t i = 0; i < f->n; i++) {
                free(f->paths[i]);
                safe_close(f->fds[i]);
        }
        free(f->paths);
        free(f->fds);
        json_writer_done(&f->answer);
        free(f);
}

/* A file's bytes, sent from the mapping of the manager's memory file as libmicrohttpd asks for
 * them: nothing is copied whole (the sidecar's /files/get holds its mapping the same way). */
typedef struct E2bFileBody {
        BusData data;
} E2bFileBody;

static ssize_t e2b_file_body_read(void *userdata, uint64_t pos, char *buf, size_t max) {
        E2bFileBody *b = userdata;
        size_t n;

        if (pos >= b->data.size)
                return MHD_CONTENT_READER_END_OF_STREAM;
        n = MIN(max, b->data.size - (size_t) pos);
        memcpy(buf, (const char *) b->data.data + pos, n);
        return (ssize_t) n;
}

static void e2b_file_body_free(void *userdata) {
        E2bFileBody *b = userdata;

        bus_data_done(&b->data);
        free(b);
}

static int e2b_files_get_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bFiles *f = req->userdata;
        HttpResponse *resp = NULL;
        E2bFileBody *body;
        int fd, r;

        if (e)
                return e2b_files_call_error(req, e, f->path);
        r = sd_bus_message_read_basic(reply, 'h', &fd);
        if (r < 0)
                return r;
        body = calloc(1, sizeof(E2bFileBody));
        if (!body)
                return -ENOMEM;
        r = bus_data_load(fd, req->server->config.max_upload_bytes, &body->data);
        if (r < 0) {
                free(body);
                return r;
        }
        /* The mapping counts against the responses' budget while libmicrohttpd holds it. */
        r = http_response_new_source(HTTP_OK, "application/octet-stream",
                                     &(HttpBodySource) { .read = e2b_file_body_read,
                                                         .free = e2b_file_body_free,
                                                         .userdata = body,
                                                         .footprint = body->data.size },
                                     &resp);
        return http_request_reply_made(req, r, resp);
}

static int e2b_files_new(HttpRequest *req, const char *path, E2bFiles **ret) {
        E2bFiles *f = http_request_new_userdata(req, sizeof(E2bFiles), e2b_files_free);

        if (!f)
                return -ENOMEM;
        *f = (E2bFiles) {};
        if (path && !(f->path = strdup(path)))
                return -ENOMEM;
        *ret = f;
        return 0;
}

int http_e2b_files_get(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ char *abs = NULL, *ws = NULL;
        const char *path = e2b_query(req, "path");
        char id[SESSION_ID_LEN + 1];
        E2bFiles *f;
        int r;

        r = e2b_files_begin(req, id);
        if (r > 0)
                r = e2b_files_path(req, path, &abs, &ws);
        if (r <= 0)
                return r;
        r = e2b_files_new(req, abs, &f);
        if (r < 0)
                return r;
        r = session_manager_new_call(req->server->bus, "ReadFile", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", id, ws);
        if (r < 0)
                return r;
        return http_request_call(req, m, bus_timeout_files_usec(&req->server->config),
                                 e2b_files_get_on_reply);
}

/* ---- POST /files ---- */

static int e2b_files_write_next(HttpRequest *req);

/* EntryInfo's short form, as envd answers an upload. */
static int e2b_files_answer_add(E2bFiles *f, const char *abs) {
        const char *slash = strrchr(abs, '/');
        int r;

        r = json_writer_append_str(&f->answer, f->answer.buf.len == 0 ? "[{\"path\":" : ",{\"path\":");
        if (r >= 0)
                r = json_writer_append_string_lossy(&f->answer, abs, strlen(abs));
        if (r >= 0)
                r = json_writer_append_str(&f->answer, ",\"name\":");
        if (r >= 0)
                r = json_writer_append_string_lossy(&f->answer, slash ? slash + 1 : abs,
                                                    strlen(slash ? slash + 1 : abs));
        if (r >= 0)
                r = json_writer_append_str(&f->answer, ",\"type\":\"file\"}");
        return r;
}

static int e2b_files_write_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        E2bFiles *f = req->userdata;

        if (e)
                return e2b_files_call_error(req, e, f->paths[f->next - 1] + strlen("/workspace/"));
        return e2b_files_write_next(req);
}

/* One WriteFile after the other, in the order of the parts; then the answer. */
static int e2b_files_write_next(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        E2bFiles *f = req->userdata;
        char *body;
        size_t size;
        int r;

        if (f->next == f->n) {
                r = json_writer_append_str(&f->answer, "]");
                if (r < 0)
                        return r;
                body = json_writer_steal(&f->answer, &size);
                if (!body)
                        return -ENOMEM;
                HttpResponse *resp = NULL;
                r = http_response_new_take(HTTP_OK, body, size, &resp);
                return http_request_reply_made(req, r, resp);
        }
        r = session_manager_new_call(req->server->bus, "WriteFile", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "ssh", req->session_id, f->paths[f->next], f->fds[f->next]);
        if (r < 0)
                return r;
        f->fds[f->next] = safe_close(f->fds[f->next]);
        f->next++;
        return http_request_call(req, m, bus_timeout_files_usec(&req->server->config),
                                 e2b_files_write_on_reply);
}

/* Adds the file 'path' (as the client named it) with 'n' bytes of 'data' to the writes. 1 if
 * added, 0 when a client error was prepared. */
static int e2b_files_add(HttpRequest *req, E2bFiles *f, const char *path, const void *data, size_t n) {
        _cleanup_free_ char *abs = NULL, *ws = NULL;
        int r, fd;

        r = e2b_files_path(req, path, &abs, &ws);
        if (r <= 0)
                return r;
        if (n > req->server->config.max_upload_bytes)
                return e2b_files_reply(req, HTTP_PAYLOAD_TOO_LARGE, "'", abs,
                                       "' is larger than the upload limit");
        for (size_t i = 0; i < f->n; i++)
                if (streq(f->paths[i], ws))
                        return e2b_files_reply(req, HTTP_BAD_REQUEST, "path '", abs, "' is named twice");
        fd = memfd_new_data("scopebox-upload", data, n);
        if (fd < 0)
                return fd;
        f->paths[f->n] = TAKE_PTR(ws);
        f->fds[f->n++] = fd;
        r = e2b_files_answer_add(f, abs);
        return r < 0 ? r : 1;
}

int http_e2b_files_post(HttpRequest *req) {
        _cleanup_(multipart_form_done) MultipartForm form = {};
        _cleanup_free_ char *boundary = NULL;
        const char *path = e2b_query(req, "path"), *type = req->headers.content_type;
        char id[SESSION_ID_LEN + 1];
        E2bFiles *f;
        size_t n_files;
        int r;

        r = e2b_files_begin(req, id);
        if (r <= 0)
                return r;
        if (req->connection &&
            MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING))
                return e2b_files_reply(req, HTTP_BAD_REQUEST,
                                       "compressed uploads are not supported by this scopebox version", NULL,
                                       "");

        if (type && multipart_boundary(type, &boundary) >= 0) {
                r = multipart_parse(boundary, req->body ?: "", req->body_size, &form);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        return e2b_files_reply(req, HTTP_BAD_REQUEST, "malformed multipart body", NULL, "");
                n_files = 0;
                for (size_t i = 0; i < form.n; i++)
                        n_files += streq(form.parts[i].name, "file");
                /* A path in the query names the one file; otherwise each part's filename does. */
                if (n_files == 0 || (path && n_files > 1))
                        return e2b_files_reply(req, HTTP_BAD_REQUEST,
                                               "one part named file per file, its path in the query or its "
                                               "filename",
                                               NULL, "");
        } else if (!type || startswith(type, "application/octet-stream")) {
                if (!path)
                        return e2b_files_reply(req, HTTP_BAD_REQUEST, "path is required", NULL, "");
                n_files = 1;
        } else
                return e2b_files_reply(req, HTTP_BAD_REQUEST,
                                       "the body must be multipart/form-data or application/octet-stream",
                                       NULL, "");

        r = e2b_files_new(req, NULL, &f);
        if (r < 0)
                return r;
        f->paths = calloc(n_files, sizeof(char *));
        f->fds = malloc(n_files * sizeof(int));
        if (!f->paths || !f->fds)
                return -ENOMEM;
        if (boundary) {
                for (size_t i = 0; i < form.n; i++) {
                        const MultipartPart *p = &form.parts[i];

                        if (!streq(p->name, "file"))
                                continue;
                        if (!path && isempty(p->filename))
                                return e2b_files_reply(req, HTTP_BAD_REQUEST, "a file part has no filename",
                                                       NULL, "");
                        r = e2b_files_add(req, f, path ?: p->filename, p->data, p->size);
                        if (r <= 0)
                                return r;
                }
        } else {
                r = e2b_files_add(req, f, path, req->body ?: "", req->body_size);
                if (r <= 0)
                        return r;
        }
        multipart_form_done(&form);
        http_request_release_body(req);
        return e2b_files_write_next(req);
}
