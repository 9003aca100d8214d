-- A region's alert state is stored gzip-compressed in `state_gz` (io/store/sql, vocab/records
-- StateJson): at 10,000 targets its JSON text was 5.4 MB, and writing it made SQLite hold two more
-- copies at once, the daemon's peak each minute. `state` keeps the text of rows an earlier build
-- wrote and is emptied at the next write.
ALTER TABLE alert_state ADD COLUMN state_gz bytea;
ALTER TABLE alert_state ALTER COLUMN state DROP NOT NULL;
