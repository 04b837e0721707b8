package agent

import (
	"context"
	"fmt"

	"github.com/allot-io/allot/internal/clusterclient"
	allotpb "github.com/allot-io/allot/proto"
)

// newClient dials the coordinators with the credentials cfg names.
func newClient(cfg *Config) (*clusterclient.Client, error) {
	onError := func(err error) { cfg.Logger.Error("a changed credential file could not be loaded", "error", err) }
	opts, err := clusterclient.DialOptions(cfg.TLS, clusterclient.Credentials{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TokenFile: cfg.TokenFile}, onError)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return clusterclient.New(cfg.Coordinators, append(opts, cfg.DialOptions...)), nil
}

// Transport carries reports to the coordinators. The default dials
// Config.Coordinators with gRPC, follows the leader and fails over; an
// in-process coordinator, or a test, may carry reports instead.
type Transport interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
}
