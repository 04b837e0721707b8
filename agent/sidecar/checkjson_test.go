package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/agenttest"
	"github.com/allot-io/allot/agent/httplimit"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// typicalCheck is the body of a check as a gateway sends it.
const typicalCheck = `{"tenant":"acme","plan":"pro","user":"u-12345","route":"/v1/search","ip":"203.0.113.7","priority":"interactive","cost":1}`

// sameDecode fails t unless decoding body with DecodeCheck and with the
// encoding/json reference gives the same request and the same error,
// word for word. Each decoder reads from its own reader from mk.
func sameDecode(t testing.TB, mk func() io.Reader) (agent.Request, error) {
	t.Helper()
	got, gotErr := DecodeCheck(mk())
	want, wantErr := decodeCheckJSON(mk())
	if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("DecodeCheck: %+v, %v\nencoding/json: %+v, %v", got, gotErr, want, wantErr)
	}
	if gotErr != nil && !errors.Is(gotErr, ErrBadCheck) {
		t.Fatalf("error %v does not wrap ErrBadCheck", gotErr)
	}
	return got, gotErr
}

// TestDecodeCheckCases: the scanner takes the bodies gateways send and
// leaves every doubtful one to encoding/json, and either way the result
// is encoding/json's.
func TestDecodeCheckCases(t *testing.T) {
	long := strings.Repeat("a", agent.MaxNameLen+1)
	for _, tt := range []struct {
		name, body string
		fast       bool // the scanner decides it
	}{
		{"typical", typicalCheck, true},
		{"empty object", `{}`, true},
		{"whitespace", " \t\r\n{ \"tenant\" :\t\"acme\" ,\n\"cost\" : 3 }\r\n ", true},
		{"duplicate keys, last wins", `{"tenant":"a","tenant":"b","cost":2,"cost":5}`, true},
		{"null leaves a field as it was", `{"tenant":"a","tenant":null,"cost":4,"plan":null}`, true},
		{"null makes the cost absent", `{"tenant":"a","cost":4,"cost":null}`, true},
		{"null then a cost", `{"cost":null,"cost":0}`, true},
		{"cost 0 is a peek", `{"tenant":"a","cost":0}`, true},
		{"a peek overridden", `{"cost":0,"cost":2}`, true},
		{"UTF-8", `{"tenant":"café","user":"日本"}`, true},
		{"negative zero cost", `{"cost":-0}`, true},
		{"negative cost", `{"cost":-7}`, true},
		{"18 digits", `{"cost":999999999999999999}`, true},
		{"cost over MaxCost", `{"cost":4294967296}`, true},
		{"each priority", `{"priority":"batch"}`, true},
		{"empty priority", `{"priority":""}`, true},
		{"unknown priority", `{"priority":"urgent"}`, true},
		{"tenant too long", `{"tenant":"` + long + `"}`, true},
		{"DEL is plain", "{\"user\":\"a\x7fb\"}", true},

		{"escape", `{"tenant":"a\"b"}`, false},
		{"unicode escape", `{"tenant":"\u00e9"}`, false},
		{"escaped key", `{"\u0074enant":"a"}`, false},
		{"key in capitals", `{"Tenant":"a"}`, false},
		{"key folding to a field", "{\"tenan\u212a\":\"a\"}", false},
		{"unknown key", `{"tenant":"a","tenat":"x"}`, false},
		{"invalid UTF-8", "{\"tenant\":\"a\xffb\"}", false},
		{"surrogate in UTF-8", "{\"tenant\":\"\xed\xa0\x80\"}", false},
		{"control character", "{\"tenant\":\"a\tb\"}", false},
		{"exponent", `{"cost":1e3}`, false},
		{"fraction", `{"cost":1.0}`, false},
		{"leading zero", `{"cost":01}`, false},
		{"19 digits", `{"cost":1000000000000000000}`, false},
		{"int64 overflow", `{"cost":9223372036854775808}`, false},
		{"minus alone", `{"cost":-}`, false},
		{"cost as string", `{"cost":"1"}`, false},
		{"string as number", `{"tenant":1}`, false},
		{"bool", `{"tenant":true}`, false},
		{"nested", `{"tenant":{"a":1}}`, false},
		{"array", `[]`, false},
		{"nul", `{"tenant":nul}`, false},
		{"nullx", `{"tenant":nullx}`, false},
		{"trailing comma", `{"tenant":"a",}`, false},
		{"missing colon", `{"tenant" "a"}`, false},
		{"missing comma", `{"tenant":"a" "plan":"b"}`, false},
		{"unterminated", `{"tenant":"a`, false},
		{"unterminated key", `{"tenant`, false},
		{"two objects", `{}{}`, false},
		{"trailing data", `{} x`, false},
		{"byte order mark", "\xef\xbb\xbf{}", false},
		{"empty", ``, false},
		{"spaces", `   `, false},
		{"not JSON", `tenant=acme`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var s checkScan
			if fast := s.scan([]byte(tt.body)); fast != tt.fast {
				t.Errorf("scanner decides it: %v, want %v", fast, tt.fast)
			}
			sameDecode(t, func() io.Reader { return strings.NewReader(tt.body) })
		})
	}
}

