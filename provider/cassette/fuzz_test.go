package cassette_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/reins-run/reins/provider/cassette"
)

// FuzzParse: any bytes give a cassette or an error naming the file, never a panic; a cassette
// that parses can serve its own first request back.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":1,"provider":"openai","model":"m","base_path":"/v1","interactions":[{"request":{"method":"POST","path":"/v1/x","body":{"a":1}},"response":{"status":200,"header":{"Content-Type":["application/json"]},"body":"{}"}}]}`))
	f.Add([]byte(`{"version":1,"provider":"anthropic","interactions":[]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := cassette.Parse("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(c.Interactions) == 0 {
			return
		}
		in := c.Interactions[0].Request
		req, err := http.NewRequest(in.Method, "http://replay.invalid"+in.Path, bytes.NewReader(in.Body))
		if err != nil {
			return // a recorded method or path that no HTTP client could send
		}
		req.URL.Path = in.Path
		resp, err := cassette.NewReplayer(c, "fuzz.json").RoundTrip(req)
		if err != nil {
			t.Fatalf("a cassette does not serve its own first request: %v", err)
		}
		resp.Body.Close()
	})
}
