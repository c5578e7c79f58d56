package api

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// httpReference is the page that lists every route of the API.
const httpReference = "../docs/reference/http-api.md"

var (
	routeHeading = regexp.MustCompile("^### `(GET|PUT|POST|DELETE|PATCH) (/[^`]*)`$")
	statusRow    = regexp.MustCompile("^\\| `([1-5][0-9][0-9])` \\|")
	codeWord     = regexp.MustCompile("`([a-z]+)`")
)

// docRoute is one route's section of http-api.md: its roles line and its statuses.
type docRoute struct {
	roles    []string // nil for "Roles: none"
	statuses []string
	line     int
}

// parseHTTPReference reads the convention of http-api.md: a "### `METHOD /path`" heading per
// route; in its section, a line "Roles: `role`, ..." (or "Roles: none...") and a table whose
// rows start with "| `STATUS` |".
func parseHTTPReference(t *testing.T, text string) map[string]*docRoute {
	t.Helper()
	routes := map[string]*docRoute{}
	var cur *docRoute
	for i, line := range strings.Split(text, "\n") {
		switch m := routeHeading.FindStringSubmatch(line); {
		case m != nil:
			key := m[1] + " " + m[2]
			if routes[key] != nil {
				t.Errorf("%s:%d: %s has a second section", httpReference, i+1, key)
			}
			cur = &docRoute{line: i + 1}
			routes[key] = cur
		case strings.HasPrefix(line, "#"):
			cur = nil
		case cur != nil && strings.HasPrefix(line, "Roles: "):
			before, _, _ := strings.Cut(strings.TrimPrefix(line, "Roles: "), " (")
			if !strings.HasPrefix(before, "none") {
				for _, w := range codeWord.FindAllStringSubmatch(before, -1) {
					cur.roles = append(cur.roles, w[1])
				}
			}
		case cur != nil && statusRow.MatchString(line):
			cur.statuses = append(cur.statuses, statusRow.FindStringSubmatch(line)[1])
		}
	}
	return routes
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
		"| status | when | body |\n|---|---|---|\n| `202` | ok | `{}` |\n| `404` | none | problem |\n\n" +
		"### `GET /healthz`\n\nRoles: none: no token needed.\n\n| `200` | ok | `ok` |\n\n## After\n\n| `500` | x | y |\n"
	doc := parseHTTPReference(t, text)
	c, h := doc["POST /v1/runs/{id}/cancel"], doc["GET /healthz"]
	if c == nil || h == nil || len(doc) != 2 {
		t.Fatalf("read %v", slices.Collect(maps.Keys(doc)))
	}
	if !slices.Equal(c.roles, []string{"submitter", "admin"}) || !slices.Equal(c.statuses, []string{"202", "404"}) {
		t.Errorf("cancel read as %+v", c)
	}
	if h.roles != nil || !slices.Equal(h.statuses, []string{"200"}) {
		t.Errorf("healthz read as %+v", h)
	}
}
