package gateway

import (
	"bytes"
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier/version"
)

//go:embed openapi.yaml
var openapiSource []byte

// openapiYAML is the document as served: its info.version is this build's (version.Info.OpenAPI).
var openapiYAML = withVersion(openapiSource, version.Get().OpenAPI())

// openAPIVersionLine is the document's version as written in the source; the server states the
// build's instead.
const openAPIVersionLine = `  version: "0.0.0-dev"`

// withVersion is the document with its info.version set to v.
func withVersion(doc []byte, v string) []byte {
	return bytes.Replace(doc, []byte(openAPIVersionLine), []byte(`  version: "`+v+`"`), 1)
}

func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", openapiYAML)
}
