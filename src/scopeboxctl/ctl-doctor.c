/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl doctor: the host's prerequisites, one line per check (ok, warn, fail). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <seccomp.h>

#include "ctl.h"
#include "host-check.h"
#include "fs-util.h"
#include "io-util.h"
#include "json-util.h"
#include "pidref.h"
#include "strbuf.h"
#include "time-util.h"

#define API_KEY_FILE "/etc/scopebox/api-key"
#define METRICS_KEY_FILE "/etc/credstore/scopebox-metrics-key"
#define FONT_CACHE_DIR SCOPEBOX_CACHE_DIR "/matplotlib"
#define TUN_DEVICE "/dev/net/tun"
#define SANDBOX_PYTHON "/usr/bin/python3"
#define SANDBOX_NODE "/usr/bin/node"
/* How long a probe (python's imports, fc-list) may take before it counts as failed. */
#define PROBE_TIMEOUT_MSEC 120000
#define PROBE_OUTPUT_MAX (1U << 20)

typedef enum CheckState {
        CHECK_OK,
        CHECK_WARN,
        CHECK_FAIL,
        _CHECK_STATE_MAX,
} CheckState;

static const char *const check_state_table[_CHECK_STATE_MAX] = {
        [CHECK_OK] = "ok",
        [CHECK_WARN] = "warn",
        [CHECK_FAIL] = "fail",
};

typedef struct Doctor {
        Table *table;
        json_object *checks;
        unsigned counts[_CHECK_STATE_MAX];
        char home[40];     /* $HOME of the probes: python and fontconfig write caches there */
} Doctor;

static void report(Doctor *d, CheckState state, const char *name, const char *format, ...) _printf_(4, 5);
static void report(Doctor *d, CheckState state, const char *name, const char *format, ...) {
        char detail[512];
        json_object *o;
        va_list ap;

        va_start(ap, format);
        (void) vsnprintf(detail, sizeof(detail), format, ap);
        va_end(ap);

        d->counts[state]++;
        (void) table_add_row(d->table, check_state_table[state], name, detail);
        o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(name));
        json_object_object_add(o, "state", json_object_new_string(check_state_table[state]));
        json_object_object_add(o, "detail", json_object_new_string(detail));
        json_object_array_add(d->checks, o);
}

/* Runs argv with stdout captured (stdin and stderr on /dev/null) in a minimal environment whose
 * $HOME is 'home' (python's caches go there); returns the exit status, or -errno. */
