/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The per-exec sandbox: PID 1 of fresh namespaces builds the root, then runs the interpreter.
 *
 * The order follows ../shared/SECURITY.md §1.2: private mount propagation, a tmpfs root with a
 * read-only /usr and a curated /etc, the session's /workspace, /tmp and /home/sandbox, a minimal
 * /dev, a fresh /proc for the new PID namespace, pivot_root, a read-only root; then PID 1 forks
 * the payload, which starts a new session, sets rlimits, drops to the sandbox uid with no
 * capabilities, sets no_new_privs, closes every other fd, loads seccomp last and executes the
 * interpreter. PID 1 reaps everything and reports the payload's status; when it exits the
 * kernel kills whatever the exec left behind in the PID namespace. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec-command.h"
#include "fs-util.h"
#include "io-util.h"
#include "parse-util.h"
#include "sandbox.h"
#include "signal-util.h"
#include "template-protocol.h"
#include "string-util.h"
#include "time-util.h"

#define ROOT_TMPFS_OPTIONS "mode=0755,size=72m,nr_inodes=4096"
#define DEV_TMPFS_OPTIONS "mode=0755,size=64k,nr_inodes=64"
#define SHM_TMPFS_OPTIONS "mode=1777,size=64m,nr_inodes=4096"

static const char etc_passwd[] =
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        "sandbox:x:" STRINGIFY(SANDBOX_UID) ":" STRINGIFY(SANDBOX_GID) ":sandbox:/home/sandbox:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char etc_group[] =
        "root:x:0:\n"
        "sandbox:x:" STRINGIFY(SANDBOX_GID) ":\n"
        "nogroup:x:65534:\n";
static const char etc_hosts[] =
        "127.0.0.1\tlocalhost " SANDBOX_HOSTNAME "\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n";
static const char etc_nsswitch_network[] =
        "passwd: files\n"
        "group: files\n"
        "shadow: files\n"
        "hosts: files dns\n"
        "networks: files\n"
        "protocols: files\n"
        "services: files\n";
static const char etc_nsswitch[] =
        "passwd: files\n"
        "group: files\n"
        "shadow: files\n"
        "hosts: files\n"
        "networks: files\n"
        "protocols: files\n"
        "services: files\n";

/* Files and directories bound read-only into the sandbox's /etc when present: the host's (the
 * dynamic linker's cache, fonts, and "alternatives", through which Debian links BLAS/LAPACK),
 * and our own matplotlibrc (CJK fonts first) rather than the host's. With a network, also the
 * certificates to check TLS peers with. */
static const struct {
        const char *source;
        const char *name;
        bool network_only;
} etc_binds[] = {
        { "/etc/ld.so.cache", "ld.so.cache" },
        { "/etc/alternatives", "alternatives" },
        { "/etc/fonts", "fonts" },
        { "/etc/mime.types", "mime.types" },
        { "/etc/protocols", "protocols" },
        { "/etc/services", "services" },
        { SCOPEBOX_DATA_DIR "/matplotlibrc", "matplotlibrc" },
        { "/etc/ssl", "ssl", true },
        { "/etc/ca-certificates", "ca-certificates", true },
};

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom" };

/* Entries of /proc hidden behind /dev/null (files) or an empty read-only tmpfs (directories). */
static const char *const proc_masked_files[] = {
        "kcore", "keys", "timer_list", "sched_debug", "latency_stats", "interrupts", "kallsyms",
        "kpagecount", "kpageflags", "kpagecgroup", "sysrq-trigger",
};
static const char *const proc_masked_dirs[] = { "acpi", "asound", "scsi", "driver" };
static const char *const proc_readonly[] = { "bus", "fs", "irq", "sys" };

typedef struct SetupError {
        const char *step;
        int error;
} SetupError;

#define FAIL(step_, r_) \
        ({ *err = (SetupError) { step_, abs(r_) }; -abs(r_); })

/* The status pipe carries how the payload started (an int32 SandboxStart, as soon as that is
 * decided: a killed sandbox has told it) and then the SandboxStatus. */
static bool start_reported = false;

void sandbox_report_start(int status_fd, SandboxStart start) {
        int32_t v = (int32_t) start;

        if (!start_reported)
                (void) write_all(status_fd, &v, sizeof(v));
        start_reported = true;
}

_noreturn_ void sandbox_report_and_exit(int status_fd, SandboxStatusKind kind, int value, const char *step,
                                       int code) {
        SandboxStatus s = { .kind = kind, .value = value };

        sandbox_report_start(status_fd, SANDBOX_START_COLD);
        seccomp_report_init(&s.seccomp);
        if (step)
                snprintf(s.step, sizeof(s.step), "%s", step);
        (void) write_all(status_fd, &s, sizeof(s));
        _exit(code);
}

/* Remounts every mount at or below 'dst' (read off /proc/self/mountinfo) with 'flags': the
 * fallback where mount_setattr() is missing. Mount points are octal-escaped there. */
static int remount_tree(const char *dst, unsigned long flags) {
        _cleanup_fclose_ FILE *f = NULL;
        size_t l = strlen(dst);
        char line[8192];
        int r = 0;

        f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char point[4096], *c;
                size_t n = 0;

                /* "id parent major:minor root mountpoint options ..." */
                c = line;
                for (unsigned field = 0; field < 4 && c; field++)
                        c = strchr(c, ' ') ? strchr(c, ' ') + 1 : NULL;
                if (!c)
                        continue;
                for (; *c && *c != ' ' && n < sizeof(point) - 1; c++) {
                        if (c[0] == '\\' && c[1] >= '0' && c[1] <= '3' && c[2] >= '0' && c[2] <= '7' &&
                            c[3] >= '0' && c[3] <= '7') {
                                point[n++] = (char) ((c[1] - '0') * 64 + (c[2] - '0') * 8 + (c[3] - '0'));
                                c += 3;
                        } else
                                point[n++] = *c;
                }
                point[n] = 0;
                if (!strneq(point, dst, l) || (point[l] != 0 && point[l] != '/'))
                        continue;
                if (mount(NULL, point, NULL, MS_BIND | MS_REMOUNT | flags, NULL) < 0 && r == 0)
                        r = -errno;
        }
        return r;
}

/* A recursive bind whose flags hold for every submount too: a mount below the host's /usr or
 * /etc keeps neither rw, suid nor dev inside the sandbox. */
static int bind_mount(const char *src, const char *dst, unsigned long extra) {
        struct mount_attr attr = {
                .attr_set = (extra & MS_RDONLY ? MOUNT_ATTR_RDONLY : 0) |
                            (extra & MS_NOSUID ? MOUNT_ATTR_NOSUID : 0) |
                            (extra & MS_NODEV ? MOUNT_ATTR_NODEV : 0) |
                            (extra & MS_NOEXEC ? MOUNT_ATTR_NOEXEC : 0),
        };

        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                return -errno;
        /* The top mount gets exactly these flags (a remount sets them all and clears the rest, as
         * before); mount_setattr() then adds them to every mount below it. */
        if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | extra, NULL) < 0)
                return -errno;
        if (syscall(SYS_mount_setattr, AT_FDCWD, dst, AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr,
                    sizeof(attr)) >= 0)
                return 0;
        if (errno != ENOSYS && errno != EPERM)
                return -errno;
        return remount_tree(dst, extra);
}

static int touch_at(const char *path) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        safe_close(fd);
        return 0;
}

static int write_etc_file(int etc_fd, const char *name, const char *content) {
        return write_file_at(etc_fd, name, content, strlen(content), 0644);
}

