/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* envd's filesystem RPCs on an E2B sandbox (http-e2b-fs.c), routes of its traffic (http-apis.c). */
#pragma once

#include "http-router.h"

/* The prefix of their paths: POST /filesystem.Filesystem/<method>. */
#define E2B_FS "/filesystem.Filesystem/"

int http_e2b_fs_stat(HttpRequest *req);
int http_e2b_fs_list_dir(HttpRequest *req);
int http_e2b_fs_make_dir(HttpRequest *req);
int http_e2b_fs_move(HttpRequest *req);
int http_e2b_fs_remove(HttpRequest *req);
int http_e2b_fs_watch_dir(HttpRequest *req);
int http_e2b_fs_watcher(HttpRequest *req);