static int probe(char *const argv[], const char *home, char **ret_output) {
        _cleanup_close_pair_ int pipefd[2] = { -EBADF, -EBADF };
        _cleanup_free_ char *home_env = NULL, *mpl_env = NULL;
        _cleanup_(strbuf_done) StrBuf out = {};
        _cleanup_(pidref_done) PidRef child = PIDREF_NULL;
        _cleanup_close_ int null_fd = -EBADF;
        uint64_t start;
        siginfo_t si;
        int status, r;

        if (asprintf(&home_env, "HOME=%s", home) < 0 || asprintf(&mpl_env, "MPLCONFIGDIR=%s", home) < 0)
                return -ENOMEM;
        char *const env[] = { (char *) "PATH=/usr/bin:/bin",
                              (char *) "LANG=C.UTF-8",
                              (char *) "MPLBACKEND=Agg",
                              home_env,
                              mpl_env,
                              NULL };

        /* What posix_spawn() said of a missing program, which the child can only exit 127 for. */
        if (access(argv[0], X_OK) < 0)
                return -errno;
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                return -errno;
        r = pidref_spawn(argv, env, (const int[]) { null_fd, pipefd[1], null_fd }, &child);
        if (r < 0)
                return r;
        pipefd[1] = safe_close(pipefd[1]);

        start = now_usec(CLOCK_MONOTONIC);
        for (;;) {
                struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
                char buf[4096];
                ssize_t n;
                long left;

                left = PROBE_TIMEOUT_MSEC - (long) ((now_usec(CLOCK_MONOTONIC) - start) / USEC_PER_MSEC);
                if (left <= 0 || (r = poll(&p, 1, (int) left)) == 0) {
                        pidref_done_kill(&child);
                        return -ETIMEDOUT;
                }
                if (r < 0 && errno != EINTR)
                        break;
                if (r < 0)
                        continue;
                n = read(pipefd[0], buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (out.len + (size_t) n > PROBE_OUTPUT_MAX) {
                        (void) pidref_kill(&child, SIGKILL);
                        break;
                }
                strbuf_append_n(&out, buf, (size_t) n);
        }
        r = pidref_wait(&child, WEXITED, &si, NULL);
        if (r < 0)
                return r;
        status = pidref_wait_status(&si);
        r = strbuf_steal(&out, ret_output);
        if (r < 0)
                return r;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- the kernel ---- */

static void on_host_finding(const HostFinding *f, void *userdata) {
        Doctor *d = userdata;
        char name[96];

        (void) snprintf(name, sizeof(name), "%s%s", strchr(f->setting, '.') ? "sysctl:" : "", f->setting);
        switch (f->verdict) {
        case HOST_OK:
                report(d, CHECK_OK, name, "%s", f->value);
                break;
        case HOST_WEAK:
                report(d, CHECK_WARN, name, "%s, recommended %s: %s", f->value, f->recommended, f->risk);
                break;
        case HOST_UNKNOWN:
                if (f->error == -ENOENT)
                        report(d, CHECK_OK, name, "not on this kernel");
                else
                        report(d, CHECK_WARN, name, "can't be read: %s", strerror(-f->error));
                break;
        }
}

static void check_seccomp(Doctor *d) {
        static const char *const needed[] = { "kill_process", "errno", "user_notif", "allow" };
        _cleanup_free_ char *actions = NULL;
        _cleanup_close_ int fd = -EBADF;
        unsigned api;
        int r;

        if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) {
                report(d, CHECK_FAIL, "seccomp", "the kernel has no seccomp: %s", strerror(errno));
                return;
        }
        fd = open("/proc/sys/kernel/seccomp/actions_avail", O_RDONLY | O_CLOEXEC);
        r = fd < 0 ? -errno : read_full_fd(fd, 4096, &actions, NULL);
        if (r < 0) {
                report(d, CHECK_FAIL, "seccomp", "can't read the available actions: %s", strerror(-r));
                return;
        }
        actions[strcspn(actions, "\n")] = 0;
        for (size_t i = 0; i < ELEMENTSOF(needed); i++) {
                const char *p = strstr(actions, needed[i]);
                size_t l = strlen(needed[i]);

                if (!p || (p != actions && p[-1] != ' ') || (p[l] != ' ' && p[l] != 0)) {
                        report(d, CHECK_FAIL, "seccomp",
                               "the kernel lacks the action '%s' the sandbox filter uses "
                               "(available: %s)",
                               needed[i], actions);
                        return;
                }
        }
        /* libseccomp's view of the kernel: level 5 and up know user notification. */
        api = seccomp_api_get();
        if (api < 5) {
                report(d, CHECK_FAIL, "seccomp", "libseccomp API level %u: no user notification (5 needed)",
                       api);
                return;
        }
        report(d, CHECK_OK, "seccomp",
               "filters with user notification (libseccomp API level %u; actions: %s)", api, actions);
}

/* ---- the runtime ---- */

static const char *const python_core_modules[] = { "numpy", "pandas", "matplotlib" };
static const char *const python_extra_modules[] = {
        "scipy", "sklearn", "statsmodels", "sympy", "networkx", "seaborn", "plotly", "PIL", "openpyxl",
        "xlsxwriter", "xlrd", "pypdf", "docx", "reportlab", "tabulate", "requests", "lxml", "bs4",
        "markdown", "jinja2", "yaml",
};

/* Imports each module in the sandbox's interpreter (isolated, as the sandbox runs it) and prints
 * the ones that fail. */
#define PYTHON_PROBE \
        "import importlib, sys\n" \
        "missing = []\n" \
        "for m in sys.argv[1:]:\n" \
        "    try:\n" \
        "        importlib.import_module(m)\n" \
        "    except Exception:\n" \
        "        missing.append(m)\n" \
        "print(sys.version.split()[0], *missing)\n"

static bool word_listed(const char *words, const char *word) {
        size_t l = strlen(word);
        for (const char *p = words; (p = strstr(p, word)); p += l)
                if ((p == words || p[-1] == ' ') && (p[l] == ' ' || p[l] == '\n' || p[l] == 0))
                        return true;
        return false;
}

static void check_python(Doctor *d) {
        char *argv[4 + ELEMENTSOF(python_core_modules) + ELEMENTSOF(python_extra_modules) + 1];
        _cleanup_free_ char *out = NULL;
        char missing_core[256] = "", missing_extra[512] = "";
        size_t n = 0;
        int r;

        if (access(SANDBOX_PYTHON, X_OK) < 0) {
                report(d, CHECK_FAIL, "python", "%s is missing: install python3", SANDBOX_PYTHON);
                return;
        }
        argv[n++] = (char *) SANDBOX_PYTHON;
        argv[n++] = (char *) "-I";
        argv[n++] = (char *) "-c";
        argv[n++] = (char *) PYTHON_PROBE;
        for (size_t i = 0; i < ELEMENTSOF(python_core_modules); i++)
                argv[n++] = (char *) python_core_modules[i];
        for (size_t i = 0; i < ELEMENTSOF(python_extra_modules); i++)
                argv[n++] = (char *) python_extra_modules[i];
        argv[n] = NULL;

        r = probe(argv, d->home, &out);
        if (r != 0) {
                report(d, CHECK_FAIL, "python", "%s -I failed: %s", SANDBOX_PYTHON,
                       r < 0 ? strerror(-r) : "non-zero exit status");
                return;
        }
        out[strcspn(out, "\n")] = 0;
        for (size_t i = 0; i < ELEMENTSOF(python_core_modules); i++)
                if (word_listed(strchrnul(out, ' '), python_core_modules[i]))
                        (void) snprintf(missing_core + strlen(missing_core),
                                        sizeof(missing_core) - strlen(missing_core), " %s",
                                        python_core_modules[i]);
        for (size_t i = 0; i < ELEMENTSOF(python_extra_modules); i++)
                if (word_listed(strchrnul(out, ' '), python_extra_modules[i]))
                        (void) snprintf(missing_extra + strlen(missing_extra),
                                        sizeof(missing_extra) - strlen(missing_extra), " %s",
                                        python_extra_modules[i]);

        if (missing_core[0])
                report(d, CHECK_FAIL, "python", "Python %.*s lacks%s%s (install tools/runtime-packages)",
                       (int) strcspn(out, " "), out, missing_core, missing_extra);
        else if (missing_extra[0])
                report(d, CHECK_WARN, "python", "Python %.*s lacks%s (install tools/runtime-packages)",
                       (int) strcspn(out, " "), out, missing_extra);
        else
                report(d, CHECK_OK, "python", "Python %s imports the data stack (%zu modules)", out,
                       ELEMENTSOF(python_core_modules) + ELEMENTSOF(python_extra_modules));
}

static void check_node(Doctor *d) {
        char *argv[] = { (char *) SANDBOX_NODE, (char *) "--version", NULL };
        _cleanup_free_ char *out = NULL;
        int r;

        if (access(SANDBOX_NODE, X_OK) < 0) {
                report(d, CHECK_WARN, "nodejs", "%s is missing: dify runs in nodejs fail", SANDBOX_NODE);
                return;
        }
        r = probe(argv, d->home, &out);
        if (r != 0)
                report(d, CHECK_WARN, "nodejs", "%s --version failed", SANDBOX_NODE);
        else
                report(d, CHECK_OK, "nodejs", "%s %.*s", SANDBOX_NODE, (int) strcspn(out, "\n"), out);
}

static void check_slirp(Doctor *d, const Config *cfg, bool config_ok) {
        static const char *const dirs[] = { "/usr/bin", "/bin", "/usr/local/bin" };

        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                char path[64];
                (void) snprintf(path, sizeof(path), "%s/slirp4netns", dirs[i]);
                if (access(path, X_OK) >= 0) {
                        report(d, CHECK_OK, "slirp4netns", "%s", path);
                        return;
                }
        }
        report(d, config_ok && cfg->dify_enable_network ? CHECK_FAIL : CHECK_WARN, "slirp4netns",
               "not installed: dify runs with enable_network fail%s",
               config_ok && cfg->dify_enable_network ? " (ENABLE_NETWORK=1)" : "");
}