static int setup_etc(const SandboxExec *e, const char *root, SetupError *err) {
        bool network = e->network_ready_fd >= 0;
        _cleanup_close_ int etc_fd = -EBADF;
        const char *etc = strjoina(root, "/etc");
        int r;

        if (mkdir(etc, 0755) < 0)
                return FAIL("mkdir /etc", errno);
        etc_fd = open(etc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (etc_fd < 0)
                return FAIL("open /etc", errno);

        /* The dify profile has no user database, as dify-sandbox's chroot (its clients test it). */
        if (!e->no_processes && ((r = write_etc_file(etc_fd, "passwd", etc_passwd)) < 0 ||
                                 (r = write_etc_file(etc_fd, "group", etc_group)) < 0))
                return FAIL("write /etc", r);
        if ((r = write_etc_file(etc_fd, "hosts", etc_hosts)) < 0 ||
            (r = write_etc_file(etc_fd, "hostname", SANDBOX_HOSTNAME "\n")) < 0 ||
            (r = write_etc_file(etc_fd, "nsswitch.conf", network ? etc_nsswitch_network : etc_nsswitch)) < 0)
                return FAIL("write /etc", r);
        if (symlinkat("/usr/share/zoneinfo/UTC", etc_fd, "localtime") < 0)
                return FAIL("symlink /etc/localtime", errno);
        /* With a network: slirp4netns's resolver. */
        if (network && (r = write_etc_file(etc_fd, "resolv.conf", "nameserver " SANDBOX_SLIRP_DNS "\n")) < 0)
                return FAIL("write /etc/resolv.conf", r);

        for (size_t i = 0; i < ELEMENTSOF(etc_binds); i++) {
                const char *src = etc_binds[i].source, *dst = strjoina(etc, "/", etc_binds[i].name);
                struct stat st;

                if (etc_binds[i].network_only && !network)
                        continue;
                if (stat(src, &st) < 0)
                        continue;
                if (S_ISDIR(st.st_mode))
                        r = mkdir(dst, 0755) < 0 ? -errno : 0;
                else if (S_ISREG(st.st_mode))
                        r = touch_at(dst);
                else
                        continue;
                if (r < 0)
                        return FAIL("create /etc bind target", r);
                r = bind_mount(src, dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
                if (r < 0)
                        return FAIL("bind /etc file", r);
        }
        return 0;
}

/* The operator's site directory, if there is one that root owns and nobody else may write (a
 * privileged process never follows a path the sandbox can write; O_NOFOLLOW and the open fd
 * keep the check and the bind on the same directory). It is bound read-only at
 * SANDBOX_SITE_PACKAGES at every sandbox start, so an installation reaches the next exec without
 * a restart. Debian's Python imports sitecustomize from /usr/lib/python3.N/, a link to
 * /etc/python3.N/sitecustomize.py: ours goes there and appends the directory to sys.path, after
 * Debian's packages, with its .pth files. */
static int setup_site_packages(const char *root, SetupError *err) {
        _cleanup_close_ int fd = -EBADF;
        char version[32], src[64];
        const char *etc_python, *dst;
        struct stat st;
        ssize_t n;
        int r;

        fd = open(SCOPEBOX_SITE_PACKAGES_DIR, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return 0;
        if (fstat(fd, &st) < 0)
                return FAIL("stat the site directory", errno);
        if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
                return 0;
        if (stat(SANDBOX_SITECUSTOMIZE, &st) < 0 || !S_ISREG(st.st_mode))
                return 0;

        /* /usr/bin/python3 -> python3.11 */
        n = readlink(SANDBOX_PYTHON, version, sizeof(version) - 1);
        if (n <= 0)
                return 0;
        version[n] = 0;
        if (!startswith(version, "python3.") || strchr(version, '/'))
                return 0;

        etc_python = strjoina(root, "/etc/", version);
        if (mkdir(etc_python, 0755) < 0 && errno != EEXIST)
                return FAIL("mkdir /etc/python3", errno);
        dst = strjoina(etc_python, "/sitecustomize.py");
        r = touch_at(dst);
        if (r < 0)
                return FAIL("create sitecustomize.py", r);
        r = bind_mount(SANDBOX_SITECUSTOMIZE, dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
        if (r < 0)
                return FAIL("bind sitecustomize.py", r);

        if ((mkdir(strjoina(root, "/opt"), 0755) < 0 && errno != EEXIST) ||
            (mkdir(strjoina(root, "/opt/scopebox"), 0755) < 0 && errno != EEXIST) ||
            mkdir(strjoina(root, SANDBOX_SITE_PACKAGES), 0755) < 0)
                return FAIL("mkdir " SANDBOX_SITE_PACKAGES, errno);
        /* Compiled extensions are mapped executable, as from /usr: no noexec. */
        snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
        r = bind_mount(src, strjoina(root, SANDBOX_SITE_PACKAGES), MS_RDONLY | MS_NOSUID | MS_NODEV);
        if (r < 0)
                return FAIL("bind the site directory", r);
        return 0;
}

static int setup_dev(const char *root, SetupError *err) {
        const char *dev = strjoina(root, "/dev"), *shm = strjoina(dev, "/shm");
        static const struct {
                const char *name, *target;
        } links[] = {
                { "fd", "/proc/self/fd" },
                { "stdin", "/proc/self/fd/0" },
                { "stdout", "/proc/self/fd/1" },
                { "stderr", "/proc/self/fd/2" },
        };
        int r;

        if (mkdir(dev, 0755) < 0)
                return FAIL("mkdir /dev", errno);
        if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, DEV_TMPFS_OPTIONS) < 0)
                return FAIL("mount /dev", errno);
        for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
                const char *src = strjoina("/dev/", dev_nodes[i]), *dst = strjoina(dev, "/", dev_nodes[i]);

                r = touch_at(dst);
                if (r < 0)
                        return FAIL("create device bind target", r);
                r = bind_mount(src, dst, MS_NOSUID | MS_NOEXEC);
                if (r < 0)
                        return FAIL("bind device node", r);
        }
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                if (symlink(links[i].target, strjoina(dev, "/", links[i].name)) < 0)
                        return FAIL("symlink /dev entry", errno);
        if (mkdir(shm, 01777) < 0)
                return FAIL("mkdir /dev/shm", errno);
        if (mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, SHM_TMPFS_OPTIONS) < 0)
                return FAIL("mount /dev/shm", errno);
        if (mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
                return FAIL("remount /dev read-only", errno);
        return 0;
}

static int setup_proc(const char *root, SetupError *err) {
        const char *proc = strjoina(root, "/proc");

        if (mkdir(proc, 0555) < 0)
                return FAIL("mkdir /proc", errno);
        /* We are PID 1 of the new PID namespace, so this procfs shows only the sandbox. */
        if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") < 0 &&
            mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                return FAIL("mount /proc", errno);

        for (size_t i = 0; i < ELEMENTSOF(proc_masked_files); i++) {
                const char *p = strjoina(proc, "/", proc_masked_files[i]);
                if (access(p, F_OK) < 0)
                        continue;
                if (mount("/dev/null", p, NULL, MS_BIND, NULL) < 0)
                        return FAIL("mask /proc file", errno);
        }
        for (size_t i = 0; i < ELEMENTSOF(proc_masked_dirs); i++) {
                const char *p = strjoina(proc, "/", proc_masked_dirs[i]);
                if (access(p, F_OK) < 0)
                        continue;
                if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          "size=0,mode=0555") < 0)
                        return FAIL("mask /proc directory", errno);
        }
        for (size_t i = 0; i < ELEMENTSOF(proc_readonly); i++) {
                const char *p = strjoina(proc, "/", proc_readonly[i]);
                if (access(p, F_OK) < 0)
                        continue;
                if (bind_mount(p, p, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC) < 0)
                        return FAIL("make /proc entry read-only", errno);
        }
        return 0;
}

int sandbox_write_cell(const SandboxExec *e, int dir_fd, int code_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        off_t off = 0;

        if (fstat(code_fd, &st) < 0)
                return -errno;
        fd = openat(dir_fd, e->language == SANDBOX_NODEJS ? "cell.js" : "cell.py",
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd < 0)
                return -errno;
        while (off < st.st_size) {
                ssize_t k = sendfile(fd, code_fd, &off, (size_t) (st.st_size - off));
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
        }
        return 0;
}

/* /exec: the cell's file, there now; or, in a prepared sandbox, a tmpfs of its own, written by
 * PID 1 (root of the host, the directory root's) once the code comes. */
static int setup_code(const SandboxExec *e, const char *root, SetupError *err) {
        _cleanup_close_ int dir_fd = -EBADF;
        const char *dir = strjoina(root, "/exec");
        int r;

        if (mkdir(dir, 0755) < 0)
                return FAIL("mkdir /exec", errno);
        if (e->prepared_fd >= 0 &&
            mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, ROOT_TMPFS_OPTIONS) < 0)
                return FAIL("mount /exec", errno);
        /* A kernel's cells never become files: it reads each from the fd PID 1 hands it; a
         * command's payload reads its own. */
        if (e->code_fd < 0 || e->kernel || e->language == SANDBOX_COMMAND)
                return 0;
        dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir_fd < 0)
                return FAIL("open /exec", errno);
        r = sandbox_write_cell(e, dir_fd, e->code_fd);
        return r < 0 ? FAIL("copy cell", r) : 0;
}

static int loopback_up(SetupError *err) {
        _cleanup_close_ int fd = -EBADF;
        struct ifreq ifr = {};

        fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return FAIL("socket for lo", errno);
        strcpy(ifr.ifr_name, "lo");
        if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
                return FAIL("get lo flags", errno);
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
                return FAIL("bring lo up", errno);
        return 0;
}

