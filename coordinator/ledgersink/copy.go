package ledgersink

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/allot-io/allot/ledger"
	"github.com/jackc/pgx/v5"
)

// A batch goes to PostgreSQL as COPY's binary format, encoded here rather
// than by pgx's CopyFrom. pgx first asks the server for the table's
// column types (a round trip a batch) and then encodes every value
// through its type map, an interface call and an allocation or two a
// value: most of the client's CPU for a batch, spent on the coordinator
// that also applies the reports. The columns' types are the schema's,
// which the migrations own, so they are written out below.

// copyHeader is the binary format's signature, flags and header
// extension length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00")

// pgEpoch is where PostgreSQL's timestamps count from, 2000-01-01 UTC,
// in Unix seconds; they count microseconds.
const pgEpoch = 946684800

// copySQL is the COPY statement for table's columns, binary.
func copySQL(table string, columns []string) string {
	return fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)",
		pgx.Identifier{table}.Sanitize(), strings.Join(columns, ", "))
}

var (
	copyUsage = copySQL("allot_usage", usageColumns)
	copyStage = copySQL("allot_usage_stage", stageColumns)
)

// encodeCopy encodes lines as rows of usageColumns, cluster first, or,
// without withCluster, of stageColumns. Windows are validated to years 1
// to 9999, so their microseconds fit an int64.
func encodeCopy(cluster string, withCluster bool, lines []ledger.Line) []byte {
	fields := len(stageColumns)
	if withCluster {
		fields = len(usageColumns)
	}
	// A row is about 130 bytes with short names.
	buf := make([]byte, 0, len(copyHeader)+len(lines)*(100+len(cluster)+len(lines[0].Tenant)+len(lines[0].Rule)+len(lines[0].Region))+2)
	buf = append(buf, copyHeader...)
	for i := range lines {
		l := &lines[i]
		buf = binary.BigEndian.AppendUint16(buf, uint16(fields))
		if withCluster {
			buf = appendText(buf, cluster)
		}
		buf = appendInt64(buf, (l.Window-pgEpoch)*1_000_000)
		buf = appendText(buf, storeName(l.Tenant))
		buf = appendText(buf, storeName(l.Rule))
		buf = appendText(buf, storeName(l.Region))
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, uint32(int32(l.WindowSeconds)))
		buf = appendInt64(buf, clamp(l.Admitted))
		buf = appendInt64(buf, clamp(l.Denied))
		if l.Granted == nil {
			buf = appendNull(buf)
		} else {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, math.Float64bits(*l.Granted))
		}
		// Terms not recorded are NULL.
		if l.CycleStart == 0 {
			buf = appendNull(buf)
		} else {
			buf = appendInt64(buf, (l.CycleStart-pgEpoch)*1_000_000)
		}
		if l.Limit == 0 {
			buf = appendNull(buf)
		} else {
			buf = appendInt64(buf, l.Limit)
		}
		buf = appendInt64(buf, min(clamp(l.Overage), clamp(l.Admitted)))
	}
	return binary.BigEndian.AppendUint16(buf, math.MaxUint16) // -1: the end
}

func appendText(buf []byte, s string) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
	return append(buf, s...)
}

// appendNull is a NULL field: its length -1.
func appendNull(buf []byte) []byte { return binary.BigEndian.AppendUint32(buf, math.MaxUint32) }

func appendInt64(buf []byte, v int64) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 8)
	return binary.BigEndian.AppendUint64(buf, uint64(v))
}

// copyRows sends encoded rows with sql, a COPY … FROM STDIN, in tx.
func copyRows(ctx context.Context, tx pgx.Tx, sql string, data []byte) error {
	_, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(data), sql)
	return err
}
