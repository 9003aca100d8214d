-- A start reads its region's week of rollups back an hour at a time (io/store/window, the
-- storage link's load). With only the primary key (region first) and the hour index, SQLite
-- walked every rollup of the region for each hour: 1.5 s per hour, over four minutes for a week at
-- 10,000 targets (docs/BENCHMARKS.md). This index finds one region's hour directly.
CREATE INDEX rollups_region_hour ON rollups (region, hour);
