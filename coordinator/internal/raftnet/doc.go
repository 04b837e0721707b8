// Package raftnet is Raft's network as a coordinator member runs it: a
// stream layer that carries Raft's traffic over TLS when the member has a
// certificate, and a gate around the transport that keeps a member with
// no Raft state out of elections, so that a member that lost its disk
// cannot vote a second time in a term.
//
// Which peers the TLS layer accepts (members only) is the caller's
// choice, made in the tls.Config it passes.
package raftnet
