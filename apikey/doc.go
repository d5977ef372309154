// Package apikey is what an API key is: its scopes (producer, worker, admin) and its own
// request rate. The store keeps keys (hashed), the gateway checks them on every request and
// `courier apikey create` makes them; it imports only the domain package.
package apikey
