package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/reins-run/reins/operator"
)

// docURL is where the tests load the OpenAPI document into the schema compiler, so that a
// schema's "#/components/..." resolves against the document itself.
const docURL = "https://reins.run/api/openapi.json"

// openAPIDocument is the parsed OpenAPI document with its schemas compiled on demand.
type openAPIDocument struct {
	raw      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema // by JSON pointer
}

var (
	docOnce   sync.Once
	sharedDoc *openAPIDocument
	docErr    error
)

// loadOpenAPI returns the embedded OpenAPI document, parsed once.
func loadOpenAPI(t testing.TB) *openAPIDocument {
	t.Helper()
	docOnce.Do(func() {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(openAPIDoc))
		if err != nil {
			docErr = fmt.Errorf("api/openapi.json is not JSON: %w", err)
			return
		}
		raw, ok := v.(map[string]any)
		if !ok {
			docErr = fmt.Errorf("api/openapi.json is not a JSON object")
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(docURL, v); err != nil {
			docErr = fmt.Errorf("api/openapi.json: %w", err)
			return
		}
		sharedDoc = &openAPIDocument{raw: raw, compiler: c, compiled: map[string]*jsonschema.Schema{}}
	})
	if docErr != nil {
		t.Fatal(docErr)
	}
	return sharedDoc
}

// schema compiles the schema at the JSON pointer ptr of the document ("/components/schemas/X").
func (d *openAPIDocument) schema(ptr string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.compiled[ptr]; ok {
		return s, nil
	}
	s, err := d.compiler.Compile(docURL + "#" + ptr)
	if err != nil {
		return nil, err
	}
	d.compiled[ptr] = s
	return s, nil
}

// pointer resolves a JSON pointer in the document.
func (d *openAPIDocument) pointer(ptr string) (any, bool) {
	var v any = d.raw
	if ptr == "" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// escape is a JSON pointer token of s.
func ptrEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// deref follows an object's $ref (#/...) to what it names, as the pointer of where it is.
func (d *openAPIDocument) deref(ptr string) (string, map[string]any, error) {
	for range 10 {
		v, ok := d.pointer(ptr)
		if !ok {
			return "", nil, fmt.Errorf("nothing at #%s", ptr)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("#%s is not an object", ptr)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return ptr, m, nil
		}
		ptr = strings.TrimPrefix(ref, "#")
	}
	return "", nil, fmt.Errorf("#%s: a cycle of $ref", ptr)
}

// operation finds the operation of method and path: path is a route's pattern (/v1/runs/{id})
// or a request's path (/v1/runs/r-1), matched segment by segment. It returns the operation's
// pointer.
func (d *openAPIDocument) operation(method, path string) (string, error) {
	paths, _ := d.raw["paths"].(map[string]any)
	segs := strings.Split(path, "/")
	var found []string
	for tmpl := range paths {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		match := true
		for i, s := range ts {
			if s != segs[i] && !(strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}")) {
				match = false
				break
			}
		}
		if match {
			found = append(found, tmpl)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("the OpenAPI document has no path %s", path)
	}
	// The most literal template wins: /v1/runs/{id}/cancel over /v1/runs/{id}/{x}.
	slices.SortFunc(found, func(a, b string) int { return strings.Count(a, "{") - strings.Count(b, "{") })
	ptr := "/paths/" + ptrEscape(found[0]) + "/" + strings.ToLower(method)
	if _, ok := d.pointer(ptr); !ok {
		return "", fmt.Errorf("the OpenAPI document has no %s %s", method, found[0])
	}
	return ptr, nil
}

// response finds the response of status of an operation: the status, its class (4XX), or
// default.
func (d *openAPIDocument) response(op string, status int) (string, map[string]any, error) {
	code := strconv.Itoa(status)
	for _, k := range []string{code, code[:1] + "XX", "default"} {
		if _, ok := d.pointer(op + "/responses/" + k); ok {
			return d.deref(op + "/responses/" + k)
		}
	}
	return "", nil, fmt.Errorf("%s documents no response %d", op, status)
}

// checkResponse checks that body, the answer of status to method path, is what the OpenAPI
// document says: the status is documented (or default) and a JSON body validates against
// the schema of the response's JSON content (application/json or application/problem+json);
// a text/event-stream body's messages validate against the schemas of x-sse-messages. path
// is the request's path or the route's pattern.
func checkResponse(t testing.TB, doc *openAPIDocument, method, path string, status int, body []byte) {
	t.Helper()
	if err := doc.checkResponse(method, path, status, "", body); err != nil {
		t.Errorf("%s %s → %d: %v\nbody: %s", method, path, status, err, oaClip(body))
	}
}

// checkHTTPResponse is checkResponse of resp, whose content type must also be documented. It
// reads and closes resp.Body, and returns it.
func checkHTTPResponse(t testing.TB, doc *openAPIDocument, resp *http.Response) []byte {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: %v", resp.Request.Method, resp.Request.URL.Path, err)
	}
	if err := doc.checkResponse(resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, resp.Header.Get("Content-Type"), body); err != nil {
		t.Errorf("%s %s → %d: %v\nbody: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, err, oaClip(body))
	}
	return body
}

func oaClip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

func (d *openAPIDocument) checkResponse(method, path string, status int, contentType string, body []byte) error {
	op, err := d.operation(method, path)
	if err != nil {
		return err
	}
	rptr, resp, err := d.response(op, status)
	if err != nil {
		return err
	}
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("%s documents no body, the answer has %d bytes", rptr, len(body))
		}
		return nil
	}
	mt := ""
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return fmt.Errorf("Content-Type %q: %v", contentType, err)
		}
		if _, ok := content[mt]; !ok {
			return fmt.Errorf("Content-Type %s is not one of %s's", mt, rptr)
		}
	} else {
		for k := range content { // the JSON one when there is one
			if mt == "" || strings.HasSuffix(k, "json") {
				mt = k
			}
		}
	}
	mptr := rptr + "/content/" + ptrEscape(mt)
	switch {
	case strings.HasSuffix(mt, "json"):
		return d.validate(mptr+"/schema", body)
	case mt == "text/event-stream":
		return d.checkSSE(mptr, body)
	}
	return nil // text: any
}