static int setup_root(const SandboxExec *e, SetupError *err) {
        const char *root = strjoina(e->session_root, "/" SESSION_NEWROOT_DIR);
        const char *ws = strjoina(e->session_root, "/" SESSION_WORKSPACE_DIR);
        const char *tmp = strjoina(e->session_root, "/" SESSION_SCRATCH_DIR "/tmp");
        const char *home = strjoina(e->session_root, "/" SESSION_SCRATCH_DIR "/home");
        static const struct {
                const char *name, *target;
        } links[] = {
                { "bin", "usr/bin" }, { "sbin", "usr/sbin" }, { "lib", "usr/lib" }, { "lib64", "usr/lib64" },
        };
        int r;

        /* Nothing we mount below may propagate back to the runner or the host. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return FAIL("make mounts private", errno);
        if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_TMPFS_OPTIONS) < 0)
                return FAIL("mount root tmpfs", errno);

        if (mkdir(strjoina(root, "/usr"), 0755) < 0)
                return FAIL("mkdir /usr", errno);
        r = bind_mount("/usr", strjoina(root, "/usr"), MS_RDONLY | MS_NOSUID | MS_NODEV);
        if (r < 0)
                return FAIL("bind /usr", r);
        for (size_t i = 0; i < ELEMENTSOF(links); i++) {
                if (access(strjoina("/", links[i].target), F_OK) < 0)
                        continue;
                if (symlink(links[i].target, strjoina(root, "/", links[i].name)) < 0)
                        return FAIL("symlink into /usr", errno);
        }

        r = setup_etc(e, root, err);
        if (r < 0)
                return r;
        if (e->language == SANDBOX_PYTHON3) {
                r = setup_site_packages(root, err);
                if (r < 0)
                        return r;
        }

        if (mkdir(strjoina(root, "/workspace"), 0755) < 0)
                return FAIL("mkdir /workspace", errno);
        r = bind_mount(ws, strjoina(root, "/workspace"), MS_NOSUID | MS_NODEV);
        if (r < 0)
                return FAIL("bind /workspace", r);
        if (mkdir(strjoina(root, "/tmp"), 01777) < 0)
                return FAIL("mkdir /tmp", errno);
        r = bind_mount(tmp, strjoina(root, "/tmp"), MS_NOSUID | MS_NODEV);
        if (r < 0)
                return FAIL("bind /tmp", r);
        /* The dify profile has a /var/tmp (dify-sandbox's clients test it): it is /tmp. Nothing else
         * of /var exists, and sidecar sandboxes have no /var at all. */
        if (e->no_processes &&
            (mkdir(strjoina(root, "/var"), 0755) < 0 || symlink("../tmp", strjoina(root, "/var/tmp")) < 0))
                return FAIL("create /var/tmp", errno);
        if (mkdir(strjoina(root, "/home"), 0755) < 0 || mkdir(strjoina(root, "/home/sandbox"), 0755) < 0)
                return FAIL("mkdir /home/sandbox", errno);
        r = bind_mount(home, strjoina(root, "/home/sandbox"), MS_NOSUID | MS_NODEV);
        if (r < 0)
                return FAIL("bind /home/sandbox", r);
        /* The E2B API's user home (docs/e2b.md): the workspace under the name E2B's clients use.
         * In the root's own tmpfs, made before it is read-only: nothing of the session's. */
        if (symlink("/workspace", strjoina(root, "/home/user")) < 0)
                return FAIL("symlink /home/user", errno);

        r = setup_dev(root, err);
        if (r < 0)
                return r;
        r = setup_proc(root, err);
        if (r < 0)
                return r;
        r = setup_code(e, root, err);
        if (r < 0)
                return r;

        if (sethostname(SANDBOX_HOSTNAME, strlen(SANDBOX_HOSTNAME)) < 0)
                return FAIL("sethostname", errno);
        r = loopback_up(err);
        if (r < 0)
                return r;

        /* Swap roots and drop the old one entirely: no path leads back to the host tree. */
        if (chdir(root) < 0)
                return FAIL("chdir new root", errno);
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                return FAIL("pivot_root", errno);
        if (umount2(".", MNT_DETACH) < 0)
                return FAIL("detach old root", errno);
        if (chdir("/") < 0)
                return FAIL("chdir /", errno);
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
                return FAIL("remount root read-only", errno);
        return 0;
}

static int drop_capabilities_bounding(void) {
        for (unsigned long cap = 0; cap <= 63; cap++)
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
                        return -errno;
        return 0;
}

/* Empties the permitted, effective and inheritable sets. Needed explicitly: inside the user
 * namespace the kernel's "leaving uid 0" rule does not apply (uid 0 is not mapped). */
static int drop_capabilities(void) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct d[2] = {};

        if (syscall(SYS_capset, &h, d) < 0)
                return -errno;
        if (syscall(SYS_capget, &h, d) < 0)
                return -errno;
        if (d[0].permitted || d[0].effective || d[0].inheritable || d[1].permitted || d[1].effective ||
            d[1].inheritable)
                return -EPERM;
        return 0;
}

static int write_proc_file(pid_t pid, const char *name, const char *content) {
        char path[64];
        _cleanup_close_ int fd = -EBADF;

        snprintf(path, sizeof(path), "/proc/%i/%s", (int) pid, name);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, content, strlen(content)) != (ssize_t) strlen(content))
                return errno > 0 ? -errno : -EIO;
        return 0;
}

int sandbox_map_ids_as(pid_t pid, uid_t inside_uid, gid_t inside_gid, uid_t uid, gid_t gid) {
        char map[64];
        int r;

        snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) inside_uid, (unsigned) uid);
        r = write_proc_file(pid, "uid_map", map);
        if (r < 0)
                return r;
        r = write_proc_file(pid, "setgroups", "deny");
        if (r < 0)
                return r;
        snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) inside_gid, (unsigned) gid);
        return write_proc_file(pid, "gid_map", map);
}

/* PID 1 maps the payload's user namespace: SANDBOX_UID/GID inside are the session's host ids,
 * nothing else (in particular not uid 0) is mapped. */
int sandbox_map_ids(pid_t payload, uid_t uid, gid_t gid) {
        return sandbox_map_ids_as(payload, SANDBOX_UID, SANDBOX_GID, uid, gid);
}

uint64_t sandbox_cpu_limit_sec(uint64_t timeout_ms, uint64_t cpus_percent) {
        return (timeout_ms / 1000 + 5) * MAX(cpus_percent, 100ULL) / 100 + 5;
}

static int set_rlimits(const SandboxExec *e) {
        struct {
                int resource;
                rlim_t value;
        } limits[] = {
                { RLIMIT_CORE, 0 },
                { RLIMIT_NOFILE, 1024 },
                /* Counted per host uid, which is the session's own: the scope's TasksMax= is the
                 * primary bound, this one holds even outside it. */
                { RLIMIT_NPROC, 1024 },
                { RLIMIT_MEMLOCK, 64 * 1024 },
                { RLIMIT_MSGQUEUE, 64 * 1024 },
                { RLIMIT_RTPRIO, 0 },
                { RLIMIT_NICE, 0 },
                { RLIMIT_STACK, 8 * 1024 * 1024 },
                { RLIMIT_FSIZE, e->fsize_limit > 0 ? (rlim_t) e->fsize_limit : RLIM_INFINITY },
                /* Backstop only: CPU seconds across all threads, above the wall-clock timeout. A
                 * kernel lives for many cells, each bounded by its timeout, and uses none while
                 * stopped between them. */
                { RLIMIT_CPU, e->kernel ? RLIM_INFINITY
                                        : (rlim_t) sandbox_cpu_limit_sec(e->timeout_ms, e->cpus_percent) },
        };

        for (size_t i = 0; i < ELEMENTSOF(limits); i++) {
                struct rlimit rl = { limits[i].value, limits[i].value };
                if (setrlimit(limits[i].resource, &rl) < 0)
                        return -errno;
        }
        return 0;
}

