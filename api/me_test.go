package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/reins-run/reins/operator"
)

// TestMe: GET /v1/me names the principal of the token and its roles, to every principal that
// may read; a worker gets 403, and a request without a known token 401.
func TestMe(t *testing.T) {
	res, err := (&operator.Config{}).Resolve(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.AddPrincipal("alice", "alice-token", operator.RoleApprover, operator.RoleViewer)
	res.AddPrincipal("wanda", "wanda-token", operator.RoleWorker)
	srv := httptest.NewServer(New(Config{Principals: res}))
	defer srv.Close()

	get := func(token string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/me", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	for _, c := range []struct {
		token, name string
		roles       []string
	}{
		{"alice-token", "alice", []string{"approver", "viewer"}},
	} {
		resp, body := get(c.token)
		if resp.StatusCode != http.StatusOK || body["name"] != c.name {
			t.Fatalf("GET /v1/me as %s: %d %v", c.name, resp.StatusCode, body)
		}
		var roles []string
		for _, r := range body["roles"].([]any) {
			roles = append(roles, r.(string))
		}
		if !slices.Equal(roles, c.roles) {
			t.Errorf("GET /v1/me as %s: roles %v, want %v", c.name, roles, c.roles)
		}
	}
	if resp, body := get("wanda-token"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /v1/me as a worker: %d %v, want 403", resp.StatusCode, body)
	}
	for _, token := range []string{"", "nobody's"} {
		if resp, body := get(token); resp.StatusCode != http.StatusUnauthorized || body["status"] != float64(401) {
			t.Errorf("GET /v1/me with token %q: %d %v, want a 401 problem", token, resp.StatusCode, body)
		}
	}
}
