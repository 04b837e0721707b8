package ledgersink

// The billing team's three questions of allot_usage, as docs/billing.md
// quotes them (with psql variables for $1…, TestBillingDocQueries)
// and BenchmarkQueries times them on 20 million lines. Their parameters
// are timestamptz window bounds, [from, to), and a tenant.
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
)
