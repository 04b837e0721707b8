// Package sidecar is the agent's sidecar: the servers and codecs through
// which a gateway in any language asks an agent in another process.
// POST /v1/check and GET /v1/status (CheckHandler, StatusHandler) speak
// JSON, decoded and encoded by hand on the common path with exactly
// encoding/json's results (checkjson.go); SidecarServer speaks the gRPC
// SidecarService, one check at a time or in batches on a stream.
//
// It is a package of its own so that a Go gateway that embeds the agent
// (package agent) links none of it: everything here uses only the agent's
// Check and Status.
package sidecar
