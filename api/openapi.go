package api

import (
	_ "embed"
	"net/http"

	"github.com/reins-run/reins/operator"
)

// openAPIDoc is the OpenAPI 3.1 document of every route of table() (docs/api.md). The test
// checks it against the table both ways, compiles its schemas and validates the answers of a
// real server against them.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.1 document of the API, as GET /v1/openapi.json serves it.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

// openAPI serves GET /v1/openapi.json (docs/api.md).
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request, _ operator.Principal) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}
