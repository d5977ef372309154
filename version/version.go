package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Info is one build of courier.
type Info struct {
	// Version is the module version: a release tag (v1.2.3), a pseudo-version derived from the
	// commit when the build is not of a tag (v0.0.0-20261129010203-abcdef123456, with
	// "+dirty" when the working tree had changes), or "(devel)" when no VCS information was
	// stamped (go run, or a build outside a checkout).
	Version   string
	Revision  string // the commit's hash; "" when unknown
	Time      string // the commit's time (RFC 3339); "" when unknown
	Modified  bool   // the working tree had uncommitted changes
	GoVersion string // the toolchain that built it
}

// Get reads this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(devel)"}
	}
	return of(bi)
}

func of(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form `courier version` prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "courier %s", i.Version)
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (commit %s", rev)
		if i.Modified {
			b.WriteString(", modified")
		}
		if i.Time != "" {
			fmt.Fprintf(&b, ", %s", i.Time)
		}
		b.WriteString(")")
	}
	if i.GoVersion != "" {
		fmt.Fprintf(&b, " built with %s", i.GoVersion)
	}
	return b.String()
}

// OpenAPI is the version the API's OpenAPI document states: the module version, or
// "0.0.0-dev" for a build without one (an OpenAPI version is free text, but tools show it).
func (i Info) OpenAPI() string {
	if i.Version == "(devel)" || i.Version == "" {
		return "0.0.0-dev"
	}
	return strings.TrimPrefix(i.Version, "v")
}
