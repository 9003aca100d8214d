-- Long-prompt probe runs (docs/CONFIGURATION.md#probeworkload, docs/STORAGE.md): the timed request
-- with the sample columns of `samples` (ratelimit ones included), kept in their own table so the
-- tiny probe's baselines, breakers, reports and export never mix them in; plus the size asked
-- (`workload_tokens`; `input_tokens` is what the provider counted). A start reads the baseline
-- window back to rebuild each target's per-size TTFT series. A few rows per target and hour:
-- no partitions.
CREATE TABLE workload_runs (
    id                           TEXT    NOT NULL PRIMARY KEY,
    provider                     TEXT    NOT NULL,
    model                        TEXT    NOT NULL,
    route                        TEXT    NOT NULL DEFAULT '',
    region                       TEXT    NOT NULL,
    scheduled_at                 TEXT    NOT NULL,
    started_at                   TEXT    NOT NULL,
    dns_ms                       REAL,
    connect_ms                   REAL,
    tls_ms                       REAL,
    ttfb_ms                      REAL,
    ttft_ms                      REAL,
    ttfr_ms                      REAL,
    total_ms                     REAL,
    input_tokens                 INTEGER,
    output_tokens                INTEGER,
    tokens_per_s                 REAL,
    status                       INTEGER,
    outcome                      TEXT    NOT NULL,
    error                        TEXT,
    request_id                   TEXT,
    adherence_ok                 INTEGER,
    cost_usd                     REAL,
    retry_after_s                REAL,
    proxy_ms                     REAL,
    ratelimit_requests_remaining INTEGER,
    ratelimit_requests_limit     INTEGER,
    ratelimit_requests_reset_at  TEXT,
    ratelimit_tokens_remaining   INTEGER,
    ratelimit_tokens_limit       INTEGER,
    ratelimit_tokens_reset_at    TEXT,
    workload_tokens              INTEGER NOT NULL
);
CREATE INDEX workload_runs_region_started ON workload_runs (region, started_at);
CREATE INDEX workload_runs_started ON workload_runs (started_at);
