package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/operator"
	"github.com/reins-run/reins/trigger"
)

// addPrincipal adds a principal of roles to the stack (before any request of it) and returns
// its token.
func (s *stack) addPrincipal(name string, roles ...string) string {
	token := "tok-" + name + "-" + client.NewRunID()
	s.Config.Principals.AddPrincipal(name, token, roles...)
	s.Tokens[name] = token
	return token
}

// jsonPut sends PUT path with a JSON body as the principal name.
func (s *stack) jsonPut(name, path, body string) answer {
	s.t.Helper()
	return s.doWith("PUT", path, s.Tokens[name], body, map[string]string{"Content-Type": "application/json"})
}

// TestWorkflowOwners: a name belongs to the principal who registered it first; only its
// owner, the writers it names (principals and roles) and admins add versions, and only the
// owner and admins name the writers; every refusal is 403 naming the principal and the owner,
// and stores nothing; GET shows the owner and the writers.
func TestWorkflowOwners(t *testing.T) {
	s := newStack(t)
	s.addPrincipal("mallory", operator.RoleSubmitter)
	s.addPrincipal("fred", operator.RoleSubmitter, operator.RoleApprover)
	s.addPrincipal("zed", operator.RoleSubmitter)
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("v1")).want(t, http.StatusCreated, "sam's first registration")
	n := 1
	for _, st := range []struct {
		who, what string
		writers   string // a PUT of writers with this body, else a PUT of a new file
		file      string // the file, when not a new hello file
		status    int
		detail    string // in the problem's detail
	}{
		{who: "mallory", what: "a stranger's version", status: 403, detail: "principal mallory may not add a version to workflow hello: it belongs to sam, and only sam, the writers sam names and admins may"},
		{who: "mallory", what: "a stranger's file that is no workflow", file: "[[steps]]\nid = 1\n", status: 403, detail: "principal mallory may not add a version to workflow hello: it belongs to sam"},
		{who: "mallory", what: "a stranger naming herself", writers: `{"writers": ["mallory"]}`, status: 403, detail: "principal mallory may not change who writes workflow hello: it belongs to sam, and only sam and admins may"},
		{who: "vera", what: "a viewer naming writers", writers: `{"writers": []}`, status: 403, detail: "principal vera (roles viewer) may not PUT"},
		{who: "sam", what: "a writer nobody is", writers: `{"writers": ["nobody"]}`, status: 422, detail: `names "nobody", which is no principal`},
		{who: "sam", what: "a role nobody has", writers: `{"writers": ["role:finance"]}`, status: 422, detail: `names role "finance", which is neither a built-in role`},
		{who: "sam", what: "a writer that is no name", writers: `{"writers": ["a.b"]}`, status: 422, detail: `writer 1, "a.b", is not a list of writers`},
		{who: "sam", what: "no writers member", writers: `{}`, status: 400, detail: `the member "writers" is required`},
		{who: "sam", what: "writers of the wrong type", writers: `{"writers": "mallory"}`, status: 400, detail: `writers`},
		{who: "sam", what: "the owner's version", status: 201},
		{who: "admin", what: "an admin's version", status: 201},
		{who: "sam", what: "the owner naming writers", writers: `{"writers": ["mallory", "role:approver", "mallory"]}`, status: 200},
		{who: "mallory", what: "a writer's version", status: 201},
		{who: "fred", what: "a version by a writer's role", status: 201},
		{who: "zed", what: "a version by no writer", status: 403, detail: "principal zed may not add a version"},
		{who: "mallory", what: "a writer naming writers", writers: `{"writers": ["zed"]}`, status: 403, detail: "principal mallory may not change who writes"},
		{who: "admin", what: "an admin naming none", writers: `{"writers": []}`, status: 200},
		{who: "mallory", what: "a former writer's version", status: 403, detail: "it belongs to sam"},
	} {
		before := s.as("vera", "GET", "/v1/workflows/hello", "").want(t, 200, "read")
		var a answer
		if st.writers != "" {
			a = s.jsonPut(st.who, "/v1/workflows/hello/writers", st.writers)
		} else {
			n++
			file := st.file
			if file == "" {
				file = helloFile(fmt.Sprint("v", n))
			}
			a = s.as(st.who, "PUT", "/v1/workflows/hello", file)
		}
		a.want(t, st.status, st.what)
		if st.status >= 400 {
			if p := a.problem(t); !strings.Contains(p.Detail, st.detail) || strings.Count(p.Detail, ". ") > 0 {
				t.Errorf("%s: detail %q, want one sentence with %q", st.what, p.Detail, st.detail)
			}
			after := s.as("vera", "GET", "/v1/workflows/hello", "").want(t, 200, "read")
			if string(after.Body) != string(before.Body) {
				t.Errorf("%s: refused, yet the workflow changed:\n%s\n%s", st.what, before.Body, after.Body)
			}
			continue
		}
		if st.writers == "" && (a.Obj["registered_by"] != st.who || a.Obj["owner"] != "sam") {
			t.Errorf("%s: %s", st.what, a.Body)
		}
	}
	var list api.WorkflowVersion
	a := s.as("vera", "GET", "/v1/workflows", "").want(t, 200, "list")
	for _, w := range a.Obj["workflows"].([]any) {
		m := w.(map[string]any)
		list.Owner, _ = m["owner"].(string)
		list.RegisteredBy, _ = m["registered_by"].(string)
		list.Version = int(m["version"].(float64))
	}
	if list.Owner != "sam" || list.RegisteredBy != "fred" || list.Version != 5 {
		t.Errorf("the list: %s", a.Body)
	}
	s.jsonPut("sam", "/v1/workflows/none/writers", `{"writers": []}`).want(t, 404, "writers of nothing registered")
	got, err := api.NewClient(api.ClientConfig{URL: s.URL, Token: s.Tokens["sam"]}).SetWriters(s.Ctx, "hello", []string{"zed"})
	if err != nil || got.Owner != "sam" || !slices.Equal(got.Writers, []string{"zed"}) {
		t.Errorf("api.Client.SetWriters: %+v, %v", got, err)
	}
}

