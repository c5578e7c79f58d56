//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/testkit/buildtest"
	"github.com/reins-run/reins/internal/testkit/runtest"
	"github.com/reins-run/reins/telemetry"
)

// The console's browser test (docs/console.md): headless Chromium drives the console that
// `reins serve` serves, against the refund example with an approval.

// chromiumPath is Debian's Chromium.
const chromiumPath = "/usr/bin/chromium"

// shotsEnv, set to 1, makes TestConsole write its screenshots into docs/console.
const shotsEnv = "REINS_CONSOLE_SHOTS"

// ensureChromium returns the path of Chromium, installing Debian's package when it is missing
// and the test runs as root (.ci/run installs it first). Elsewhere the test skips, or fails in
// CI, naming the package and the command (buildtest.Need).
func ensureChromium(t *testing.T) string {
	t.Helper()
	return buildtest.Need(t, buildtest.System{What: "Chromium", Debian: "chromium", Paths: []string{chromiumPath, "chromium"}})
}

// consoleServer is `reins serve` with an operator configuration of three principals.
type consoleServer struct {
	t    *testing.T
	base string // http://127.0.0.1:PORT
	proc *proc
	data string // the data directory
	// tokens of the approver (alice), the viewer (val) and the submitter (sam)
	alice, val, sam string
}

func randomToken(t *testing.T, who string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tok-" + who + "-" + hex.EncodeToString(b)
}

var httpAddrLine = regexp.MustCompile(`"?http"?[=:]"?(127\.0\.0\.1:\d+)`)

// consoleTraceURL is the operator's link from a run to its trace in a tracing backend.
const consoleTraceURL = "http://jaeger.example:16686/trace/{trace_id}"

func startConsoleServer(t *testing.T) *consoleServer {
	t.Helper()
	s := &consoleServer{t: t, data: t.TempDir(), alice: randomToken(t, "alice"), val: randomToken(t, "val"), sam: randomToken(t, "sam")}
	cfg := `
[principals.alice]
token_env = "REINS_TOKEN_ALICE"
roles = ["approver", "viewer"]

[principals.val]
token_env = "REINS_TOKEN_VAL"
roles = ["viewer"]

[principals.sam]
token_env = "REINS_TOKEN_SAM"
roles = ["submitter"]

[console]
trace_url = "` + consoleTraceURL + `"
`
	file := filepath.Join(t.TempDir(), "ops.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"REINS_TOKEN_ALICE=" + s.alice, "REINS_TOKEN_VAL=" + s.val, "REINS_TOKEN_SAM=" + s.sam}
	s.proc = start(t, "reins serve", env, bins.reins, "serve", "--data", s.data, "--listen", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--config", file, "--retention", "0")
	line := s.proc.waitFor("reins serving", 60*time.Second)
	m := httpAddrLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("reins serve names no HTTP address: %s", line)
	}
	s.base = "http://" + m[1]
	return s
}

// runFile runs the workflow file at path on the server as the data directory's admin, as
// reins run FILE does: nothing is registered. It returns once the run has finished.
func (s *consoleServer) runFile(path, input, runID string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, err := os.ReadFile(filepath.Join(s.data, "nats.url"))
	if err != nil {
		s.t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(s.data, "admin.token"))
	if err != nil {
		s.t.Fatal(err)
	}
	box, err := natsbox.Open(ctx, natsbox.Options{URL: strings.TrimSpace(string(url)), Token: strings.TrimSpace(string(token))})
	if err != nil {
		s.t.Fatal(err)
	}
	defer box.Close()
	c := client.New(client.Config{Conn: (*conn.Conn)(box), Principal: "admin"})
	id, err := c.Start(ctx, runtest.LoadBundles(s.t, path), json.RawMessage(input), runID)
	if err != nil {
		s.t.Fatalf("start a run of %s: %v", path, err)
	}
	if rec, err := c.Wait(ctx, id); err != nil || rec.Run.Status != "completed" {
		s.t.Fatalf("the run of %s: %v, want it completed", path, err)
	}
}

// call calls the API as the principal of token and returns the status and the body.
func (s *consoleServer) call(method, path, token, ctype string, body []byte) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *consoleServer) callJSON(method, path, token string, body any) (int, []byte) {
	s.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.call(method, path, token, "application/json", raw)
}

