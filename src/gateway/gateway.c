/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopebox-gateway: the socket-activated HTTP front end of the sidecar API. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "config.h"
#include "gateway-auth.h"
#include "gateway-server.h"
#include "daemon-util.h"
#include "http-apis.h"
#include "log.h"
#include "macro.h"
#include "mime.h"

static void strv_freep(char ***p) {
        if (!*p)
                return;
        for (char **i = *p; *i; i++)
                free(*i);
        free(*p);
}

/* The inherited sockets [SD_LISTEN_FDS_START + next, SD_LISTEN_FDS_START + n) not handed to the
 * server yet. */
typedef struct ListenFds {
        int next, n;
} ListenFds;

/* Our references only: systemd keeps the sockets for the next activation. */
static void listen_fds_close(ListenFds *l) {
        for (; l->next < l->n; l->next++)
                (void) safe_close(SD_LISTEN_FDS_START + l->next);
}

/* The artifacts' types as the sidecar's Python mimetypes gives them on this host: its builtin table
 * and the host's mime.types files (ProtectSystem=strict leaves /etc readable). Read once, at start:
 * a changed /etc/mime.types needs a restart, as it does for the sidecar. */
static int load_mime_types(Server *s) {
        const char *failed = NULL;
        int r;

        r = mime_types_load(MIME_TYPES_FILES, &s->mime_types, &failed);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                log_warning_errno(r, "Failed to read MIME types from '%s', using Python's builtin table "
                                  "alone: %m", strna(failed));
        else
                log_debug("%zu file name extensions have a MIME type.", mime_types_size(s->mime_types));
        return 0;
}

/* The key comes from the credential if there is one, else from SANDBOX_API_KEY. Returns NULL in
 * *ret when there is none and that is allowed. */
static int load_api_key(const Config *config, char **ret) {
        _cleanup_erase_free_ char *key = NULL;
        const char *reason;
        int r;

        r = key_load_credential(API_KEY_CREDENTIAL, &key, &reason);
        if (r == -EINVAL)
                return log_error_errno(r, "Credential \"%s\" %s, refusing to start.",
                                       API_KEY_CREDENTIAL, reason);
        if (r < 0)
                return log_error_errno(r, "Failed to read credential \"%s\": %m", API_KEY_CREDENTIAL);
        if (r > 0) {
                log_debug("Using the API key from credential \"%s\".", API_KEY_CREDENTIAL);
                *ret = TAKE_PTR(key);
                return 0;
        }

        if (!isempty(config->api_key)) {
                if (api_key_validate(config->api_key, strlen(config->api_key), &reason) < 0)
                        return log_error_errno(-EINVAL, "SANDBOX_API_KEY %s, refusing to start.", reason);
                key = strdup(config->api_key);
                if (!key)
                        return log_oom();
                *ret = TAKE_PTR(key);
                return 0;
        }

        if (!config->allow_no_auth)
                return log_error_errno(-ENOKEY,
                                       "No API key configured: provide credential \"%s\" (LoadCredential=) "
                                       "or SANDBOX_API_KEY, or set SANDBOX_ALLOW_NO_AUTH=1 on a trusted "
                                       "development host. Refusing to start.", API_KEY_CREDENTIAL);

        log_warning("No API key configured and SANDBOX_ALLOW_NO_AUTH is set: every client that can reach "
                    "the socket can run code. Never use this in production.");
        *ret = NULL;
        return 0;
}

/* The scrape key is optional: without it /metrics takes the API key, like every other endpoint. */
static int load_metrics_key(Server *s) {
        _cleanup_erase_free_ char *key = NULL;
        const char *reason;
        int r;

        r = key_load_credential(METRICS_KEY_CREDENTIAL, &key, &reason);
        if (r == -EINVAL)
                return log_error_errno(r, "Credential \"%s\" %s, refusing to start.", METRICS_KEY_CREDENTIAL,
                                       reason);
        if (r < 0)
                return log_error_errno(r, "Failed to read credential \"%s\": %m", METRICS_KEY_CREDENTIAL);
        if (r == 0)
                return 0;
        if (!s->auth_header)
                return 0; /* no authentication at all: nothing to open */
        r = server_set_scrape_key(s, key);
        if (r == -EEXIST)
                return log_error_errno(
                        r, "Credential \"%s\" equals the API key; it must differ, refusing to start.",
                        METRICS_KEY_CREDENTIAL);
        if (r < 0)
                return log_oom();
        log_info("GET /metrics also accepts the scrape key from credential \"%s\".", METRICS_KEY_CREDENTIAL);
        return 0;
}

static int run(int argc, char *argv[]) {
        _cleanup_(server_freep) Server *s = NULL;
        _cleanup_erase_free_ char *key = NULL;
        _cleanup_free_ char *config_error = NULL;
        _cleanup_(strv_freep) char **names = NULL;
        _cleanup_(config_done) Config config = {};
        _cleanup_(listen_fds_close) ListenFds fds = {};
        int r;

        r = daemon_parse_argv(argc, argv, "scopebox-gateway",
                              "The HTTP gateway of scopebox: the sidecar and dify-sandbox APIs.",
                              "by scopebox-gateway.socket");
        if (r != 0)
                return r;

        log_setup("scopebox-gateway");

        /* MHD sends with MSG_NOSIGNAL, but a peer vanishing must never kill us. */
        (void) signal(SIGPIPE, SIG_IGN);

        r = config_load(&config, NULL, &config_error);
        if (r < 0) {
                if (config_error)
                        return log_error_errno(r, "Invalid configuration: %s", config_error);
                return log_error_errno(r, "Failed to load configuration: %m");
        }

        r = load_api_key(&config, &key);
        if (r < 0)
                return r;

        fds.n = sd_listen_fds_with_names(true, &names);
        if (fds.n < 0)
                return log_error_errno(fds.n, "Failed to get listening sockets from systemd: %m");
        if (fds.n == 0)
                return log_error_errno(-ENXIO,
                                       "No listening socket received. scopebox-gateway is socket-activated: "
                                       "start scopebox-gateway.socket, or for testing run it under "
                                       "systemd-socket-activate -l 127.0.0.1:48217.");

        r = server_new(&config, &s);
        if (r < 0)
                return r;

        /* Every socket serves both APIs; their paths are disjoint. */
        r = server_add_api(s, &http_sidecar_api);
        if (r >= 0)
                r = server_add_api(s, &http_dify_api);
        /* Alone on the socket named "e2b" (scopebox-gateway-e2b.socket). */
        if (r >= 0)
                r = server_add_api(s, &http_e2b_api);
        if (r < 0)
                return log_error_errno(r, "Failed to register the APIs: %m");

        r = load_mime_types(s);
        if (r < 0)
                return r;

        r = server_set_api_key(s, key);
        if (r < 0)
                return log_oom();
        r = load_metrics_key(s);
        if (r < 0)
                return r;

        /* The bus first: without it there is nothing to serve, and the sockets stay untouched. */
        r = server_connect_bus(s);
        if (r < 0)
                return r;

        /* Each is the server's from here, also when it fails. */
        while (fds.next < fds.n) {
                int i = fds.next++;

                r = server_add_listen_fd(s, SD_LISTEN_FDS_START + i, names ? names[i] : NULL);
                if (r < 0)
                        return r;
        }

        return server_run(s);
}

int main(int argc, char *argv[]) {
        int r;

        r = run(argc, argv);
        if (r < 0) {
                (void) sd_notifyf(false, "ERRNO=%i", -r);
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}
