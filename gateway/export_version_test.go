package gateway

// WithVersion is withVersion, and OpenAPISource the document as written, for the test that the
// served document states the build's version.
var (
	WithVersion   = withVersion
	OpenAPISource = openapiSource
)
