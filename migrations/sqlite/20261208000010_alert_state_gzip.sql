-- A region's alert state is stored gzip-compressed in `state_gz` (io/store/sql, vocab/records
-- StateJson): at 10,000 targets its JSON text was 5.4 MB, and writing it made SQLite hold two more
-- copies at once, the daemon's peak each minute. `state` keeps the text of rows an earlier build
-- wrote and is emptied at the next write; SQLite cannot drop a NOT NULL, so the table is rebuilt.
CREATE TABLE alert_state_new (
    region     TEXT NOT NULL PRIMARY KEY,
    state      TEXT,
    state_gz   BLOB,
    updated_at TEXT NOT NULL
);
INSERT INTO alert_state_new (region, state, updated_at) SELECT region, state, updated_at FROM alert_state;
DROP TABLE alert_state;
ALTER TABLE alert_state_new RENAME TO alert_state;
