//go:build slim

package main

import (
	"context"
	"errors"
)

// errSlimBuild is what the commands that need the embedded stack say in a build made with
// -tags slim (the production image's), which leaves out the embedded Temporal server, its UI
// server and the embedded NATS server.
var errSlimBuild = errors.New("this build has no embedded stack (built with -tags slim, as the production image is): " +
	"run courier dev and courier bench from a full build (go build ./cmd/courier, make build), or point courier worker and courier gateway at your Temporal")

func runDev(context.Context, []string) error { return errSlimBuild }

func runBench(context.Context, []string) error { return errSlimBuild }
