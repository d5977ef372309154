package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// How every command answers, like its peers (go, git, kubectl): -h, -help, --help or help
// print the command's usage on stdout and exit 0; a usage mistake (an unknown flag, a missing
// or unknown subcommand) prints the reason and the usage once on stderr and exits 2.

// usageError is a mistake in how a command was called; main prints it with the usage.
type usageError struct {
	msg   string
	usage string
}

func (e *usageError) Error() string { return e.msg }

// parse parses a command's flags. Asked for help, it prints the usage on stdout and returns
// flag.ErrHelp (main then exits 0); a bad flag is a usageError carrying the usage.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // the flag package would print the usage itself, on stderr, and twice with the error
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(os.Stdout, flagUsage(fs))
		return flag.ErrHelp
	case err != nil:
		return &usageError{msg: err.Error(), usage: flagUsage(fs)}
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0)), usage: flagUsage(fs)}
	}
	return nil
}

func flagUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: courier %s [flags]\n\nFlags:\n", fs.Name())
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// subcommand is one entry of a command group such as `courier bench`.
type subcommand struct{ name, summary string }

// pickSubcommand reads the subcommand a group's arguments start with. Help asked for prints
// the group's usage on stdout (flag.ErrHelp); none or an unknown one is a usageError.
func pickSubcommand(group, what string, subs []subcommand, args []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: courier %s <%s> [flags]\n\n", group, what)
	for _, s := range subs {
		fmt.Fprintf(&b, "  courier %s %-9s %s\n", group, s.name, s.summary)
	}
	fmt.Fprintf(&b, "\nRun courier %s <%s> -h for its flags.\n", group, what)
	usage := b.String()
	if len(args) == 0 {
		return "", &usageError{msg: "no " + what + " given", usage: usage}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
		return "", flag.ErrHelp
	}
	for _, s := range subs {
		if args[0] == s.name {
			return s.name, nil
		}
	}
	return "", &usageError{msg: fmt.Sprintf("unknown %s %q", what, args[0]), usage: usage}
}
