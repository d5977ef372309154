package version

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInfoFromBuildInfo(t *testing.T) {
	in := of(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/courier-oss/courier", Version: "v0.0.0-20261129010203-abcdef123456+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abcdef1234567890"}, {Key: "vcs.time", Value: "2026-11-29T01:02:03Z"}, {Key: "vcs.modified", Value: "true"}}})
	require.Equal(t, "courier v0.0.0-20261129010203-abcdef123456+dirty (commit abcdef123456, modified, 2026-11-29T01:02:03Z) built with go1.26.8", in.String())
	require.Equal(t, "0.0.0-20261129010203-abcdef123456+dirty", in.OpenAPI())

	bare := of(&debug.BuildInfo{Main: debug.Module{Path: "github.com/courier-oss/courier"}})
	require.Equal(t, "(devel)", bare.Version)
	require.Equal(t, "courier (devel)", bare.String())
	require.Equal(t, "0.0.0-dev", bare.OpenAPI())

	tagged := of(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}})
	require.Equal(t, "1.2.3", tagged.OpenAPI())
}
