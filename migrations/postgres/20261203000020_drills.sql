-- Failover drills (`vigil drill`, `POST /v1/drills`): a target dropped from one chain's export
-- until `until_at` or until ended early; every region sharing the database reads them.
CREATE TABLE drills (
    id         uuid        NOT NULL PRIMARY KEY,
    chain      text        NOT NULL,
    target     text        NOT NULL,
    region     text        NOT NULL,
    started_at timestamptz NOT NULL,
    until_at   timestamptz NOT NULL,
    ended_at   timestamptz
);
CREATE INDEX drills_until ON drills (until_at);
