/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* GET /metrics: the gateway's and the session manager's counters in the OpenMetrics text format
 * (https://github.com/OpenObservability/OpenMetrics/blob/main/specification/OpenMetrics.md).
 * Behind the same authorization as the rest of the sidecar API. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "bus-client.h"
#include "http-apis.h"
#include "http-metrics.h"
#include "http-router.h"
#include "log.h"
#include "string-util.h"

static bool label_is_valid(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > METRICS_LABEL_MAX)
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
                        return false;
        return true;
}

static int read_label(sd_bus_message *m, void *userdata) {
        MetricsLabeled *l = userdata;
        const char *label;
        uint64_t value;
        int r;

        r = sd_bus_message_read(m, "{st}", &label, &value);
        if (r < 0)
                return r;
        if (!label_is_valid(label))
                return -EBADMSG;
        for (size_t i = 0; i < l->n; i++)
                if (streq(l->v[i].label, label))
                        return -EBADMSG;
        l->v[l->n].label = label;
        l->v[l->n].value = value;
        l->n++;
        return 0;
}

static int read_labeled(sd_bus_message *m, void *dest) {
        *(MetricsLabeled *) dest = (MetricsLabeled) {};
        return bus_message_read_array(m, "{st}", METRICS_LABELS_MAX, read_label, dest);
}

static int read_bucket(sd_bus_message *m, void *userdata) {
        MetricsBuckets *b = userdata;
        int r = sd_bus_message_read(m, "(tt)", &b->b[b->n].le_usec, &b->b[b->n].count);

        if (r >= 0)
                b->n++;
        return r;
}

static int read_buckets(sd_bus_message *m, void *dest) {
        *(MetricsBuckets *) dest = (MetricsBuckets) {};
        return bus_message_read_array(m, "(tt)", METRICS_BUCKETS_MAX, read_bucket, dest);
}

static const BusDictField manager_metrics_fields[] = {
        { "start_time_usec",        't', offsetof(ManagerMetrics, start_time_usec)        },
        { "sessions",               'u', offsetof(ManagerMetrics, sessions)               },
        { "sessions_started",       't', offsetof(ManagerMetrics, sessions_started)       },
        { "sessions_ended",         't', offsetof(ManagerMetrics, sessions_ended)         },
        { "sessions_reaped",        't', offsetof(ManagerMetrics, sessions_reaped)        },
        { "execs_running",          'u', offsetof(ManagerMetrics, execs_running)          },
        { "execs_waiting",          'u', offsetof(ManagerMetrics, execs_waiting)          },
        { "creates_running",        'u', offsetof(ManagerMetrics, creates_running)        },
        { "creates_waiting",        'u', offsetof(ManagerMetrics, creates_waiting)        },
        { "runs_running",           'u', offsetof(ManagerMetrics, runs_running)           },
        { "runs_waiting",           'u', offsetof(ManagerMetrics, runs_waiting)           },
        { "runs",                   't', offsetof(ManagerMetrics, runs)                   },
        { "execs",                  0,   offsetof(ManagerMetrics, execs), "a{st}", read_labeled },
        { "kills",                  0,   offsetof(ManagerMetrics, kills), "a{st}", read_labeled },
        { "exec_duration_buckets",  0,   offsetof(ManagerMetrics, exec_duration), "a(tt)", read_buckets },
        { "exec_duration_sum_usec", 't', offsetof(ManagerMetrics, exec_duration_sum_usec) },
        { "exec_duration_count",    't', offsetof(ManagerMetrics, exec_duration_count)    },
        { "archive_bytes_written",  't', offsetof(ManagerMetrics, archive_bytes_written)  },
        { "archive_bytes_restored", 't', offsetof(ManagerMetrics, archive_bytes_restored) },
        { "archive_failures",       't', offsetof(ManagerMetrics, archive_failures)       },
        { "archive_retries",        't', offsetof(ManagerMetrics, archive_retries)        },
        { "archives_skipped",       't', offsetof(ManagerMetrics, archives_skipped)       },
        { "archives_abandoned",     't', offsetof(ManagerMetrics, archives_abandoned)     },
        { "restore_failures",       't', offsetof(ManagerMetrics, restore_failures)       },
        { "archives_quarantined",   't', offsetof(ManagerMetrics, archives_quarantined)   },
        { "archives_pending",       'u', offsetof(ManagerMetrics, archives_pending)       },
        {}
};