// validate validates the JSON body against the schema at ptr.
func (d *openAPIDocument) validate(ptr string, body []byte) error {
	sch, err := d.schema(ptr)
	if err != nil {
		return fmt.Errorf("compile #%s: %w", ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("the body is not JSON: %w", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("the body does not match #%s: %w", ptr, err)
	}
	return nil
}

// oaSSEMessage is one message of a text/event-stream.
type oaSSEMessage struct {
	id, event string
	data      []byte
}

// oaParseSSE splits a text/event-stream into its messages (comments left out).
func oaParseSSE(body []byte) []oaSSEMessage {
	var out []oaSSEMessage
	var m oaSSEMessage
	var data []string
	flush := func() {
		if len(data) > 0 || m.event != "" {
			m.data = []byte(strings.Join(data, "\n"))
			if m.event == "" {
				m.event = "message"
			}
			out = append(out, m)
		}
		m, data = oaSSEMessage{}, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			m.id = value
		case "event":
			m.event = value
		case "data":
			data = append(data, value)
		}
	}
	flush()
	return out
}

// checkSSE validates every message of an event stream against the schema x-sse-messages
// gives its event name.
func (d *openAPIDocument) checkSSE(mptr string, body []byte) error {
	for i, m := range oaParseSSE(body) {
		ptr := mptr + "/x-sse-messages/" + ptrEscape(m.event)
		if _, ok := d.pointer(ptr); !ok {
			return fmt.Errorf("message %d: event %q is not one of x-sse-messages of #%s", i, m.event, mptr)
		}
		if err := d.validate(ptr, m.data); err != nil {
			return fmt.Errorf("message %d (event %s, id %q): %w", i, m.event, m.id, err)
		}
	}
	return nil
}

var oaMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// oaTable is the table of a Server with every route (metrics too).
func oaTable() []route {
	s := New(Config{Principals: &operator.Resolved{}, Metrics: http.NotFoundHandler()})
	return s.routes
}

// TestOpenAPIRoutes: every route of the table is documented with its method, and every
// documented operation is a route: a route added without documentation fails, as does
// documentation of a route that is gone.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	routes := map[string]bool{}
	for _, rt := range oaTable() {
		routes[rt.method+" "+rt.path] = true
	}
	documented := map[string]bool{}
	paths, _ := doc.raw["paths"].(map[string]any)
	for p, item := range paths {
		for m := range item.(map[string]any) {
			if slices.Contains(oaMethods, m) {
				documented[strings.ToUpper(m)+" "+p] = true
			}
		}
	}
	for r := range routes {
		if !documented[r] {
			t.Errorf("route %s is not in api/openapi.json", r)
		}
	}
	for r := range documented {
		if !routes[r] {
			t.Errorf("api/openapi.json documents %s, which is no route of the table", r)
		}
	}
	if len(routes) < 15 {
		t.Errorf("the table has %d routes: the test reads it wrong", len(routes))
	}
}

