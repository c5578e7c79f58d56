package eval_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/eval"
)

// FuzzParse feeds arbitrary bytes to the fixture parser: it must never panic, and it must return
// either a fixture that runs, or an *eval.InvalidError that names the file.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("../evals/*.json")
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed fixtures: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"case_id":"x","goal":"g","model":[{"text":""}],"expected":{"stop_reason":"refused"}}`))
	f.Add([]byte(`{"case_id":"x","goal":"g","model":[],"expected":{"stop_reason":"completed"},"budget":{"max_duration":"1h"}}`))
	f.Add([]byte(`{"case_id":1}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fx, err := eval.Parse("fuzz.json", data)
		if err != nil {
			var inv *eval.InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("error is %T, not *eval.InvalidError: %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.json: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// A fixture that parsed must build a controller: every check the loop makes at
		// construction time has to be caught by the parser first.
		if _, err := eval.Controller(fx, nil, eval.Options{}); err != nil {
			t.Fatalf("parsed fixture does not build a controller: %v", err)
		}
	})
}
