package reins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// A program that embeds reins lets a worker of another process in with a token of its own, as
// reins serve does with the principals of its configuration.
func ExampleConfig_principals() {
	ctx := context.Background()
	sum := sha256.Sum256([]byte("the packers' token"))
	r, err := reins.New(ctx, reins.Config{
		DataDir: "/var/lib/shop",
		Listen:  "127.0.0.1:4222",
		Principals: []operator.Principal{
			{Name: "packers", TokenSHA256: hex.EncodeToString(sum[:]), Roles: []string{operator.RoleWorker}},
			{Name: "ci", TokenEnv: "SHOP_CI_TOKEN", Roles: []string{operator.RoleSubmitter}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	// The packers' program: worker.New on client.Dial(ctx, r.ClientURL(), conn.Token("the packers' token")).Conn()
	fmt.Println(r.ClientURL())
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// dial connects to url with token, as a program of another process does.
func dial(t *testing.T, ctx context.Context, url, token string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, url, conn.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// With Principals, a listening reins.New lets in each principal with its own token and lets it
// do what its roles allow: a worker serves tasks and may not start runs, a submitter starts,
// an approver decides, and the run records who did; a token nobody holds is refused in one
// sentence.
func TestPrincipals(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Setenv("REINS_TEST_APPROVER_TOKEN", "lead-token")
	r, err := reins.New(ctx, reins.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Principals: []operator.Principal{
		{Name: "packers", TokenSHA256: tokenHash("packers-token"), Roles: []string{operator.RoleWorker}},
		{Name: "ci", TokenSHA256: strings.ToUpper(tokenHash("ci-token")), Roles: []string{operator.RoleSubmitter}},
		{Name: "lead", TokenEnv: "REINS_TEST_APPROVER_TOKEN", Roles: []string{operator.RoleApprover}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	url := r.ClientURL()

	if _, err := client.Dial(ctx, url, conn.Token("nobody-token")); err == nil {
		t.Fatal("a token no principal holds was let in")
	} else if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "the token is not one the server knows") || strings.Contains(msg, "nobody-token") {
		t.Errorf("an unknown token: %q, want one sentence saying the server does not know it, without it", msg)
	}

	packers := dial(t, ctx, url, "packers-token")
	if packers.Principal() != "packers" {
		t.Errorf("the worker's principal: %q, want packers", packers.Principal())
	}
	w, err := worker.New(packers.Conn(), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("pack", func(tc worker.TaskContext) error { return tc.Complete("packed") })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	<-w.Ready()

	wf := reins.NewWorkflow("ship")
	wf.Approval("ask", "Ship?").WithApprovers("role:" + operator.RoleApprover)
	wf.Task("pack", "pack")
	wf.Edge("ask", "pack").When("approved")
	def, err := wf.Build()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := workflow.NewBundles(def, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := packers.Start(ctx, bs, json.RawMessage(`{}`), ""); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "packers may not start runs") {
		t.Errorf("the worker starting a run: %v, want ErrForbidden naming the principal", err)
	}

	ci := dial(t, ctx, url, "ci-token")
	id, err := ci.Start(ctx, bs, json.RawMessage(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	lead := dial(t, ctx, url, "lead-token")
	approved := false
	for u, err := range lead.Watch(ctx, id, client.WatchOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if u.Record == nil {
			continue
		}
		for _, a := range u.Record.Run.Acts {
			if a.Refused != "" {
				t.Fatalf("%s's %s was refused: %s", a.By, a.Type, a.Refused)
			}
		}
		if approved {
			continue
		}
		for _, ws := range client.WaitingSteps(nil, u.Record.Run) {
			if ws.Wait == protocol.WaitApproval {
				approved = true
				if err := ci.Approve(ctx, id, ws.Key, "me too"); !errors.Is(err, client.ErrForbidden) {
					t.Errorf("the submitter deciding: %v, want ErrForbidden", err)
				}
				if err := lead.Approve(ctx, id, ws.Key, "ship it"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rec, err := ci.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Run.Status != protocol.RunCompleted || string(rec.Run.Output) != `"packed"` {
		t.Fatalf("the run: %s, output %s; want completed with the worker's output", rec.Run.Status, rec.Run.Output)
	}
	if rec.Run.StartedBy != "ci" {
		t.Errorf("the run's StartedBy: %q, want ci", rec.Run.StartedBy)
	}
	var decided []string
	for _, a := range rec.Run.Acts {
		if a.Type == protocol.EvDecision {
			decided = append(decided, a.By+" "+a.Step+" "+a.Refused)
		}
	}
	if len(decided) != 1 || decided[0] != "lead ask " {
		t.Errorf("the run's decisions (by, step, refused): %q, want one by lead on ask, taken", decided)
	}
}

// A principal that cannot be let in is refused by New in one line naming it.
func TestPrincipalsRefused(t *testing.T) {
	worker := []string{operator.RoleWorker}
	for _, tc := range []struct {
		name string
		cfg  reins.Config
		want string
	}{
		{"without Listen", reins.Config{Principals: []operator.Principal{{Name: "w", TokenEnv: "W", Roles: worker}}},
			"Config.Principals lets other processes in through Config.Listen"},
		{"with NATSURL", reins.Config{NATSURL: "nats://127.0.0.1:1", Principals: []operator.Principal{{Name: "w", TokenEnv: "W", Roles: worker}}},
			"Config.Principals applies to the embedded server"},
		{"no token", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", Roles: worker}}},
			"Config.Principals[0] (w): missing a token"},
		{"both tokens", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "W", TokenSHA256: tokenHash("x"), Roles: worker}}},
			"Config.Principals[0] (w): set TokenEnv or TokenSHA256, not both"},
		{"short hash", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenSHA256: "abc", Roles: worker}}},
			"Config.Principals[0] (w): TokenSHA256: want 64 hexadecimal characters"},
		{"bad env name", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "1W", Roles: worker}}},
			"Config.Principals[0] (w): TokenEnv: want the name of an environment variable"},
		{"unset env", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "REINS_TEST_UNSET_TOKEN", Roles: worker}}},
			"Config.Principals[0] (w): TokenEnv: the environment variable REINS_TEST_UNSET_TOKEN is not set"},
		{"no roles", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "W"}}},
			"Config.Principals[0] (w): missing roles"},
		{"unknown role", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "W", Roles: []string{"wroker"}}}},
			`Config.Principals[0] (w): Roles[0]: unknown role "wroker"`},
		{"admin", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "admin", TokenEnv: "W", Roles: worker}}},
			"Config.Principals[0] (admin): the principal admin is the data directory's"},
		{"bad name", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "Team A", TokenEnv: "W", Roles: worker}}},
			"Config.Principals[0] (Team A): a name is 1 to 64 characters of [a-z0-9_-]"},
		{"twice", reins.Config{Listen: "127.0.0.1:0", Principals: []operator.Principal{{Name: "w", TokenEnv: "W", Roles: worker}, {Name: "w", TokenEnv: "V", Roles: worker}}},
			"Config.Principals[1] (w): another principal has this name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			r, err := reins.New(t.Context(), tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("New: no error, want %q", tc.want)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("New: %q, want one line with %q", msg, tc.want)
			}
		})
	}
}
