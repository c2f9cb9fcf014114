/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Parsing of integers, sizes and booleans from configuration and protocol text. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

int safe_atou64(const char *s, uint64_t *ret);
int safe_atoi64(const char *s, int64_t *ret);
/* "512M", "2G", "1024", "64k" (base 1024). */
int parse_size(const char *s, uint64_t *ret);
/* 1,true,yes,on → 1; 0,false,no,off → 0; else -EINVAL. */
int parse_boolean(const char *s);
/* "1", "0.5", "2" CPUs → percent (100 per CPU). */
int parse_cpus(const char *s, uint64_t *ret_percent);
