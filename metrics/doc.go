// Package metrics declares courier's Prometheus metrics in one place, so the worker, the
// gateway and the benchmarks count the same things under the same names.
package metrics
