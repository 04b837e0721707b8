// Package forwardauth serves forward authentication for gateways that ask
// an HTTP endpoint before serving each request (nginx's auth_request,
// Caddy's and Traefik's forward_auth): Handler reads the request's
// attributes from configurable headers (Config), checks it with the
// agent, and answers 200 or the deny status with the RateLimit fields.
//
// It is apart from package agent so that an embedded agent links none of
// it; the sidecar serves it on /v1/authz.
package forwardauth
