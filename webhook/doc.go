// Package webhook signs courier's HTTP callbacks and verifies them on the receiving side, in the
// Standard Webhooks format: headers webhook-id, webhook-timestamp and webhook-signature, an
// HMAC-SHA256 over "id.timestamp.body". Receivers import only this package (with the Standard
// Webhooks library it builds on and courier's domain package, which holds the signing secret
// rule and imports nothing but the standard library) to check that a callback came from
// courier, was not altered, is fresh, and is not a replay.
package webhook
