/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Artifact MIME types from file extensions. */
#pragma once

/* Never NULL: unknown extensions map to application/octet-stream. */
const char *mime_type_from_name(const char *name);
