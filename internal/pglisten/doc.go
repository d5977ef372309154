// Package pglisten turns PostgreSQL LISTEN/NOTIFY into wake-ups for polling loops.
package pglisten
