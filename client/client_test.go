package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/engine"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

func TestClientStartErrors(t *testing.T) {
	v := newEnv(t)
	bs := runtest.LoopWorkflow(t, 2)
	if _, err := v.Client.Start(v.Ctx, bs, json.RawMessage(`{bad`), "r1"); err == nil ||
		!strings.Contains(err.Error(), "the input of run r1 is not JSON") || strings.Count(err.Error(), ". ") > 0 {
		t.Errorf("input that is not JSON: %v", err)
	}
	// One set of rules (wire.CheckJSON): what the engine could not take is refused here; the
	// size bound is the client's (a server's max_input_bytes).
	small := client.New(client.Config{Conn: (*conn.Conn)(v.Box), MaxInputBytes: 512 << 10})
	for _, tc := range []struct{ name, input, want string }{
		{"too deep", strings.Repeat("[", 9999) + strings.Repeat("]", 9999), "the input of run r1 nests deeper than 256 levels"},
		{"not UTF-8", "\"\xff\"", "the input of run r1 is not valid UTF-8 (byte 1)"},
		{"too large", strconv.Quote(strings.Repeat("x", 600<<10)), "more than the 524288 bytes allowed"},
	} {
		if _, err := small.Start(v.Ctx, bs, json.RawMessage(tc.input), "r1"); !errors.Is(err, wire.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := v.Client.Start(v.Ctx, bs, nil, "bad id"); err == nil || !strings.Contains(err.Error(), `run id "bad id"`) {
		t.Errorf("bad run id: %v", err)
	}
	if _, err := v.Client.Start(v.Ctx, nil, nil, ""); err == nil {
		t.Error("no bundles: no error")
	}
	id := v.Start(bs, "", "")
	if err := wire.CheckRunID(id); err != nil || !strings.HasPrefix(id, "r-") {
		t.Errorf("generated run id %q: %v", id, err)
	}
	v.WaitFor(id, func(*client.Record) bool { return true })
	if _, err := v.Client.Start(v.Ctx, bs, nil, id); !errors.Is(err, client.ErrExists) {
		t.Errorf("a second start of %s: %v, want ErrExists", id, err)
	}
	if _, err := v.Client.Get(v.Ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get of no run: %v, want ErrNotFound", err)
	}
	if _, err := v.Client.Get(v.Ctx, "a*"); err == nil || errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get of a wildcard: %v, want an invalid run id", err)
	}
	if _, err := v.Client.Events(v.Ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Events of no run: %v, want ErrNotFound", err)
	}
	if client.NewRunID() == client.NewRunID() {
		t.Error("two generated run ids are equal")
	}
}

func TestListAndWatch(t *testing.T) {
	v := newEnv(t)
	now := time.Now()
	times := []time.Time{now.Add(2 * time.Minute), now.Add(time.Minute), now.Add(3 * time.Minute)}
	v.Client = client.New(client.Config{Conn: (*conn.Conn)(v.Box), Now: func() time.Time {
		at := times[0]
		times = times[1:]
		return at
	}})
	bs := runtest.LoopWorkflow(t, 2)
	// The worker answers once the watch has seen the run running, so that the watch sees a
	// save before the last however fast the machine is.
	sawRunning := make(chan struct{})
	v.Worker("think").Serve(func(task *protocol.Task) *protocol.Event {
		<-sawRunning
		return runtest.Continued(task, `"again"`)
	})

	// Watch a run before it exists: the watch waits for it, yields every save, ends at the end.
	watched := make(chan []protocol.RunStatus, 1)
	go func() {
		var seen []protocol.RunStatus
		for u, err := range v.Client.Watch(v.Ctx, "second", client.WatchOptions{Only: client.WatchRecords}) {
			rec := u.Record
			if err != nil {
				t.Errorf("Watch: %v", err)
				break
			}
			if len(seen) == 0 {
				close(sawRunning)
			}
			seen = append(seen, rec.Run.Status)
		}
		watched <- seen
	}()
	hang := workflow.New("hang")
	hang.Task("wait", "nobody")
	_, hangBS := runtest.Bundles(t, hang)
	v.Start(hangBS, "", "first")
	v.Start(bs, "", "second")
	v.WaitFor("first", func(*client.Record) bool { return true })
	if err := v.Client.Cancel(v.Ctx, "first", ""); err != nil {
		t.Fatal(err)
	}
	v.Wait("first")
	v.Wait("second")
	seen := <-watched
	if len(seen) < 2 || seen[len(seen)-1] != protocol.RunCompleted || seen[0] != protocol.RunRunning {
		t.Fatalf("watched %v", seen)
	}

	all, err := v.Client.List(v.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Run.ID != "second" || all[1].Run.ID != "first" {
		t.Fatalf("List: %v, want second (started earlier) then first", ids(all))
	}
	cancelled, err := v.Client.List(v.Ctx, protocol.RunCancelled)
	if err != nil {
		t.Fatal(err)
	}
	if len(cancelled) != 1 || cancelled[0].Run.ID != "first" || cancelled[0].Run.Error.Message != "the run was cancelled" {
		t.Fatalf("List cancelled: %v", ids(cancelled))
	}
}

func ids(recs []*client.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Run.ID)
	}
	return out
}