// TestDecodeCheckReaders: a body read in pieces, cut off by an error or
// by MaxBytesReader, or longer than the pooled buffer, decodes as
// encoding/json decodes it from the same reader.
func TestDecodeCheckReaders(t *testing.T) {
	pad := strings.Repeat(" ", MaxCheckBody)
	bodies := []string{
		typicalCheck, `{"tenant":"a\"b"}`, `{}`, `{"tenant":"a"} x`, ``,
		typicalCheck + pad,                  // valid, over the pooled buffer
		pad + typicalCheck,                  // likewise, the object last
		pad[:MaxCheckBody-2] + `{}`,         // exactly MaxCheckBody
		`{"tenant":"` + pad + `"}`,          // a string over the limit
		`x` + pad,                           // invalid and oversized
		`{"tenant":"a"}` + pad + `{"a":1}`,  // trailing data past the limit
		`{"tenant":"a"}` + pad + pad + "\n", // trailing whitespace past it
	}
	boom := errors.New("connection reset")
	for i, body := range bodies {
		readers := map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(body) },
			"halves":   func() io.Reader { return iotest.HalfReader(strings.NewReader(body)) },
			"data+EOF": func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) },
			"error": func() io.Reader {
				return io.MultiReader(strings.NewReader(body[:len(body)/2]), errReader{boom})
			},
			"MaxBytesReader": func() io.Reader {
				return http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), MaxCheckBody)
			},
			"MaxBytesReader/short": func() io.Reader {
				return http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), int64(len(body)/2))
			},
		}
		if len(body) < 1024 { // encoding/json is quadratic on long bodies read a byte at a time
			readers["one byte"] = func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }
		}
		for name, mk := range readers {
			t.Run(fmt.Sprintf("%d/%s", i, name), func(t *testing.T) { sameDecode(t, mk) })
		}
	}
}

