/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's filesystem RPCs on an E2B sandbox (http-e2b-fs.c), routes of its traffic (http-apis.c). */
#pragma once

#include <json-c/json.h>

#include "http-router.h"
#include "id.h"

/* The prefix of their paths: POST /filesystem.Filesystem/<method>. */
#define E2B_FS "/filesystem.Filesystem/"
/* Their requests name a path or two: no more than this is read. */
#define E2B_FS_BODY_MAX (64U * 1024U)

uint64_t http_e2b_fs_body_max(const Config *config);

int http_e2b_fs_stat(HttpRequest *req);
int http_e2b_fs_list_dir(HttpRequest *req);
int http_e2b_fs_make_dir(HttpRequest *req);
int http_e2b_fs_move(HttpRequest *req);
int http_e2b_fs_remove(HttpRequest *req);
int http_e2b_fs_watch_dir(HttpRequest *req);
int http_e2b_fs_watcher(HttpRequest *req);

/* What http-e2b-watch.c shares with the unary calls (http-e2b-fs.c): */
/* The sandbox, the user and the body of a call (unary: JSON; WatchDir: one envelope of JSON): 1 with
 * the message's object (owned), 0 when an answer was prepared. */
int e2b_fs_begin(HttpRequest *req, char id[static SESSION_ID_LEN + 1], json_object **ret);
/* The path in member 'name' of the message as the workspace's: 1 with it relative to the workspace
 * and the root the client named it under, 0 when a client error was prepared. */
int e2b_fs_member_path(HttpRequest *req, json_object *o, const char *name, char **ret_relative,
                       const char **ret_root);
/* A Connect error, unary or as a stream's end (WatchDir). */
int e2b_fs_reply_error(HttpRequest *req, unsigned status, const char *code, const char *before,
                       const char *path, const char *after);
