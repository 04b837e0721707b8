package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/internal/fleet"
	"github.com/allot-io/allot/internal/plural"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/ledgerpb"
)

// The sink's ledger check: the units in PostgreSQL, read with SQL from
// allot_usage, plus those the cluster still holds in memory (the lines
// QueryUsage returns with exported false), must equal what the sidecars
// answered, per tenant and rule, exactly; and every line QueryUsage
// returns with exported true must equal its row in PostgreSQL.

// sameCounts reports whether two reads of one line agree on what the
// check compares: its counts and its window's length.
func sameCounts(a, b ledger.Line) bool {
	return a.Admitted == b.Admitted && a.Denied == b.Denied && a.WindowSeconds == b.WindowSeconds
}

// sinkSnapshot is the cluster's ledger read at one export position: the
// sink's rows and the lines QueryUsage returned, split by where they
// came from.
type sinkSnapshot struct {
	pos      ledger.Position
	rows     map[ledger.Key]ledger.Line // allot_usage, this cluster's
	exported map[ledger.Key]ledger.Line // QueryUsage's lines with exported set
	memory   map[ledger.Key]ledger.Line // QueryUsage's others
	final    int                        // of memory, final lines
	// oldestOpen is the oldest window not yet final (hasOpen says there
	// is one), and behind the final lines after it, which wait for it
	// before the sink may take them.
	oldestOpen int64
	hasOpen    bool
	behind     int
	twice      []string // keys QueryUsage returned more than once
	reads      int
}