int sandbox_become_user(const char **ret_step) {
        uid_t ru, eu, su;
        gid_t rg, eg, sg;
        int r;

        /* Lock root semantics out for good, while we still hold CAP_SETPCAP in our namespace. */
        *ret_step = "securebits";
        if (prctl(PR_SET_SECUREBITS,
                  SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                          SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                          SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                  0, 0, 0) < 0)
                return -errno;
        *ret_step = "capability bounding set";
        r = drop_capabilities_bounding();
        if (r < 0)
                return r;
        *ret_step = "credentials";
        if (setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) < 0 ||
            setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) < 0)
                return -errno;
        if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0 || ru != SANDBOX_UID ||
            eu != SANDBOX_UID || su != SANDBOX_UID || rg != SANDBOX_GID || eg != SANDBOX_GID ||
            sg != SANDBOX_GID)
                return -EPERM;
        *ret_step = "capabilities";
        r = drop_capabilities();
        if (r < 0)
                return r;
        *ret_step = "ambient capabilities";
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        *ret_step = "no_new_privs";
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        return 0;
}

/* The interpreter's environment: the documented list (docs/runtime.md), plus the extras of the
 * exec (proxies). Nothing of ours. 'buf' holds the entries that are formatted here. With
 * 'base_only' (the template's own interpreter), without PYTHONPATH and the extras. */
size_t sandbox_build_env(const SandboxExec *e, bool base_only, char *buf, size_t buf_size, char **envp,
                         size_t n_max) {
        static const char *const common[] = {
                "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/sandbox", "USER=sandbox", "LOGNAME=sandbox",
                "TMPDIR=/tmp", "LANG=C.UTF-8",
        };
        /* A command's is a login of the E2B API's user, at home in /home/user (the workspace). */
        static const char *const common_command[] = {
                "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", "USER=user", "LOGNAME=user",
                "TMPDIR=/tmp", "LANG=C.UTF-8",
        };
        static const char
                *const
                        python[] = {
                                "PYTHONUNBUFFERED=1",    "PYTHONDONTWRITEBYTECODE=1",
                                "MPLBACKEND=Agg",        "MPLCONFIGDIR=/tmp/matplotlib",
                                "PYTHONPATH=/workspace", /* last: the template goes without it */
                        };
        size_t n = 0;
        int k;

        assert(n_max >= 16);
        static_assert(ELEMENTSOF(common) == ELEMENTSOF(common_command), "one list or the other");
        for (size_t i = 0; i < ELEMENTSOF(common); i++)
                envp[n++] = (char *) (e->language == SANDBOX_COMMAND ? common_command : common)[i];
        if (e->language == SANDBOX_NODEJS) {
                /* V8 sizes its heap itself, not from the cgroup: three quarters of the scope's
                 * memory. libuv's io_uring would only meet ENOSYS. */
                k = snprintf(buf, buf_size, "NODE_OPTIONS=--max-old-space-size=%llu",
                             (unsigned long long) MAX(e->memory_limit / 4 * 3 / (1024 * 1024), 64ULL));
                envp[n++] = buf;
                buf += k + 1;
                buf_size -= k + 1;
                envp[n++] = (char *) "UV_USE_IO_URING=0";
        } else if (e->language == SANDBOX_PYTHON3)
                for (size_t i = 0; i < ELEMENTSOF(python) - base_only; i++)
                        envp[n++] = (char *) python[i];
        snprintf(buf, buf_size, "OPENBLAS_NUM_THREADS=%llu",
                 (unsigned long long) MAX(e->cpus_percent / 100, 1ULL));
        envp[n++] = buf;
        for (size_t i = 0; !base_only && e->extra_env && e->extra_env[i] && n < n_max - 1; i++)
                envp[n++] = e->extra_env[i];
        envp[n] = NULL;
        return n;
}

/* The filter as BPF (seccomp_export_bpf() output in a memfd): the template's children load what
 * the runner compiled, read into 'insns' before the fds are closed. */
static int read_filter_bpf(int filter_fd, struct sock_filter *insns, size_t n_max, struct sock_fprog *ret) {
        struct stat st;
        ssize_t k;

        if (fstat(filter_fd, &st) < 0)
                return -errno;
        if (st.st_size <= 0 || (size_t) st.st_size > n_max * sizeof(struct sock_filter) ||
            st.st_size % sizeof(struct sock_filter) != 0)
                return -EBADMSG;
        k = pread(filter_fd, insns, (size_t) st.st_size, 0);
        if (k != st.st_size)
                return k < 0 ? -errno : -EBADMSG;
        *ret = (struct sock_fprog) { .len = (unsigned short) (st.st_size / sizeof(struct sock_filter)),
                                     .filter = insns };
        return 0;
}

/* A child of the template has the template's command line and initial environment (what
 * /proc/self/cmdline and /proc/self/environ show): give it those of the cold interpreter, in a
 * new mapping. PR_SET_MM_MAP (checkpoint/restore's call) replaces the whole map at once and,
 * unlike the single fields, needs no CAP_SYS_RESOURCE: the rest of it is read off
 * /proc/self/stat unchanged. */
static int set_command_line(const SandboxExec *e, char *const *envp) {
        const char *script = e->no_processes ? SANDBOX_DIFY_RUN_SCRIPT : SANDBOX_CELL_PATH;
        size_t size = strlen("python3") + 1 + strlen(script) + 1, arg_size = size;
        unsigned long long f[49];
        struct prctl_mm_map map;
        char stat[1024], *c, *area, *p;
        ssize_t k;
        int fd, n = 0;

        fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        k = read(fd, stat, sizeof(stat) - 1);
        (void) close(fd);
        if (k <= 0)
                return -EIO;
        stat[k] = 0;
        c = strrchr(stat, ')');
        if (!c)
                return -EBADMSG;
        /* f[i] is field i + 3 of proc_pid_stat(5): f[0] the state. */
        for (char *save = NULL, *t = strtok_r(c + 1, " \n", &save); t && n < (int) ELEMENTSOF(f);
             t = strtok_r(NULL, " \n", &save))
                f[n++] = strtoull(t, NULL, 10);
        if (n < (int) ELEMENTSOF(f))
                return -EBADMSG;

        for (size_t i = 0; envp[i]; i++)
                size += strlen(envp[i]) + 1;
        area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (area == MAP_FAILED)
                return -errno;
        p = stpcpy(area, "python3") + 1;
        p = stpcpy(p, script) + 1;
        for (size_t i = 0; envp[i]; i++)
                p = stpcpy(p, envp[i]) + 1;

        map = (struct prctl_mm_map) {
                .start_code = f[23], .end_code = f[24], .start_stack = f[25],
                .start_data = f[42], .end_data = f[43], .start_brk = f[44],
                .brk = (uint64_t) syscall(SYS_brk, 0),
                .arg_start = (uint64_t) area, .arg_end = (uint64_t) (area + arg_size),
                .env_start = (uint64_t) (area + arg_size), .env_end = (uint64_t) p,
                .exe_fd = (uint32_t) -1,
        };
        if (prctl(PR_SET_MM, PR_SET_MM_MAP, (unsigned long) &map, sizeof(map), 0) < 0)
                return -errno;
        (void) prctl(PR_SET_NAME, (unsigned long) "python3", 0, 0, 0);
        return 0;
}

/* The payload is the first candidate when the scope runs out of memory. */
static void set_oom_first(void) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

        if (fd >= 0) {
                (void) write_all(fd, "500", 3);
                safe_close(fd);
        }
}

/* Loads the payload's filter, 'prog' (read off e->filter_fd, compiled by the manager). Returns its
 * listener, which PID 1 answers the refused calls through, or a negative errno. */
static int load_filter(const struct sock_fprog *prog) {
        /* The flags libseccomp's seccomp_load() uses for our filter: a listener for the notifying
         * default action (no_new_privs is already set). */
        long fd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog);

        return fd < 0 ? -errno : (int) fd;
}

