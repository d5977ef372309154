// Package gateway is courier's HTTP API (echo v4, JSON, under /v1) plus health, readiness,
// Prometheus metrics and the OpenAPI document. It is stateless: any number run side by side.
// Errors leave through one handler that maps courier's error codes to HTTP statuses.
package gateway