/* slirp4netns runs as each dify run's own uid (docs/security.md), so it can open the tun device
 * only when everybody may: mode 0666, as udev makes it (systemd's 50-udev-default.rules and its
 * static-nodes-permissions.conf). Opening it gives nothing without CAP_NET_ADMIN over a network
 * namespace. */
static void check_tun(Doctor *d, const Config *cfg, bool config_ok) {
        bool needed = config_ok && cfg->dify_enable_network;
        CheckState bad = needed ? CHECK_FAIL : CHECK_WARN;
        const char *consequence = needed ? "dify runs with enable_network fail (ENABLE_NETWORK=1)"
                                         : "dify runs with enable_network would fail";
        struct stat st;

        if (stat(TUN_DEVICE, &st) < 0)
                report(d, bad, "tun", "%s: %s: %s (modprobe tun)", TUN_DEVICE, strerror(errno), consequence);
        else if (!S_ISCHR(st.st_mode))
                report(d, bad, "tun", "%s is not a character device: %s", TUN_DEVICE, consequence);
        else if ((st.st_mode & 0666) != 0666)
                report(d, bad, "tun",
                       "%s has mode %04o: slirp4netns runs as each run's uid and can't open it; %s. "
                       "Make it 0666 (chmod 0666 %s; udev's default rule does at every boot)",
                       TUN_DEVICE, (unsigned) (st.st_mode & 07777), consequence, TUN_DEVICE);
        else
                report(d, CHECK_OK, "tun", "%s: mode %04o", TUN_DEVICE, (unsigned) (st.st_mode & 07777));
}

