/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Talking to io.scopebox.SessionManager1 and io.scopebox.StorageAgent1 (docs/dbus-api.md): method calls
 * and reply decoding. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "config.h"
#include "macro.h"

/* How long the gateway waits for the session manager. The manager answers every call on its own
 * (429 when a queue times out), and one that stops answering altogether (stopped, stuck) is found
 * out by the gateway's pings within seconds (http-health.h), so these only catch a call lost in a
 * manager that is otherwise alive: they are generous, a client's own timeout is the one that
 * matters. */
#define BUS_TIMEOUT_HEALTH_USEC   (15U * USEC_PER_SEC)
/* On top of the longest wait the configuration allows: the manager's own work and scheduling. */
#define BUS_TIMEOUT_SLACK_USEC    (60U * USEC_PER_SEC)
/* A call the manager answers at once, not queued behind the session (CancelExec). */
#define BUS_TIMEOUT_SHORT_USEC    BUS_TIMEOUT_HEALTH_USEC

/* Creation waits for a create slot, release for the session; both may archive or restore a
 * workspace (SANDBOX_ARCHIVE_TIMEOUT_S). */
uint64_t bus_timeout_session_usec(const Config *c);
/* An exec waits for its session, then for an exec slot (each up to SANDBOX_QUEUE_TIMEOUT_SECONDS),
 * then runs for up to its timeout. */
uint64_t bus_timeout_exec_usec(const Config *c, uint64_t timeout_ms);
/* A file call waits for its session, which may be running an exec of up to
 * SANDBOX_EXEC_TIMEOUT_CAP_MS. */
uint64_t bus_timeout_files_usec(const Config *c);

/* A dify-sandbox run waits in the manager's queue behind the others (up to MAX_REQUESTS, and those
 * of clients that went away), MAX_WORKERS of them at a time, each for up to WORKER_TIMEOUT, then
 * runs itself. */
uint64_t bus_timeout_run_usec(const Config *c);

/* A new method call on the session manager's object. */
int session_manager_new_call(sd_bus *bus, const char *member, sd_bus_message **ret);

/* How long the gateway waits for the storage agent. The agent bounds a transfer by
 * SANDBOX_ARCHIVE_TIMEOUT_S (120 s); on top of that come its activation and scheduling. */
uint64_t bus_timeout_storage_usec(const Config *c);
/* A sweep lists and deletes page by page, many requests to the provider: this much on top. */
#define BUS_TIMEOUT_STORAGE_GC_EXTRA_USEC (600U * USEC_PER_SEC)
uint64_t bus_timeout_storage_gc_usec(const Config *c);

/* A new method call on the storage agent's object. */
int storage_agent_new_call(sd_bus *bus, const char *member, sd_bus_message **ret);

/* Reads the element that is next in an array (there is one), or fails. */
typedef int (*BusArrayElement)(sd_bus_message *m, void *userdata);

/* Reads an array of 'contents' (the element's signature) with 'element', once for each element,
 * and leaves the array: the one walk of an array every reader of the contract uses. An array of
 * more than 'max' elements fails with -EBADMSG before 'element' sees the one too many. */
int bus_message_read_array(sd_bus_message *m, const char *contents, size_t max, BusArrayElement element,
                           void *userdata);

/* One entry of an a{sv}: a reply's info the gateway and scopeboxctl read, or a method's options. */
typedef struct BusDictField {
        const char *name;
        char type;        /* 'b' bool, 'u' uint32_t, 'i' int32_t, 't' uint64_t, 'x' int64_t,
                           * 's' const char *, 'h' int (an fd),
                           * 0: read by `read` from a variant of `signature` */
        size_t offset;
        const char *signature;
        int (*read)(sd_bus_message *m, void *dest);
} BusDictField;

/* A struct and the table that reads it, declared from one list: a macro LIST(F, T) that calls
 * F(T, key, letter, member) for each member of the struct T read from the a{sv}, e.g.
 *
 *   #define SESSION_INFO_FIELDS(F, T) \
 *           F(T, "state", s, state)   \
 *           F(T, "uid",   u, uid)
 *
 * Inside the struct, LIST(BUS_DICT_MEMBER, T) declares the members, the type of each the C type
 * of its letter (BusDictField.type); LIST(BUS_DICT_FIELD, T) makes the table's entries. */
#define BUS_DICT_CTYPE_b bool
#define BUS_DICT_CTYPE_u uint32_t
#define BUS_DICT_CTYPE_i int32_t
#define BUS_DICT_CTYPE_t uint64_t
#define BUS_DICT_CTYPE_x int64_t
#define BUS_DICT_CTYPE_s const char *
#define BUS_DICT_CTYPE_h int
#define BUS_DICT_MEMBER(T, key, letter, member) BUS_DICT_CTYPE_##letter member;
#define BUS_DICT_FIELD(T, key, letter, member) { key, (#letter)[0], offsetof(T, member) },

/* Reads an a{sv} into the struct at 'base'. Unknown keys are skipped (the manager may grow new ones);
 * a known key with another type fails with -EBADMSG. Strings and fds stay owned by the message. */
int bus_message_read_dict(sd_bus_message *m, const BusDictField fields[], void *base);

/* As bus_message_read_dict(), for a method's a{sv} of options: an unknown key, or a known one of
 * another type, is an InvalidArgs error in 'error' that names it. */
int bus_message_read_options(sd_bus_message *m, const BusDictField fields[], void *base,
                             sd_bus_error *error);

/* The content of a data fd a reply carries (a memfd). Mapped when it is sealed against shrinking;
 * copied otherwise, since the sender could shrink it under a mapping and turn our reads into
 * SIGBUS. */
typedef struct BusData {
        void *map;
        size_t map_size;
        char *copy;
        const uint8_t *data;    /* never NULL after a successful load */
        size_t size;
} BusData;

/* -EBADMSG if the fd is not a regular file (memfd), -EFBIG if it holds more than 'max' bytes. */
int bus_data_load(int fd, uint64_t max, BusData *ret);
void bus_data_done(BusData *d);