// TestDecodeCheckRoundTrip: any valid request, written as encoding/json
// writes it or as a client might (keys in any order and repeated, null
// for absent fields, whitespace anywhere), decodes back to itself.
func TestDecodeCheckRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// The first ten need no escaping in JSON; the rest send the body to
	// encoding/json, as json.Marshal escapes them.
	alphabet := []string{"a", "Z", "0", "/", "-", ".", ":", " ", "é", "日", "<", "&", `"`, `\`, "\n", "\u2028"}
	var plain bool // this round, no character that needs escaping
	str := func(limit int) string {
		chars := alphabet
		if plain {
			chars = alphabet[:10]
		}
		var sb strings.Builder
		for n := rng.IntN(limit + 1); sb.Len() < n; {
			sb.WriteString(chars[rng.IntN(len(chars))])
		}
		s := sb.String()
		for len(s) > limit { // trim whole runes
			_, size := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-size]
		}
		return s
	}
	space := func() string { return [...]string{"", "", " ", "\n\t", "\r\n  "}[rng.IntN(5)] }
	var fast int
	for range 5000 {
		plain = rng.IntN(2) == 0
		want := agent.Request{Tenant: str(20), Plan: str(8), User: str(30), Route: str(30), IP: str(15),
			Priority: agent.Priority(rng.IntN(4)), Cost: rng.Int64N(agent.MaxCost + 1)}
		if rng.IntN(4) == 0 {
			want.Tenant = strings.Repeat("t", agent.MaxNameLen) // at the bound
		}
		values := map[string]any{"tenant": want.Tenant, "plan": want.Plan, "user": want.User, "route": want.Route,
			"ip": want.IP, "priority": want.Priority.String(), "cost": want.Cost}
		keys := []string{"tenant", "plan", "user", "route", "ip", "priority", "cost"}
		switch rng.IntN(6) {
		case 0: // no cost: 1
			want.Cost, keys = 0, keys[:len(keys)-1]
		case 1: // an explicit 0: a peek
			want.Cost, want.Peek, values["cost"] = 0, true, int64(0)
		}
		want.Peek = want.Peek || len(keys) == 7 && want.Cost == 0
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		var members []string
		for _, k := range keys {
			v := values[k]
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 { // an earlier value the last overrides
				early := `"x"`
				if k == "cost" {
					early = "12"
				}
				members = append(members, fmt.Sprintf(`"%s"%s:%s%s`, k, space(), space(), early))
			}
			members = append(members, fmt.Sprintf(`"%s":%s%s`, k, space(), js))
			if rng.IntN(3) == 0 && k != "cost" { // a null after it, which changes nothing
				members = append(members, fmt.Sprintf(`"%s":%snull`, k, space()))
			}
		}
		body := space() + "{" + space() + strings.Join(members, space()+","+space()) + space() + "}" + space()
		got, err := sameDecode(t, func() io.Reader { return strings.NewReader(body) })
		if err != nil || got != want {
			t.Fatalf("%s: %+v, %v; want %+v", body, got, err, want)
		}
		var s checkScan
		if s.scan([]byte(body)) {
			fast++
		}
	}
	if fast < 2000 {
		t.Errorf("the scanner decided %d bodies of 5000; the test means to cover it", fast)
	}
	if testing.Verbose() {
		t.Logf("the scanner decided %d bodies of 5000", fast)
	}
}

// encodeCheckJSON is what CheckHandler wrote before appendCheckResponse:
// the reference it must match byte for byte.
func encodeCheckJSON(r CheckResponse) ([]byte, error) {
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(r)
	return buf.Bytes(), err
}

// sameEncode fails t unless appendCheckResponse writes what encoding/json
// does, and fails where it does.
func sameEncode(t testing.TB, r CheckResponse) []byte {
	t.Helper()
	want, wantErr := encodeCheckJSON(r)
	got, err := appendCheckResponse([]byte("prefix"), &r)
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("%+v: %q lost what it appends to", r, got)
	}
	got = got[len("prefix"):]
	if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
		t.Fatalf("%+v:\n got %q, %v\nwant %q, %v", r, got, err, want, wantErr)
	}
	return got
}

// TestAppendCheckResponse: the answer's bytes are encoding/json's for
// decisions, and for the floats and strings encoding/json treats apart.
func TestAppendCheckResponse(t *testing.T) {
	retry := int64(60)
	zero, neg := int64(0), int64(-3)
	floats := []float64{0, math.Copysign(0, -1), 1, 60, 0.5, 1.5e-3, 123.456, 1e-6, 9.99e-7, 1e-7, 1.23e-10,
		5e-324, 1e20, 1e21, 1.5e300, math.MaxFloat64, -1e-7, -2.5e21, 1 << 53, time.Hour.Seconds()}
	strs := []string{"", "plan-quota", "tenant", `a"b\c`, "<script>&amp;</script>", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"\u2028\u2029", "é日本🎉", "a\xffb", "\xed\xa0\x80", "\xe2\x80", "tail\xf0"}
	for _, f := range floats {
		sameEncode(t, CheckResponse{Allowed: true, Rule: "r", Limit: 10, PeriodSeconds: f, Remaining: 9, ResetAfterSeconds: -f})
	}
	for _, s := range strs {
		sameEncode(t, CheckResponse{Rule: s, Scope: s, RetryAfterSeconds: &retry, Fallback: true})
		sameEncode(t, CheckResponse{Rule: s, Reason: s})
	}
	for _, p := range []*int64{nil, &retry, &zero, &neg} {
		sameEncode(t, CheckResponse{Allowed: p == nil, Limit: math.MinInt64, Remaining: math.MaxInt64, RetryAfterSeconds: p})
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		sameEncode(t, CheckResponse{PeriodSeconds: f})
		sameEncode(t, CheckResponse{ResetAfterSeconds: f})
	}
	got := sameEncode(t, CheckResponse{Allowed: false, Rule: "plan-quota", Scope: "tenant", Limit: 2,
		PeriodSeconds: 60, RetryAfterSeconds: &retry, ResetAfterSeconds: 59.5})
	const want = `{"allowed":false,"rule":"plan-quota","scope":"tenant","limit":2,"period_seconds":60,"remaining":0,"retry_after_seconds":60,"reset_after_seconds":59.5,"fallback":false}` + "\n"
	if string(got) != want {
		t.Errorf("got %s", got)
	}
	one := int64(1)
	got = sameEncode(t, CheckResponse{RetryAfterSeconds: &one, NoRules: true})
	const wantNoRules = `{"allowed":false,"limit":0,"period_seconds":0,"remaining":0,"retry_after_seconds":1,"reset_after_seconds":0,"fallback":false,"no_rules":true}` + "\n"
	if string(got) != wantNoRules {
		t.Errorf("got %s", got)
	}
}

