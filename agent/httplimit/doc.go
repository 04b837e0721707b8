// Package httplimit puts an agent in front of net/http handlers:
// Middleware checks every request and answers a refusal 429 with
// Retry-After and the IETF RateLimit fields; SetHeaders and WriteRefusal
// write the same fields for handlers that check by themselves, and
// WriteError answers a request that could not be decided.
//
// It is apart from package agent so that the decision core links no HTTP
// serving code; the sidecar and forward-auth servers use it too, so that
// every 429 Allot writes says the same.
package httplimit
