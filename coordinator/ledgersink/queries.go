package ledgersink

// The billing team's questions of allot_usage, as docs/billing.md quotes
// them (with psql variables for $1…, TestBillingDocQueries) and
// BenchmarkQueries times them on 20 million lines. Their parameters are
// timestamptz window bounds, [from, to), a tenant, and for an invoice a
// rule and the start of a cycle.
const (
	// QueryTenantMonth is one tenant's month: what it admitted and was
	// denied under each rule, over every region and cluster.
	// $1 tenant, $2 from, $3 to.
	QueryTenantMonth = `SELECT rule, sum(admitted) AS admitted, sum(denied) AS denied
FROM allot_usage
WHERE tenant = $1 AND window_start >= $2 AND window_start < $3
GROUP BY rule
ORDER BY rule`

	// QueryAllTenantsDay is every tenant's day over every cluster.
	// $1 from, $2 to.
	QueryAllTenantsDay = `SELECT tenant, sum(admitted) AS admitted, sum(denied) AS denied
FROM allot_usage
WHERE window_start >= $1 AND window_start < $2
GROUP BY tenant
ORDER BY tenant`

	// QueryRegionsMerged is one tenant's month with the regions (and
	// their clusters) merged: one line per billing window and rule, as
	// `allot usage` totals it, with how many regions counted and what
	// their parents granted. $1 tenant, $2 from, $3 to.
	QueryRegionsMerged = `SELECT window_start, tenant, rule, sum(admitted) AS admitted, sum(denied) AS denied,
    sum(granted) AS granted, count(*) AS regions
FROM allot_usage
WHERE tenant = $1 AND window_start >= $2 AND window_start < $3
GROUP BY window_start, tenant, rule
ORDER BY window_start, tenant, rule`

	// QueryTenantCycle is one tenant's invoice: what it was admitted under
	// one rule in one of its cycles (the lines whose cycle_start is the
	// cycle's), over every region and cluster, split into the units its
	// plan includes and the overage billed apart, what it was denied, and
	// the limit in force at the last window counted. The cycle is named by
	// its start, as the tenant's anchor places it ('2026-11-17 00:00:00
	// America/New_York'). $1 tenant, $2 rule, $3 cycle start.
	QueryTenantCycle = `SELECT tenant, rule, cycle_start, sum(admitted) AS admitted,
    sum(admitted) - coalesce(sum(overage), 0) AS included, coalesce(sum(overage), 0) AS overage,
    sum(denied) AS denied, (array_agg(limit_units ORDER BY window_start DESC))[1] AS limit_units
FROM allot_usage
WHERE tenant = $1 AND rule = $2 AND cycle_start = $3
GROUP BY tenant, rule, cycle_start`
)
