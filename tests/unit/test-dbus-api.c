/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* docs/dbus-api.md is the contract the gateway codes against: every method and property of the
 * session manager's vtable must appear there with the same signature and argument names, and its
 * error table must be bus-contract.c's, name for name and errno for errno. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>

#include "bus-contract.h"
#include "bus-introspect.h"
#include "io-util.h"
#include "manager.h"
#include "tests.h"

/* Length of the first complete type in a D-Bus signature. */
static size_t type_len(const char *s) {
        if (*s == 'a')
                return 1 + type_len(s + 1);
        if (*s == '(' || *s == '{') {
                size_t n = 1;
                int depth = 1;
                while (depth > 0 && s[n]) {
                        if (s[n] == '(' || s[n] == '{')
                                depth++;
                        else if (s[n] == ')' || s[n] == '}')
                                depth--;
                        n++;
                }
                return n;
        }
        return 1;
}

/* "s session_id, h code" from a signature and a NUL-separated name list; advances *names. */
static void format_args(const char *sig, const char **names, char *out, size_t size) {
        size_t o = 0;
        out[0] = 0;
        while (sig && *sig) {
                size_t l = type_len(sig);
                o += (size_t) snprintf(out + o, size - o, "%s%.*s %s", o ? ", " : "", (int) l, sig, *names);
                *names += strlen(*names) + 1;
                sig += l;
        }
}

/* What the gateway and scopeboxctl call: each must stay in the vtable (and so in the docs). */
static const char *const required_methods[] = {
        "CreateSession", "ReleaseSession", "Exec", "Run", "WriteFile", "ReadFile", "ListFiles",
        "ResetInputs", "GetHealth", "GetMetrics", "ListSessions", "ListRunSandboxes", "GetSession",
        "SetDraining", "CancelExec", "ResetKernel",
};

static bool vtable_has_method(const char *name) {
        for (const sd_bus_vtable *v = manager_get_vtable(); v->type != _SD_BUS_VTABLE_END; v++)
                if (v->type == _SD_BUS_VTABLE_METHOD && strcmp(v->x.method.member, name) == 0)
                        return true;
        return false;
}

/* Each error of the table is a row "| `name` | `ERRNO` |" of the page; the daemons' -errno becomes
 * that name (but for the two set by name only), and the page has no other error row. */
static void test_errors(const char *doc) {
        unsigned rows = 0, n = 0;
        bool by_name_only = false;

        for (const sd_bus_error_map *m = scopebox_bus_errors; m->name; m++, n++) {
                char line[256];

                snprintf(line, sizeof(line), "| `%s` | `%s` |", m->name, strerrorname_np(m->code));
                if (!strstr(doc, line)) {
                        fprintf(stderr, "docs/dbus-api.md lacks the error row: %s\n", line);
                        abort();
                }
                if (by_name_only)
                        ASSERT_TRUE(!streq(bus_error_name_from_errno(-m->code), m->name));
                else
                        ASSERT_STREQ(bus_error_name_from_errno(-m->code), m->name);
                if (streq(m->name, BUS_ERROR_BACKEND_FAILED))
                        by_name_only = true;
                printf("ok - error %s\n", m->name);
        }
        for (const char *p = doc; (p = strstr(p, "\n| `io.scopebox.Error.")); p++)
                rows++;
        ASSERT_EQ(rows, n);
        ASSERT_STREQ(bus_error_name_from_errno(-EINVAL), SD_BUS_ERROR_INVALID_ARGS);
        ASSERT_STREQ(bus_error_name_from_errno(-ESHUTDOWN), BUS_ERROR_BACKEND_FAILED);
        ASSERT_STREQ(bus_error_name_from_errno(-EIO), BUS_ERROR_BACKEND_FAILED);
        ASSERT_STREQ(bus_error_name_from_errno(-EBADMSG), BUS_ERROR_BACKEND_FAILED);
        ASSERT_TRUE(bus_exit_reason_is_valid("cancelled") && !bus_exit_reason_is_valid("Cancelled") &&
                    !bus_exit_reason_is_valid(NULL));
        ASSERT_TRUE(bus_kernel_state_is_valid("ended") && !bus_kernel_state_is_valid("end") &&
                    !bus_kernel_state_is_valid(NULL));
}

