// Package layering holds no code, only a test: the import rules the
// package map in docs/architecture.md promises, checked against what
// `go list -deps` says every package really pulls in. The compiler keeps
// internal packages internal; it does not know that a gateway embedding
// the agent must not link the coordinator, or that the rate algorithms
// and the lease arithmetic are leaves any program can take without the
// wire. Those rules are the point of the layout, so a change that breaks
// one fails here, naming the package and the chain that brought the
// import in.
package layering
