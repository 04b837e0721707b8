package ledgersink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"

	"github.com/allot-io/allot/ledger"
	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	// ErrBadDSN is a connection string Open cannot parse.
	ErrBadDSN = errors.New("ledgersink: bad DSN")
	// ErrBadBatch is a Write whose lines are empty, out of ledger
	// order, not after the position they were read after, or not
	// storable (a window too long, a name not UTF-8).
	ErrBadBatch = errors.New("ledgersink: bad batch")
	// ErrPositionMoved is a Write whose from is not the stored position:
	// another writer (a second leader, a replay) exported first.
	ErrPositionMoved = errors.New("ledgersink: the export position moved")
	// ErrSchemaTooNew is a database migrated by a newer binary than
	// this one.
	ErrSchemaTooNew = errors.New("ledgersink: the database schema is newer than this binary knows")
)

// PositionError is a Write refused because the stored position is not
// the one its batch was read after. It unwraps to ErrPositionMoved.
type PositionError struct {
	Stored, Expected ledger.Position
}

func (e *PositionError) Error() string {
	return fmt.Sprintf("ledgersink: the export position moved: stored %v, the batch was read %v", e.Stored, e.Expected)
}

func (e *PositionError) Unwrap() error { return ErrPositionMoved }

// Sink exports one or more clusters' ledgers into one database. It is
// safe for concurrent use.
type Sink struct {
	pool *pgxpool.Pool
	log  hclog.Logger
	// write is the upsert Write uses: copyUpsert, or unnestUpsert for
	// the benchmark that compares them.
	write upsertFunc
}

// Open parses dsn and makes a connection pool for it. The pool connects
// lazily, so Open succeeds while the server is down; the first Write,
// Position or Ping says whether it is up. A DSN that does not parse is
// an error at once, wrapping ErrBadDSN and without the password.
func Open(ctx context.Context, dsn string, log hclog.Logger) (*Sink, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadDSN, redact(err.Error(), dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledgersink: %s", redact(err.Error(), dsn))
	}
	return &Sink{pool: pool, log: log, write: copyDirect}, nil
}

// passwordParam finds password=… in a key/value DSN or a URL's query.
var passwordParam = regexp.MustCompile(`password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)`)

// redact removes from msg everything in dsn that could be a password:
// the user info's after its first colon and every password= value, raw
// and URL-decoded. pgx redacts too, but only what it could parse.
func redact(msg, dsn string) string {
	var secrets []string
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				secrets = append(secrets, rest[c+1:at])
			}
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(dsn, -1) {
		secrets = append(secrets, m[1], strings.Trim(m[1], "'"))
	}
	for _, s := range secrets {
		if d, err := url.PathUnescape(s); err == nil && d != s {
			secrets = append(secrets, d)
		}
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// Ping checks that the database answers.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ledgersink: ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Sink) Close() { s.pool.Close() }

// Position is how far cluster has exported: the zero Position before
// its first batch.
func (s *Sink) Position(ctx context.Context, cluster string) (ledger.Position, error) {
	p, err := scanPosition(s.pool.QueryRow(ctx, selectPosition, cluster))
	if errors.Is(err, errNoPosition) {
		return ledger.Position{}, nil
	}
	if err != nil {
		return ledger.Position{}, fmt.Errorf("ledgersink: reading the export position of cluster %q: %w", cluster, err)
	}
	return p, nil
}

// clamp stores a uint64 count in a bigint.
func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// pgError is err's PostgreSQL error, if it carries one.
func pgError(err error) (*pgconn.PgError, bool) {
	var pe *pgconn.PgError
	ok := errors.As(err, &pe)
	return pe, ok
}
