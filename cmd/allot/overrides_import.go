package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/plural"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
)

const overridesImportAbout = `
Sets the overrides FILE lists, all or none. FILE is CSV with a header
line naming its columns (rule and tenant, then any of limit, weight and
expires), or JSON lines ({"rule":..,"tenant":..,"limit":..}) — told apart
by --format, or by the file's extension (.csv; anything else is JSON
lines); - reads stdin. expires is an RFC 3339 time. What 'overrides list
--format csv' or '--format jsonl' prints imports as it is.

Every line is read and checked first: each broken line is reported as
FILE:LINE, and nothing is sent. The cluster then checks every batch
(validate only), reporting every entry it refuses by FILE:LINE, before
any is applied, so an override it refuses leaves the cluster as it was;
batches of --batch are applied after that. An override already in force
as the file gives it is left as it is: importing what 'overrides list'
printed changes nothing, and keeps the version.`

// importBatch is how many overrides one import call sends.
const importBatch = 5000

// entryIndex finds the overrides[N] a refusal names.
var entryIndex = regexp.MustCompile(`overrides\[(\d+)\]`)

// lineProblems are the problems of an overrides file, each naming
// FILE:LINE: every one is reported, not only the first.
type lineProblems []string

func (p lineProblems) Error() string { return plural.Count(len(p), "problem") }

func overridesImportFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var format string
	batch := importBatch
	f.StringVar(&format, "format", "", "csv or jsonl; default: by the file's extension")
	f.IntVar(&batch, "batch", importBatch, "overrides per call (at most 10000)")
	return func(ctx context.Context, e *env, args []string) error {
		file, err := exactlyOne(cmd, "overrides file", args)
		if err != nil {
			return err
		}
		if batch < 1 || batch > 10000 {
			return usagef(cmd, "--batch %d: want 1 to 10000", batch)
		}
		if format == "" {
			format = "jsonl"
			if strings.HasSuffix(strings.ToLower(file), ".csv") {
				format = "csv"
			}
		}
		if format != "csv" && format != "jsonl" {
			return usagef(cmd, "--format %q: want csv or jsonl", format)
		}
		in := e.stdin
		if file != "-" {
			fh, err := os.Open(file)
			if err != nil {
				return &usageError{err: err}
			}
			defer fh.Close()
			in = fh
		}
		list, lines, err := readOverrides(in, file, format, time.Now())
		var problems lineProblems
		if errors.As(err, &problems) {
			for _, p := range problems {
				fmt.Fprintln(e.stderr, p)
			}
			return &usageError{err: fmt.Errorf("%s: %s; nothing was imported", file, problems)}
		}
		if err != nil {
			return &usageError{err: err}
		}
		if len(list) == 0 {
			return usagef(cmd, "%s holds no overrides", file)
		}
		var batches [][]*allotpb.Override
		for i := 0; i < len(list); i += batch {
			batches = append(batches, list[i:min(i+batch, len(list))])
		}
		// Every batch is checked, so that every entry the cluster refuses is
		// reported at once.
		var refused []string
		for i, b := range batches {
			_, err := sendOverrides(ctx, cf, b, true)
			if err == nil {
				continue
			}
			if !errors.Is(err, errRejected) {
				return fmt.Errorf("%s: checking batch %d of %d: %w; nothing was imported", file, i+1, len(batches), err)
			}
			// The cluster names the entry of the batch: name the line.
			msg := entryIndex.ReplaceAllStringFunc(err.Error(), func(m string) string {
				n, _ := strconv.Atoi(entryIndex.FindStringSubmatch(m)[1])
				if j := i*batch + n; j < len(lines) {
					return fmt.Sprintf("%s:%d", file, lines[j])
				}
				return m
			})
			refused = append(refused, fmt.Sprintf("batch %d of %d: %s", i+1, len(batches), msg))
		}
		if len(refused) > 0 {
			for _, r := range refused {
				fmt.Fprintln(e.stderr, r)
			}
			return &usageError{err: fmt.Errorf("%s: the cluster refused %s; nothing was imported", file, plural.Count(len(refused), "batch"))}
		}
		var v uint64
		changed := 0
		for i, b := range batches {
			resp, err := putOverrides(ctx, cf, b, false)
			if err != nil {
				return fmt.Errorf("%s: batch %d of %d: %w; the %d overrides before it were imported", file, i+1, len(batches), err, i*batch)
			}
			v = resp.GetVersion()
			changed += int(resp.GetCount())
		}
		switch {
		case changed == 0:
			fmt.Fprintf(e.stdout, "overrides version %d kept: the %s of %s are in force as they are; nothing changed\n", v, plural.Count(len(list), "override"), file)
		case changed < len(list):
			fmt.Fprintf(e.stdout, "overrides version %d: %d imported from %s in %s: %d changed, %d already so\n", v, len(list), file, plural.Count(len(batches), "batch"), changed, len(list)-changed)
		default:
			fmt.Fprintf(e.stdout, "overrides version %d: %d imported from %s in %s\n", v, len(list), file, plural.Count(len(batches), "batch"))
		}
		return nil
	}
}

// readOverrides reads an import file. A problem with a line names
// FILE:LINE and the field; every one is returned, as lineProblems.
func readOverrides(in io.Reader, file, format string, now time.Time) ([]*allotpb.Override, []int, error) {
	if format == "csv" {
		return readOverridesCSV(in, file, now)
	}
	var rd overrideReader
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var j overrideJSON
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			rd.problem(file, line, jsonLineError(err))
			continue
		}
		if dec.More() {
			rd.problem(file, line, errors.New("more than one JSON object on the line"))
			continue
		}
		rd.add(file, line, now, j)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return rd.result()
}

