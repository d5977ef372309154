// Package version says which build of courier is running: the module version and the version
// control revision that the Go toolchain stamps into every binary it builds. The binary's
// `courier version`, the gateway's OpenAPI document and its /healthz read it.
package version
