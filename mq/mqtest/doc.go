// Package mqtest is the publisher conformance suite every mq adapter runs (Run with a Harness
// that creates destinations, reads back what the broker durably holds and makes the broker
// unreachable), and the tools harnesses use for that: a listener Gate and a TCP Proxy that can be
// cut and restored.
package mqtest
