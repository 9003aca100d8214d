-- Failover drills (`vigil drill`, `POST /v1/drills`): a target dropped from one chain's export
-- until `until_at` or until ended early; every region sharing the database reads them.
CREATE TABLE drills (
    id         TEXT NOT NULL PRIMARY KEY,
    chain      TEXT NOT NULL,
    target     TEXT NOT NULL,
    region     TEXT NOT NULL,
    started_at TEXT NOT NULL,
    until_at   TEXT NOT NULL,
    ended_at   TEXT
);
CREATE INDEX drills_until ON drills (until_at);
