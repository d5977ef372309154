// Package helmtest checks the Helm chart in courier/ (deploy/helm/courier): it renders the
// chart with Helm's Go library and decodes every object strictly into the Kubernetes API types.
// It has no code of its own; it is a package apart so that Helm's and Kubernetes' libraries
// reach no other package's build.
package helmtest