// refundWithApproval is the refund example as a registered workflow that waits for an
// approval: the investigation runs on the drafter's script, whose model calls take a while
// (latency), so that a browser sees its iterations come one by one, and streams its replies.
func refundWithApproval(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "examples", "refund", "workflow.toml"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(raw)
	from, to := strings.Index(src, "[models.drafter]"), strings.Index(src, "[models.eager]")
	if from < 0 || to < from {
		t.Fatal("examples/refund/workflow.toml has no [models.drafter] before [models.eager]")
	}
	drafter := strings.ReplaceAll(src[from:to], "usage = {", `latency = "1500ms", usage = {`)
	src = src[:from] + drafter + src[to:]
	if !strings.Contains(src, "model = \"investigator\"\n") {
		t.Fatal("the investigate step of examples/refund/workflow.toml does not use the investigator")
	}
	src = strings.Replace(src, "model = \"investigator\"\n", "model = \"drafter\"\nstream = true\n", 1)
	return []byte(src)
}

// browser starts headless Chromium with a new profile; it is closed when the test ends.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// page is a tab of the console, with what it reported: script exceptions and violations of the
// Content-Security-Policy.
type consolePage struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string // the directory of the screenshots, "" for none
}

func (p *consolePage) do(what string, timeout time.Duration, acts ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, acts...); err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`location.hash + "\n" + (document.querySelector('main') || document.body).innerText`))
		p.t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, text)
	}
}

func eval[T any](p *consolePage, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition in the page until it holds.
func (p *consolePage) waitFor(what, cond string, timeout time.Duration) {
	p.t.Helper()
	p.do(what, timeout+5*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))(ctx, t)
		return err
	}))
}

// screenshot writes the whole page into the directory of the screenshots, if any.
func (p *consolePage) screenshot(name string) { p.capture(name, chromedp.FullScreenshot(100)) }

// screenshotView writes what the window shows.
func (p *consolePage) screenshotView(name string) { p.capture(name, chromedp.CaptureScreenshot()) }

func (p *consolePage) capture(name string, shot chromedp.Action[[]byte]) {
	p.t.Helper()
	if p.shot == "" {
		return
	}
	p.do("screenshot "+name, 30*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		buf, err := shot(ctx, t)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(p.shot, name), buf, 0o644)
	}))
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// signIn types token in the console's prompt, which has the focus, and presses Enter, as a
// person with a keyboard would; then it waits for the principal's name.
func (p *consolePage) signIn(token, name string) {
	p.t.Helper()
	p.do("sign in as "+name, 30*time.Second,
		chromedp.WaitVisible(css("#token")),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			id, err := chromedp.Evaluate[string](`document.activeElement && document.activeElement.id`)(ctx, t)
			if err == nil && id != "token" {
				err = fmt.Errorf("the focus is on %q, not on the token's field", id)
			}
			return err
		}),
		chromedp.KeyEvent(token+"\r"),
		chromedp.WaitVisible(css(fmt.Sprintf(`#principal[data-name=%q]`, name))))
}

