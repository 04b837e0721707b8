// Package allotpb holds the protocol buffer messages and gRPC services that
// connect Allot's agents, coordinators and operator tools. The .proto files
// in this directory are the source; the .pb.go files are generated from
// them by `make proto` with pinned protoc and plugin versions, and
// committed so that building Allot needs no protoc.
//
// Compatibility: fields are only ever added, never renumbered or retyped;
// every peer ignores fields it does not know. ReportRequest and
// ReportResponse carry a ProtocolVersion so that during a rolling upgrade a
// newer agent can talk to an older coordinator and the other way round.
package allotpb

//go:generate make -C .. proto
