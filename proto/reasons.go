package allotpb

// Refusals a peer acts on carry a google.rpc.ErrorInfo detail with
// ErrorDomain and one of these reasons, so that the peer need not read the
// message.
const (
	// ErrorDomain is the domain of every such ErrorInfo.
	ErrorDomain = "allot"
	// ReasonStaleBatch refuses a usage batch cut long ago by an
	// incarnation the coordinators no longer knew (they forget one silent
	// for a day): it may have been counted before, so none of it is
	// counted now. The batch is recorded as applied, and acknowledged when
	// sent again; the incarnation's later batches are counted as usual.
	// Metadata "seq" names the batch.
	ReasonStaleBatch = "STALE_USAGE_BATCH"
	// ReasonLedgerSinkUnavailable refuses a usage page that needs windows
	// the cluster exported to its ledger sink, which could not be read
	// (code UNAVAILABLE): the coordinator answered, the database did not.
	// Metadata "cause" is ledgersink.Cause's label (unreachable, auth,
	// timeout…), "error" the database's error, "exported_through" the start of the last window exported
	// (RFC 3339) and "in_memory_from" the start of the window after it:
	// a query from there on needs no sink.
	ReasonLedgerSinkUnavailable = "LEDGER_SINK_UNAVAILABLE"
)