// TestCheckResponseRoundTrip: random responses encode as encoding/json
// encodes them and decode back to themselves.
func TestCheckResponseRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return float64(rng.Int64N(1<<40)) / 1e9 // a Duration's Seconds
		case 1:
			return math.Float64frombits(rng.Uint64() &^ (0x7ff << 52)) // subnormal
		}
		return math.Float64frombits(rng.Uint64()) // any; NaN and Inf skipped below
	}
	for range 20000 {
		r := CheckResponse{Allowed: rng.IntN(2) == 0, Rule: fmt.Sprintf("rule-%d<%x>", rng.IntN(100), rng.Uint32()),
			Limit: rng.Int64(), PeriodSeconds: f(), Remaining: rng.Int64(), ResetAfterSeconds: f(), Fallback: rng.IntN(2) == 0, NoRules: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			s := rng.Int64()
			r.RetryAfterSeconds = &s
		} else if rng.IntN(2) == 0 {
			r.Reason = fmt.Sprintf("cost %d is more than <%x>", rng.Int64(), rng.Uint32())
		}
		if math.IsNaN(r.PeriodSeconds) || math.IsInf(r.PeriodSeconds, 0) || math.IsNaN(r.ResetAfterSeconds) || math.IsInf(r.ResetAfterSeconds, 0) {
			continue
		}
		var back CheckResponse
		if err := json.Unmarshal(sameEncode(t, r), &back); err != nil {
			t.Fatal(err)
		}
		if back.RetryAfterSeconds != nil && r.RetryAfterSeconds != nil && *back.RetryAfterSeconds == *r.RetryAfterSeconds {
			back.RetryAfterSeconds = r.RetryAfterSeconds
		}
		if back != r {
			t.Fatalf("%+v came back %+v", r, back)
		}
	}
}

