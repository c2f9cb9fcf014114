/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Snapshots of /workspace/outputs and the artifact selection: what an exec created or changed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds for walking a directory tree that hostile code controls. Every entry counts against
 * the entries bound, whatever its type, and a directory that is entered counts
 * OUTPUTS_DIR_COST more (opening and reading one costs about as much as looking at that many
 * entries): 100,000 empty directories cost a walk no more than a few thousand files. The walk of
 * outputs/ after each exec takes a few milliseconds at worst; an exec returns at most
 * SANDBOX_MAX_FILES_PER_EXEC (≤ 1000) files anyway. */
#define OUTPUTS_DEPTH_MAX 16
#define OUTPUTS_ENTRIES_MAX 4096
#define OUTPUTS_DIR_COST 16
/* No set ever holds more files than this, whatever bound its walk had. */
#define OUTPUTS_SET_MAX 65536

typedef struct OutputEntry {
        char *path;          /* relative to the outputs directory, '/'-separated */
        uint64_t size;
        int64_t mtime_nsec;
} OutputEntry;

typedef struct OutputSet {
        OutputEntry *entries; /* sorted by path (bytewise) */
        size_t n;
        size_t allocated;
        size_t visited;       /* entries of every type the walk looked at */
        bool truncated;       /* the walk hit a bound */
} OutputSet;

/* Walks the tree below dir_fd without following symlinks and records every regular file. */
int output_set_scan(int dir_fd, OutputSet *ret);
/* Same with explicit bounds: files at most max_depth components deep, looking at no more than
 * max_entries entries (files, directories, links, anything). */
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
