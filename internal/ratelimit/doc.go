// Package ratelimit keeps token buckets by key in process memory, for the gateway's admission
// control: one bucket per API key, business type or queue, on each gateway instance.
package ratelimit