static void check_fonts(Doctor *d) {
        char *argv[] = { (char *) "/usr/bin/fc-list", NULL };
        _cleanup_free_ char *out = NULL;
        glob_t g = {};
        size_t lines = 0;
        int r;

        r = glob(FONT_CACHE_DIR "/fontlist-*.json", 0, NULL, &g);
        if (r == 0)
                report(d, CHECK_OK, "font-cache", "%s", g.gl_pathv[0]);
        else
                report(d, CHECK_WARN, "font-cache",
                       "no matplotlib font list in %s: every session scans the fonts "
                       "(run tools/build-font-cache)",
                       FONT_CACHE_DIR);
        globfree(&g);

        r = access(argv[0], X_OK) < 0 ? -errno : probe(argv, d->home, &out);
        for (const char *p = out; p && *p; p = strchrnul(p, '\n'), p += *p == '\n')
                lines++;
        if (r != 0 || lines == 0)
                report(d, CHECK_FAIL, "fonts",
                       "fc-list finds no fonts: charts have no text (install the fonts "
                       "of tools/runtime-packages)");
        else
                report(d, CHECK_OK, "fonts", "fc-list finds %zu fonts", lines);
}

/* ---- scopebox's own files ---- */

/* A key file: a non-empty regular file of root's that nobody else may read. Reports the verdict. */
static bool check_key_file(Doctor *d, const char *name, const char *path, const struct stat *st) {
        if (!S_ISREG(st->st_mode))
                report(d, CHECK_FAIL, name, "%s is not a regular file", path);
        else if (st->st_size == 0)
                report(d, CHECK_FAIL, name, "%s is empty", path);
        else if (st->st_uid != 0)
                report(d, CHECK_FAIL, name, "%s is owned by uid %u, not root", path, (unsigned) st->st_uid);
        else if (st->st_mode & 0077)
                report(d, CHECK_FAIL, name, "%s has mode %04o: others may read the key (chmod 0600)", path,
                       (unsigned) (st->st_mode & 07777));
        else
                return true;
        return false;
}