/* The XML --bus-introspect prints and the build installs: our interface alone, every method and
 * property of the vtable in it. */
static void test_introspection(void) {
        const BusInterface iface = { SESSION_MANAGER_OBJECT_PATH, SESSION_MANAGER_INTERFACE,
                                     manager_get_vtable() };
        const BusInterface none[] = { iface, {} };
        _cleanup_free_ char *xml = NULL;

        ASSERT_EQ(bus_introspect_interface(&iface, &xml), 0);
        ASSERT_TRUE(strstr(xml, "<interface name=\"" SESSION_MANAGER_INTERFACE "\">"));
        ASSERT_TRUE(!strstr(xml, "org.freedesktop.DBus.Properties") && strstr(xml, "</node>\n"));
        for (const sd_bus_vtable *v = manager_get_vtable(); v->type != _SD_BUS_VTABLE_END; v++) {
                char want[256];

                if (v->type == _SD_BUS_VTABLE_METHOD)
                        snprintf(want, sizeof(want), "<method name=\"%s\">", v->x.method.member);
                else if (v->type == _SD_BUS_VTABLE_PROPERTY || v->type == _SD_BUS_VTABLE_WRITABLE_PROPERTY)
                        snprintf(want, sizeof(want), "<property name=\"%s\" type=\"%s\"",
                                 v->x.property.member, v->x.property.signature);
                else
                        continue;
                ASSERT_TRUE(strstr(xml, want));
        }
        ASSERT_EQ(bus_introspect_argument("--bus-introspect=io.scopebox.Nope1", none), -ENOENT);
        ASSERT_EQ(bus_introspect_argument("--version", none), 0);
        printf("ok - introspection\n");
}

int main(int argc, char *argv[]) {
        _cleanup_free_ char *doc = NULL;
        unsigned methods = 0, properties = 0;
        int fd;

        ASSERT_TRUE(argc == 2);
        fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(read_full_fd(fd, 1 << 20, &doc, NULL), 0);
        close(fd);

        for (const sd_bus_vtable *v = manager_get_vtable(); v->type != _SD_BUS_VTABLE_END; v++) {
                char in[512], out[512], line[1200];
                const char *names;

                if (v->type == _SD_BUS_VTABLE_METHOD) {
                        names = v->x.method.names;
                        ASSERT_TRUE(names); /* every method declares argument names */
                        format_args(v->x.method.signature, &names, in, sizeof(in));
                        format_args(v->x.method.result, &names, out, sizeof(out));
                        if (*out)
                                snprintf(line, sizeof(line), "`%s(%s) → (%s)`", v->x.method.member, in, out);
                        else
                                snprintf(line, sizeof(line), "`%s(%s) → ()`", v->x.method.member, in);
                        if (!strstr(doc, line)) {
                                fprintf(stderr, "docs/dbus-api.md lacks: %s\n", line);
                                abort();
                        }
                        printf("ok - method %s\n", v->x.method.member);
                        methods++;
                } else if (v->type == _SD_BUS_VTABLE_PROPERTY ||
                           v->type == _SD_BUS_VTABLE_WRITABLE_PROPERTY) {
                        snprintf(line, sizeof(line), "`%s` (`%s`", v->x.property.member,
                                 v->x.property.signature);
                        if (!strstr(doc, line)) {
                                fprintf(stderr, "docs/dbus-api.md lacks: %s\n", line);
                                abort();
                        }
                        printf("ok - property %s\n", v->x.property.member);
                        properties++;
                }
        }
        for (size_t i = 0; i < sizeof(required_methods) / sizeof(required_methods[0]); i++) {
                if (!vtable_has_method(required_methods[i])) {
                        fprintf(stderr, "the vtable lacks %s\n", required_methods[i]);
                        abort();
                }
                printf("ok - required method %s\n", required_methods[i]);
        }
        test_errors(doc);
        test_introspection();
        ASSERT_TRUE(methods >= 4);
        ASSERT_TRUE(properties >= 3);
        return 0;
}
