-- Long-prompt probe runs (docs/CONFIGURATION.md#probeworkload, docs/STORAGE.md): the timed request
-- with the sample columns of `samples` (ratelimit ones included), kept in their own table so the
-- tiny probe's baselines, breakers, reports and export never mix them in; plus the size asked
-- (`workload_tokens`; `input_tokens` is what the provider counted). A start reads the baseline
-- window back to rebuild each target's per-size TTFT series. A few rows per target and hour:
-- no partitions.
CREATE TABLE workload_runs (
    id                           uuid             NOT NULL PRIMARY KEY,
    provider                     text             NOT NULL,
    model                        text             NOT NULL,
    route                        text             NOT NULL DEFAULT '',
    region                       text             NOT NULL,
    scheduled_at                 timestamptz      NOT NULL,
    started_at                   timestamptz      NOT NULL,
    dns_ms                       double precision,
    connect_ms                   double precision,
    tls_ms                       double precision,
    ttfb_ms                      double precision,
    ttft_ms                      double precision,
    ttfr_ms                      double precision,
    total_ms                     double precision,
    input_tokens                 bigint,
    output_tokens                bigint,
    tokens_per_s                 double precision,
    status                       integer,
    outcome                      text             NOT NULL,
    error                        text,
    request_id                   text,
    adherence_ok                 boolean,
    cost_usd                     double precision,
    retry_after_s                double precision,
    proxy_ms                     double precision,
    ratelimit_requests_remaining bigint,
    ratelimit_requests_limit     bigint,
    ratelimit_requests_reset_at  timestamptz,
    ratelimit_tokens_remaining   bigint,
    ratelimit_tokens_limit       bigint,
    ratelimit_tokens_reset_at    timestamptz,
    workload_tokens              bigint           NOT NULL
);
CREATE INDEX workload_runs_region_started ON workload_runs (region, started_at);
CREATE INDEX workload_runs_started ON workload_runs (started_at);