static void check_api_key(Doctor *d, const Config *cfg, bool config_ok) {
        struct stat st;

        if (lstat(API_KEY_FILE, &st) < 0) {
                if (errno == ENOENT && config_ok && (cfg->allow_no_auth || !isempty(cfg->api_key)))
                        report(d, CHECK_WARN, "api-key", "%s is missing; the key comes from %s",
                               API_KEY_FILE,
                               cfg->allow_no_auth ? "nowhere (SANDBOX_ALLOW_NO_AUTH=1)" : "SANDBOX_API_KEY");
                else
                        report(d, CHECK_FAIL, "api-key", "%s: %s", API_KEY_FILE, strerror(errno));
                return;
        }
        if (check_key_file(d, "api-key", API_KEY_FILE, &st))
                report(d, CHECK_OK, "api-key", "%s: mode %04o, owner root", API_KEY_FILE,
                       (unsigned) (st.st_mode & 07777));
}

/* A key file's content without the trailing newline editors add; NULL if unreadable. */
static char *read_key(const char *path) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        char *buf = NULL;
        size_t size = 0;

        if (fd < 0 || read_full_fd(fd, 4096, &buf, &size) < 0)
                return NULL;
        if (size > 0 && buf[size - 1] == '\n')
                buf[size - 1] = 0;
        return buf;
}

/* The optional scrape key of GET /metrics (the gateway's credential scopebox-metrics-key). */
static void check_metrics_key(Doctor *d) {
        _cleanup_erase_free_ char *key = NULL, *api_key = NULL;
        struct stat st;

        if (lstat(METRICS_KEY_FILE, &st) < 0) {
                if (errno == ENOENT)
                        report(d, CHECK_OK, "metrics-key", "not configured: GET /metrics takes the API key");
                else
                        report(d, CHECK_FAIL, "metrics-key", "%s: %s", METRICS_KEY_FILE, strerror(errno));
                return;
        }
        if (!check_key_file(d, "metrics-key", METRICS_KEY_FILE, &st))
                return;
        key = read_key(METRICS_KEY_FILE);
        api_key = read_key(API_KEY_FILE);
        if (key && api_key && streq(key, api_key))
                report(d, CHECK_FAIL, "metrics-key", "%s equals the API key; the gateway refuses to start",
                       METRICS_KEY_FILE);
        else
                report(d, CHECK_OK, "metrics-key", "%s: mode %04o, owner root; opens GET /metrics only",
                       METRICS_KEY_FILE, (unsigned) (st.st_mode & 07777));
}

static void check_files(Doctor *d, const char *name, const char *dir, const char *const files[], size_t n) {
        char missing[512] = "";

        for (size_t i = 0; i < n; i++) {
                char path[512];
                (void) snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
                if (access(path, F_OK) < 0)
                        (void) snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s",
                                        files[i]);
        }
        if (missing[0])
                report(d, CHECK_FAIL, name, "missing in %s:%s", dir, missing);
        else
                report(d, CHECK_OK, name, "%zu files in %s", n, dir);
}