int sandbox_payload_specialize(const SandboxExec *e, int sync_fd, bool from_template, char **envp,
                               size_t n_envp, char *env_buf, size_t env_buf_size, const char **ret_step) {
        struct sock_filter insns[BPF_MAXINSNS];
        struct sock_fprog prog = {};
        sigset_t ss;
        int null_fd, listener, ack = 0, r;
        int32_t self;

        sandbox_build_env(e, false, env_buf, env_buf_size, envp, n_envp);

        *ret_step = "setsid";
        if (setsid() < 0)
                return -errno;
        *ret_step = "signal mask";
        if (from_template) {
                /* The interpreter's own dispositions stay; its template started from defaults. */
                sigemptyset(&ss);
                if (sigprocmask(SIG_SETMASK, &ss, NULL) < 0)
                        return -errno;
        } else {
                r = reset_all_signal_dispositions();
                if (r < 0)
                        return r;
        }

        set_oom_first();

        *ret_step = "stdio";
        null_fd = e->has_stdin ? e->stdin_fd : open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(e->stdout_fd, STDOUT_FILENO) < 0 ||
            dup2(e->stderr_fd, STDERR_FILENO) < 0 || dup2(sync_fd, SANDBOX_SYNC_FD) < 0)
                return -errno;
        /* A kernel keeps its socket to PID 1 (PID 1 put it above every fd dup'ed here). */
        if (e->kernel && dup2(e->kernel_payload_fd, SANDBOX_KERNEL_FD) < 0)
                return -errno;

        *ret_step = "rlimits";
        r = set_rlimits(e);
        if (r < 0)
                return r;
        if (from_template) {
                *ret_step = "command line";
                r = set_command_line(e, envp);
                if (r < 0)
                        return r;
        }
        *ret_step = "chdir /workspace";
        if (chdir("/workspace") < 0)
                return -errno;
        /* The sandbox's (the template's unit has its own). */
        umask(0022);

        /* Our own user namespace, mapped by PID 1: the session's host uid appears as SANDBOX_UID,
         * nothing else is mapped. Supplementary groups go first, while we still may. PID 1 learns
         * our PID in its namespace from the request. */
        *ret_step = "supplementary groups";
        if (setgroups(0, NULL) < 0)
                return -errno;
        *ret_step = "user namespace";
        if (unshare(CLONE_NEWUSER) < 0)
                return -errno;
        self = (int32_t) getpid();
        if (write(SANDBOX_SYNC_FD, &self, sizeof(self)) != (ssize_t) sizeof(self) ||
            read(SANDBOX_SYNC_FD, &ack, sizeof(ack)) != (ssize_t) sizeof(ack))
                return errno > 0 ? -errno : -EIO;
        if (ack != 0)
                return -ack;

        r = sandbox_become_user(ret_step);
        if (r < 0)
                return r;
        /* The credential change made us undumpable: /proc/self would be root's. An execve()
         * resets that for a cold payload; a child of the template is the sandbox user's now,
         * exactly as a cold one (the template holds nothing secret). */
        *ret_step = "dumpable";
        if (from_template && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
                return -errno;

        /* Never without it. */
        *ret_step = "read filter";
        r = read_filter_bpf(e->filter_fd, insns, ELEMENTSOF(insns), &prog);
        if (r < 0)
                return r;

        /* Nothing but stdio and the socket to PID 1 (the template's own fds among the rest). */
        *ret_step = "close fds";
        if (syscall(SYS_close_range, (e->kernel ? SANDBOX_KERNEL_FD : SANDBOX_SYNC_FD) + 1U, ~0U, 0U) < 0)
                return -errno;

        /* Last: from here on only the interpreter's own calls are filtered. PID 1 answers the
         * calls the filter refuses, through the listener we hand it. */
        *ret_step = "seccomp";
        listener = load_filter(&prog);
        if (listener < 0)
                return listener;
        r = fd_send_one(SANDBOX_SYNC_FD, listener);
        (void) close(listener);
        /* A prepared payload waits on it for its release (sandbox-prepared.c). */
        if (!e->prepared)
                (void) close(SANDBOX_SYNC_FD);
        return r;
}

/* A command's packed argv, environment and cwd (exec-command.h): the bytes of the code, a sealed
 * memfd of the manager's bounded by SANDBOX_MAX_CODE_BYTES there (and here again), read while the
 * fd is still open; parsed only once we are the sandbox user, under the filter. */
