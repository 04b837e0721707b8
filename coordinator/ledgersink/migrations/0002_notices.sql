-- Allot's threshold notices, stored by coordinator/ledgersink: one row
-- per coordinator cluster and notice key, written once (docs/billing.md,
-- "Threshold notices"). Every text column is COLLATE "C", as in
-- allot_usage.

CREATE TABLE allot_notices (
    cluster_id  text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    tenant      text COLLATE "C" NOT NULL,
    rule        text COLLATE "C" NOT NULL,
    cycle_start timestamptz NOT NULL,
    cycle_end   timestamptz NOT NULL CHECK (cycle_end > cycle_start),
    threshold   double precision NOT NULL CHECK (threshold > 0),
    limit_units bigint NOT NULL,
    used        bigint NOT NULL CHECK (used >= 0),
    crossed_at  timestamptz NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, key)
);

-- One tenant's notices, newest first.
CREATE INDEX allot_notices_tenant ON allot_notices (tenant, crossed_at);

COMMENT ON TABLE allot_notices IS
    'Allot threshold notices: a tenant''s usage under a rule reached one of the rule''s notice thresholds in a cycle. Written by the coordinators (coordinator/ledgersink) at least once, and stored once per key: a key written again is left as it is.';
COMMENT ON COLUMN allot_notices.cluster_id IS
    'The recording coordinator cluster''s ID (allot status shows it).';
COMMENT ON COLUMN allot_notices.key IS
    'The idempotency key: tenant/rule/cycle start (Unix seconds)/threshold, as the webhook''s Idempotency-Key header.';
COMMENT ON COLUMN allot_notices.tenant IS
    'Tenant, as in the rules; bytewise order (COLLATE "C").';
COMMENT ON COLUMN allot_notices.rule IS
    'Rule name; bytewise order (COLLATE "C").';
COMMENT ON COLUMN allot_notices.cycle_start IS
    'Start of the cycle (the rule''s period) the usage was counted in; it covers [cycle_start, cycle_end).';
COMMENT ON COLUMN allot_notices.cycle_end IS
    'End of the cycle.';
COMMENT ON COLUMN allot_notices.threshold IS
    'The threshold reached, a fraction of limit_units.';
COMMENT ON COLUMN allot_notices.limit_units IS
    'The limit in force for the tenant when it was reached, in the rule''s units per period.';
COMMENT ON COLUMN allot_notices.used IS
    'The tenant''s admitted usage in the cycle when it was reached. Saturates at 9223372036854775807.';
COMMENT ON COLUMN allot_notices.crossed_at IS
    'When the usage that reached it was applied, on the leader''s clock.';
COMMENT ON COLUMN allot_notices.stored_at IS
    'When the row was written.';
