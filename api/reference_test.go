package api

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reins-run/reins/internal/testkit/reftest"
)

// httpReference is the page that lists every route of the API.
const httpReference = "../docs/reference/http-api.md"

var (
	routeName = regexp.MustCompile("^(GET|PUT|POST|DELETE|PATCH) (/[^`]*)$")
	statusRow = regexp.MustCompile("^[1-5][0-9][0-9]$")
	codeWord  = regexp.MustCompile("`([a-z]+)`")
)

// docRoute is one route's section of http-api.md: its roles line, its parameters (name → in),
// its body's members, and its statuses with the members of each answer it spells out.
type docRoute struct {
	roles    []string // nil for "Roles: none"
	params   map[string]string
	members  []string
	statuses []string
	answers  map[string][]string // status → the members of a body written {"a", "b", ...}
	line     int
}

// parseHTTPReference reads the convention of http-api.md through [reftest.Parse]: a
// "### `METHOD /path`" heading per route; in its section, a line "Roles: `role`, ..." (or
// "Roles: none...") and tables headed "| parameter |", "| body member |" and "| status |".
func parseHTTPReference(t *testing.T, text string) map[string]*docRoute {
	t.Helper()
	page, err := reftest.Parse(httpReference, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]*docRoute{}
	for _, s := range page.Sections {
		m := routeName.FindStringSubmatch(s.Names[0])
		if m == nil || s.Heading != "`"+s.Names[0]+"`" {
			continue
		}
		key := m[1] + " " + m[2]
		if routes[key] != nil {
			t.Errorf("%s:%d: %s has a second section", httpReference, s.Line, key)
		}
		r := &docRoute{line: s.Line, params: map[string]string{}, answers: map[string][]string{}}
		routes[key] = r
		if l, ok := s.Starting("Roles: "); ok {
			before, _, _ := strings.Cut(strings.TrimPrefix(l.Text, "Roles: "), " (")
			if !strings.HasPrefix(before, "none") {
				for _, w := range codeWord.FindAllStringSubmatch(before, -1) {
					r.roles = append(r.roles, w[1])
				}
			}
		}
		for _, table := range s.Tables {
			for _, row := range table.Rows {
				readRow(r, table.Header[0], row)
			}
		}
	}
	return routes
}

// readRow reads one row of a route's table: a parameter, a body member or a status.
func readRow(r *docRoute, table string, row reftest.Row) {
	name, cells := row.Name(), row.Cells
	switch {
	case name == "":
	case table == "parameter" && len(cells) > 1:
		r.params[name] = cells[1]
	case table == "body member":
		r.members = append(r.members, name)
	case table == "status" && statusRow.MatchString(name) && cells[0] == "`"+name+"`":
		r.statuses = append(r.statuses, name)
		if len(cells) > 2 {
			if members, ok := objectMembers(cells[2]); ok {
				r.answers[name] = members
			}
		}
	}
}

// objectMembers reads the members of a body spelled `{"a", "b": ..., ...}` (values and nested
// objects aside); ok is false for a body written otherwise.
func objectMembers(cell string) (members []string, ok bool) {
	body, found := strings.CutPrefix(cell, "`{")
	if !found {
		return nil, false
	}
	depth, prev := 1, '{'
	for i := 0; i < len(body) && depth > 0; i++ {
		c := body[i]
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			end := strings.IndexByte(body[i+1:], '"')
			if end < 0 {
				return members, true
			}
			if depth == 1 && (prev == '{' || prev == ',') {
				members = append(members, body[i+1:i+1+end])
			}
			i += end + 1
			prev = '"'
			continue
		}
		if c != ' ' {
			prev = rune(c)
		}
	}
	return members, true
}

// TestHTTPAPIReference: docs/reference/http-api.md has a section for every operation of
// api/openapi.json and none for an operation it lacks, with the roles of its x-roles and the
// statuses of its responses. (TestOpenAPIRoutes holds the document to the server's routes.)
func TestHTTPAPIReference(t *testing.T) {
	text, err := os.ReadFile(httpReference)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseHTTPReference(t, string(text))
	openapi := loadOpenAPI(t)
	paths, _ := openapi.raw["paths"].(map[string]any)
	seen := map[string]bool{}
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			if !slices.Contains(oaMethods, method) {
				continue
			}
			key := strings.ToUpper(method) + " " + path
			seen[key] = true
			d, ok := doc[key]
			if !ok {
				t.Errorf("%s has no section ### `%s`", httpReference, key)
				continue
			}
			checkRoute(t, key, d, op.(map[string]any))
		}
	}
	for key, d := range doc {
		if !seen[key] {
			t.Errorf("%s:%d: documents %s, which api/openapi.json does not have", httpReference, d.line, key)
		}
	}
	if len(seen) < 15 {
		t.Errorf("api/openapi.json has %d operations: the test reads it wrong", len(seen))
	}
}