// TestOpenAPIDocument: the document is OpenAPI 3.1 in structure: its fields, operations with
// unique ids and responses, path parameters declared as the templates name them, security
// schemes that exist, every $ref resolving, and every schema (components, parameters, bodies,
// responses, SSE messages) compiling as JSON Schema 2020-12.
func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	if v, _ := doc.raw["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi is %q, want 3.1.x", v)
	}
	if d, _ := doc.raw["jsonSchemaDialect"].(string); d != "" && d != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("jsonSchemaDialect %q", d)
	}
	info, _ := doc.raw["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info needs title and version: %v", info)
	}
	comps, _ := doc.raw["components"].(map[string]any)
	schemes, _ := comps["securitySchemes"].(map[string]any)
	if b, _ := schemes["bearer"].(map[string]any); b["type"] != "http" || b["scheme"] != "bearer" {
		t.Errorf("securitySchemes.bearer is %v, want http bearer", schemes["bearer"])
	}

	// Every $ref resolves; every schema compiles.
	var walk func(ptr string, v any)
	var schemaPtrs []string
	walk = func(ptr string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if !strings.HasPrefix(ref, "#/") {
					t.Errorf("#%s: $ref %q is not within the document", ptr, ref)
				} else if _, ok := doc.pointer(strings.TrimPrefix(ref, "#")); !ok {
					t.Errorf("#%s: $ref %q resolves to nothing", ptr, ref)
				}
			}
			for k, e := range x {
				p := ptr + "/" + ptrEscape(k)
				if k == "schema" || strings.HasPrefix(ptr, "/components/schemas") && strings.Count(ptr, "/") == 2 ||
					strings.HasSuffix(ptr, "/x-sse-messages") {
					schemaPtrs = append(schemaPtrs, p)
				}
				walk(p, e)
			}
		case []any:
			for i, e := range x {
				walk(ptr+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("", doc.raw)
	for _, p := range schemaPtrs {
		if strings.HasPrefix(p, "/components/schemas/") && strings.Count(p, "/") > 3 {
			continue // compiled with its schema
		}
		if _, err := doc.schema(p); err != nil {
			t.Errorf("schema #%s does not compile: %v", p, err)
		}
	}
	if len(schemaPtrs) < 40 {
		t.Errorf("found %d schemas: the walk is wrong", len(schemaPtrs))
	}

	// Operations.
	ids := map[string]string{}
	param := regexp.MustCompile(`\{([^}]+)\}`)
	paths, _ := doc.raw["paths"].(map[string]any)
	for p, item := range paths {
		if !strings.HasPrefix(p, "/") {
			t.Errorf("path %q does not start with /", p)
		}
		for m, o := range item.(map[string]any) {
			if !slices.Contains(oaMethods, m) {
				t.Errorf("%s: %q is not an HTTP method", p, m)
				continue
			}
			op := o.(map[string]any)
			where := strings.ToUpper(m) + " " + p
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s has no operationId", where)
			} else if other, ok := ids[id]; ok {
				t.Errorf("%s and %s share operationId %s", where, other, id)
			}
			ids[id] = where
			rs, _ := op["responses"].(map[string]any)
			if len(rs) == 0 {
				t.Errorf("%s has no responses", where)
			}
			hasOK := false
			for code := range rs {
				if code != "default" && !regexp.MustCompile(`^[1-5]([0-9]{2}|XX)$`).MatchString(code) {
					t.Errorf("%s: response %q is not a status", where, code)
				}
				hasOK = hasOK || strings.HasPrefix(code, "2")
				_, r, err := doc.deref("/paths/" + ptrEscape(p) + "/" + m + "/responses/" + ptrEscape(code))
				if err != nil {
					t.Errorf("%s response %s: %v", where, code, err)
				} else if _, ok := r["description"].(string); !ok {
					t.Errorf("%s response %s has no description", where, code)
				} else if (code >= "400" || code == "default") && p != "/readyz" { // readyz's 503 is text
					if _, ok := r["content"].(map[string]any)["application/problem+json"]; !ok {
						t.Errorf("%s response %s is not an application/problem+json", where, code)
					}
				}
			}
			if !hasOK {
				t.Errorf("%s documents no success", where)
			}
			// Path parameters: those of the template, declared, required.
			want := map[string]bool{}
			for _, mm := range param.FindAllStringSubmatch(p, -1) {
				want[mm[1]] = true
			}
			params, _ := op["parameters"].([]any)
			for i := range params {
				_, pm, err := doc.deref(fmt.Sprintf("/paths/%s/%s/parameters/%d", ptrEscape(p), m, i))
				if err != nil {
					t.Errorf("%s parameter %d: %v", where, i, err)
					continue
				}
				name, _ := pm["name"].(string)
				in, _ := pm["in"].(string)
				if !slices.Contains([]string{"path", "query", "header", "cookie"}, in) {
					t.Errorf("%s parameter %s: in %q", where, name, in)
				}
				if in == "path" {
					if !want[name] {
						t.Errorf("%s declares path parameter %s that the path does not have", where, name)
					}
					if pm["required"] != true {
						t.Errorf("%s path parameter %s is not required", where, name)
					}
					delete(want, name)
				}
			}
			for name := range want {
				t.Errorf("%s does not declare its path parameter %s", where, name)
			}
			// Security: none for the public routes, bearer for the others.
			sec, ok := op["security"].([]any)
			if !ok {
				sec, _ = doc.raw["security"].([]any)
			}
			for _, s := range sec {
				for name := range s.(map[string]any) {
					if _, ok := schemes[name]; !ok {
						t.Errorf("%s: security scheme %s does not exist", where, name)
					}
				}
			}
		}
	}
	// Public routes need nothing, the others the bearer token: the document and the table agree.
	for _, rt := range oaTable() {
		ptr := "/paths/" + ptrEscape(rt.path) + "/" + strings.ToLower(rt.method) + "/security"
		sec, _ := doc.pointer(ptr)
		arr, _ := sec.([]any)
		if public := rt.access == public; public != (len(arr) == 0) {
			t.Errorf("%s %s: security %v, but the route is public=%v", rt.method, rt.path, sec, public)
		}
	}
}

