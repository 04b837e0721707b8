package ledgersink

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Cause labels an error of this package for a metric: one of
//
//	unreachable  no connection: refused, reset, closed, or the server
//	             shutting down or starting (class 08, 57P01–57P03)
//	auth         the server refused the role or its password (28000, 28P01)
//	read_only    a read-only transaction or database (25006)
//	disk_full    the server's disk is full (53100)
//	schema       a table or column missing (42P01, 42703), a database or
//	             schema missing (3D000, 3F000), or a schema newer than
//	             this binary (ErrSchemaTooNew)
//	timeout      the context's deadline, or a statement cancelled (57014)
//	position     another writer moved the export position (ErrPositionMoved)
//	canceled     the context was cancelled
//	other        anything else
//
// and "" for nil.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, ErrPositionMoved) {
		return "position"
	}
	if errors.Is(err, ErrSchemaTooNew) {
		return "schema"
	}
	if pe, ok := pgError(err); ok {
		switch code := pe.Code; {
		case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03":
			return "unreachable"
		case code == "28000", code == "28P01":
			return "auth"
		case code == "25006":
			return "read_only"
		case code == "53100":
			return "disk_full"
		case code == "42P01", code == "42703", code == "3D000", code == "3F000":
			return "schema"
		case code == "57014":
			return "timeout"
		}
		return "other"
	}
	// A connection attempt cut short by the deadline is a timeout, not
	// an unreachable server: a hung server accepts the TCP connection
	// and then answers nothing.
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return "timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
	)
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "unreachable"
	}
	return "other"
}
