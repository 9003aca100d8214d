-- Golden check runs (docs/CHECKS.md): the timed request with the sample columns of `samples`,
-- kept in their own table (as canary runs are) so no latency baseline, breaker, report or export
-- that reads `samples` ever mixes them in; plus the check's name, its verdict, why, and the start
-- of the answer. A few rows per target and hour: no partitions.
CREATE TABLE check_runs (
    id                  TEXT    NOT NULL PRIMARY KEY,
    provider            TEXT    NOT NULL,
    model               TEXT    NOT NULL,
    route               TEXT    NOT NULL DEFAULT '',
    region              TEXT    NOT NULL,
    scheduled_at        TEXT    NOT NULL,
    started_at          TEXT    NOT NULL,
    dns_ms              REAL,
    connect_ms          REAL,
    tls_ms              REAL,
    ttfb_ms             REAL,
    ttft_ms             REAL,
    ttfr_ms             REAL,
    total_ms            REAL,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    tokens_per_s        REAL,
    status              INTEGER,
    outcome             TEXT    NOT NULL,
    error               TEXT,
    request_id          TEXT,
    adherence_ok        INTEGER,
    cost_usd            REAL,
    retry_after_s       REAL,
    proxy_ms            REAL,
    check_name          TEXT    NOT NULL,
    verdict             TEXT    NOT NULL,
    why                 TEXT    NOT NULL DEFAULT '',
    answer              TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX check_runs_region_started ON check_runs (region, started_at);
CREATE INDEX check_runs_started ON check_runs (started_at);
