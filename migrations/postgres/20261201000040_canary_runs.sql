-- Canary runs (docs/CANARY.md): the timed probe with the sample columns of `samples`, kept in
-- their own table so no latency baseline, breaker, report or export that reads `samples` ever
-- mixes them in; plus what the answers and the provider's model identity said. A few rows per
-- target and hour: no partitions.
CREATE TABLE canary_runs (
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
    prompt_version      integer          NOT NULL,
    correct             integer          NOT NULL,
    total               integer          NOT NULL,
    answers_fingerprint text             NOT NULL,
    answers             text             NOT NULL DEFAULT '[]',
    echo_model          text,
    system_fingerprint  text,
    upstream_provider   text,
    logprob_tokens      bigint,
    logprob_sum         double precision
);
CREATE INDEX canary_runs_region_started ON canary_runs (region, started_at);
CREATE INDEX canary_runs_started ON canary_runs (started_at);
