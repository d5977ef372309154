package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/courier-oss/courier/version"
)

// runVersion is `courier version`: the build's module version, commit and toolchain.
func runVersion(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parse(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, version.Get())
	return err
}