int manager_metrics_read(sd_bus_message *reply, ManagerMetrics *ret) {
        ManagerMetrics m = {};
        const MetricsBuckets *b = &m.exec_duration;
        int r;

        r = bus_message_read_dict(reply, manager_metrics_fields, &m);
        if (r < 0)
                return r;

        /* A histogram's buckets grow with their bounds and never exceed the count. */
        for (size_t i = 0; i < b->n; i++)
                if (b->b[i].le_usec == 0 || b->b[i].count > m.exec_duration_count ||
                    (i > 0 && (b->b[i].le_usec <= b->b[i - 1].le_usec || b->b[i].count < b->b[i - 1].count)))
                        return -EBADMSG;

        *ret = m;
        return 0;
}

static_assert(LOOP_STALL_BUCKETS <= METRICS_BUCKETS_MAX, "too many loop stall buckets");

/* Microseconds as seconds, exactly: "0.025", "1.0" (the Go float form the le label wants). */
static int append_seconds(JsonWriter *w, uint64_t usec) {
        char frac[8];
        size_t n;

        (void) snprintf(frac, sizeof(frac), "%06" PRIu64, usec % USEC_PER_SEC);
        for (n = 6; n > 1 && frac[n - 1] == '0'; n--)
                ;
        frac[n] = 0;
        return json_writer_appendf(w, "%" PRIu64 ".%s", usec / USEC_PER_SEC, frac);
}

static int append_family(JsonWriter *w, const char *name, const char *type, const char *unit,
                         const char *help) {
        int r;

        r = json_writer_appendf(w, "# TYPE %s %s\n", name, type);
        if (r >= 0 && unit)
                r = json_writer_appendf(w, "# UNIT %s %s\n", name, unit);
        if (r >= 0)
                r = json_writer_appendf(w, "# HELP %s %s\n", name, help);
        return r;
}

static int append_gauge(JsonWriter *w, const char *name, const char *help, uint64_t value) {
        int r = append_family(w, name, "gauge", NULL, help);
        return r < 0 ? r : json_writer_appendf(w, "%s %" PRIu64 "\n", name, value);
}

static int append_counter(JsonWriter *w, const char *name, const char *unit, const char *help,
                          uint64_t value) {
        int r = append_family(w, name, "counter", unit, help);
        return r < 0 ? r : json_writer_appendf(w, "%s_total %" PRIu64 "\n", name, value);
}

static int append_budget(JsonWriter *w, const GatewayMetrics *g) {
        int r;

        r = append_family(w, "scopebox_http_buffered_bytes", "gauge", "bytes",
                          "What the gateway holds for clients now: request bodies (with what they parse "
                          "into, wherever they wait) and queued responses.");
        if (r >= 0)
                r = json_writer_appendf(w, "scopebox_http_buffered_bytes{kind=\"bodies\"} %" PRIu64 "\n"
                                        "scopebox_http_buffered_bytes{kind=\"responses\"} %" PRIu64 "\n",
                                        g->body_bytes, g->response_bytes);
        if (r >= 0)
                r = append_family(w, "scopebox_http_buffer_budget_bytes", "gauge", "bytes",
                                  "The budget they share; past it a request gets 503 with Retry-After.");
        return r < 0 ? r : json_writer_appendf(w, "scopebox_http_buffer_budget_bytes %" PRIu64 "\n",
                                               g->body_budget);
}

static int append_timestamp(JsonWriter *w, const char *name, const char *help, uint64_t usec) {
        int r = append_family(w, name, "gauge", "seconds", help);
        if (r >= 0)
                r = json_writer_appendf(w, "%s ", name);
        if (r >= 0)
                r = append_seconds(w, usec);
        return r < 0 ? r : json_writer_append_str(w, "\n");
}

static int append_labeled(JsonWriter *w, const char *name, const char *label, const char *unit,
                          const char *help, const MetricsLabeled *l) {
        int r = append_family(w, name, "counter", unit, help);

        for (size_t i = 0; r >= 0 && i < l->n; i++)
                r = json_writer_appendf(w, "%s_total{%s=\"%s\"} %" PRIu64 "\n", name, label, l->v[i].label,
                                        l->v[i].value);
        return r;
}