static int command_read(int code_fd, char **ret, size_t *ret_size) {
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t done = 0;

        if (fstat(code_fd, &st) < 0)
                return -errno;
        if (st.st_size <= 0 || st.st_size > (off_t) (64U << 20))
                return -EBADMSG;
        buf = malloc((size_t) st.st_size);
        if (!buf)
                return -ENOMEM;
        while (done < (size_t) st.st_size) {
                ssize_t k = pread(code_fd, buf + done, (size_t) st.st_size - done, (off_t) done);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return k < 0 ? -errno : -EBADMSG;
                done += (size_t) k;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = done;
        return 0;
}

/* The payload's environment, then the command's own: a later entry replaces an earlier one of
 * the same name. */
static char **command_env(const ExecCommand *c, char *const *base, const char *pwd) {
        size_t n_base = 0, n = 0;
        char **env;

        while (base[n_base])
                n_base++;
        env = calloc(n_base + c->n_env + 2, sizeof(char *));
        if (!env)
                return NULL;
        for (size_t i = 0; i < n_base + c->n_env + 1; i++) {
                const char *entry = i < n_base ? base[i] : i < n_base + c->n_env ? c->env[i - n_base] : pwd;
                size_t name = strcspn(entry, "=");
                size_t j = 0;

                while (j < n && !(strncmp(env[j], entry, name + 1) == 0))
                        j++;
                env[j] = (char *) entry;
                if (j == n)
                        n++;
        }
        return env;
}

/* execvpe() with the command's own PATH (glibc's would search ours). Returns the errno of the
 * attempt that tells most (EACCES over ENOENT), as a shell does. */
static int command_execvpe(const char *file, char *const *argv, char *const *envp) {
        const char *path = "/usr/local/bin:/usr/bin:/bin";
        int error = ENOENT;

        if (strchr(file, '/')) {
                execve(file, argv, envp);
                return errno;
        }
        for (size_t i = 0; envp[i]; i++)
                if (startswith(envp[i], "PATH="))
                        path = envp[i] + 5;
        for (const char *p = path;; p++) {
                size_t len = strcspn(p, ":");
                char candidate[PATH_MAX];

                if (len + 1 + strlen(file) + 1 <= sizeof(candidate)) {
                        (void) snprintf(candidate, sizeof(candidate), "%.*s%s%s", (int) len,
                                        len > 0 ? p : ".", "/", file);
                        execve(candidate, argv, envp);
                        if (errno == EACCES)
                                error = EACCES;
                        else if (errno != ENOENT && errno != ENOTDIR && error != EACCES)
                                error = errno;
                }
                p += len;
                if (*p == 0)
                        break;
        }
        return error;
}

/* The E2B API's command: the sandbox user runs it as any payload (same filter, namespaces and
 * limits), in its cwd (the E2B user's home by default), with its environment. */
_noreturn_ static void payload_exec_command(const SandboxExec *e, int sync_fd) {
        _cleanup_free_ char *buf = NULL, *pwd = NULL;
        _cleanup_(exec_command_done) ExecCommand c = {};
        char *envp[32], ebuf[192], **env = NULL;
        const char *step = "read command", *cwd;
        size_t size = 0;
        int r;

        r = command_read(e->code_fd, &buf, &size);
        if (r >= 0)
                r = sandbox_payload_specialize(e, sync_fd, false, envp, ELEMENTSOF(envp), ebuf, sizeof(ebuf),
                                               &step);
        if (r >= 0) {
                step = "parse command";
                r = exec_command_parse(buf, size, &c);
                if (r >= 0 && c.cwd[0] != 0 && c.cwd[0] != '/')
                        r = -EBADMSG;
        }
        if (r < 0) {
                dprintf(STDERR_FILENO, "[sandbox] failed to start the command (%s): %s\n", step,
                        strerror(-r));
                _exit(127);
        }
        /* As the sandbox user: the cwd is the sandbox's to resolve. */
        cwd = c.cwd[0] != 0 ? c.cwd : "/home/user";
        if (chdir(cwd) < 0) {
                dprintf(STDERR_FILENO, "[sandbox] cwd '%s': %s\n", cwd, strerror(errno));
                _exit(1);
        }
        /* A shell keeps the name it was given for its working directory (pwd shows /home/user). */
        if (asprintf(&pwd, "PWD=%s", cwd) < 0 || !(env = command_env(&c, envp, pwd))) {
                dprintf(STDERR_FILENO, "[sandbox] failed to start the command: out of memory\n");
                _exit(127);
        }
        r = command_execvpe(c.argv[0], (char *const *) c.argv, env);
        dprintf(STDERR_FILENO, "[sandbox] %s: %s\n", c.argv[0], strerror(r));
        _exit(r == ENOENT ? 127 : 126);
}

/* Runs as root in the sandbox's namespaces, forked by PID 1; sync_fd is our end of the socket
 * over which PID 1 maps our user namespace and receives the seccomp listener. */
_noreturn_ static void payload_exec(const SandboxExec *e, int sync_fd) {
        char *const argv_python[] = { (char *) "python3", (char *) SANDBOX_CELL_PATH, NULL };
        char *const argv_node[] = { (char *) "node", (char *) SANDBOX_CELL_PATH_JS, NULL };
        /* The dify profile: upstream's excepthook, an uncaught exception exits 255. */
        char *const argv_dify[] = { (char *) "python3", (char *) SANDBOX_DIFY_RUN_SCRIPT, NULL };
        char *const argv_kernel[] = { (char *) "python3", (char *) SANDBOX_KERNEL_SCRIPT, NULL };
        const char *binary = e->language == SANDBOX_NODEJS ? SANDBOX_NODE : SANDBOX_PYTHON;
        char *envp[32], buf[192];
        const char *step;
        int r;

        if (e->language == SANDBOX_COMMAND)
                payload_exec_command(e, sync_fd);
        r = sandbox_payload_specialize(e, sync_fd, false, envp, ELEMENTSOF(envp), buf, sizeof(buf), &step);
        if (r < 0)
                errno = -r;
        else {
                execve(binary, e->language == SANDBOX_NODEJS ? argv_node : e->no_processes ? argv_dify :
                               e->kernel ? argv_kernel : argv_python, envp);
                step = e->language == SANDBOX_NODEJS ? "execve " SANDBOX_NODE : "execve " SANDBOX_PYTHON;
        }
        r = errno;
        dprintf(STDERR_FILENO, "[sandbox] failed to start the interpreter (%s): %s\n", step, strerror(r));
        _exit(127);
}
/* PID 1 after the payload started: map its ids (the payload sends its PID in our namespace) and
 * take its seccomp listener. Returns the listener, -EBADF when the payload sent nothing (it
 * failed before its filter and reports why), or another negative errno. */
int sandbox_payload_attach(const SandboxExec *e, pid_t payload, int sync_fd) {
        int32_t pid;
        ssize_t k;
        int ack, fd;

        do
                k = read(sync_fd, &pid, sizeof(pid));
        while (k < 0 && errno == EINTR);
        if (k != (ssize_t) sizeof(pid))
                return -EBADF;
        if (payload > 0 ? pid != payload : pid <= 1)
                ack = EPROTO;
        else
                ack = -sandbox_map_ids(pid, e->uid, e->gid);
        if (write(sync_fd, &ack, sizeof(ack)) != (ssize_t) sizeof(ack) || ack != 0)
                return -(ack ?: EIO);
        fd = fd_receive_one(sync_fd);
        return fd >= 0 ? fd : -EBADF;
}

unsigned sandbox_signals_from_outside(int signal_fd) {
        struct signalfd_siginfo si;
        unsigned got = 0;

        while (read(signal_fd, &si, sizeof(si)) == (ssize_t) sizeof(si))
                /* The runner's requests: from outside our PID namespace only. */
                if ((si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) && si.ssi_pid == 0 &&
                    si.ssi_code == SI_USER)
                        got |= si.ssi_signo == SIGTERM ? SANDBOX_OUTSIDE_TERM : SANDBOX_OUTSIDE_INT;
        return got;
}

bool sandbox_sigterm_from_outside(int signal_fd) {
        return sandbox_signals_from_outside(signal_fd) & SANDBOX_OUTSIDE_TERM;
}

void sandbox_listener_event(int *listener, short revents, SeccompSupervisor *sup, SeccompReport *report) {
        if (*listener < 0 || revents == 0)
                return;
        if (!(revents & POLLIN)) {
                *listener = safe_close(*listener); /* no process uses the filter any more */
                return;
        }
        if (seccomp_notify_handle_one(*listener, sup) < 0)
                *listener = safe_close(*listener); /* calls now fail with ENOSYS */
        *report = sup->report;
}

/* The template's child tells how the payload ended: its wait status into st->value, its usage
 * into *ret. A parent that died without telling: as if the payload was killed. */
static void read_template_status(int fd, SandboxStatus *st, TemplateStatus *ret) {
        TemplateStatus ts = {};
        ssize_t k;

        do
                k = read(fd, &ts, sizeof(ts));
        while (k < 0 && errno == EINTR);
        if (k == (ssize_t) sizeof(ts)) {
                st->value = ts.wait_status;
                *ret = ts;
        } else
                st->value = SIGKILL;
}

/* Reaps what has ended until 'payload' (our child; 0: a child of the template, not ours) is among
 * it: then its wait status goes to st->value and it returns true. */
static bool reap_payload(pid_t payload, SandboxStatus *st) {
        for (;;) {
                int ws;
                pid_t c = waitpid(-1, &ws, WNOHANG | __WALL);

                if (c <= 0)
                        return false;
                if (payload > 0 && c == payload) {
                        st->value = ws;
                        return true;
                }
        }
}

/* PID 1 after the payload started: sandbox_payload_attach() (unless a prepared sandbox did), then
 * answer refused calls and reap children until the payload is gone. 'payload' is our child
 * (cold), or 0: a child of the template, whose PID comes over init->sync[0] and whose wait status
 * its parent (outside our namespaces) writes to 'payload_status_fd'. */
static int supervise_payload(const SandboxExec *e, pid_t payload, SandboxInit *init, int payload_status_fd,
                             SandboxStatus *st, TemplateStatus *ret_template) {
        /* Only the cold dify payload's own execve() of the interpreter goes through; a child of the
         * template never executes anything. */
        SeccompSupervisor sup = { .first_exec_pid = e->no_processes && payload > 0 ? payload : 0 };
        _cleanup_close_ int listener = -EBADF;
        int signal_fd = init->signal_fd;
        bool ending = false;
        int r;

        if (init->attached)
                r = TAKE_FD(init->listener);
        else
                r = sandbox_payload_attach(e, payload, init->sync[0]);
        if (r < 0 && r != -EBADF)
                return r;
        listener = r;

        for (;;) {
                struct pollfd p[3] = {
                        { .fd = signal_fd, .events = POLLIN },
                        { .fd = payload_status_fd, .events = POLLIN },
                        { .fd = listener, .events = POLLIN },
                };

                r = poll(p, 3, ending ? SANDBOX_END_GRACE_MS : -1);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (r == 0) {
                        /* Ending, and the template's child did not report: as if killed. */
                        st->value = SIGKILL;
                        return 0;
                }
                sandbox_listener_event(&listener, p[2].revents, &sup, &st->seccomp);

                if (payload_status_fd >= 0 && p[1].revents) {
                        read_template_status(payload_status_fd, st, ret_template);
                        return 0;
                }

                if (p[0].revents & POLLIN) {
                        /* The runner's request to end the exec (its timeout, a cancel): everything
                         * of the sandbox is killed; the payload's status and the usage of all
                         * follow as at a normal end. */
                        if (sandbox_sigterm_from_outside(signal_fd) && !ending) {
                                ending = true;
                                (void) kill(-1, SIGKILL);
                        }
                        if (reap_payload(payload, st))
                                return 0;
                }
        }
}

static int int_cmp(const void *a, const void *b) {
        return *(const int *) a < *(const int *) b ? -1 : *(const int *) a > *(const int *) b;
}

/* PID 1 starts with a copy of every fd of the runner (the control connection among them): keep
 * only what the exec needs. */
static int close_fds_except(const int *keep, size_t n) {
        int sorted[9 + TEMPLATE_CGROUPS_MAX], next = 3;

        assert(n <= ELEMENTSOF(sorted));
        memcpy(sorted, keep, n * sizeof(int));
        qsort(sorted, n, sizeof(int), int_cmp);
        for (size_t i = 0; i < n; i++) {
                if (sorted[i] < next)
                        continue;
                if (sorted[i] > next &&
                    syscall(SYS_close_range, (unsigned) next, (unsigned) sorted[i] - 1, 0U) < 0)
                        return -errno;
                next = sorted[i] + 1;
        }
        return syscall(SYS_close_range, (unsigned) next, ~0U, 0U) < 0 ? -errno : 0;
}

/* Asks the template to fork our payload: it gets our namespaces, the session's cgroup, the
 * exec's pipes, our end of 'sync_fd' and the filter; its child (outside our namespaces) reports
 * the payload's wait status on *ret_status_fd. Returns 0 once the template's child says the
 * payload exists, or a negative errno: then nothing of it runs, or what runs can never be
 * mapped (sync_fd is closed by then) and dies with us. */
static int start_from_template(const SandboxExec *e, int sync_fd, int *ret_status_fd) {
        static const char *const ns[] = { "mnt", "pid", "net", "ipc", "uts", "cgroup" };
        int fds[_TEMPLATE_FD_MAX + TEMPLATE_CGROUPS_MAX];
        _cleanup_close_pair_ int status[2] = { -EBADF, -EBADF };
        TemplateRequest req = {
                .magic = TEMPLATE_MAGIC,
                .version = TEMPLATE_PROTOCOL_VERSION,
                .profile = e->no_processes ? TEMPLATE_PROFILE_DIFY : TEMPLATE_PROFILE_SIDECAR,
                .n_cgroups = (uint32_t) e->n_cgroup_fds,
                .flags = e->prepared_fd >= 0 ? TEMPLATE_REQUEST_PREPARED : 0,
                .timeout_ms = e->timeout_ms,
                .fsize_limit = e->fsize_limit,
                .cpus_percent = e->cpus_percent,
                .site_dev = (uint64_t) e->site.st_dev,
                .site_ino = (uint64_t) e->site.st_ino,
                .site_mode = (uint32_t) e->site.st_mode,
                .site_uid = (uint32_t) e->site.st_uid,
        };
        TemplateReply reply = {};
        struct pollfd p = { .fd = e->template_fd, .events = POLLIN };
        ssize_t k;
        int r = 0;

        if (e->n_cgroup_fds == 0 || e->n_cgroup_fds > TEMPLATE_CGROUPS_MAX)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                fds[i] = -EBADF;
        for (size_t i = 0; e->extra_env && e->extra_env[i]; i++) {
                size_t l = strlen(e->extra_env[i]) + 1;
                if (req.env_size + l > sizeof(req.env))
                        return -E2BIG;
                memcpy(req.env + req.env_size, e->extra_env[i], l);
                req.env_size += (uint32_t) l;
        }
        if (pipe2(status, O_CLOEXEC) < 0)
                return -errno;
        for (size_t i = 0; i < ELEMENTSOF(ns); i++) {
                fds[TEMPLATE_FD_MNT + i] = open(strjoina("/proc/self/ns/", ns[i]), O_RDONLY | O_CLOEXEC);
                if (fds[TEMPLATE_FD_MNT + i] < 0) {
                        r = -errno;
                        goto finish;
                }
        }
        fds[TEMPLATE_FD_STDOUT] = e->stdout_fd;
        fds[TEMPLATE_FD_STDERR] = e->stderr_fd;
        fds[TEMPLATE_FD_SYNC] = sync_fd;
        fds[TEMPLATE_FD_FILTER] = e->filter_fd;
        fds[TEMPLATE_FD_STATUS] = status[1];
        memcpy(fds + _TEMPLATE_FD_MAX, e->cgroup_fds, sizeof(int) * e->n_cgroup_fds);

        r = fds_send(e->template_fd, &req, offsetof(TemplateRequest, env) + req.env_size, fds,
                     _TEMPLATE_FD_MAX + e->n_cgroup_fds);
        if (r < 0)
                goto finish;
        status[1] = safe_close(status[1]);
        do
                r = poll(&p, 1, TEMPLATE_REPLY_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
                r = -ETIMEDOUT;
                goto finish;
        }
        k = recv(e->template_fd, &reply, sizeof(reply), MSG_DONTWAIT);
        if (k != (ssize_t) sizeof(reply))
                r = k < 0 ? -errno : -ECONNRESET;
        else
                r = reply.error > 0 ? -reply.error : reply.error < 0 ? -EPROTO : 0;
        if (r >= 0)
                *ret_status_fd = TAKE_FD(status[0]);
finish:
        for (size_t i = 0; i < ELEMENTSOF(ns); i++)
                safe_close(fds[TEMPLATE_FD_MNT + i]);
        return r;
}

/* Kills every other process of our PID namespace and reaps every child we get, until none is
 * left. A process forking while kill(-1) walks the list escapes one round, not the next. The
 * runner's timer still runs: a process that never dies (D state) ends with the exec's timeout. */
void sandbox_end_all_processes(void) {
        for (;;) {
                (void) kill(-1, SIGKILL);
                if (waitpid(-1, NULL, __WALL) < 0 && errno != EINTR)
                        return; /* ECHILD: nothing is left */
        }
}

/* What every process of the sandbox used, once all are reaped: ours (the children we reaped:
 * the cold payload and everything reparented to us) and the template's child's (the payload it
 * reaped). Our own writes since 'wchar_before' are the status pipe's few bytes. */
static void collect_usage(int io_fd, int last_pid_fd, uint64_t wchar_before, bool from_template,
                          const TemplateStatus *ts, SandboxUsage *ret) {
        struct rusage ru;
        uint64_t wchar, last_pid;
        char buf[32];
        ssize_t k;

        if (getrusage(RUSAGE_CHILDREN, &ru) >= 0) {
                ret->valid = true;
                ret->cpu_usec = timeval_load(&ru.ru_utime) + timeval_load(&ru.ru_stime);
                ret->max_rss_bytes = (uint64_t) ru.ru_maxrss * 1024U;
        }
        if (ts->flags & TEMPLATE_STATUS_USAGE) {
                ret->cpu_usec += ts->cpu_usec;
                ret->max_rss_bytes = MAX(ret->max_rss_bytes, ts->max_rss_bytes);
        }
        if (proc_io_read_wchar(io_fd, &wchar) >= 0 && wchar >= wchar_before) {
                ret->written_valid = true;
                ret->written_bytes = wchar - wchar_before;
                if (from_template) {
                        /* A child of the template: its counter is what it reaped. */
                        if (ts->flags & TEMPLATE_STATUS_WRITTEN)
                                ret->written_bytes += ts->written_bytes;
                        else
                                ret->written_valid = false;
                }
        }
        /* PIDs of a new namespace are given in order from 1 (us), threads' too. */
        k = last_pid_fd >= 0 ? pread(last_pid_fd, buf, sizeof(buf) - 1, 0) : -1;
        if (k > 0) {
                buf[k] = 0;
                if (buf[k - 1] == '\n')
                        buf[k - 1] = 0;
                if (safe_atou64(buf, &last_pid) >= 0 && last_pid >= 1) {
                        ret->tasks_valid = true;
                        ret->tasks = last_pid - 1;
                }
        }
}

int sandbox_supervise_payload(const SandboxExec *e, SandboxInit *init, pid_t payload, int payload_status_fd,
                              SandboxStatus *st) {
        TemplateStatus template_status = {};
        uint64_t wchar_before = 0;
        int r;

        /* PID 1 must not keep the output pipes open, or readers never see EOF. */
        init->sync[1] = safe_close(init->sync[1]);
        safe_close(e->stdout_fd);
        safe_close(e->stderr_fd);
        safe_close(e->code_fd);
        safe_close(e->filter_fd);
        if (e->has_stdin)
                safe_close(e->stdin_fd);

        if (proc_io_read_wchar(init->io_fd, &wchar_before) < 0)
                init->io_fd = safe_close(init->io_fd);
        r = supervise_payload(e, payload, init, payload_status_fd, st, &template_status);
        if (r < 0)
                return r;

        /* What the payload left behind in this PID namespace is killed and reaped now, so that
         * its usage counts; then what every process of the exec used. */
        sandbox_end_all_processes();
        collect_usage(init->io_fd, init->last_pid_fd, wchar_before, st->start == SANDBOX_START_TEMPLATE,
                      &template_status, &st->usage);
        (void) write_all(e->status_fd, st, sizeof(*st));
        return 0;
}

/* The start modes follow. A stateful session's sandbox: the kernel is a cold payload with a
 * socket of ours at SANDBOX_KERNEL_FD (never from the template: it lives for many cells, so its
 * start is paid once; the runner gives a kernel no template); sandbox_kernel_run() takes over once
 * it is mapped and filtered. */
_noreturn_ static void run_kernel(const SandboxExec *e, SandboxInit *init) {
        PidRef kernel = PIDREF_NULL;
        int ksock[2], listener, r;
        pid_t pid;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ksock) < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno, "socketpair", 125);
        /* Above every fd the payload dup2()s onto 0-4. */
        {
                int fd = fcntl(ksock[1], F_DUPFD_CLOEXEC, 16);
                if (fd < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                        "dup kernel socket", 125);
                safe_close(ksock[1]);
                ksock[1] = fd;
        }
        pid = fork();
        if (pid < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno, "fork kernel",
                                        125);
        if (pid == 0) {
                SandboxExec pe = *e;

                pe.kernel_payload_fd = ksock[1];
                safe_close(init->sync[0]);
                safe_close(ksock[0]);
                safe_close(e->kernel_fd);
                payload_exec(&pe, init->sync[1]);
        }
        /* Signalled through its pidfd only. Should there be none, our exit takes the kernel along
         * with everything of the namespace. */
        r = pidref_set_child(&kernel, pid);
        if (r < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -r, "pidfd of the kernel",
                                        125);
        safe_close(ksock[1]);
        safe_close(init->sync[1]);
        listener = sandbox_payload_attach(e, pid, init->sync[0]);
        if (listener < 0 && listener != -EBADF)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -listener,
                                        "user namespace", 125);
        safe_close(init->sync[0]);
        if (proc_io_read_wchar(init->io_fd, &(uint64_t) { 0 }) < 0)
                init->io_fd = safe_close(init->io_fd);
        sandbox_kernel_run(e, &kernel, ksock[0], listener, init->signal_fd, init->io_fd, init->last_pid_fd);
}