// jsonLineError says what is wrong with a line's JSON in the line's
// terms: the field and the type it wants, not encoding/json's Go types.
func jsonLineError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field != "":
		want := "a string"
		switch te.Field {
		case "limit", "version":
			want = "an integer"
		case "weight":
			want = "a number"
		}
		return fmt.Errorf("%s: must be %s, got a JSON %s", te.Field, want, te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("not a JSON object (%v)", se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the JSON object is not closed")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

func readOverridesCSV(in io.Reader, file string, now time.Time) ([]*allotpb.Override, []int, error) {
	r := csv.NewReader(in)
	r.TrimLeadingSpace = true
	head, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s:1: reading the header: %v", file, err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(h))
		if !slices.Contains(csvColumns, h) {
			return nil, nil, fmt.Errorf("%s:1: column %q: want rule, tenant, limit, weight, anchor_day, time_zone or expires", file, h)
		}
		col[h] = i
	}
	if _, ok := col["rule"]; !ok {
		return nil, nil, fmt.Errorf("%s:1: the header has no rule column", file)
	}
	if _, ok := col["tenant"]; !ok {
		return nil, nil, fmt.Errorf("%s:1: the header has no tenant column", file)
	}
	var rd overrideReader
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rd.result()
		}
		if err != nil {
			// A malformed record: the reader goes on with the next.
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				rd.problem(file, pe.StartLine, pe.Err)
				continue
			}
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		line, _ := r.FieldPos(0)
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		j := overrideJSON{Rule: get("rule"), Tenant: get("tenant"), TimeZone: get("time_zone"), Expires: get("expires")}
		if s := get("limit"); s != "" {
			if j.Limit, err = strconv.ParseInt(s, 10, 64); err != nil {
				rd.problem(file, line, fmt.Errorf("limit %q: not an integer", s))
				continue
			}
		}
		if s := get("weight"); s != "" {
			if j.Weight, err = strconv.ParseFloat(s, 64); err != nil {
				rd.problem(file, line, fmt.Errorf("weight %q: not a number", s))
				continue
			}
		}
		if s := get("anchor_day"); s != "" {
			if j.AnchorDay, err = strconv.Atoi(s); err != nil {
				rd.problem(file, line, fmt.Errorf("anchor_day %q: not an integer", s))
				continue
			}
		}
		rd.add(file, line, now, j)
	}
}

// overrideReader collects a file's overrides, the line of each, and its
// problems.
type overrideReader struct {
	list     []*allotpb.Override
	lines    []int
	seen     map[[2]string]int
	problems lineProblems
}

func (rd *overrideReader) problem(file string, line int, err error) {
	rd.problems = append(rd.problems, fmt.Sprintf("%s:%d: %v", file, line, err))
}

// add checks one line's override and keeps it, or its problem.
func (rd *overrideReader) add(file string, line int, now time.Time, j overrideJSON) {
	o, err := overrideFrom(j, now)
	if err != nil {
		rd.problem(file, line, err)
		return
	}
	if rd.seen == nil {
		rd.seen = map[[2]string]int{}
	}
	k := [2]string{o.GetRule(), o.GetTenant()}
	if first, dup := rd.seen[k]; dup {
		rd.problem(file, line, fmt.Errorf("tenant %q under rule %q is also on line %d", o.GetTenant(), o.GetRule(), first))
		return
	}
	rd.seen[k] = line
	rd.list = append(rd.list, o)
	rd.lines = append(rd.lines, line)
}

func (rd *overrideReader) result() ([]*allotpb.Override, []int, error) {
	if len(rd.problems) > 0 {
		return nil, nil, rd.problems
	}
	return rd.list, rd.lines, nil
}

// overrideFrom checks what a line can be checked for without the
// cluster's rules, and builds the override.
func overrideFrom(j overrideJSON, now time.Time) (*allotpb.Override, error) {
	switch {
	case j.Rule == "":
		return nil, errors.New("rule: missing")
	case j.Tenant == "":
		return nil, errors.New("tenant: missing")
	case j.Limit < 0:
		return nil, fmt.Errorf("limit: must not be negative, got %d", j.Limit)
	case j.Weight < 0:
		return nil, fmt.Errorf("weight: must not be negative, got %g", j.Weight)
	case j.AnchorDay < 0 || j.AnchorDay > 31:
		return nil, fmt.Errorf("anchor_day: must be a day of the month from 1 to 31, got %d", j.AnchorDay)
	case j.Limit == 0 && j.Weight == 0 && j.AnchorDay == 0 && j.TimeZone == "":
		return nil, errors.New("limit: an override sets a limit, a weight or a cycle (anchor_day, time_zone); give one")
	}
	o := &allotpb.Override{Rule: j.Rule, Tenant: j.Tenant, Limit: j.Limit, Weight: j.Weight,
		Cycle: rulespb.AnchorToProto(rules.Anchor{AnchorDay: j.AnchorDay, TimeZone: j.TimeZone})}
	if expires := j.Expires; expires != "" {
		t, err := time.Parse(time.RFC3339Nano, expires)
		if err != nil {
			return nil, fmt.Errorf("expires %q: want an RFC 3339 time", expires)
		}
		if !t.After(now) {
			return nil, fmt.Errorf("expires %s: not in the future", expires)
		}
		o.ExpiresUnixNano = t.UnixNano()
	}
	return o, nil
}
