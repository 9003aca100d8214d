-- Golden check runs (docs/CHECKS.md): the timed request with the sample columns of `samples`,
-- kept in their own table (as canary runs are) so no latency baseline, breaker, report or export
-- that reads `samples` ever mixes them in; plus the check's name, its verdict, why, and the start
-- of the answer. A few rows per target and hour: no partitions.
CREATE TABLE check_runs (
    id                  uuid             NOT NULL PRIMARY KEY,
    provider            text             NOT NULL,
    model               text             NOT NULL,
    route               text             NOT NULL DEFAULT '',
    region              text             NOT NULL,
    scheduled_at        timestamptz      NOT NULL,
    started_at          timestamptz      NOT NULL,
    dns_ms              double precision,
    connect_ms          double precision,
    tls_ms              double precision,
    ttfb_ms             double precision,
    ttft_ms             double precision,
    ttfr_ms             double precision,
    total_ms            double precision,
    input_tokens        bigint,
    output_tokens       bigint,
    tokens_per_s        double precision,
    status              integer,
    outcome             text             NOT NULL,
    error               text,
    request_id          text,
    adherence_ok        boolean,
    cost_usd            double precision,
    retry_after_s       double precision,
    proxy_ms            double precision,
    check_name          text             NOT NULL,
    verdict             text             NOT NULL,
    why                 text             NOT NULL DEFAULT '',
    answer              text             NOT NULL DEFAULT ''
);
CREATE INDEX check_runs_region_started ON check_runs (region, started_at);
CREATE INDEX check_runs_started ON check_runs (started_at);