// TestCheckJSONAllocs: decoding a typical body allocates once (the one
// string the fields share), encoding an answer not at all. (Under the
// race detector sync.Pool drops some buffers; AllocsPerRun's whole-number
// average absorbs that.)
func TestCheckJSONAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	body := strings.NewReader(typicalCheck)
	if n := testing.AllocsPerRun(1000, func() {
		body.Reset(typicalCheck)
		if _, err := DecodeCheck(body); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("DecodeCheck: %v allocations, want at most 1", n)
	}
	// A peek (an explicit cost of 0) likewise: its cost is no pointer on
	// the heap.
	const peek = `{"tenant":"acme","plan":"pro","user":"u-12345","route":"/v1/search","ip":"203.0.113.7","priority":"interactive","cost":0}`
	if n := testing.AllocsPerRun(1000, func() {
		body.Reset(peek)
		if req, err := DecodeCheck(body); err != nil || !req.Peek {
			t.Fatal(req, err)
		}
	}); n > 1 {
		t.Errorf("DecodeCheck of a peek: %v allocations, want at most 1", n)
	}
	retry := int64(12)
	resp := CheckResponse{Rule: "plan-quota", Scope: "tenant", Limit: 1000, PeriodSeconds: 60,
		RetryAfterSeconds: &retry, ResetAfterSeconds: 11.75}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(1000, func() {
		var err error
		if buf, err = appendCheckResponse(buf[:0], &resp); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("appendCheckResponse: %v allocations, want 0", n)
	}
	// Both through one pooled buffer, as CheckHandler does.
	if n := testing.AllocsPerRun(1000, func() {
		bp := getBuf()
		defer putBuf(bp)
		body.Reset(typicalCheck)
		if _, err := decodeCheckBuffered(body, bp); err != nil {
			t.Fatal(err)
		}
		var err error
		if *bp, err = appendCheckResponse((*bp)[:0], &resp); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("decoding and encoding: %v allocations, want at most 1", n)
	}
}

// FuzzCheckResponseJSON: for any response, appendCheckResponse writes
// what json.NewEncoder(w).Encode writes, and fails where it fails.
func FuzzCheckResponseJSON(f *testing.F) {
	f.Add(true, "plan-quota", "tenant", int64(1000), 60.0, int64(999), false, int64(0), 0.5, false, "")
	f.Add(false, "<a&b>\u2028", "\xff\x00", int64(-1), 1e-7, int64(0), true, int64(12), 1e21, true, "")
	f.Add(false, "", "", int64(0), math.Copysign(0, -1), int64(0), true, int64(-1), math.Inf(1), false, "")
	f.Add(false, "plan-quota", "tenant", int64(5), 60.0, int64(0), false, int64(0), 30.5, false, "cost 7 is more than <plan-quota>")
	f.Fuzz(func(t *testing.T, allowed bool, rule, scope string, limit int64, period float64, remaining int64,
		retrySet bool, retry int64, reset float64, fallback bool, reason string) {
		r := CheckResponse{Allowed: allowed, Rule: rule, Scope: scope, Limit: limit, PeriodSeconds: period,
			Remaining: remaining, Reason: reason, ResetAfterSeconds: reset, Fallback: fallback}
		if retrySet {
			r.RetryAfterSeconds = &retry
		}
		sameEncode(t, r)
	})
}

// checkHandlerJSON is CheckHandler as it was before checkjson.go, all
// through encoding/json: the "json" baseline of BenchmarkCheckHandler.
func checkHandlerJSON(a *agent.Agent) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := decodeCheckJSON(http.MaxBytesReader(w, r.Body, MaxCheckBody))
		if err != nil {
			httplimit.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		d := a.Check(req)
		h := w.Header()
		httplimit.SetHeaders(h, d)
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		resp := CheckResponse{Allowed: d.Allowed, Rule: d.Rule, Scope: d.Scope, Limit: d.Limit,
			PeriodSeconds: d.Period.Seconds(), Remaining: max(d.Remaining, 0),
			ResetAfterSeconds: d.ResetAfter.Seconds(), Fallback: d.Fallback}
		code := http.StatusOK
		if !d.Allowed {
			code = http.StatusTooManyRequests
			if d.RetryAfter >= 0 {
				s := httplimit.RetryAfterSeconds(d)
				resp.RetryAfterSeconds = &s
			}
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(resp)
	})
}

// benchWriter is a ResponseWriter that keeps nothing but the status and
// its header map, so the benchmark measures the handler.
type benchWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }
func (w *benchWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkCheckHandler is one POST /v1/check from body to answer, with
// a token-bucket rule per tenant: "fast" is CheckHandler, "json" the same
// handler through encoding/json; "admit" answers 200, "refuse" 429. Run:
//
//	go test -run '^$' -bench CheckHandler -benchmem ./agent
func BenchmarkCheckHandler(b *testing.B) {
	tb := agenttest.Rule("tenant", rules.Tenant, algo.TokenBucket, 100_000_000, time.Second, lease.Capacity)
	tb.Burst = 100_000_000
	tight := agenttest.Rule("tenant", rules.Tenant, algo.TokenBucket, 1, time.Hour, lease.Capacity)
	for _, c := range []struct {
		name string
		rule rules.Rule
		code int
	}{{"admit", tb, http.StatusOK}, {"refuse", tight, http.StatusTooManyRequests}} {
		a, err := agent.New(agent.Config{Rules: []rules.Rule{c.rule}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close(context.Background()) })
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"json", checkHandlerJSON(a)}, {"fast", CheckHandler(a)}} {
			b.Run(c.name+"/"+h.name, func(b *testing.B) {
				body := strings.NewReader(typicalCheck)
				req, err := http.NewRequest(http.MethodPost, "/v1/check", io.NopCloser(body))
				if err != nil {
					b.Fatal(err)
				}
				w := &benchWriter{h: make(http.Header)}
				b.ReportAllocs()
				for b.Loop() {
					body.Reset(typicalCheck)
					h.h.ServeHTTP(w, req)
				}
				if w.code != c.code {
					b.Fatalf("answered %d, want %d", w.code, c.code)
				}
				b.ReportMetric(float64(w.n)/float64(b.N), "resp-bytes/op")
			})
		}
	}
}

// BenchmarkCheckJSON is decoding a typical body and encoding an answer
// alone, by hand ("fast") and through encoding/json ("json").
func BenchmarkCheckJSON(b *testing.B) {
	body := strings.NewReader(typicalCheck)
	for _, d := range []struct {
		name   string
		decode func(io.Reader) (agent.Request, error)
	}{{"json", decodeCheckJSON}, {"fast", DecodeCheck}} {
		b.Run("decode/"+d.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(typicalCheck)
				if _, err := d.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	retry := int64(12)
	resp := CheckResponse{Rule: "plan-quota", Scope: "tenant", Limit: 1000, PeriodSeconds: 60,
		RetryAfterSeconds: &retry, ResetAfterSeconds: 11.75}
	b.Run("encode/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = json.NewEncoder(io.Discard).Encode(resp)
		}
	})
	b.Run("encode/fast", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf, _ = appendCheckResponse(buf[:0], &resp)
		}
	})
}
