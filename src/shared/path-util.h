/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Workspace paths from clients: lexical normalisation and confinement below /workspace. */
#pragma once

#define WORKSPACE_PATH "/workspace"
#define WORKSPACE_PATH_MAX 4096
#define WORKSPACE_NAME_MAX 255

/* Normalises a client's path like Python's os.path.normpath() after joining a relative path to
 * /workspace, and returns it relative to /workspace ("" for /workspace itself). Fails with
 * -EXDEV when the result is not /workspace or below it, -ENAMETOOLONG for overlong paths or
 * components, -EINVAL for NUL bytes or an empty path. */
int workspace_path_normalize(const char *path, char **ret_relative);