/* A python payload from the template. Returns the pipe on which the template's child reports the
 * payload's wait status; when the template does not answer (stopped, restarting, stale, busy),
 * -EBADF, st->template_error says why, and the payload starts cold as before. */
static int start_payload_template(const SandboxExec *e, SandboxInit *init, SandboxStatus *st) {
        int status_fd = -EBADF, r;

        r = start_from_template(e, init->sync[1], &status_fd);
        safe_close(e->template_fd);
        if (r >= 0)
                st->start = SANDBOX_START_TEMPLATE;
        else {
                st->template_error = -r;
                /* A late child of the template must find no PID 1 on its socket. */
                safe_close(init->sync[0]);
                safe_close(init->sync[1]);
                if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, init->sync) < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                                "socketpair", 125);
        }
        for (size_t i = 0; i < e->n_cgroup_fds; i++)
                safe_close(e->cgroup_fds[i]);
        return status_fd;
}

/* A cold start: our child executes a new interpreter. Returns its PID. */
static pid_t start_payload_cold(const SandboxExec *e, SandboxInit *init) {
        pid_t payload = fork();

        if (payload < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno, "fork payload",
                                        125);
        if (payload == 0) {
                safe_close(init->sync[0]);
                payload_exec(e, init->sync[1]);
        }
        return payload;
}