// TestConsole: headless Chromium opens the console of a served instance, signs in as an
// approver, sees a run of the refund example appear in the runs list and its iterations fill
// in on the run page, with the graph and its current step; approves the pending call in the
// approvals inbox's run and watches the run complete, live; then, as a viewer, sees no approve
// button anywhere, and the API answers the viewer's approval with 403. No script error and no
// violation of the Content-Security-Policy happens on the way. REINS_CONSOLE_SHOTS=1 writes the
// screenshots of docs/console.md.
func TestConsole(t *testing.T) {
	chromium := ensureChromium(t)
	s := startConsoleServer(t)

	// Register the workflow as the submitter.
	if code, body := s.call("PUT", "/v1/workflows/refund", s.sam, "application/toml", refundWithApproval(t)); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("PUT /v1/workflows/refund: %d %s", code, body)
	}

	ctx := browser(t, chromium)
	p := &consolePage{t: t, ctx: ctx, base: s.base}
	if os.Getenv(shotsEnv) == "1" {
		p.shot = filepath.Join("..", "docs", "console")
		if err := os.MkdirAll(p.shot, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Script exceptions, and violations of the Content-Security-Policy (reported through a
	// binding by a listener that is set before any script of a page runs), in every page.
	var mu sync.Mutex
	var problems []string
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	bindings := chromedp.Events(ctx, runtime.BindingCalled)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			mu.Lock()
			problems = append(problems, fmt.Sprintf("exception: %s (%s:%d)", msg, d.URL, d.LineNumber))
			mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range bindings {
			if err != nil {
				return
			}
			if ev.Name == "reinsViolation" {
				mu.Lock()
				problems = append(problems, "Content-Security-Policy violation: "+ev.Payload)
				mu.Unlock()
			}
		}
	}()
	p.do("watch for exceptions and policy violations", 10*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, runtime.AddBinding, runtime.AddBindingParams{Name: "reinsViolation"}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `document.addEventListener('securitypolicyviolation', (e) => reinsViolation(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber));`,
		})
		return err
	}))

	p.do("open the console", 30*time.Second, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(css("#token-form .sign-in-help")))
	// The sign-in page says which token to paste, where it is, and the console's address.
	if help := eval[string](p, `document.querySelector('#token-form .sign-in-help').innerText`); !strings.Contains(help, ".reins/admin.token") || !strings.Contains(help, s.base+"/") {
		t.Errorf("the sign-in page does not name .reins/admin.token and the console's address %s/:\n%s", s.base, help)
	}
	p.screenshot("sign-in.png")
	p.signIn(s.alice, "alice")
	p.do("the runs list", 30*time.Second, chromedp.WaitVisible(css("#runs-body")))
	// The keyboard's focus is visible: Tab from the page's heading reaches the first filter,
	// outlined.
	p.do("tab to the first filter", 10*time.Second, chromedp.KeyEvent("\t"))
	if f := eval[string](p, `(() => { const e = document.activeElement; const st = getComputedStyle(e); return e.id + ' ' + st.outlineStyle + ' ' + st.outlineWidth; })()`); f != "f-status solid 3px" {
		t.Errorf("after Tab, the focus is %q; want the status filter with a visible outline (f-status solid 3px)", f)
	}
	if tok := eval[string](p, `sessionStorage.getItem('reins.token')`); tok != s.alice {
		t.Errorf("sessionStorage holds %q, want the token typed in", tok)
	}
	if c := eval[string](p, `document.cookie`); c != "" {
		t.Errorf("the console set cookies: %q", c)
	}

	// The run appears in the list, which is open before it starts.
	const run1 = "console-refund-1"
	start := func(id string) {
		t.Helper()
		code, body := s.callJSON("POST", "/v1/runs", s.sam, map[string]any{"workflow": "refund", "input": map[string]string{"order_id": "O-104"}, "run_id": id})
		// 202: started, but the engine has not saved its first record yet; the console will see it.
		if code != http.StatusCreated && code != http.StatusAccepted {
			t.Fatalf("POST /v1/runs %s: %d %s", id, code, body)
		}
	}
	start(run1)
	p.do("the run appears in the list", 30*time.Second, chromedp.WaitVisible(css(`tr[data-run="`+run1+`"]`)))

	// The run page: its graph with the current step, and the iterations as they come.
	p.do("open the run", 30*time.Second,
		chromedp.Click(css(`tr[data-run="`+run1+`"] a`)),
		chromedp.WaitVisible(css(`svg.graph g.node[data-step="investigate"]`)),
		chromedp.WaitVisible(css(`#steps-body tr[data-step="investigate"]`)))
	answered := func() int {
		return eval[int](p, `document.querySelectorAll('article.iteration[data-step="investigate"]:not([data-answer="pending"])').length`)
	}
	atOpen := answered()
	// The run's trace id, linked to the operator's tracing backend.
	tid := telemetry.TraceID(run1).String()
	p.do("the trace link", 30*time.Second, chromedp.WaitVisible(css(`a.trace-link`)))
	if got := eval[string](p, `document.querySelector('code.trace-id').textContent + ' ' + document.querySelector('a.trace-link').href + ' ' + document.querySelector('a.trace-link').rel`); got != tid+" "+strings.ReplaceAll(consoleTraceURL, "{trace_id}", tid)+" noopener noreferrer" {
		t.Errorf("the run's trace: %q, want its id %s linked to the operator's trace URL", got, tid)
	}
	for n, answer := range map[int]string{1: "continued", 2: "continued", 3: "waiting"} {
		p.waitFor(fmt.Sprintf("iteration %d answers %s", n, answer),
			fmt.Sprintf(`document.querySelector('article.iteration[data-step="investigate"][data-n="%d"][data-answer="%s"]') !== null`, n, answer), 60*time.Second)
	}
	t.Logf("the run page showed %d answered iterations when it opened, 3 before the approval", atOpen)
	p.do("the graph highlights the waiting step", 30*time.Second,
		chromedp.WaitVisible(css(`svg.graph g.node.current.st-waiting[data-step="investigate"]`)),
		chromedp.WaitVisible(css(`#run-status[data-status="waiting"]`)))
	// Iteration 1 shows its calls: the tools, their arguments, validation and results.
	text := eval[string](p, `document.querySelector('article.iteration[data-step="investigate"][data-n="1"]').innerText`)
	for _, want := range []string{"read_order", "read_delivery_status", "O-104", "accept", "Validation", "tokens"} {
		if !strings.Contains(text, want) {
			t.Errorf("iteration 1 does not show %q:\n%s", want, text)
		}
	}
	text = eval[string](p, `document.querySelector('article.iteration[data-step="investigate"][data-n="3"]').innerText`)
	for _, want := range []string{"draft_refund_recommendation", "approval required", "pending"} {
		if !strings.Contains(text, want) {
			t.Errorf("iteration 3 does not show %q:\n%s", want, text)
		}
	}
	p.do("the pending call with its approve button", 30*time.Second,
		chromedp.WaitVisible(css(`#waits li.wait[data-tool="draft_refund_recommendation"] button[data-action="approve"]`)))
	if args := eval[string](p, `document.querySelector('#waits li.wait[data-tool="draft_refund_recommendation"] pre.args').textContent`); !strings.Contains(args, "42.5") || !strings.Contains(args, "O-104") {
		t.Errorf("the pending call's arguments read %q", args)
	}
	p.screenshot("run-waiting.png")

	// The approvals inbox shows the pending call and what it would do.
	inboxCall := `#approvals section[data-run="` + run1 + `"] li.wait[data-tool="draft_refund_recommendation"]`
	p.do("the approvals inbox", 30*time.Second,
		chromedp.Click(css(`nav.main a[href="#/approvals"]`)),
		chromedp.WaitVisible(css(inboxCall+` button[data-action="approve"]`)))
	p.screenshot("approvals.png")

	// Back on the run page, approve it with a message and watch the run complete, live: the
	// page is not loaded again.
	p.do("back to the run", 30*time.Second,
		chromedp.Click(css(`#approvals section[data-run="`+run1+`"] h2 a`)),
		chromedp.WaitVisible(css(`#waits li.wait[data-tool="draft_refund_recommendation"] button[data-action="approve"]`)))
	p.do("mark the page", 5*time.Second, chromedp.Evaluate[chromedp.Void](`window.__samePage = 'run1'`))
	waitsCall := `#waits li.wait[data-tool="draft_refund_recommendation"]`
	p.do("approve", 30*time.Second,
		chromedp.SendKeys(css(waitsCall+` textarea.message`), "Late delivery confirmed; approved from the console."),
		chromedp.Click(css(waitsCall+` button[data-action="approve"]`)))
	p.waitFor("the run completes", `document.querySelector('#run-status[data-status="completed"]') !== null`, 60*time.Second)
	p.waitFor("iteration 4 answers", `document.querySelector('article.iteration[data-step="investigate"][data-n="4"][data-answer="completed"]') !== null`, 30*time.Second)
	p.waitFor("iteration 3 records the approval",
		`[...document.querySelectorAll('article.iteration[data-step="investigate"][data-n="3"] li.call[data-tool="draft_refund_recommendation"]')].some((c) => c.dataset.approval === 'approved' && c.dataset.executed === 'true' && c.innerText.includes('by alice'))`, 30*time.Second)
	text = eval[string](p, `document.querySelector('article.iteration[data-step="investigate"][data-n="4"]').innerText`)
	if !strings.Contains(text, "Recommend a full refund") {
		t.Errorf("iteration 4 does not show the answer:\n%s", text)
	}
	p.waitFor("the steps show their stop reasons", `(() => {
		const row = document.querySelector('#steps-body tr[data-step="investigate"]');
		return row && row.dataset.status === 'completed' && row.querySelector('.stop').innerText.includes('completed');
	})()`, 30*time.Second)
	p.waitFor("the output", `!document.querySelector('#output').hidden`, 30*time.Second)
	p.waitFor("the stream ends", `document.querySelector('#stream-state').dataset.state === 'ended'`, 30*time.Second)
	if v := eval[string](p, `String(window.__samePage)`); v != "run1" {
		t.Errorf("the run page was loaded again while the run went on (marker %q): it should update in place", v)
	}
	if live := eval[string](p, `document.querySelector('#live-log').innerText`); !strings.Contains(live, "Recommend a full refund") {
		t.Errorf("the live token stream does not show the streamed answer of iteration 4:\n%s", live)
	}
	p.do("scroll to the top", 5*time.Second, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	p.screenshot("run-completed.png")

	// A second run waits for the viewer's eyes; its page opens before it starts waiting and
	// fills in without a reload.
	const run2 = "console-refund-2"
	start(run2)
	p.do("open run 2", 30*time.Second, chromedp.Navigate(s.base+"/#/runs/"+run2),
		chromedp.WaitVisible(css(`svg.graph g.node[data-step="investigate"]`)))
	p.do("mark the page", 5*time.Second, chromedp.Evaluate[chromedp.Void](`window.__samePage = 'run2'`))
	p.waitFor("run 2 waits", `document.querySelector('#run-status[data-status="waiting"]') !== null && document.querySelector('article.iteration[data-step="investigate"][data-n="3"][data-answer="waiting"]') !== null`, 60*time.Second)
	if v := eval[string](p, `String(window.__samePage)`); v != "run2" {
		t.Errorf("the run page was loaded again while the run went on (marker %q): it should update in place", v)
	}
	// The list's filters and pages. A filter changed with the keyboard applies at once and
	// keeps the focus: the status after "any" is queued (runs waiting for a concurrency slot),
	// of which there are none.
	p.do("filter with the keyboard", 30*time.Second, chromedp.Navigate(s.base+"/#/runs"),
		chromedp.WaitVisible(css(`tr[data-run="`+run1+`"]`)),
		chromedp.Focus(css(`#f-status`)),
		chromedp.KeyEvent(kb.ArrowDown))
	p.waitFor("the filter applies", `location.hash === '#/runs?status=queued' && document.activeElement.id === 'f-status' && document.querySelector('#runs-body td.empty') !== null`, 30*time.Second)
	p.do("filter by status", 30*time.Second, chromedp.Navigate(s.base+"/#/runs?status=completed"),
		chromedp.WaitVisible(css(`tr[data-run="`+run1+`"][data-status="completed"]`)))
	if n := eval[int](p, `document.querySelectorAll('tr[data-run="`+run2+`"]').length`); n != 0 {
		t.Errorf("the runs completed list shows the waiting run %s", run2)
	}
	p.do("a page of one", 30*time.Second, chromedp.Navigate(s.base+"/#/runs?limit=1"),
		chromedp.WaitVisible(css(`tr[data-run="`+run2+`"]`)),
		chromedp.Click(css(`#next-page`)),
		chromedp.WaitVisible(css(`tr[data-run="`+run1+`"]`)),
		chromedp.Click(css(`#prev-page`)),
		chromedp.WaitVisible(css(`tr[data-run="`+run2+`"]`)))

	// A file nobody registered, run as reins run FILE does: the research example, whose
	// parallel step's three branches show their own status on the graph, and whose workflow
	// the workflows page lists from its run, while refund_investigation, registered as refund,
	// is listed once, as registered.
	const runR = "console-research-1"
	s.runFile(filepath.Join("..", "examples", "research", "workflow.toml"), `{"question": "automated refunds"}`, runR)
	p.do("the research run's graph", 30*time.Second, chromedp.Navigate(s.base+"/#/runs/"+runR),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitVisible(css(`svg.graph g.node.st-completed[data-step="research"]`)))
	for _, branch := range []string{"market", "competitors", "regulation"} {
		if cls := eval[string](p, `document.querySelector('svg.graph g.node[data-step="`+branch+`"]').getAttribute('class')`); !strings.Contains(cls, "st-completed") {
			t.Errorf("the graph shows the branch %s as %q, want it completed", branch, cls)
		}
	}
	if row := eval[string](p, `document.querySelector('#steps-body tr[data-step="research#1"] th').innerText`); !strings.Contains(row, "competitors") {
		t.Errorf("the steps table shows research#1 as %q, not naming the step it runs (competitors)", row)
	}
	p.screenshot("run-parallel.png")
	p.do("the workflows of past runs", 30*time.Second, chromedp.Navigate(s.base+"/#/workflows"),
		chromedp.WaitVisible(css(`#from-runs tr[data-workflow="research_fanout"]`)),
		chromedp.WaitVisible(css(`#registered tr[data-workflow="refund"]`)))
	if text := eval[string](p, `document.querySelector('#from-runs').innerText`); !strings.Contains(text, "from past runs") || strings.Contains(text, "refund") {
		t.Errorf("the workflows of past runs read:\n%s\nwant research_fanout marked from past runs, and no refund_investigation (registered as refund)", text)
	}
	if n := eval[int](p, `document.querySelectorAll('#no-workflows:not([hidden])').length`); n != 0 {
		t.Errorf("the workflows page says there is no workflow")
	}
	p.screenshot("workflows.png")
	p.do("a workflow of past runs", 30*time.Second, chromedp.Click(css(`#from-runs tr[data-workflow="research_fanout"] td a`)),
		chromedp.WaitVisible(css(`#from-runs-note`)),
		chromedp.WaitVisible(css(`svg.graph g.node[data-step="market"]`)))
	if p.shot != "" {
		p.do("runs list", 30*time.Second, chromedp.Navigate(s.base+"/#/runs"), chromedp.WaitVisible(css(`tr[data-run="`+run2+`"][data-status="waiting"]`)),
			chromedp.WaitVisible(css(`tr[data-run="`+run1+`"][data-status="completed"]`)))
		p.screenshot("runs.png")
		p.do("workflow", 30*time.Second, chromedp.Navigate(s.base+"/#/workflows/refund"), chromedp.WaitVisible(css(`#problems`)))
		p.screenshot("workflow.png")
		p.do("phone", 30*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(s.base+"/#/runs/"+run2),
			chromedp.WaitVisible(css(`article.iteration[data-step="investigate"][data-n="3"]`)))
		p.screenshotView("phone-run.png")
		p.do("desktop", 10*time.Second, chromedp.EmulateViewport(1280, 900))
	}

	// The viewer: no approve button anywhere, and the API refuses the viewer's approval.
	p.do("sign out", 30*time.Second, chromedp.Navigate(s.base+"/#/runs"), chromedp.WaitVisible(css("#sign-out")), chromedp.Click(css("#sign-out")), chromedp.WaitVisible(css("#token")))
	if tok := eval[string](p, `String(sessionStorage.getItem('reins.token'))`); tok != "null" {
		t.Errorf("after signing out, sessionStorage holds %q", tok)
	}
	p.signIn(s.val, "val")
	p.do("the viewer opens run 2", 30*time.Second, chromedp.Navigate(s.base+"/#/runs/"+run2),
		chromedp.WaitVisible(css(`#waits li.wait[data-tool="draft_refund_recommendation"] .no-decide`)))
	if n := eval[int](p, `document.querySelectorAll('button[data-action]').length`); n != 0 {
		t.Errorf("the viewer sees %d approve or deny buttons on the run page", n)
	}
	if n := eval[int](p, `document.querySelectorAll('#cancel-run, .signal-box').length`); n != 0 {
		t.Errorf("the viewer sees %d cancel or signal controls", n)
	}
	p.do("the viewer's inbox", 30*time.Second, chromedp.Click(css(`nav.main a[href="#/approvals"]`)),
		chromedp.WaitVisible(css(`#approvals section[data-run="`+run2+`"] li.wait .no-decide`)))
	if n := eval[int](p, `document.querySelectorAll('button[data-action]').length`); n != 0 {
		t.Errorf("the viewer sees %d approve or deny buttons in the inbox", n)
	}
	code, body := s.call("GET", "/v1/runs/"+run2, s.val, "", nil)
	var r2 struct {
		Status  string `json:"status"`
		Waiting []struct {
			Pending []struct {
				CallID string `json:"call_id"`
			} `json:"pending"`
		} `json:"waiting"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &r2) != nil || len(r2.Waiting) == 0 || len(r2.Waiting[0].Pending) == 0 {
		t.Fatalf("GET /v1/runs/%s as the viewer: %d %s", run2, code, body)
	}
	call := r2.Waiting[0].Pending[0].CallID
	code, body = s.callJSON("POST", "/v1/runs/"+run2+"/approvals/"+call, s.val, map[string]string{"decision": "approve"})
	if code != http.StatusForbidden || !strings.Contains(string(body), "val") {
		t.Errorf("the viewer's approval: %d %s, want 403 naming the principal", code, body)
	}
	if code, body := s.call("GET", "/v1/runs/"+run2, s.val, "", nil); code != http.StatusOK || !strings.Contains(string(body), `"status": "waiting"`) && !strings.Contains(string(body), `"status":"waiting"`) {
		t.Errorf("after the viewer's refused approval, run 2: %d %s; want it still waiting", code, body)
	}

	// The submitter starts a run from the workflow's page and cancels it from the run's page
	// (accepting the confirmation); a submitter has no approve, deny or signal control.
	p.do("sign out", 30*time.Second, chromedp.Click(css("#sign-out")), chromedp.WaitVisible(css("#token")))
	p.signIn(s.sam, "sam")
	p.do("the workflow's page", 30*time.Second, chromedp.Click(css(`nav.main a[href="#/workflows"]`)),
		chromedp.WaitVisible(css(`tr[data-workflow="refund"] a`)),
		chromedp.Click(css(`tr[data-workflow="refund"] a`)),
		chromedp.WaitVisible(css(`#start-input`)),
		chromedp.SetValue(css(`#start-input`), `{"order_id": "O-105"}`),
		chromedp.Click(css(`form.start button[type=submit]`)),
		chromedp.WaitVisible(css(`#cancel-run`)),
		chromedp.WaitVisible(css(`svg.graph g.node[data-step="investigate"]`)))
	run3 := strings.TrimPrefix(eval[string](p, `decodeURIComponent(location.hash)`), "#/runs/")
	if n := eval[int](p, `document.querySelectorAll('button[data-action], .signal-box').length`); n != 0 {
		t.Errorf("the submitter sees %d approve, deny or signal controls", n)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	accepted := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			if err == nil {
				accepted <- ev.Message
			}
			return
		}
	}()
	p.do("cancel", 30*time.Second, chromedp.Click(css(`#cancel-run`)))
	select {
	case msg := <-accepted:
		if !strings.Contains(msg, run3) {
			t.Errorf("the confirmation of the cancel says %q, not naming run %s", msg, run3)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelling asked no confirmation")
	}
	p.waitFor("the run is cancelled", `document.querySelector('#run-status[data-status="cancelled"]') !== null`, 60*time.Second)
	if code, body := s.call("GET", "/v1/runs/"+run3, s.sam, "", nil); code != http.StatusOK || !strings.Contains(string(body), "cancelled") {
		t.Errorf("run %s after the cancel: %d %s", run3, code, body)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, pr := range problems {
		t.Errorf("the console's page: %s", pr)
	}
}

// mapWorkflow pauses once for each item of its input's list: a map step whose body is a step of
// the workflow.
const mapWorkflow = `name = "map_pauses"

[[steps]]
id = "each"
type = "map"
items = "input.items"
step = "pause"
max_items = 5

[[steps]]
id = "pause"
type = "sleep"
duration = "1ms"
`

// The items of a map step are shown where they ran: the steps table names each item's row
// (each#N) with the step it runs, and the graph draws the body's node with the items' status
// and lists them in its title, instead of a body that never ran.
func TestConsoleMapItems(t *testing.T) {
	chromium := ensureChromium(t)
	s := startConsoleServer(t)
	file := filepath.Join(t.TempDir(), "map.toml")
	if err := os.WriteFile(file, []byte(mapWorkflow), 0o600); err != nil {
		t.Fatal(err)
	}
	const id = "console-map-1"
	s.runFile(file, `{"items": ["a", "b", "c"]}`, id)
	admin, err := os.ReadFile(filepath.Join(s.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}

	p := &consolePage{t: t, ctx: browser(t, chromium), base: s.base}
	p.do("open the console", 30*time.Second, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(css("#token")))
	p.signIn(strings.TrimSpace(string(admin)), "admin")
	p.do("the map run", 30*time.Second, chromedp.Navigate(s.base+"/#/runs/"+id),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
		chromedp.WaitVisible(css(`#steps-body tr[data-step="each#2"]`)))

	for _, item := range []string{"each#0", "each#1", "each#2"} {
		row := eval[string](p, `(() => { const r = document.querySelector('#steps-body tr[data-step="`+item+`"]'); return r.dataset.status + ' | ' + r.querySelector('th').innerText; })()`)
		if row != "completed | "+item+" runs pause" {
			t.Errorf("the steps table shows item %s as %q, want %q", item, row, "completed | "+item+" runs pause")
		}
	}
	body := `document.querySelector('svg.graph g.node[data-step="pause"]')`
	if cls := eval[string](p, body+`.getAttribute('class')`); !strings.Contains(cls, "st-completed") {
		t.Errorf("the graph draws the map's body as %q, want it completed by its items", cls)
	}
	title := eval[string](p, body+`.querySelector('title').textContent`)
	for _, line := range []string{"status: completed", "each#0: completed", "each#1: completed", "each#2: completed"} {
		if !strings.Contains(title, line) {
			t.Errorf("the title of the map's body does not say %q:\n%s", line, title)
		}
	}
	if cls := eval[string](p, `document.querySelector('svg.graph g.node[data-step="each"]').getAttribute('class')`); !strings.Contains(cls, "st-completed") {
		t.Errorf("the graph draws the map step as %q, want it completed", cls)
	}
}
