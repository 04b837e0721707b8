-- The terms each line was counted against (ledger.Terms): the start of
-- the tenant's cycle of the rule that the window belongs to, and the
-- limit in force for the tenant. Added, not changed: rows exported
-- before hold NULL in both, as do lines of rules without a tenant's
-- cycle (docs/billing.md, "What the ledger records").

ALTER TABLE allot_usage
    ADD COLUMN cycle_start timestamptz NULL,
    ADD COLUMN limit_units bigint NULL CHECK (limit_units > 0);

-- One tenant's cycle of one rule: an invoice (QueryTenantCycle). Partial:
-- only the lines that carry a cycle are billed by cycle, so the other
-- rules' lines (per-user, per-minute, global) cost the export no entry
-- here, and rows exported before this version cost the migration no sort.
CREATE INDEX allot_usage_tenant_rule_cycle ON allot_usage (tenant, rule, cycle_start)
    WHERE cycle_start IS NOT NULL;

COMMENT ON COLUMN allot_usage.cycle_start IS
    'Start of the tenant''s cycle of the rule that the window belongs to (a calendar month from the tenant''s anchor, or the rule''s period from the Unix epoch), as the usage was counted; NULL when not recorded: rules not keyed by the tenant alone, a cycle set by a plan the coordinators do not know, rows exported before it was recorded.';
COMMENT ON COLUMN allot_usage.limit_units IS
    'The limit in force for the tenant when the window''s usage was counted, in the rule''s units per cycle (an override''s, else the rule''s); NULL when not recorded, as cycle_start, or when it is a plan''s.';
