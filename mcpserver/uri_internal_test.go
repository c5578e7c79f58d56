package mcpserver

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/wire"
)

func TestParseRunURI(t *testing.T) {
	for _, tc := range []struct {
		uri, id, step string
		n             int
		bad           string
	}{
		{uri: "reins://runs/r-1", id: "r-1"},
		{uri: "reins://runs/r-1/iterations/act/2", id: "r-1", step: "act", n: 2},
		{uri: "reins://runs/r-1/iterations/fan%231/1", id: "r-1", step: "fan%231", n: 1},
		{uri: "reins://runs/", bad: "no run id"},
		{uri: "reins://runs/r-1/iterations/act/0", bad: `iteration "0" is not a whole number from 1`},
		{uri: "reins://runs/r-1/iterations/act/x", bad: `iteration "x"`},
		{uri: "reins://runs/r-1/steps", bad: "no run id, or more than"},
		{uri: "https://example.com/runs/r-1", bad: "does not begin with reins://runs/"},
	} {
		id, step, n, err := parseRunURI(tc.uri)
		switch {
		case tc.bad != "":
			if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), tc.uri) {
				t.Errorf("%s: %v, want an error naming it and saying %q", tc.uri, err, tc.bad)
			}
		case err != nil || id != tc.id || step != tc.step || n != tc.n:
			t.Errorf("%s: %q %q %d %v", tc.uri, id, step, n, err)
		}
	}
}

// FuzzParseRunURI: any text is a run, an iteration of one, or an error naming the URI; what it
// reads back makes the same URI.
func FuzzParseRunURI(f *testing.F) {
	for _, s := range []string{"reins://runs/r-1", "reins://runs/r-1/iterations/act/2", "reins://runs//iterations//", "reins://runs/a/b/c/d/e", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		id, step, n, err := parseRunURI(uri)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(uri)) {
				t.Fatalf("the error %q does not name %q", err, uri)
			}
			return
		}
		again := runURIPrefix + id
		if step != "" {
			again += "/iterations/" + step + "/" + uri[strings.LastIndex(uri, "/")+1:]
			if n < 1 {
				t.Fatalf("%q: iteration %d", uri, n)
			}
		}
		if again != uri {
			t.Fatalf("%q read as %q %q %d", uri, id, step, n)
		}
	})
}

// FuzzRunID: every derived id is a run id a client may choose, and the same call derives it
// again.
func FuzzRunID(f *testing.F) {
	f.Add("sam", "S1", "echo", []byte(`{"a":1}`), int64(7), "")
	f.Add("sam", "", "echo", []byte(`not json`), int64(0), "k-1")
	f.Fuzz(func(t *testing.T, principal, session, tool string, args []byte, reqID int64, key string) {
		id := RunID(principal, session, tool, json.RawMessage(args), reqID, key)
		if err := wire.CheckClientRunID(id); err != nil {
			t.Fatal(err)
		}
		if again := RunID(principal, session, tool, json.RawMessage(args), reqID, key); again != id {
			t.Fatalf("%s then %s", id, again)
		}
	})
}