func TestNewResultWithoutDefinition(t *testing.T) {
	data, err := json.Marshal(client.NewResult(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != `{"run_id":"","status":"","output":null,"error":null,"steps":[],"path":[]}` {
		t.Fatalf("empty result %s", got)
	}
	rec := &client.Record{Run: &engine.Run{ID: "r", Status: protocol.RunRunning, Steps: map[string]*engine.StepRun{
		"b": {Status: protocol.StepPending}, "a": {Status: protocol.StepRunning, Iteration: 1, Attempts: 1},
	}}}
	res := client.NewResult(nil, rec)
	if len(res.Steps) != 2 || res.Steps[0].ID != "a" || res.Steps[1].ID != "b" {
		t.Fatalf("steps %+v: want them by id without a definition", res.Steps)
	}
}

// Query selects runs by status, by workflow or both through the index, oldest first, and pages
// through them without losing or repeating one.
func TestQuery(t *testing.T) {
	v := newEnv(t)
	base := time.Now() // the runs' start times, a second apart: within their deadline
	n := 0
	v.Client = client.New(client.Config{Conn: (*conn.Conn)(v.Box), Now: func() time.Time {
		n++
		return base.Add(time.Duration(n) * time.Second)
	}})
	a := workflow.New("a")
	a.Terminate("end")
	_, as := runtest.Bundles(t, a)
	b := workflow.New("b")
	b.Approval("ask", "Ship?")
	_, bs := runtest.Bundles(t, b)
	for i := 1; i <= 5; i++ {
		v.Wait(v.Start(as, "", fmt.Sprint("a", i)))
	}
	for i := 1; i <= 2; i++ {
		id := v.Start(bs, "", fmt.Sprint("b", i))
		v.WaitFor(id, func(r *client.Record) bool { return r.Run.Status == protocol.RunWaiting })
	}
	ids := func(q client.Query) (string, string) {
		t.Helper()
		p, err := v.Client.Query(v.Ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range p.Records {
			got = append(got, r.Run.ID)
		}
		return fmt.Sprint(got), p.Next
	}
	for _, c := range []struct {
		q    client.Query
		want string
	}{
		{client.Query{Workflow: "a"}, "[a1 a2 a3 a4 a5]"},
		{client.Query{Status: protocol.RunWaiting}, "[b1 b2]"},
		{client.Query{Status: protocol.RunCompleted, Workflow: "b"}, "[]"},
		{client.Query{}, "[a1 a2 a3 a4 a5 b1 b2]"},
		{client.Query{Newest: true}, "[b2 b1 a5 a4 a3 a2 a1]"},
		{client.Query{Workflow: "a", Newest: true}, "[a5 a4 a3 a2 a1]"},
		{client.Query{Status: protocol.RunWaiting, Newest: true}, "[b2 b1]"},
		{client.Query{Status: protocol.RunCompleted, Workflow: "b", Newest: true}, "[]"},
	} {
		if got, next := ids(c.q); got != c.want || next != "" {
			t.Errorf("%+v: %s (next %q), want %s", c.q, got, next, c.want)
		}
	}
	for _, c := range []struct {
		q    client.Query
		want string
	}{
		{client.Query{Limit: 2}, "[[a1 a2] [a3 a4] [a5 b1] [b2]]"},
		{client.Query{Limit: 2, Newest: true}, "[[b2 b1] [a5 a4] [a3 a2] [a1]]"},
		{client.Query{Limit: 3, Newest: true, Workflow: "a"}, "[[a5 a4 a3] [a2 a1]]"},
		{client.Query{Limit: 2, Newest: true, Workflow: "a"}, "[[a5 a4] [a3 a2] [a1]]"},
		{client.Query{Limit: 1, Newest: true, Status: protocol.RunWaiting}, "[[b2] [b1]]"},
		{client.Query{Limit: 7, Newest: true}, "[[b2 b1 a5 a4 a3 a2 a1]]"},
	} {
		var pages []string
		q := c.q
		for {
			got, next := ids(q)
			pages = append(pages, got)
			if next == "" {
				break
			}
			q.After = next
		}
		if got := fmt.Sprint(pages); got != c.want {
			t.Errorf("pages of %+v: %s, want %s", c.q, got, c.want)
		}
	}
	for _, q := range []client.Query{{After: "junk"}, {Limit: -1}} {
		if _, err := v.Client.Query(v.Ctx, q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
}
