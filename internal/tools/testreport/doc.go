// Command testreport reads `go test -json` on stdin and prints what a person needs: each
// package's result, the full output of failed tests, which tests were skipped and why, and a
// closing "N passed, N failed, N skipped" line. It exits 1 if anything failed or did not build.
package main