int sandbox_init_signals(void) {
        sigset_t mask;
        int fd;

        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;
        fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? -errno : fd;
}

/* PID 1 starts with a copy of every fd of the runner (the control connection among them): it
 * keeps only the exec's. */
static int keep_exec_fds(const SandboxExec *e) {
        int keep[12 + TEMPLATE_CGROUPS_MAX] = { e->stdout_fd, e->stderr_fd, e->status_fd, e->code_fd,
                                                e->network_ready_fd, e->template_fd, e->filter_fd,
                                                e->kernel ? e->kernel_fd : -EBADF, e->netns_fd,
                                                e->prepared_fd, e->has_stdin ? e->stdin_fd : -EBADF,
                                                e->in_payload ? e->payload_procs_fd : -EBADF };
        size_t n = 12;

        for (size_t i = 0; e->template_fd >= 0 && i < MIN(e->n_cgroup_fds, (size_t) TEMPLATE_CGROUPS_MAX);
             i++)
                keep[n++] = e->cgroup_fds[i];
        return close_fds_except(keep, n);
}

/* The payload starts with its network up, or not at all. */
static void wait_for_network(const SandboxExec *e) {
        char c = 0;
        ssize_t k;

        if (e->network_ready_fd < 0)
                return;
        do
                k = read(e->network_ready_fd, &c, 1);
        while (k < 0 && errno == EINTR);
        if (k != 1 || c != '1')
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, k < 0 ? errno : ENETDOWN,
                                "network (slirp4netns)", 125);
        safe_close(e->network_ready_fd);
}

/* What PID 1 does first whatever starts the payload: only the exec's fds, the exec's network
 * namespace, the root built and entered, its signals on a signalfd, the network up, and the
 * socket to the payload. On failure it reports and exits. */
static void init_prologue(const SandboxExec *e, SandboxInit *ret) {
        SetupError err = {};
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        (void) prctl(PR_SET_NAME, (unsigned long) "sandbox-init", 0, 0, 0);
        /* Our memory holds nothing secret, but keep /proc/1 unreadable for the payload anyway.
         * Nobody needs to open our /proc entries: slirp4netns gets the network namespace as an fd. */
        (void) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

        r = keep_exec_fds(e);
        if (r < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -r, "close fds", 125);
        /* Into the sandboxes' cgroup before anything starts ("0": the writer itself; no process is
         * ever moved by its number), and the cgroup namespace rooted there. */
        if (e->in_payload) {
                if (write(e->payload_procs_fd, "0", 1) < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                                "join the sandboxes' cgroup", 125);
                if (unshare(CLONE_NEWCGROUP) < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                                "cgroup namespace", 125);
                safe_close(e->payload_procs_fd);
        }
        /* With a network, the namespace slirp4netns serves (owned by its user namespace), before
         * anything is set up in it (lo). */
        if (e->netns_fd >= 0) {
                if (setns(e->netns_fd, CLONE_NEWNET) < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                        "join network namespace", 125);
                safe_close(e->netns_fd);
        }
        /* For the usage report, from the runner's /proc while we still see it: our own I/O
         * counters (which take up those of the children we reap) and our PID namespace's last
         * PID (the file answers for the reader's namespace). */
        ret->io_fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
        ret->last_pid_fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
        r = setup_root(e, &err);
        if (r < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, err.error, err.step, 125);
        ret->exec_dir_fd = -EBADF;
        ret->listener = -EBADF;
        if (e->prepared_fd >= 0) {
                /* Opened before anything of the sandbox runs; only root can write in it. */
                ret->exec_dir_fd = open("/exec", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (ret->exec_dir_fd < 0)
                        sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno,
                                                "open /exec", 125);
        }

        ret->signal_fd = sandbox_init_signals();
        if (ret->signal_fd < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -ret->signal_fd,
                                        "signalfd", 125);
        wait_for_network(e);
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ret->sync) < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, errno, "socketpair", 125);
}

_noreturn_ void sandbox_run_init(const SandboxExec *exec) {
        SandboxStatus st = { .kind = SANDBOX_STATUS_EXITED };
        int payload_status_fd = -EBADF, r;
        SandboxExec x = *exec, *e = &x;
        SandboxInit init = {};
        pid_t payload = 0;

        seccomp_report_init(&st.seccomp);
        init_prologue(e, &init);
        if (e->kernel)
                run_kernel(e, &init);
        if (e->template_fd >= 0)
                payload_status_fd = start_payload_template(e, &init, &st);
        if (e->prepared_fd >= 0)
                /* Until the exec comes; then its code is in /exec and e has its timeout. */
                sandbox_prepared_wait(e, &init, payload_status_fd, &st);
        sandbox_report_start(e->status_fd, st.start);
        if (st.start != SANDBOX_START_TEMPLATE)
                payload = start_payload_cold(e, &init);

        r = sandbox_supervise_payload(e, &init, payload, payload_status_fd, &st);
        if (r < 0)
                sandbox_report_and_exit(e->status_fd, SANDBOX_STATUS_SETUP_FAILED, -r, "user namespace",
                                        125);
        _exit(0);
}

int sandbox_seed_font_cache(int scratch_fd, uid_t uid, gid_t gid) {
        _cleanup_closedir_ DIR *d = NULL;
        _cleanup_close_ int dst_dir = -EBADF;
        struct dirent *de;

        if (mkdirat(scratch_fd, "tmp/matplotlib", 0700) < 0)
                return -errno;
        dst_dir = openat(scratch_fd, "tmp/matplotlib", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dst_dir < 0 || fchown(dst_dir, uid, gid) < 0)
                return -errno;
        d = opendir(SANDBOX_FONT_CACHE_DIR);
        if (!d)
                return 0;
        FOREACH_DIRENT(de, d, break) { /* a cache: what could not be read is rebuilt */
                _cleanup_close_ int in = -EBADF, out = -EBADF;
                struct stat st;
                off_t off = 0;

                if (!startswith(de->d_name, "fontlist-") || !endswith(de->d_name, ".json"))
                        continue;
                in = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20))
                        continue;
                out = openat(dst_dir, de->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             0600);
                if (out < 0)
                        continue;
                while (off < st.st_size && sendfile(out, in, &off, (size_t) (st.st_size - off)) > 0)
                        ;
                /* A cut or foreign-owned copy is worse than none: matplotlib would rebuild anyway. */
                if (off != st.st_size || fchown(out, uid, gid) < 0)
                        (void) unlinkat(dst_dir, de->d_name, 0);
        }
        return 0;
}

int sandbox_build_root(const SandboxExec *e, const char **ret_step) {
        SetupError err = {};
        int r;

        r = setup_root(e, &err);
        if (r < 0)
                *ret_step = err.step;
        return r < 0 ? -err.error : 0;
}
