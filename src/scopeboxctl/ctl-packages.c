/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* scopeboxctl packages install: add Python packages to every sandbox, from local wheels. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl.h"
#include "pidref.h"
#include "strbuf.h"

/* The runner binds this directory read-only into every Python sandbox (docs/runtime.md). */
#define SITE_PACKAGES_DIR SCOPEBOX_STATE_DIR "/site-packages"
#define SITE_PACKAGES_STAGING SCOPEBOX_STATE_DIR "/site-packages.new.XXXXXX"
#define DEPENDENCIES_TOOL LIBEXECDIR "/python-dependencies"
#define DEPENDENCIES_FILE SCOPEBOX_DATA_DIR "/python-dependencies.json"
#define CTL_PYTHON "/usr/bin/python3"

/* Runs argv[0] (an absolute path) with a minimal environment, our stdout and stderr; its exit
 * status, or 128 + the signal. */
static int spawn_wait(char *const *argv) {
        char *const env[] = { (char *) "PATH=/usr/bin:/bin", (char *) "LANG=C.UTF-8",
                              (char *) "HOME=/nonexistent", NULL };
        _cleanup_(pidref_done) PidRef child = PIDREF_NULL;
        siginfo_t si;
        int status, r;

        r = pidref_spawn(argv, env, (const int[]) { -EBADF, -EBADF, -EBADF }, &child);
        if (r < 0)
                return r;
        r = pidref_wait(&child, WEXITED, &si, NULL);
        if (r < 0)
                return r;
        status = pidref_wait_status(&si);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void remove_tree(const char *path) {
        (void) spawn_wait((char *const[]) { (char *) "/bin/rm", (char *) "-rf", (char *) "--one-file-system",
                                            (char *) "--", (char *) path, NULL });
}

static int argv_add(char ***argv, size_t *n, const char *s) {
        char **a = reallocarray(*argv, *n + 2, sizeof(char *));

        if (!a)
                return -ENOMEM;
        *argv = a;
        a[*n] = strdup(s);
        if (!a[*n])
                return -ENOMEM;
        a[++*n] = NULL;
        return 0;
}

static void argv_free(char ***argv) {
        for (char **i = *argv; i && *i; i++)
                free(*i);
        free(*argv);
}

/* pip's arguments for what the operator named: a wheel file as it is (its directory also serves
 * to find its dependencies), a directory for all the wheels in it. */
static int add_sources(Ctl *c, char ***argv, size_t *n) {
        int r;

        for (int i = 1; i < c->n_args; i++) {
                const char *p = c->args[i];
                _cleanup_free_ char *dir = NULL;
                struct stat st;

                if (stat(p, &st) < 0)
                        return ctl_error(-errno, "Cannot use '%s': %m", p);
                if (S_ISDIR(st.st_mode)) {
                        _cleanup_free_ char *pattern = NULL;
                        glob_t g = {};

                        if (asprintf(&pattern, "%s/*.whl", p) < 0)
                                return -ENOMEM;
                        if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
                                globfree(&g);
                                return ctl_error(-ENOENT, "No wheels (*.whl) in '%s'.", p);
                        }
                        r = argv_add(argv, n, "--find-links");
                        if (r >= 0)
                                r = argv_add(argv, n, p);
                        for (size_t k = 0; r >= 0 && k < g.gl_pathc; k++)
                                r = argv_add(argv, n, g.gl_pathv[k]);
                        globfree(&g);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        return ctl_error(-EINVAL, "'%s' is neither a wheel nor a directory of wheels.", p);
                dir = strdup(p);
                if (!dir)
                        return -ENOMEM;
                if (!strrchr(dir, '/'))
                        strcpy(dir, ".");
                else if (strrchr(dir, '/') == dir)
                        dir[1] = 0;
                else
                        *strrchr(dir, '/') = 0;
                if ((r = argv_add(argv, n, "--find-links")) < 0 || (r = argv_add(argv, n, dir)) < 0 ||
                    (r = argv_add(argv, n, p)) < 0)
                        return r;
        }
        return 0;
}

/* Installs into a copy of the site directory and swaps it in whole: a sandbox starting meanwhile
 * binds either the old directory or the new one, never a half-written one. */
static int packages_install(Ctl *c) {
        _cleanup_(argv_free) char **argv = NULL, **sources = NULL;
        char staging[] = SITE_PACKAGES_STAGING;
        struct stat st;
        size_t n = 0, n_sources = 0;
        bool existed;
        int r;

        if (geteuid() != 0)
                return ctl_error(-EPERM, "packages install must run as root: the site directory is root's.");
        r = add_sources(c, &sources, &n_sources);
        if (r < 0)
                return r;

        (void) umask(022);
        if (mkdir(SCOPEBOX_STATE_DIR, 0700) < 0 && errno != EEXIST)
                return ctl_error(-errno, "Failed to create '%s': %m", SCOPEBOX_STATE_DIR);
        if (!mkdtemp(staging))
                return ctl_error(-errno, "Failed to create a directory in '%s': %m", SCOPEBOX_STATE_DIR);
        if (chmod(staging, 0755) < 0) {
                r = ctl_error(-errno, "Failed to make '%s' readable: %m", staging);
                goto fail;
        }

        existed = lstat(SITE_PACKAGES_DIR, &st) >= 0;
        if (existed && !S_ISDIR(st.st_mode)) {
                r = ctl_error(-ENOTDIR, "'%s' is not a directory.", SITE_PACKAGES_DIR);
                goto fail;
        }
        if (existed) {
                r = spawn_wait((char *const[]) { (char *) "/bin/cp", (char *) "-a", (char *) "--",
                                                 (char *) SITE_PACKAGES_DIR "/.", staging, NULL });
                if (r != 0) {
                        r = ctl_error(r < 0 ? r : -EIO, "Failed to copy '%s'.", SITE_PACKAGES_DIR);
                        goto fail;
                }
        }

        /* No index: only what the operator provides. --upgrade replaces earlier versions. */
        static const char *const pip[] = {
                CTL_PYTHON, "-I", "-m", "pip", "install", "--no-index", "--no-cache-dir",
                "--disable-pip-version-check", "--no-warn-script-location", "--upgrade", "--target",
        };
        for (size_t i = 0; i < ELEMENTSOF(pip); i++)
                if ((r = argv_add(&argv, &n, pip[i])) < 0)
                        goto fail;
        if ((r = argv_add(&argv, &n, staging)) < 0)
                goto fail;
        for (size_t i = 0; i < n_sources; i++)
                if ((r = argv_add(&argv, &n, sources[i])) < 0)
                        goto fail;
        r = spawn_wait(argv);
        if (r < 0) {
                r = ctl_error(r, "Failed to run pip: %m");
                goto fail;
        }
        if (r > 0) {
                r = ctl_error(-EIO, "pip failed (exit status %d), nothing changed.", r);
                goto fail;
        }

        if (existed ? renameat2(AT_FDCWD, staging, AT_FDCWD, SITE_PACKAGES_DIR, RENAME_EXCHANGE) < 0 :
                      rename(staging, SITE_PACKAGES_DIR) < 0) {
                r = ctl_error(-errno, "Failed to put '%s' in place: %m", SITE_PACKAGES_DIR);
                goto fail;
        }
        if (existed)
                remove_tree(staging);   /* the old one, now */

        r = spawn_wait((char *const[]) { (char *) DEPENDENCIES_TOOL, (char *) DEPENDENCIES_FILE, NULL });
        if (r != 0)
                fprintf(stderr, "scopeboxctl: warning: could not update %s; the dify API lists the old "
                        "dependencies.\n", DEPENDENCIES_FILE);
        printf("Installed into %s; new sandboxes see it.\n", SITE_PACKAGES_DIR);
        return 0;

fail:
        remove_tree(staging);
        return r;
}

int verb_packages(Ctl *c) {
        if (streq(c->args[0], "install")) {
                if (c->n_args < 2)
                        return ctl_error(-EINVAL,
                                         "packages install needs a wheel or a directory of wheels.");
                return packages_install(c);
        }
        return ctl_error(-EINVAL, "Unknown packages command '%s' (known: install).", c->args[0]);
}
