package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/workflow"
)

// TestStartRunIDSpaces: a client cannot start a run under an id of the server's spaces (a
// trigger's, a sub-run's, a fork's): the refusal names the rule and nothing is sent; only the
// trigger service's start (StartOptions.Trigger) takes a trigger's id, and only that.
func TestStartRunIDSpaces(t *testing.T) {
	v := newEnv(t)
	_, bs := registryBundles(t, v, "one")
	for _, tc := range []struct {
		id      string
		trigger bool
		want    string // "" when it starts
	}{
		{id: "t-on-order-aaaaaaaaaaaaaaaaaaaa", want: `begins with "t-"`},
		{id: "refund-1-fork-2", want: "ends in \"-fork-N\""},
		{id: "refund-1/ask/1", want: "an id with '/'"},
		{id: "plain", trigger: true, want: `run id "plain" is not a trigger's`},
		{id: "t-a/b", trigger: true, want: `is not a trigger's`},
		{id: "t-on-order-bbbbbbbbbbbbbbbbbbbb", trigger: true},
		{id: "refund-1"},
	} {
		_, err := v.Client.StartWith(v.Ctx, bs, nil, client.StartOptions{RunID: tc.id, Trigger: tc.trigger})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.id, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.id, err, tc.want)
		case tc.want != "" && !strings.Contains(tc.id, "/"):
			if _, err := v.Client.Origin(v.Ctx, tc.id); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("%s: refused, yet something of it is stored: %v", tc.id, err)
			}
		}
	}
}

// registryBundles registers a file of registryFile(text) as sam and returns the version and
// its bundles.
func registryBundles(t *testing.T, v *env, text string) (client.Registered, *workflow.Bundles) {
	t.Helper()
	src, def := registryFile(t, text)
	reg, _, err := as(v.Env, "sam").Register(v.Ctx, "greet", src, def)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := v.Client.Bundles(v.Ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, bs
}

// TestOrigin: who started a run and which registered version it runs, from its start while
// the engine has no record yet and from its record after; a start that claims a version whose
// definition is not the run's is not believed; a start that names none (before starts named
// them) is matched by its definition.
func TestOrigin(t *testing.T) {
	v := newEnv(t)
	v1, bs1 := registryBundles(t, v, "one")
	_, bs2 := registryBundles(t, v, "two")
	sam, mallory := as(v.Env, "sam", "submitter"), as(v.Env, "mallory", "submitter")
	v.stop() // no record until the engine runs again: Origin reads the starts
	cases := []struct {
		id      string
		by      *client.Client
		bs      *workflow.Bundles
		claim   *client.Registered
		who     string
		shown   string // Registered as NAME vN, "" for none
		version int    // VersionOf greet
	}{
		{"pinned", sam, bs1, &v1, "sam", "greet v1", 1},
		{"false-claim", mallory, bs2, &v1, "mallory", "", 2},
		{"no-such-version", mallory, bs1, &client.Registered{Name: "greet", Version: 9}, "mallory", "", 1},
		{"other-name", mallory, bs1, &client.Registered{Name: "other", Version: 1}, "mallory", "", 1},
		{"legacy", sam, bs1, nil, "sam", "", 1},
	}
	for _, tc := range cases {
		if _, err := tc.by.StartWith(v.Ctx, tc.bs, nil, client.StartOptions{RunID: tc.id, Registered: tc.claim}); err != nil {
			t.Fatal(err)
		}
	}
	for i, when := range []string{"before its record", "once recorded"} {
		if i == 1 {
			v.startEngine()
		}
		for _, tc := range cases {
			if i == 0 {
				if _, err := v.Client.Get(v.Ctx, tc.id); !errors.Is(err, client.ErrNotFound) {
					t.Fatalf("%s has a record with no engine running: %v", tc.id, err)
				}
			} else {
				v.WaitFor(tc.id, func(*client.Record) bool { return true })
			}
			o, err := v.Client.Origin(v.Ctx, tc.id)
			if err != nil {
				t.Fatalf("%s, %s: %v", tc.id, when, err)
			}
			shown := ""
			if o.Registered != nil {
				shown = fmt.Sprintf("%s v%d", o.Registered.Name, o.Registered.Version)
			}
			version, err := v.Client.VersionOf(v.Ctx, o, "greet")
			if err != nil || o.By != tc.who || shown != tc.shown || o.Hash != tc.bs.Root || version != tc.version {
				t.Errorf("%s, %s: %+v shown %q, version %d (%v); want by %s shown %q version %d", tc.id, when, o, shown, version, err, tc.who, tc.shown, tc.version)
			}
		}
	}
	for _, tc := range cases {
		rec, err := v.Client.Get(v.Ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		events, err := v.Client.Events(v.Ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := v.Client.RegisteredOf(v.Ctx, rec, events)
		if err != nil || (r == nil) != (tc.shown == "") || r != nil && (r.Name != "greet" || r.Version != 1) {
			t.Errorf("%s: RegisteredOf = %+v, %v", tc.id, r, err)
		}
	}
	if _, err := v.Client.Origin(v.Ctx, "nothing"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the origin of no run: %v", err)
	}
}