// TestStartRunIDRules: a run_id of the server's spaces (a trigger's, a sub-run's, a fork's) is
// 400 naming the rule; the run_id of another principal's run is 409 and says nothing of it;
// the principal who started it is answered its run (200).
func TestStartRunIDRules(t *testing.T) {
	s := newStack(t)
	s.addPrincipal("mallory", operator.RoleSubmitter)
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("Hello!")).want(t, 201, "registration")
	const secret = "sams-own-input-7f3e"
	mine := `{"workflow": "hello", "input": {"who": "` + secret + `"}, "run_id": "sams-run"}`
	s.as("sam", "POST", "/v1/runs", mine).want(t, 201, "sam's start")
	for _, tc := range []struct {
		who, runID string
		status     int
		detail     string
	}{
		{"mallory", trigger.RunID("webhook", "hello", "t", "d-1"), 400, `the member "run_id": run id "t-t-`},
		{"mallory", "t-anything", 400, `begins with "t-" names a run of a trigger, which only the server starts, and a client may not choose one`},
		{"mallory", "sams-run-fork-1", 400, `ends in "-fork-N" names a fork`},
		{"mallory", "sams-run/ask/1", 400, "an id with '/' names a sub-run"},
		{"mallory", "sams-run", 409, "principal mallory may not start run sams-run: a run of that id exists and mallory did not start it, so choose another run_id"},
		{"admin", "sams-run", 409, "principal admin may not start run sams-run"},
		{"sam", "sams-run", 200, ""},
	} {
		body := strings.Replace(mine, `"run_id": "sams-run"`, `"run_id": "`+tc.runID+`"`, 1)
		a := s.as(tc.who, "POST", "/v1/runs", body).want(t, tc.status, tc.who+" "+tc.runID)
		if tc.status == 200 {
			if a.Obj["run_id"] != "sams-run" || a.Obj["version"] != 1.0 {
				t.Errorf("sam's retry: %s", a.Body)
			}
			continue
		}
		if p := a.problem(t); !strings.Contains(p.Detail, tc.detail) || strings.Contains(string(a.Body), secret) || a.Obj["version"] != nil {
			t.Errorf("%s %s: %s, want a detail with %q and nothing of the run", tc.who, tc.runID, a.Body, tc.detail)
		}
	}
	if err := wire.CheckClientRunID("sams-run"); err != nil {
		t.Fatal(err)
	}
}

