-- Canary runs (docs/CANARY.md): the timed probe with the sample columns of `samples`, kept in
-- their own table so no latency baseline, breaker, report or export that reads `samples` ever
-- mixes them in; plus what the answers and the provider's model identity said.
CREATE TABLE canary_runs (
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
    prompt_version      INTEGER NOT NULL,
    correct             INTEGER NOT NULL,
    total               INTEGER NOT NULL,
    answers_fingerprint TEXT    NOT NULL,
    answers             TEXT    NOT NULL DEFAULT '[]',
    echo_model          TEXT,
    system_fingerprint  TEXT,
    upstream_provider   TEXT,
    logprob_tokens      INTEGER,
    logprob_sum         REAL
);
CREATE INDEX canary_runs_region_started ON canary_runs (region, started_at);
CREATE INDEX canary_runs_started ON canary_runs (started_at);