static int append_histogram(JsonWriter *w, const char *name, const char *help, const MetricsBuckets *b,
                            uint64_t sum_usec, uint64_t count) {
        int r = append_family(w, name, "histogram", "seconds", help);

        for (size_t i = 0; r >= 0 && i < b->n; i++) {
                r = json_writer_appendf(w, "%s_bucket{le=\"", name);
                if (r >= 0)
                        r = append_seconds(w, b->b[i].le_usec);
                if (r >= 0)
                        r = json_writer_appendf(w, "\"} %" PRIu64 "\n", b->b[i].count);
        }
        if (r >= 0)
                r = json_writer_appendf(w, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum ", name, count, name);
        if (r >= 0)
                r = append_seconds(w, sum_usec);
        if (r >= 0)
                r = json_writer_appendf(w, "\n%s_count %" PRIu64 "\n", name, count);
        return r;
}

static int append_loop(JsonWriter *w, const LoopStats *l) {
        MetricsBuckets b = { .n = LOOP_STALL_BUCKETS };
        uint64_t cumulative = 0;
        int r;

        for (size_t i = 0; i < LOOP_STALL_BUCKETS; i++) {
                cumulative += l->buckets[i];
                b.b[i].le_usec = loop_stall_bounds_usec[i];
                b.b[i].count = cumulative;
        }
        r = append_histogram(w, "scopebox_gateway_loop_stall_seconds", "How long each dispatch of the "
                             "gateway's event loop took (an HTTP round, a bus message, a timer): the time "
                             "every other client waited.", &b, l->sum_usec, l->count);
        /* No unit line: the name does not end in it. */
        if (r >= 0)
                r = append_family(
                        w, "scopebox_gateway_loop_stall_seconds_max", "gauge", NULL,
                        "The longest dispatch of the gateway's event loop since it started, in seconds.");
        if (r >= 0)
                r = json_writer_append_str(w, "scopebox_gateway_loop_stall_seconds_max ");
        if (r >= 0)
                r = append_seconds(w, l->max_usec);
        return r < 0 ? r : json_writer_append_str(w, "\n");
}

/* One family of the session manager's, as the table in append_manager() lists them. */
typedef enum MetricKind {
        METRIC_GAUGE,
        METRIC_COUNTER,
        METRIC_LABELED,
        METRIC_HISTOGRAM,
        METRIC_TIMESTAMP,
} MetricKind;

typedef struct MetricFamily {
        MetricKind kind;
        const char *name;
        const char *help;
        uint64_t value;                 /* gauge, counter; timestamp: usec; histogram: the sum in usec */
        const char *label, *unit;       /* labeled: the label's name, the family's unit (or NULL) */
        const MetricsLabeled *labeled;  /* labeled */
        const MetricsBuckets *buckets;  /* histogram, with its 'count' */
        uint64_t count;
} MetricFamily;

static int append_families(JsonWriter *w, const MetricFamily *f, size_t n) {
        int r = 0;

        for (size_t i = 0; r >= 0 && i < n; i++)
                switch (f[i].kind) {
                case METRIC_GAUGE:
                        r = append_gauge(w, f[i].name, f[i].help, f[i].value);
                        break;
                case METRIC_COUNTER:
                        r = append_counter(w, f[i].name, NULL, f[i].help, f[i].value);
                        break;
                case METRIC_LABELED:
                        r = append_labeled(w, f[i].name, f[i].label, f[i].unit, f[i].help, f[i].labeled);
                        break;
                case METRIC_HISTOGRAM:
                        r = append_histogram(w, f[i].name, f[i].help, f[i].buckets, f[i].value, f[i].count);
                        break;
                case METRIC_TIMESTAMP:
                        r = append_timestamp(w, f[i].name, f[i].help, f[i].value);
                        break;
                default:
                        assert(false);
                }
        return r;
}

static int append_manager(JsonWriter *w, const ManagerMetrics *m) {
        MetricsLabeled archive = {
                .v = { { "written", m->archive_bytes_written }, { "restored", m->archive_bytes_restored } },
                .n = 2,
        };
        const MetricFamily families[] = {
                { METRIC_GAUGE, "scopebox_sessions",
                  "Sidecar sessions that exist (starting, running or being released).", m->sessions },
                { METRIC_COUNTER, "scopebox_sessions_started", "Sidecar sessions that became ready.",
                  m->sessions_started },
                { METRIC_COUNTER, "scopebox_sessions_ended",
                  "Sidecar sessions started by this session manager that ended, for any reason.",
                  m->sessions_ended },
                { METRIC_COUNTER, "scopebox_sessions_reaped", "Sidecar sessions ended by their idle TTL.",
                  m->sessions_reaped },
                { METRIC_GAUGE, "scopebox_execs_running",
                  "Execs holding one of SANDBOX_MAX_CONCURRENT_EXECS slots.", m->execs_running },
                { METRIC_GAUGE, "scopebox_execs_waiting", "Execs waiting for a free exec slot.",
                  m->execs_waiting },
                { METRIC_GAUGE, "scopebox_session_creates_running",
                  "Sessions being started (SANDBOX_MAX_CONCURRENT_CREATES).", m->creates_running },
                { METRIC_GAUGE, "scopebox_session_creates_waiting",
                  "Session creates waiting for a free create slot.", m->creates_waiting },
                { METRIC_GAUGE, "scopebox_dify_runs_running", "dify-sandbox runs executing (MAX_WORKERS).",
                  m->runs_running },
                { METRIC_GAUGE, "scopebox_dify_runs_waiting", "dify-sandbox runs waiting for a worker.",
                  m->runs_waiting },
                { METRIC_COUNTER, "scopebox_dify_runs", "dify-sandbox runs accepted by the session manager.",
                  m->runs },
                { METRIC_LABELED, "scopebox_execs",
                  "Execs (sidecar and dify) by how they ended: ok, error (non-zero exit), timeout, killed "
                  "(by a signal), failed (no result), rejected (queue timeout), cancelled (the client hung "
                  "up).",
                  .label = "outcome", .labeled = &m->execs },
                { METRIC_LABELED, "scopebox_exec_kills",
                  "Execs stopped by their timeout, the OOM killer (memory), the seccomp kill list "
                  "(blocked_syscall), the tasks limit (tasks) or another signal.",
                  .label = "reason", .labeled = &m->kills },
                { METRIC_HISTOGRAM, "scopebox_exec_duration_seconds",
                  "How long execs with a result ran in their sandbox.", m->exec_duration_sum_usec,
                  .buckets = &m->exec_duration, .count = m->exec_duration_count },
                { METRIC_LABELED, "scopebox_archive_bytes",
                  "Bytes of workspace archives written (committed to storage) and restored into new "
                  "sessions.",
                  .label = "direction", .unit = "bytes", .labeled = &archive },
                { METRIC_COUNTER, "scopebox_archive_failures",
                  "Attempts to store a released session's workspace archive that failed (each retry "
                  "counts); the journal has each with its MESSAGE_ID.",
                  m->archive_failures },
                { METRIC_COUNTER, "scopebox_archive_retries", "Archive attempts made after a failed one.",
                  m->archive_retries },
                { METRIC_GAUGE, "scopebox_archives_pending",
                  "Released sessions whose workspace is kept until its archive is stored (scopeboxctl "
                  "archives list).",
                  m->archives_pending },
                { METRIC_COUNTER, "scopebox_archives_skipped",
                  "Archives that can never be stored (larger than SANDBOX_MAX_ARCHIVE_BYTES, storage block "
                  "refused); the stored one stays.",
                  m->archives_skipped },
                { METRIC_COUNTER, "scopebox_archives_abandoned",
                  "Archives given up (retry deadline passed, runner gone, superseded by a newer release): "
                  "the workspace is lost.",
                  m->archives_abandoned },
                { METRIC_COUNTER, "scopebox_restore_failures",
                  "Creates whose stored archive could not be restored (the create failed, or started empty "
                  "if so configured).",
                  m->restore_failures },
                { METRIC_COUNTER, "scopebox_archives_quarantined",
                  "Damaged archives a create moved aside to their quarantine key.",
                  m->archives_quarantined },
                { METRIC_TIMESTAMP, "scopebox_session_manager_start_time_seconds",
                  "When the session manager started; its counters start at zero then.", m->start_time_usec },
        };

        return append_families(w, families, ELEMENTSOF(families));
}

int metrics_render(const GatewayMetrics *g, const ManagerMetrics *m, char **ret, size_t *ret_size) {
        static const char *const classes[] = { "2xx", "3xx", "4xx", "5xx", "none" };
        static const unsigned class_index[] = { 2, 3, 4, 5, 0 };
        _cleanup_(json_writer_done) JsonWriter w = {};
        int r;

        r = append_family(&w, "scopebox_http_responses", "counter", NULL,
                          "HTTP requests the gateway finished, by status class (none: closed unanswered).");
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(classes); i++)
                r = json_writer_appendf(&w, "scopebox_http_responses_total{class=\"%s\"} %" PRIu64 "\n",
                                        classes[i], g->responses[class_index[i]]);
        if (r >= 0 && g->start_time_usec > 0)
                r = append_timestamp(&w, "process_start_time_seconds", "When the gateway process started.",
                                     g->start_time_usec);
        if (r >= 0 && g->loop)
                r = append_loop(&w, g->loop);
        if (r >= 0)
                r = append_counter(&w, "scopebox_http_connections_made_room", NULL,
                                   "Connections without the key answered 503 and closed to make room for "
                                   "newer ones.", g->connections_made_room);
        if (r >= 0)
                r = append_counter(&w, "scopebox_http_connections_over_bounds", NULL,
                                   "Connections taken past the per-peer or total bounds, none being "
                                   "closable for them (at 320 per address new ones wait in the listen "
                                   "backlog).",
                                   g->connections_over);
        if (r >= 0 && g->body_budget > 0)
                r = append_budget(&w, g);
        if (r >= 0)
                r = append_gauge(&w, "scopebox_session_manager_up", "Whether the session manager answered "
                                 "(it is started on demand and exits when it has no sessions).", m ? 1 : 0);
        if (r >= 0 && m)
                r = append_manager(&w, m);
        if (r >= 0)
                r = json_writer_append_str(&w, "# EOF\n");
        if (r < 0)
                return r;

        *ret = json_writer_steal(&w, ret_size);
        return *ret ? 0 : -ENOMEM;
}

