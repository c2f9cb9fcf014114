/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /metrics: the gateway's and the session manager's counters in the OpenMetrics text format. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "gateway-server.h"

#define METRICS_CONTENT_TYPE "application/openmetrics-text; version=1.0.0; charset=utf-8"

/* Bounds on what GetMetrics() may send; more is a malformed reply. */
#define METRICS_LABELS_MAX  16U
#define METRICS_BUCKETS_MAX 32U
#define METRICS_LABEL_MAX   32U   /* bytes of a label value */

typedef struct MetricsLabeled {
        struct {
                const char *label;   /* [a-z0-9_]+, owned by the reply */
                uint64_t value;
        } v[METRICS_LABELS_MAX];
        size_t n;
} MetricsLabeled;

typedef struct MetricsBuckets {
        struct {
                uint64_t le_usec;    /* upper bound, ascending */
                uint64_t count;      /* cumulative */
        } b[METRICS_BUCKETS_MAX];
        size_t n;
} MetricsBuckets;

/* The reply of io.scopebox.SessionManager1.GetMetrics() (docs/dbus-api.md). */
typedef struct ManagerMetrics {
        uint64_t start_time_usec;
        uint32_t sessions;
        uint64_t sessions_started, sessions_ended, sessions_reaped;
        uint32_t execs_running, execs_waiting, creates_running, creates_waiting, runs_running, runs_waiting;
        uint64_t runs;
        MetricsLabeled execs;         /* by outcome */
        MetricsLabeled kills;         /* by reason */
        MetricsBuckets exec_duration;
        uint64_t exec_duration_sum_usec, exec_duration_count;
        uint64_t archive_bytes_written, archive_bytes_restored;
        uint64_t archive_failures;
        uint64_t archive_retries;
        uint64_t archives_skipped;
        uint64_t archives_abandoned;
        uint64_t restore_failures;
        uint64_t archives_quarantined;
        uint32_t archives_pending;
} ManagerMetrics;

/* What the gateway counts itself. */
typedef struct GatewayMetrics {
        uint64_t start_time_usec;     /* 0: unknown */
        uint64_t responses[6];        /* by status class: [2] 2xx ... [5] 5xx, [0] none sent */
        const LoopStats *loop;        /* NULL: left out */
        uint64_t connections_made_room; /* answered 503 and closed to make room */
        uint64_t connections_over;    /* taken past the bounds, none being closable for them */
        uint64_t body_bytes;          /* request bodies reserved now, with what they parse into */
        uint64_t response_bytes;      /* responses queued now */
        uint64_t body_budget;         /* 0: the three budget gauges are left out */
} GatewayMetrics;

/* Reads and checks a GetMetrics() reply: -EBADMSG when it is malformed (label values that are no
 * identifiers, a histogram that is not cumulative). Label strings stay owned by the message. */
int manager_metrics_read(sd_bus_message *reply, ManagerMetrics *ret);

/* The exposition, ending in "# EOF". 'm' NULL: the session manager did not answer (not running), its
 * families are left out and scopebox_session_manager_up is 0. */
int metrics_render(const GatewayMetrics *g, const ManagerMetrics *m, char **ret, size_t *ret_size);