// TestCheckResponseCatches: checkResponse finds what does not match.
func TestCheckResponseCatches(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, c := range []struct {
		method, path string
		status       int
		ctype, body  string
		want         string
	}{
		{"GET", "/v1/nothing", 200, "", `{}`, "no path"},
		{"DELETE", "/v1/runs/r-1", 200, "", `{}`, "has no DELETE"},
		{"GET", "/v1/runs", 200, "application/json", `{"runs": [{"run_id": "r"}]}`, "does not match"},
		{"GET", "/v1/runs", 200, "application/json", `{"runs": [], "extra": 1}`, "does not match"},
		{"GET", "/v1/runs", 404, "application/problem+json", `{"title": "Not Found"}`, "does not match"},
		{"GET", "/v1/runs", 200, "text/html", `{"runs": []}`, "Content-Type text/html"},
		{"GET", "/v1/runs/r-1/events", 200, "text/event-stream", "event: delta\ndata: {\"step\": 1}\n\n", "message 0 (event delta"},
		{"GET", "/v1/runs/r-1/events", 200, "text/event-stream", "event: what\ndata: {}\n\n", `event "what"`},
	} {
		err := doc.checkResponse(c.method, c.path, c.status, c.ctype, []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s %d %s: %v, want an error with %q", c.method, c.path, c.status, c.body, err, c.want)
		}
	}
	good := "event: delta\ndata: {\"step\": \"a\", \"iteration\": 1, \"text\": \"hi\"}\n\n: keep-alive\n\nevent: end\ndata: {\"status\": \"completed\"}\n\n"
	if err := doc.checkResponse("GET", "/v1/runs/r-1/events", 200, "text/event-stream", []byte(good)); err != nil {
		t.Errorf("a good stream: %v", err)
	}
	if err := doc.checkResponse("GET", "/v1/runs", 200, "application/json; charset=utf-8", []byte(`{"runs": [], "next_cursor": "x"}`)); err != nil {
		t.Errorf("a good page: %v", err)
	}
}