static int metrics_reply(HttpRequest *req, const ManagerMetrics *m) {
        Server *s = req->server;
        GatewayMetrics g = {
                .start_time_usec = s->start_realtime_usec,
                .loop = &s->loop,
                .connections_made_room = s->n_connections_evicted,
                .connections_over = s->n_connections_over,
                .body_bytes = s->body_bytes,
                .response_bytes = s->response_bytes,
                .body_budget = s->body_budget,
        };
        HttpResponse *resp;
        char *text;
        size_t size;
        int r;

        memcpy(g.responses, s->n_responses, sizeof(g.responses));
        r = metrics_render(&g, m, &text, &size);
        if (r < 0)
                return r;
        r = http_response_new_take(HTTP_OK, text, size, &resp);
        if (r < 0)
                return r;
        resp->content_type = METRICS_CONTENT_TYPE;
        return http_request_reply(req, resp);
}

static int metrics_on_reply(HttpRequest *req, sd_bus_message *reply) {
        const sd_bus_error *e;
        ManagerMetrics m;
        int r;

        e = sd_bus_message_get_error(reply);
        if (e) {
                /* Not running is normal: it is not started for a scrape. */
                http_request_log_bus_error(
                        req, e,
                        !sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) &&
                                !sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER));
                return metrics_reply(req, NULL);
        }
        r = manager_metrics_read(reply, &m);
        if (r < 0)
                return r;
        return metrics_reply(req, &m);
}

int http_metrics_get(HttpRequest *req) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = session_manager_new_call(req->server->bus, "GetMetrics", &m);
        /* A scrape must not start the session manager (nor keep it from its idle exit). */
        if (r >= 0)
                r = sd_bus_message_set_auto_start(m, false);
        if (r >= 0)
                r = http_request_call(req, m, BUS_TIMEOUT_HEALTH_USEC, metrics_on_reply);
        if (r < 0) {
                log_debug_errno(r, "Failed to call GetMetrics(): %m");
                return metrics_reply(req, NULL);
        }
        return 0;
}
