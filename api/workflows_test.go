package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/builtin"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/host"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/worker"
	"github.com/reins-run/reins/workflow"
)

// The stack of the tests of registered workflows: a real embedded NATS server with the engine
// and the built-in workers running (host.StartEmbedded, as reins serve hosts them), the API in
// front of it, and a principal of each role.

// regTokens are the tokens of the stack's principals, by name.
var regTokens = map[string]string{
	"root":  "tok-root",  // admin
	"sam":   "tok-sam",   // submitter
	"alice": "tok-alice", // approver
	"val":   "tok-val",   // viewer
	"wanda": "tok-wanda", // worker
}

var regRoles = map[string]string{
	"root": operator.RoleAdmin, "sam": operator.RoleSubmitter, "alice": operator.RoleApprover,
	"val": operator.RoleViewer, "wanda": operator.RoleWorker,
}

// regStack is a server with the API, its principals and a client acting as its admin.
type regStack struct {
	t      *testing.T
	ctx    context.Context
	url    string
	client *client.Client
	cfg    api.Config // the API's
}

// newRegStack starts the stack; maxInput is the API's MaxInputBytes (0: its default).
func newRegStack(t *testing.T, maxInput int64) *regStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	res, err := (&operator.Config{}).Resolve(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range regTokens {
		res.AddPrincipal(name, tok, regRoles[name])
	}
	op := operator.Default() // the configuration of a server without --config
	log := slog.New(slog.NewTextHandler(regLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := host.StartEmbedded(ctx, t.TempDir(), host.Config{
		Engine: true,
		Logger: log,
		Register: func(w *worker.Worker) error {
			return builtin.Register(w, builtin.Config{Operator: res})
		},
		Roles: func(name string) []string {
			p, _ := res.Principal(name)
			return p.Roles
		},
		Admit: func(_ context.Context, defs []*workflow.Definition, _ json.RawMessage) *protocol.RunError {
			if ps := operator.CheckWorkflow(op, defs...); len(ps) > 0 {
				return &protocol.RunError{Code: string(ps[0].Code), Message: ps.Error()}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	cfg := api.Config{Box: h.Box(), Principals: res, Log: log, MaxInputBytes: maxInput}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	return &regStack{t: t, ctx: ctx, url: srv.URL, client: client.NewClient(client.ClientConfig{Box: h.Box()}), cfg: cfg}
}

// regLog writes the server's log to the test's.
type regLog struct{ t *testing.T }

func (l regLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// regAnswer is an answer of the API: its status, headers and body decoded.
type regAnswer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends method path with body as principal who ("" sends no token) and decodes the answer.
func (s *regStack) call(who, method, path, body string) regAnswer {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.ctx, method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if who != "" {
		tok, ok := regTokens[who]
		if !ok {
			tok = who // a token nobody has
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	a := regAnswer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			s.t.Fatalf("%s %s answered %d with a body that is not a JSON object: %s", method, path, resp.StatusCode, raw)
		}
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		s.t.Errorf("%s %s answered %d as %s, want a problem document", method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return a
}

// want fails the test when a's status is not status.
func (a regAnswer) want(t *testing.T, status int, what string) regAnswer {
	t.Helper()
	if a.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, a.status, status, a.raw)
	}
	return a
}

// problems returns the code, line and key of each problem of a 422, as "CODE@LINE key".
func (a regAnswer) problems() []string {
	var out []string
	ps, _ := a.body["problems"].([]any)
	for _, p := range ps {
		m := p.(map[string]any)
		line, _ := m["line"].(float64)
		key, _ := m["key"].(string)
		out = append(out, fmt.Sprintf("%s@%d %s", m["code"], int(line), key))
	}
	return out
}

// helloFile is a workflow whose llm step answers text with a scripted model, reading the run
// input's who.
func helloFile(text string) string {
	return fmt.Sprintf(`name = "hello"

[models.m]
provider = "scripted"
script = [{ text = %q }]

[[steps]]
id = "say"
type = "llm"
model = "m"
prompt = "Say hello to {{input.who}}."
`, text)
}

// TestRegisterAndStart: a submitter registers a workflow, and runs it by name: the run, started
// as that submitter, completes with the scripted model's answer. Versions count, the same
// file again is the latest, and both read back.
func TestRegisterAndStart(t *testing.T) {
	s := newRegStack(t, 0)
	a := s.call("sam", "PUT", "/v1/workflows/hello", helloFile("Hello, Ada!")).want(t, 201, "the first registration")
	if a.body["name"] != "hello" || a.body["version"] != 1.0 || a.body["registered_by"] != "sam" || a.body["hash"] == "" || a.body["registered_at"] == nil {
		t.Errorf("the first registration answered %s", a.raw)
	}
	if loc := a.header.Get("Location"); loc != "/v1/workflows/hello?version=1" {
		t.Errorf("Location %q", loc)
	}
	hash1 := a.body["hash"]
	a = s.call("sam", "PUT", "/v1/workflows/hello", helloFile("Hello, Ada!")).want(t, 200, "the same file again")
	if a.body["version"] != 1.0 || a.body["hash"] != hash1 {
		t.Errorf("the same file again answered %s, want version 1", a.raw)
	}
	a = s.call("root", "PUT", "/v1/workflows/hello", helloFile("Hi there, Ada.")).want(t, 201, "another file")
	if a.body["version"] != 2.0 || a.body["registered_by"] != "root" || a.body["hash"] == hash1 {
		t.Errorf("another file answered %s, want version 2 by root", a.raw)
	}

	a = s.call("val", "GET", "/v1/workflows", "").want(t, 200, "the list")
	list, _ := a.body["workflows"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["version"] != 2.0 || list[0].(map[string]any)["source"] != nil {
		t.Errorf("the list: %s", a.raw)
	}
	a = s.call("val", "GET", "/v1/workflows/hello", "").want(t, 200, "the latest")
	graph, _ := a.body["graph"].(map[string]any)
	nodes, _ := graph["nodes"].([]any)
	if a.body["version"] != 2.0 || !strings.Contains(a.body["source"].(string), "Hi there") || len(nodes) != 1 || nodes[0].(map[string]any)["step"] != "say" ||
		a.body["problems"] == nil || len(a.body["problems"].([]any)) != 0 {
		t.Errorf("the latest: %s", a.raw)
	}
	a = s.call("alice", "GET", "/v1/workflows/hello?version=1", "").want(t, 200, "version 1")
	if a.body["version"] != 1.0 || !strings.Contains(a.body["source"].(string), "Hello, Ada!") {
		t.Errorf("version 1: %s", a.raw)
	}

	for _, tc := range []struct {
		body, want string
		version    float64
	}{
		{`{"workflow": "hello", "input": {"who": "Ada"}}`, "Hi there, Ada.", 2},
		{`{"workflow": "hello", "input": {"who": "Ada"}, "version": 1}`, "Hello, Ada!", 1},
	} {
		a = s.call("sam", "POST", "/v1/runs", tc.body).want(t, 201, "a start")
		id, _ := a.body["run_id"].(string)
		if id == "" || a.body["workflow"] != "hello" || a.body["version"] != tc.version || a.header.Get("Location") != "/v1/runs/"+id {
			t.Fatalf("start %s answered %s (Location %q)", tc.body, a.raw, a.header.Get("Location"))
		}
		rec, err := s.client.Wait(s.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.client.Result(s.ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != protocol.RunCompleted || !strings.Contains(string(res.Output), tc.want) {
			t.Errorf("the run of %s: %s %s %+v, want completed with %q", tc.body, res.Status, res.Output, res.Error, tc.want)
		}
		if rec.Run.StartedBy != "sam" {
			t.Errorf("the run was started by %q, want sam (the authenticated principal)", rec.Run.StartedBy)
		}
	}
}

// TestRegisterConcurrentPUTs: two different files PUT at once get versions 1 and 2.
func TestRegisterConcurrentPUTs(t *testing.T) {
	s := newRegStack(t, 0)
	var wg sync.WaitGroup
	answers := make([]regAnswer, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.call("sam", "PUT", "/v1/workflows/race", helloFile(fmt.Sprint("file ", i)))
		}()
	}
	wg.Wait()
	var versions []float64
	for _, a := range answers {
		a.want(t, 201, "a concurrent registration")
		versions = append(versions, a.body["version"].(float64))
	}
	slices.Sort(versions)
	if !slices.Equal(versions, []float64{1, 2}) {
		t.Errorf("versions %v, want 1 and 2", versions)
	}
}

// TestRegisterProblems: what cannot be registered answers 422 with every problem, its code,
// line and key, as reins validate reports them, and what only the operator may set or what
// names another file too.
func TestRegisterProblems(t *testing.T) {
	s := newRegStack(t, 0)
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"invalid", `name = "bad"
colour = "blue"

[[steps]]
id = "a"
type = "terminate"

[[edges]]
from = "a"
to = "nowhere"
`, []string{"E_UNKNOWN_KEY@2 colour", "E_DANGLING_EDGE@10 edges[0].to"}},
		{"syntax", "name = \"x\"\n[[steps]\n", []string{"E_PARSE@2 "}},
		{"operator-only", `name = "keys"

[models.m]
provider = "openai"
model = "gpt-4.1-mini"
base_url = "http://attacker.example/v1"
api_key_env = "DATABASE_PASSWORD"

[models.r]
provider = "replay"
cassette = "rec.json"

[[steps]]
id = "a"
type = "llm"
model = "m"
prompt = "hi"

[[steps]]
id = "b"
type = "llm"
model = "r"
prompt = "hi"

[[edges]]
from = "a"
to = "b"
`, []string{"E_OPERATOR_ONLY@6 models.m.base_url", "E_OPERATOR_ONLY@7 models.m.api_key_env", "E_OPERATOR_ONLY@11 models.r.cassette"}},
		{"subflow", `name = "parent"

[[steps]]
id = "child"
type = "call"
workflow = "child.toml"
`, []string{"E_PATH_OUTSIDE@6 steps[0].workflow"}},
		{"provider", `name = "p"

[models.m]
provider = "mistral"
model = "x"

[[steps]]
id = "a"
type = "llm"
model = "m"
prompt = "hi"
`, nil},
	} {
		a := s.call("sam", "PUT", "/v1/workflows/"+tc.name, tc.file).want(t, 422, tc.name)
		got := a.problems()
		if tc.want != nil && !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v", tc.name, got, tc.want)
		}
		if len(got) == 0 {
			t.Errorf("%s: a 422 without problems: %s", tc.name, a.raw)
		}
		if !strings.Contains(a.body["detail"].(string), tc.name+".toml") {
			t.Errorf("%s: detail %q does not name the file", tc.name, a.body["detail"])
		}
	}
	s.call("val", "GET", "/v1/workflows/invalid", "").want(t, 404, "a workflow refused is not registered")
}

// TestWorkflowAccess: 401 without a known token, 403 for a role that may not, and the 404s,
// 400s and 413s of names, versions and bodies.
func TestWorkflowAccess(t *testing.T) {
	s := newRegStack(t, 4096)
	s.call("sam", "PUT", "/v1/workflows/hello", helloFile("hi")).want(t, 201, "registration")
	for _, tc := range []struct {
		who, method, path, body string
		status                  int
	}{
		{"", "PUT", "/v1/workflows/hello", helloFile("x"), 401},
		{"tok-nobody", "GET", "/v1/workflows", "", 401},
		{"", "POST", "/v1/runs", `{"workflow": "hello"}`, 401},
		{"val", "PUT", "/v1/workflows/hello", helloFile("x"), 403},
		{"alice", "PUT", "/v1/workflows/hello", helloFile("x"), 403},
		{"val", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}}`, 403},
		{"alice", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}}`, 403},
		{"wanda", "GET", "/v1/workflows", "", 403},
		{"val", "GET", "/v1/workflows/nothing", "", 404},
		{"val", "GET", "/v1/workflows/hello?version=9", "", 404},
		{"val", "GET", "/v1/workflows/Not.A.Name", "", 404},
		{"val", "GET", "/v1/workflows/hello?version=x", "", 400},
		{"sam", "POST", "/v1/runs", `{"workflow": "nothing", "input": {}}`, 404},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "version": 2, "input": {"who": "x"}}`, 404},
		{"sam", "PUT", "/v1/workflows/Hello", helloFile("x"), 400},
		{"sam", "PUT", "/v1/workflows/-x", helloFile("x"), 400},
		{"sam", "PUT", "/v1/workflows/" + strings.Repeat("a", 65), helloFile("x"), 400},
		{"sam", "PUT", "/v1/workflows/" + strings.Repeat("a", 64), helloFile("x"), 201},
		{"sam", "PUT", "/v1/workflows/big", "# " + strings.Repeat("x", 1<<20) + "\n", 413},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "` + strings.Repeat("x", 4096) + `"}}`, 413},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}, "colour": 1}`, 400},
		{"sam", "POST", "/v1/runs", `{"workflow": 7}`, 400},
		{"sam", "POST", "/v1/runs", `{"input": {}}`, 400},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}, "run_id": "a.b"}`, 400},
		{"sam", "POST", "/v1/runs", `not json`, 400},
		// The input: the workflow reads input.who, and an input reins does not take.
		{"sam", "POST", "/v1/runs", `{"workflow": "hello"}`, 422},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "input": null}`, 422},
		{"sam", "POST", "/v1/runs", `{"workflow": "hello", "input": ` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, 422},
	} {
		a := s.call(tc.who, tc.method, tc.path, tc.body)
		if a.status != tc.status {
			t.Errorf("%s %s as %q: %d, want %d; %s", tc.method, tc.path, tc.who, a.status, tc.status, a.raw)
		}
		if a.status == 401 && a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: a 401 without WWW-Authenticate", tc.method, tc.path)
		}
	}
}

// TestStartRunIDIdempotent: a start with a run_id that exists starts nothing and answers the
// run (200), at once or later; a run_id taken by a run of another workflow is 409.
func TestStartRunIDIdempotent(t *testing.T) {
	s := newRegStack(t, 0)
	s.call("sam", "PUT", "/v1/workflows/hello", helloFile("Hello!")).want(t, 201, "registration")
	s.call("sam", "PUT", "/v1/workflows/other", strings.Replace(helloFile("Other."), `"hello"`, `"other"`, 1)).want(t, 201, "registration")
	body := `{"workflow": "hello", "input": {"who": "Ada"}, "run_id": "hello-ada"}`
	answers := make([]regAnswer, 3)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.call("sam", "POST", "/v1/runs", body)
		}()
	}
	wg.Wait()
	var statuses []int
	for _, a := range answers {
		statuses = append(statuses, a.status)
		if a.body["run_id"] != "hello-ada" || a.body["version"] != 1.0 || a.body["workflow"] != "hello" || a.header.Get("Location") != "/v1/runs/hello-ada" {
			t.Errorf("a start with run_id: %d %s", a.status, a.raw)
		}
	}
	slices.Sort(statuses)
	if !slices.Equal(statuses, []int{200, 200, 201}) {
		t.Errorf("three starts of one run_id at once answered %v, want one 201 and two 200", statuses)
	}
	if _, err := s.client.Wait(s.ctx, "hello-ada"); err != nil {
		t.Fatal(err)
	}
	s.call("sam", "POST", "/v1/runs", body).want(t, 200, "a start of a run that ended")
	evs, err := s.client.Events(s.ctx, "hello-ada")
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, ev := range evs {
		if ev.Type == protocol.EvStart {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("run hello-ada has %d start events, want 1", starts)
	}
	s.call("sam", "POST", "/v1/runs", `{"workflow": "other", "input": {"who": "Ada"}, "run_id": "hello-ada"}`).want(t, 409, "a run_id of another workflow's run")
}

// TestRegisterLargeBody: a body of exactly the limit is read; one byte more is 413.
func TestRegisterLargeBody(t *testing.T) {
	s := newRegStack(t, 0)
	file := []byte(helloFile("hi"))
	pad := api.MaxWorkflowBytes - len(file) - 3
	body := append(append(append([]byte{}, file...), "\n# "...), bytes.Repeat([]byte("x"), pad)...)
	if len(body) != api.MaxWorkflowBytes {
		t.Fatalf("body of %d bytes", len(body))
	}
	// A file of 1 MiB does not fit one NATS message with its record: 413 too, saying so.
	a := s.call("sam", "PUT", "/v1/workflows/big", string(body))
	if a.status != 413 || !strings.Contains(a.body["detail"].(string), "NATS server takes messages of at most") {
		t.Errorf("a file of 1 MiB: %d %s", a.status, a.raw)
	}
	s.call("sam", "PUT", "/v1/workflows/big", string(body)+"x").want(t, 413, "a file larger than 1 MiB")
}

// TestWorkflowProblemsOfNow: a registered workflow is validated again when read, against the
// operator's configuration of now: one naming a provider the operator has since removed shows
// the problem, and registers no more.
func TestWorkflowProblemsOfNow(t *testing.T) {
	s := newRegStack(t, 0)
	file := `name = "ask"

[models.m]
provider = "openai"
model = "gpt-4.1-mini"

[[steps]]
id = "a"
type = "llm"
model = "m"
prompt = "hi"
`
	s.call("sam", "PUT", "/v1/workflows/ask", file).want(t, 201, "a workflow of the default providers")
	a := s.call("val", "GET", "/v1/workflows/ask", "").want(t, 200, "read")
	if ps := a.problems(); len(ps) != 0 {
		t.Errorf("problems %v, want none", ps)
	}
	op := operator.Default()
	delete(op.Providers, "openai")
	cfg := s.cfg
	cfg.Operator = op
	srv := httptest.NewServer(api.New(cfg))
	defer srv.Close()
	now := *s
	now.url = srv.URL
	a = now.call("val", "GET", "/v1/workflows/ask", "").want(t, 200, "read under the new configuration")
	if ps := a.problems(); !slices.Equal(ps, []string{"E_UNKNOWN_PROVIDER@4 models.m.provider"}) {
		t.Errorf("problems %v, want E_UNKNOWN_PROVIDER at line 4", ps)
	}
	now.call("sam", "PUT", "/v1/workflows/ask", file).want(t, 422, "a registration under the new configuration")
}
