// Package console is reins's web console (docs/console.md): the page and assets that
// `reins serve` serves at / from files embedded in the binary, so that nothing (no Node, no
// CDN) is needed at run time. The page talks to the HTTP API with the token a person types in,
// kept in the tab's sessionStorage and sent only in the Authorization header.
//
// It must not hold API logic or import any other reins package: everything it shows comes from
// the API, which checks every request.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the console: the page at / and its files (style.css, js/...), each with a
// Content-Security-Policy that allows scripts, styles and connections of the same origin only
// and no framing.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		w.Header().Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
