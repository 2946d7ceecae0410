// Package docs holds what of the documentation the binary carries: the
// OpenAPI document of the HTTP API (openapi.yaml), which the admin
// listener serves at GET /openapi.yaml and the server's tests check the
// running server against. The rest of this directory is prose for
// readers of the repository.
package docs

import _ "embed"

// OpenAPI is openapi.yaml: the OpenAPI 3.1 document of the checkout API
// (/v1) and of the admin listener's routes. It is embedded so that the
// document a server serves is the one its tests held it to.
//
//go:embed openapi.yaml
var OpenAPI []byte
