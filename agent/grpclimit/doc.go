// Package grpclimit puts an agent in front of a gRPC server: unary and
// stream interceptors that check every call and refuse with
// RESOURCE_EXHAUSTED, carrying the retry delay as a RetryInfo detail, as
// RefusalStatus builds it.
//
// It is apart from package agent so that a gateway that does not serve
// gRPC links none of it.
package grpclimit
