/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Parsing of integers, sizes and booleans from configuration and protocol text. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int safe_atou64(const char *s, uint64_t *ret);
int safe_atoi64(const char *s, int64_t *ret);
/* "512M", "2G", "1024", "64k" (base 1024). */
int parse_size(const char *s, uint64_t *ret);
/* 1,true,yes,on → 1; 0,false,no,off → 0; else -EINVAL. */
int parse_boolean(const char *s);
/* "1", "0.5", "2" CPUs → percent (100 per CPU). */
int parse_cpus(const char *s, uint64_t *ret_percent);
/* The value of "<field>: N" lines in /proc text (/proc/<pid>/io: "wchar"), within 'size' bytes;
 * -ENOENT without it, -EINVAL when it is not a number. */
int parse_proc_field(const char *text, size_t size, const char *field, uint64_t *ret);
/* Reads an open /proc/<pid>/io (from offset 0: the fd may be read again) and returns its wchar:
 * the bytes the task (and the children it reaped) passed to write(2) and its relatives. */
int proc_io_read_wchar(int fd, uint64_t *ret);
