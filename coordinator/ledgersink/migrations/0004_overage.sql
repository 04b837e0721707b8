-- Metered overage (docs/billing.md, "Metered overage"): the part of each
-- line's admitted units past the tenant's limit in force, under a quota
-- with overage. Added, not changed: rows exported before hold NULL; the
-- coordinators write 0 for a line without overage.

ALTER TABLE allot_usage
    ADD COLUMN overage bigint NULL CHECK (overage >= 0);

COMMENT ON COLUMN allot_usage.overage IS
    'Cost admitted in the window past the tenant''s limit in force, under a rule with overage: billed apart. Part of admitted, not added to it (the units included in the plan are admitted - overage). 0 for other rules; NULL in rows exported before overage was counted. Saturates at 9223372036854775807.';