static void check_installation(Doctor *d) {
        static const char *const units[] = {
                "scopebox-gateway.socket", "scopebox-gateway-agent.socket", "scopebox-gateway-e2b.socket",
                "scopebox-gateway.service",
                "scopebox-session-manager.service", "scopebox-storage-agent.service", "scopebox.slice",
        };
        static const char *const policies[] = {
                "io.scopebox.Gateway1.conf",
                "io.scopebox.SessionManager1.conf",
                "io.scopebox.StorageAgent1.conf",
        };
        static const char *const activations[] = {
                "io.scopebox.SessionManager1.service", "io.scopebox.StorageAgent1.service",
        };
        static const char *const users[] = { "scopebox-gateway", "scopebox-storage" };
        char missing[128] = "";

        check_files(d, "units", CTL_SYSTEMUNITDIR, units, ELEMENTSOF(units));
        check_files(d, "bus-policy", CTL_DBUS_POLICY_DIR, policies, ELEMENTSOF(policies));
        check_files(d, "bus-activation", CTL_DBUS_SERVICES_DIR, activations, ELEMENTSOF(activations));

        if (access(RUNNER_PATH, X_OK) < 0)
                report(d, CHECK_FAIL, "runner", "%s: %s", RUNNER_PATH, strerror(errno));
        else
                report(d, CHECK_OK, "runner", "%s", RUNNER_PATH);

        for (size_t i = 0; i < ELEMENTSOF(users); i++)
                if (!getpwnam(users[i]))
                        (void) snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s",
                                        users[i]);
        if (missing[0])
                report(d, CHECK_FAIL, "users", "missing:%s (systemd-sysusers)", missing);
        else
                report(d, CHECK_OK, "users", "scopebox-gateway, scopebox-storage");
}

int verb_doctor(Ctl *c) {
        _cleanup_(table_freep) Table *table = NULL;
        _cleanup_json_ json_object *checks = NULL;
        _cleanup_free_ char *config_error = NULL;
        _cleanup_(config_done) Config cfg = {};
        bool config_ok;
        Doctor d = {};
        int r;

        checks = json_object_new_array();
        r = table_new(&table, "STATE", "CHECK", "DETAIL", NULL);
        if (!checks || r < 0)
                return ctl_error(ENOMEM, "Out of memory.");
        d = (Doctor) { .table = table, .checks = checks, .home = "/tmp/scopeboxctl-doctor-XXXXXX" };
        if (!mkdtemp(d.home))
                return ctl_error(errno, "Failed to create a temporary directory: %m");

        config_ok = ctl_load_config(&cfg, &config_error) >= 0;
        if (config_ok)
                report(&d, CHECK_OK, "config", "%s parses", SCOPEBOX_CONFIG_FILE);
        else
                report(&d, CHECK_FAIL, "config", "%s", strempty(config_error));

        (void) host_check_run(on_host_finding, &d);
        check_seccomp(&d);
        check_python(&d);
        check_node(&d);
        check_slirp(&d, &cfg, config_ok);
        check_tun(&d, &cfg, config_ok);
        check_fonts(&d);
        check_api_key(&d, &cfg, config_ok);
        check_metrics_key(&d);
        check_installation(&d);
        (void) rm_rf(d.home);

        if (c->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object *counts = json_object_new_object();

                json_object_object_add(o, "ok", json_object_new_boolean(d.counts[CHECK_FAIL] == 0));
                for (size_t i = 0; i < _CHECK_STATE_MAX; i++)
                        json_object_object_add(counts, check_state_table[i],
                                               json_object_new_uint64(d.counts[i]));
                json_object_object_add(o, "counts", counts);
                json_object_object_add(o, "checks", TAKE_PTR(checks));
                json_print(o);
        } else {
                table_print(table, stdout, false, false);
                if (c->legend)
                        printf("\n%u ok, %u warnings, %u failed.\n", d.counts[CHECK_OK],
                               d.counts[CHECK_WARN], d.counts[CHECK_FAIL]);
        }
        return d.counts[CHECK_FAIL] > 0 ? EXIT_FAILURE : 0;
}