// principals of the tests: a token per role, and one with none.
var oaTokens = map[string]string{
	"admin": "tok-admin", "viewer": "tok-viewer", "submitter": "tok-submitter",
	"approver": "tok-approver", "worker": "tok-worker",
}

func oaPrincipals() *operator.Resolved {
	res, err := (&operator.Config{}).Resolve(func(string) string { return "" }, nil)
	if err != nil {
		panic(err)
	}
	for role, tok := range oaTokens {
		res.AddPrincipal(role, tok, role)
	}
	return res
}

// oaCall sends method path with body as the principal of token ("": none) and returns the answer.
func oaCall(t testing.TB, base, method, path, token, body string) *http.Response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// oaPath is the route's path with its parameters filled in.
func oaPath(path string) string {
	r := strings.NewReplacer("{id}", "r-none", "{step}", "work", "{n}", "1", "{call}", "c-1", "{event}", "go", "{name}", "refund")
	return r.Replace(path)
}

// TestOpenAPIAnswersAuth: the answers of every route to a request without a token, with an
// unknown one, and with a role that may not call it, are the documented problems; the public
// routes answer as documented. The Server here has no NATS: what the routes do with one is
// TestOpenAPIAnswers'.
func TestOpenAPIAnswersAuth(t *testing.T) {
	doc := loadOpenAPI(t)
	srv := httptest.NewServer(New(Config{Principals: oaPrincipals(), Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "# no metrics\n")
	})}))
	defer srv.Close()
	for _, rt := range oaTable() {
		path := oaPath(rt.path)
		if rt.access == signed {
			continue // no token: its signature (TestHooks)
		}
		if rt.access == public {
			resp := oaCall(t, srv.URL, rt.method, path, "", "")
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %d, want 200", rt.method, path, resp.StatusCode)
			}
			body := checkHTTPResponse(t, doc, resp)
			if rt.path == "/v1/openapi.json" && !bytes.Equal(body, openAPIDoc) {
				t.Errorf("GET /v1/openapi.json is not api/openapi.json")
			}
			continue
		}
		for _, c := range []struct {
			token  string
			status int
		}{{"", 401}, {"nobody's", 401}, {oaTokens["worker"], 403}} {
			resp := oaCall(t, srv.URL, rt.method, path, c.token, "")
			if resp.StatusCode != c.status {
				t.Errorf("%s %s with token %q: %d, want %d", rt.method, path, c.token, resp.StatusCode, c.status)
			}
			if c.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", rt.method, path)
			}
			body := checkHTTPResponse(t, doc, resp)
			if c.token != "" && bytes.Contains(body, []byte(c.token)) {
				t.Errorf("%s %s: the answer echoes the token: %s", rt.method, path, body)
			}
		}
		// A role the route does not allow: a viewer may only read.
		if rt.access != read {
			resp := oaCall(t, srv.URL, rt.method, path, oaTokens["viewer"], "")
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s as a viewer: %d, want 403", rt.method, path, resp.StatusCode)
			}
			checkHTTPResponse(t, doc, resp)
		}
	}
}

// oaProblem decodes a problem document.
func oaProblem(t testing.TB, body []byte) Problem {
	t.Helper()
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem document: %v: %s", err, body)
	}
	return p
}

// TestOpenAPIRoles: each route's x-roles are the roles that may call it (allowed), no more, no
// fewer: the document's access table is the server's.
func TestOpenAPIRoles(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, rt := range oaTable() {
		ptr := "/paths/" + ptrEscape(rt.path) + "/" + strings.ToLower(rt.method) + "/x-roles"
		got, ok := doc.pointer(ptr)
		if rt.access == public || rt.access == signed {
			if ok {
				t.Errorf("%s %s: x-roles %v on a route no token calls", rt.method, rt.path, got)
			}
			continue
		}
		var want []any
		for _, role := range []string{operator.RoleViewer, operator.RoleSubmitter, operator.RoleApprover, operator.RoleAdmin, operator.RoleWorker} {
			if allowed(operator.Principal{Name: "p", Roles: []string{role}}, rt.access) {
				want = append(want, role)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s: x-roles %v, want %v", rt.method, rt.path, got, want)
		}
	}
}