// checkRoute holds one route's section to its operation in the OpenAPI document.
func checkRoute(t *testing.T, key string, d *docRoute, op map[string]any) {
	t.Helper()
	var roles []string
	if xr, ok := op["x-roles"].([]any); ok {
		for _, r := range xr {
			roles = append(roles, r.(string))
		}
	}
	if !slices.Equal(sorted(d.roles), sorted(roles)) {
		t.Errorf("%s:%d: %s: Roles %v, api/openapi.json says %v", httpReference, d.line, key, d.roles, roles)
	}
	responses, _ := op["responses"].(map[string]any)
	var statuses []string
	for s := range maps.Keys(responses) {
		if s != "default" {
			statuses = append(statuses, s)
		}
	}
	if !slices.Equal(sorted(d.statuses), sorted(statuses)) {
		t.Errorf("%s:%d: %s: statuses %v, api/openapi.json says %v", httpReference, d.line, key, sorted(d.statuses), sorted(statuses))
	}
	checkParameters(t, key, d, op)
	if body := jsonSchemaOf(t, op["requestBody"]); body != nil || len(d.members) > 0 {
		if want := properties(t, body); !slices.Equal(sorted(d.members), want) {
			t.Errorf("%s:%d: %s: body members %v, api/openapi.json says %v", httpReference, d.line, key, sorted(d.members), want)
		}
	}
	for status, members := range d.answers {
		want := properties(t, jsonSchemaOf(t, responses[status]))
		if !slices.Equal(sorted(members), want) {
			t.Errorf("%s:%d: %s: the answer %s has %v, api/openapi.json says %v", httpReference, d.line, key, status, sorted(members), want)
		}
	}
}

// checkParameters holds the route's path and query parameters to the operation's (headers are
// documented with the security schemes they belong to, so they are not compared).
func checkParameters(t *testing.T, key string, d *docRoute, op map[string]any) {
	t.Helper()
	var got, want []string
	for name, in := range d.params {
		if in == "path" || in == "query" {
			got = append(got, in+" "+name)
		}
	}
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		pm, _ := p.(map[string]any)
		if in, _ := pm["in"].(string); in == "path" || in == "query" {
			want = append(want, in+" "+pm["name"].(string))
		}
	}
	if !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("%s:%d: %s: parameters %v, api/openapi.json says %v", httpReference, d.line, key, sorted(got), sorted(want))
	}
}

// jsonSchemaOf returns the application/json schema of a request body or response, its $refs
// followed; nil when it has none.
func jsonSchemaOf(t *testing.T, v any) map[string]any {
	t.Helper()
	m := resolve(t, v)
	content, _ := m["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	if media == nil {
		return nil
	}
	return resolve(t, media["schema"])
}

// resolve follows v's $ref within the OpenAPI document.
func resolve(t *testing.T, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		target, found := loadOpenAPI(t).pointer(strings.TrimPrefix(ref, "#"))
		if !found {
			t.Fatalf("api/openapi.json: %s does not resolve", ref)
		}
		m, _ = target.(map[string]any)
	}
	return nil
}

// properties returns the sorted member names of an object schema.
func properties(t *testing.T, schema map[string]any) []string {
	t.Helper()
	props, _ := schema["properties"].(map[string]any)
	return slices.Sorted(maps.Keys(props))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestHTTPAPIReferenceConvention: the parser reads roles, "none" and statuses as meant, so
// that TestHTTPAPIReference cannot pass on a section it misread.
func TestHTTPAPIReferenceConvention(t *testing.T) {
	text := "## Routes\n\n### `POST /v1/runs/{id}/cancel`\n\nRoles: `submitter`, `admin` (of a given run: `viewer` never).\n\n" +
		"| parameter | in | type | meaning |\n|---|---|---|---|\n| `id` | path | string | the run |\n\n" +
		"| body member | type | meaning |\n|---|---|---|\n| `reason` | string | why |\n\n" +
		"| status | when | body |\n|---|---|---|\n| `202` | ok | `{\"run_id\", \"steps\": [{\"id\", \"x\"}], \"name\": \"alice\", \"roles\": [\"a\", \"b\"]}` |\n| `404` | none | problem |\n\n" +
		"### `GET /healthz`\n\nRoles: none: no token needed.\n\n| status | when | body |\n|---|---|---|\n| `200` | ok | `ok` |\n\n## After\n\n| status | when | body |\n|---|---|---|\n| `500` | x | y |\n"
	doc := parseHTTPReference(t, text)
	c, h := doc["POST /v1/runs/{id}/cancel"], doc["GET /healthz"]
	if c == nil || h == nil || len(doc) != 2 {
		t.Fatalf("read %v", slices.Collect(maps.Keys(doc)))
	}
	if !slices.Equal(c.roles, []string{"submitter", "admin"}) || !slices.Equal(c.statuses, []string{"202", "404"}) {
		t.Errorf("cancel read as %+v", c)
	}
	if c.params["id"] != "path" || !slices.Equal(c.members, []string{"reason"}) {
		t.Errorf("cancel's parameters and body read as %v, %v", c.params, c.members)
	}
	if got := c.answers["202"]; !slices.Equal(got, []string{"run_id", "steps", "name", "roles"}) {
		t.Errorf("the answer 202 read as %v", got)
	}
	if _, ok := c.answers["404"]; ok {
		t.Errorf("a problem answer read as members")
	}
	if h.roles != nil || !slices.Equal(h.statuses, []string{"200"}) {
		t.Errorf("healthz read as %+v", h)
	}
}
