// Package testenv gives tests the real components they run against: a fresh PostgreSQL schema
// (from COURIER_TEST_POSTGRES_URL), a fresh SQLite file, and their migrated stores. Outside CI a
// missing PostgreSQL skips the test and says why; in CI (CI=true) it fails instead.
package testenv
