/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Snapshots of /workspace/outputs and the artifact selection: what an exec created or changed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds for walking a directory tree that hostile code controls. */
#define OUTPUTS_DEPTH_MAX 16
#define OUTPUTS_ENTRIES_MAX 20000

typedef struct OutputEntry {
        char *path;          /* relative to the outputs directory, '/'-separated */
        uint64_t size;
        int64_t mtime_nsec;
} OutputEntry;

typedef struct OutputSet {
        OutputEntry *entries; /* sorted by path (bytewise) */
        size_t n;
        bool truncated;       /* the walk hit a bound */
} OutputSet;

/* Walks the tree below dir_fd without following symlinks and records every regular file. */
int output_set_scan(int dir_fd, OutputSet *ret);
/* Same with explicit bounds: files at most max_depth components deep, at most max_entries. */
int output_set_scan_bounded(int dir_fd, unsigned max_depth, size_t max_entries, OutputSet *ret);
void output_set_done(OutputSet *s);
int output_set_add(OutputSet *s, const char *path, uint64_t size, int64_t mtime_nsec);
void output_set_sort(OutputSet *s);

/* Entries of 'after' that are new or whose (mtime, size) differ from 'before'. Both must be
 * sorted; the result is sorted and borrows the path strings of 'after'. */
int output_set_diff(const OutputSet *before, const OutputSet *after, OutputEntry ***ret, size_t *ret_n);

typedef struct ArtifactLimits {
        uint64_t max_file_bytes;
        uint64_t max_files;
        uint64_t max_total_bytes;
} ArtifactLimits;

/* Marks in 'chosen' which of the n changed entries fit the limits, taken in path order and
 * skipping what does not fit. Returns the number skipped. */
size_t artifacts_select(OutputEntry *const *changed, size_t n, const ArtifactLimits *limits, bool *chosen);
