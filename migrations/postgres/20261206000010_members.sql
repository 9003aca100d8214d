-- Replicas of a region (docs/DEPLOYMENT.md#replicas): every running instance upserts its row at
-- each heartbeat and reads its region's rows to decide which targets it probes. A member that
-- stops cleanly deletes its row; one that dies leaves it to go stale, and the heartbeat prunes
-- rows a day old. A few rows per region: no partitions.
CREATE TABLE members (
    region       text        NOT NULL,
    member       text        NOT NULL,
    host         text        NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    active_from  timestamptz NOT NULL,
    PRIMARY KEY (region, member)
);
