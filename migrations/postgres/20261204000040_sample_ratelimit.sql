-- Rate-limit headroom (docs/STORAGE.md): what each probe's response headers said was left of the
-- provider's request and token allowances, and when each resets (null when not said). Canary
-- runs and golden check runs are probes too and carry the same columns.
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_requests_remaining bigint;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_requests_limit bigint;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_requests_reset_at timestamptz;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_tokens_remaining bigint;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_tokens_limit bigint;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS ratelimit_tokens_reset_at timestamptz;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_remaining bigint;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_limit bigint;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_reset_at timestamptz;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_remaining bigint;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_limit bigint;
ALTER TABLE canary_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_reset_at timestamptz;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_remaining bigint;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_limit bigint;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_requests_reset_at timestamptz;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_remaining bigint;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_limit bigint;
ALTER TABLE check_runs ADD COLUMN IF NOT EXISTS ratelimit_tokens_reset_at timestamptz;
