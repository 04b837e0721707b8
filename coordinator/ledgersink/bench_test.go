package ledgersink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/ledger"
)

// BenchmarkWrite exports batches of new lines, one window each, into a
// table that grows as it runs, on the shared test server (fsync on, as
// deployed), by COPY and by unnest. lines/s is the figure to read.
func BenchmarkWrite(b *testing.B) {
	methods := []struct {
		name string
		use  func(*ledgersink.Sink)
	}{
		{"copy", func(*ledgersink.Sink) {}},
		{"stage", ledgersink.UseCopyUpsert},
		{"unnest", ledgersink.UseUnnest},
	}
	for _, m := range methods {
		for _, size := range []int{1000, 10000, 50000} {
			b.Run(fmt.Sprintf("%s/lines=%d", m.name, size), func(b *testing.B) {
				s := open(b, pgtest.Database(b))
				if err := s.Migrate(ctxFor(b, time.Minute)); err != nil {
					b.Fatal(err)
				}
				m.use(s)
				lines := batch(0, size)
				for i := range lines {
					lines[i].Rule, lines[i].Region = "requests-per-second", "eu-west-1"
					lines[i].Granted = ptr(float64(i))
				}
				pos := ledger.Position{}
				b.ReportAllocs()
				for w := 0; b.Loop(); w++ {
					for i := range lines {
						lines[i].Window = hour(w)
					}
					var err error
					if pos, err = s.Write(ctxFor(b, time.Minute), "eu-1", pos, lines); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "lines/s")
			})
		}
	}
}