// TestRunShowsVersion: a start pinned to a version runs it though another is the latest, and
// GET /v1/runs/{id} says which version ran; a run of a file (no registered version) says none.
func TestRunShowsVersion(t *testing.T) {
	s := newStack(t)
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("one")).want(t, 201, "v1")
	s.as("sam", "PUT", "/v1/workflows/hello", helloFile("two")).want(t, 201, "v2")
	for _, tc := range []struct {
		body, id string
		version  int
		output   string
	}{
		{`{"workflow": "hello", "version": 1, "input": {"who": "x"}, "run_id": "pinned"}`, "pinned", 1, "one"},
		{`{"workflow": "hello", "input": {"who": "x"}, "run_id": "latest"}`, "latest", 2, "two"},
	} {
		s.as("sam", "POST", "/v1/runs", tc.body).want(t, 201, tc.id).JSON(t, new(api.RunStarted))
		rec := s.wait(tc.id)
		var d api.RunDetail
		s.as("vera", "GET", "/v1/runs/"+tc.id, "").want(t, 200, tc.id).JSON(t, &d)
		if d.Registered == nil || d.Registered.Name != "hello" || d.Registered.Version != tc.version || !strings.Contains(string(rec.Run.Output), tc.output) {
			t.Errorf("%s: registered %+v, output %s; want hello v%d saying %q", tc.id, d.Registered, rec.Run.Output, tc.version, tc.output)
		}
	}
	id := s.start(helloFile("a file"), `{"who": "x"}`)
	s.wait(id)
	var d api.RunDetail
	s.as("vera", "GET", "/v1/runs/"+id, "").want(t, 200, "a run of a file").JSON(t, &d)
	if d.Registered != nil {
		t.Errorf("a run of a file shows registered %+v", d.Registered)
	}
}

// TestHookRunIDTaken: a delivery whose run id names a run its trigger did not start (taken
// before client ids were kept out of triggers' space) is 409, not answered as existing; the
// trigger's own run is, and says which version it runs.
func TestHookRunIDTaken(t *testing.T) {
	const secret = "hook-secret-value"
	s := newStackWith(t, stackOptions{Hooks: map[string]string{"refunds": secret}})
	s.as("sam", "PUT", "/v1/workflows/refund", hookWorkflow).want(t, http.StatusCreated, "register")
	reg, err := s.Admin.Workflow(s.Ctx, "refund", 0)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := s.Admin.Bundles(s.Ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	taken := trigger.RunID("webhook", "refund", "on-refund", "d-taken")
	// Made as a run the server started as mallory: the engine takes no person's start of such
	// an id any more, as it took one before client ids were kept out of triggers' space.
	if _, err := s.Admin.StartWith(s.Ctx, bs, nil, client.StartOptions{RunID: taken, Trigger: true, As: "mallory"}); err != nil {
		t.Fatal(err)
	}
	body := `{"order_id": "O-1"}`
	deliver := func(delivery string) answer {
		return s.doWith("POST", "/v1/hooks/refunds", "", body, map[string]string{trigger.SignatureHeader: trigger.Sign([]byte(secret), []byte(body)), trigger.DeliveryHeader: delivery})
	}
	a := deliver("d-taken").want(t, http.StatusConflict, "a delivery whose run id is taken")
	if p := a.problem(t); !strings.Contains(p.Detail, "names a run its trigger did not start") {
		t.Errorf("the 409: %q", p.Detail)
	}
	var ans api.HookAnswer
	deliver("d-own").want(t, http.StatusAccepted, "a delivery").JSON(t, &ans)
	deliver("d-own").want(t, http.StatusAccepted, "the same again").JSON(t, &ans)
	if len(ans.Runs) != 1 || !ans.Runs[0].Existing {
		t.Fatalf("the same delivery again: %+v", ans)
	}
	s.wait(ans.Runs[0].RunID)
	var d api.RunDetail
	s.as("vera", "GET", "/v1/runs/"+ans.Runs[0].RunID, "").want(t, 200, "the trigger's run").JSON(t, &d)
	if d.Registered == nil || d.Registered.Name != "refund" || d.Registered.Version != 1 {
		t.Errorf("the trigger's run shows registered %+v", d.Registered)
	}
}