// readSink reads the sink and the cluster's ledger until one read is
// consistent: the position the same before and after, and QueryUsage
// returning as exported every row the sink holds (its state's position
// is the sink's: a position committed to PostgreSQL and not yet through
// Raft leaves lines in both places for a moment).
func (h *harness) readSink(ctx context.Context) (*sinkSnapshot, error) {
	var last string
	for attempt := 1; attempt <= 30; attempt++ {
		s, why, err := h.readSinkOnce(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case why == "":
			s.reads = attempt
			return s, nil
		default:
			last = why
		}
		if err := fleet.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("reading the sink: no consistent read in 30 attempts (last: %s)", last)
}

// readSinkOnce reads once, and says why the read is not consistent ("" if
// it is).
func (h *harness) readSinkOnce(ctx context.Context) (*sinkSnapshot, string, error) {
	conn, err := h.sink.connect(ctx)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close(context.Background())
	p1, err := readPosition(ctx, conn, h.cluster)
	if err != nil {
		return nil, "", err
	}
	recs, err := h.queryUsage(ctx, time.Now().Add(-48*time.Hour))
	if err != nil {
		return nil, "", err
	}
	rows, err := readRows(ctx, conn, h.cluster)
	if err != nil {
		return nil, "", err
	}
	p2, err := readPosition(ctx, conn, h.cluster)
	if err != nil {
		return nil, "", err
	}
	s := &sinkSnapshot{pos: p2, rows: rows, exported: map[ledger.Key]ledger.Line{}, memory: map[ledger.Key]ledger.Line{}}
	var finals []int64
	for _, r := range recs {
		u := ledgerpb.FromProto(r)
		k := u.Key
		into := s.memory
		if r.GetExported() {
			into = s.exported
		} else if u.Final {
			s.final++
			finals = append(finals, k.Window)
		} else if !s.hasOpen || k.Window < s.oldestOpen {
			s.oldestOpen, s.hasOpen = k.Window, true
		}
		if _, dup := s.exported[k]; dup {
			s.twice = append(s.twice, k.String())
		} else if _, dup := s.memory[k]; dup {
			s.twice = append(s.twice, k.String())
		}
		into[k] = u
	}
	for _, w := range finals {
		if s.hasOpen && w > s.oldestOpen {
			s.behind++
		}
	}
	switch {
	case p1 != p2:
		return nil, fmt.Sprintf("the position moved during the read, from %v to %v", p1, p2), nil
	case len(s.exported) != len(rows):
		return nil, fmt.Sprintf("QueryUsage returned %d lines as exported, the sink holds %d rows: its position is not yet the sink's", len(s.exported), len(rows)), nil
	}
	return s, "", nil
}

// readRows reads every row of cluster in allot_usage.
func readRows(ctx context.Context, conn *pgx.Conn, cluster string) (map[ledger.Key]ledger.Line, error) {
	rows, err := conn.Query(ctx, `SELECT extract(epoch FROM window_start)::bigint, tenant, rule, region, window_seconds, admitted, denied
FROM allot_usage WHERE cluster_id = $1`, cluster)
	if err != nil {
		return nil, fmt.Errorf("reading allot_usage: %w", err)
	}
	out := map[ledger.Key]ledger.Line{}
	for rows.Next() {
		var (
			l        = ledger.Line{Final: true}
			seconds  int32
			adm, den int64
		)
		if err := rows.Scan(&l.Window, &l.Tenant, &l.Rule, &l.Region, &seconds, &adm, &den); err != nil {
			return nil, fmt.Errorf("reading allot_usage: %w", err)
		}
		l.WindowSeconds, l.Admitted, l.Denied = int64(seconds), uint64(adm), uint64(den)
		out[l.Key] = l
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading allot_usage: %w", err)
	}
	return out, nil
}

// queryUsage reads every ledger line of the windows from from to two days
// ahead with QueryUsage, the leader first, as `allot usage` does, keeping
// the exported flag, which `allot usage` does not print.
func (h *harness) queryUsage(ctx context.Context, from time.Time) ([]*allotpb.UsageRecord, error) {
	leader, _ := h.cl.FindLeader(ctx)
	order := []*fleet.Coordinator{}
	if leader != nil {
		order = append(order, leader)
	}
	for _, co := range h.cl.Coords {
		if co != leader && co.Running() {
			order = append(order, co)
		}
	}
	var errs []error
	for _, co := range order {
		recs, err := h.queryUsageOf(ctx, co, from)
		if err == nil {
			return recs, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", co.ID, err))
	}
	return nil, fmt.Errorf("QueryUsage: %w", errors.Join(errs...))
}

func (h *harness) queryUsageOf(ctx context.Context, co *fleet.Coordinator, from time.Time) ([]*allotpb.UsageRecord, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cr := h.cl.Creds; cr != nil {
		r, err := auth.NewReloader(auth.TLSFiles{CAFile: cr.CA}, nil)
		if err != nil {
			return nil, err
		}
		opts = []grpc.DialOption{grpc.WithTransportCredentials(r.ClientCredentials()),
			grpc.WithPerRPCCredentials(auth.StaticTokenCredentials(fleet.Token(cr.Reader)))}
	}
	cc, err := grpc.NewClient(co.GRPC, append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := allotpb.NewUsageServiceClient(cc)
	q := &allotpb.UsageQuery{From: timestamppb.New(from), To: timestamppb.New(time.Now().Add(48 * time.Hour)), PageSize: 10000}
	var out []*allotpb.UsageRecord
	for range 1000 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := client.QueryUsage(cctx, q)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetRecords()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		q.PageToken = resp.GetNextPageToken()
	}
	return nil, errors.New("more than 1000 pages")
}

// sinkVerdict is the sink's ledger against the answers.
type sinkVerdict struct {
	snap *sinkSnapshot
	v    *verdict
	// crossOK and crossBad count the exported lines equal to their row
	// and not; badLines are the first that differ.
	crossOK, crossBad int
	badLines          []string
	// envoys says whether the Envoys' lines in the sink and memory equal
	// those allot usage read.
	envoys                       string
	envoysOK                     bool
	pgAdm, pgDen, memAdm, memDen u128
}

// checkSink reads the sink and compares it with the answers; led is the
// ledger allot usage read, before the Envoys' lines were taken out of it.
func (h *harness) checkSink(ctx context.Context, got *tally, rules *ruleSet, led ledgerSums) (*sinkVerdict, error) {
	snap, err := h.readSink(ctx)
	if err != nil {
		return nil, err
	}
	sv := &sinkVerdict{snap: snap, envoysOK: true}
	for k, row := range snap.rows {
		if k.Tenant != envoyTenant {
			sv.pgAdm.add(row.Admitted)
			sv.pgDen.add(row.Denied)
		}
		if u, ok := snap.exported[k]; ok && sameCounts(u, row) {
			sv.crossOK++
			continue
		}
		sv.crossBad++
		if len(sv.badLines) < 10 {
			u, ok := snap.exported[k]
			sv.badLines = append(sv.badLines, fmt.Sprintf("%v: in PostgreSQL admitted %d denied %d (%d s); allot usage: %v %v", k, row.Admitted, row.Denied, row.WindowSeconds, ok, u))
		}
	}
	for k := range snap.exported {
		if _, ok := snap.rows[k]; !ok {
			sv.crossBad++
			if len(sv.badLines) < 10 {
				sv.badLines = append(sv.badLines, fmt.Sprintf("%v: exported according to allot usage, not in PostgreSQL", k))
			}
		}
	}
	sl := ledgerSums{}
	add := func(l ledger.Line) {
		i, ok := rules.index[l.Rule]
		if !ok {
			i = -1
		}
		tr := tenantRule{l.Tenant, i}
		if sl[tr] == nil {
			sl[tr] = &units{}
		}
		sl[tr].adm.add(l.Admitted)
		sl[tr].den.add(l.Denied)
	}
	for _, l := range snap.rows {
		add(l)
	}
	for _, l := range snap.memory {
		add(l)
		if l.Tenant != envoyTenant {
			sv.memAdm.add(l.Admitted)
			sv.memDen.add(l.Denied)
		}
	}
	// The Envoys' lines are checked on their own (envoyVerdict): here
	// they must only be what allot usage read.
	var inSink, inUsage units
	for k, u := range sl {
		if k.tenant == envoyTenant {
			inSink.adm.addU(u.adm)
			inSink.den.addU(u.den)
			delete(sl, k)
		}
	}
	for k, u := range led {
		if k.tenant == envoyTenant {
			inUsage.adm.addU(u.adm)
			inUsage.den.addU(u.den)
		}
	}
	sv.envoysOK = inSink == inUsage
	sv.envoys = fmt.Sprintf("admitted %s denied %s, allot usage read admitted %s denied %s", inSink.adm.big(), inSink.den.big(), inUsage.adm.big(), inUsage.den.big())
	sv.v = compare(got, sl, rules)
	return sv, nil
}

// pass is whether the sink's ledger is exact (less at most allowed lost),
// agrees with allot usage, and every sink phase held.
func (sv *sinkVerdict) pass(allowed *big.Int, problems []string) bool {
	return sv.v.passWithin(allowed) && sv.crossBad == 0 && sv.envoysOK && len(sv.snap.twice) == 0 && len(problems) == 0
}

// print writes the sink's mismatching lines (all of them to
// logs/sink-mismatches.tsv) and its summary lines.
func (sv *sinkVerdict) print(w io.Writer, max int, logs string, allowed *big.Int, problems []string) {
	v, s := sv.v, sv.snap
	if len(v.mismatches) > 0 {
		fmt.Fprintln(w, "The sink's ledger (PostgreSQL + memory) against the answers, where they differ:")
		if err := printMismatches(w, v, max, filepath.Join(logs, "sink-mismatches.tsv")); err != nil {
			fmt.Fprintln(w, err)
		}
	}
	for _, l := range sv.badLines {
		fmt.Fprintf(w, "exported line differs from PostgreSQL: %s\n", l)
	}
	for i, k := range s.twice {
		if i == 10 {
			fmt.Fprintf(w, "… and %d more\n", len(s.twice)-i)
			break
		}
		fmt.Fprintf(w, "QueryUsage returned a line twice: %s\n", k)
	}
	open := ""
	if s.hasOpen {
		open = fmt.Sprintf("; oldest window not final %s, %d final lines after it wait for it",
			time.Unix(s.oldestOpen, 0).UTC().Format(time.RFC3339), s.behind)
	}
	fmt.Fprintf(w, "SUMMARY sink: %s in PostgreSQL (%s), %s; %s still in memory (%d final%s); read %s to a consistent position\n",
		plural.Count(s.pos.Lines, "line"), plural.Count(len(s.rows), "row"), plural.Count(s.pos.Batches, "batch"), plural.Count(len(s.memory), "line"), s.final, open, plural.Count(s.reads, "time"))
	fmt.Fprintf(w, "SUMMARY sink units (the Envoys' apart): PostgreSQL admitted %s, denied %s; memory admitted %s, denied %s; answered admitted %s, denied %s\n",
		sv.pgAdm.big(), sv.pgDen.big(), sv.memAdm.big(), sv.memDen.big(), v.genAdm, v.genDen)
	fmt.Fprintf(w, "SUMMARY sink tenant/rule lines: %d, mismatching %d (%d lines short in %d tenants, %d lines over in %d tenants)\n",
		v.lines, len(v.mismatches), v.lostLines, v.lostTenants, v.doubleLines, v.doubleTenants)
	fmt.Fprintf(w, "SUMMARY sink lost units: %s, double-counted units: %s\n", v.lost, v.double)
	fmt.Fprintf(w, "SUMMARY sink cross-check: %d exported lines equal their PostgreSQL rows, %d differ; Envoys' lines: %s\n", sv.crossOK, sv.crossBad, sv.envoys)
	if len(problems) > 0 {
		fmt.Fprintf(w, "SUMMARY sink phases: %d failed: %s\n", len(problems), strings.Join(problems, "; "))
	}
	result := "PASS"
	if !sv.pass(allowed, problems) {
		result = "FAIL"
	}
	fmt.Fprintf(w, "SUMMARY sink: %s\n", result)
}
