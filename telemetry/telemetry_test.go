package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/reins-run/reins/internal/testkit/otlptest"
	"github.com/reins-run/reins/model"
	"github.com/reins-run/reins/telemetry"
	"github.com/reins-run/reins/tool"
)

// otelVars are the variables Setup reads.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", telemetry.CaptureContentEnv}

// setenv makes vars the test's environment of OTEL_* variables, the others empty.
func setenv(t *testing.T, vars map[string]string) {
	for _, k := range otelVars {
		t.Setenv(k, vars[k])
	}
}

// setupWith is Setup in the environment vars.
func setupWith(t *testing.T, vars map[string]string) (*telemetry.Provider, error) {
	setenv(t, vars)
	return telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "reins-test"})
}

// TestOffByDefault: without an endpoint nothing is set up, and the calls on the hot paths cost
// no allocation.
func TestOffByDefault(t *testing.T) {
	p, err := setupWith(t, nil)
	if err != nil || p != nil {
		t.Fatalf("Setup with no OTEL_* variable = %v, %v; want nil, nil", p, err)
	}
	for _, vars := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, // for another signal: traces are off anyway
	} {
		if p, err := setupWith(t, vars); err != nil || p != nil {
			t.Errorf("Setup(%v) = %v, %v; want off", vars, p, err)
		}
	}
	if telemetry.Enabled() {
		t.Fatal("Enabled after no setup")
	}
	m := model.Func(func(context.Context, *model.Request) (*model.Response, error) { return &model.Response{}, nil })
	if w := telemetry.WrapModel(m, "p", "n"); w == nil || func() bool { _, ok := w.(model.Func); return !ok }() {
		t.Errorf("WrapModel when off = %T, want the model itself", w)
	}
	h := nats.Header{}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := telemetry.Start(ctx, trace.SpanContext{}, "x", trace.SpanKindInternal)
		span.End()
		telemetry.Inject(h, trace.SpanContext{})
		telemetry.Emit(telemetry.Ended{})
		_ = telemetry.HeaderSize()
	})
	if allocs != 0 || len(h) != 0 {
		t.Errorf("off: %v allocations, header %v; want none", allocs, h)
	}
}

// TestSetupRefuses: what reins cannot export is an error, not a silent no-op.
func TestSetupRefuses(t *testing.T) {
	for _, vars := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
	} {
		if p, err := setupWith(t, vars); err == nil {
			_ = p.Shutdown(context.Background())
			t.Errorf("Setup(%v) succeeded", vars)
		}
	}
}

func TestParseSampler(t *testing.T) {
	for _, c := range []struct {
		name, arg string
		want      float64
		ok        bool
	}{
		{"", "", 1, true}, {"always_on", "", 1, true}, {"parentbased_always_off", "", 0, true},
		{"traceidratio", "0.25", 0.25, true}, {"ParentBased_TraceIDRatio", " 1 ", 1, true}, {"traceidratio", "", 1, true},
		{"traceidratio", "-0.1", 0, false}, {"traceidratio", "NaN", 0, false}, {"traceidratio", "x", 0, false}, {"jaeger_remote", "", 0, false},
	} {
		got, err := telemetry.ParseSampler(c.name, c.arg)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSampler(%q, %q) = %v, %v; want %v, ok %v", c.name, c.arg, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseSampler(f *testing.F) {
	for _, s := range []string{"", "always_on", "traceidratio", "parentbased_traceidratio"} {
		f.Add(s, "0.5")
	}
	f.Fuzz(func(t *testing.T, name, arg string) {
		r, err := telemetry.ParseSampler(name, arg)
		if err == nil && !(r >= 0 && r <= 1) {
			t.Fatalf("ParseSampler(%q, %q) = %v, no error", name, arg, r)
		}
	})
}

// TestIDs: the ids of a run's spans are derived from what every process knows, the same every
// time, distinct across runs, steps and activations, and all in the run's trace.
func TestIDs(t *testing.T) {
	run := telemetry.RunSpan("r1")
	if !run.Equal(telemetry.RunSpan("r1")) || !run.IsValid() || !run.IsRemote() {
		t.Fatalf("RunSpan(r1) = %v: want valid, remote and the same every time", run)
	}
	seen := map[trace.SpanID]string{run.SpanID(): "run r1"}
	for _, c := range []struct {
		run, step string
		act       int
	}{{"r1", "a", 1}, {"r1", "a", 2}, {"r1", "b", 1}, {"r1", "a#0", 1}, {"r2", "a", 1}, {"r1a", "", 1}, {"r", "1a", 1}} {
		sc := telemetry.StepSpan(c.run, c.step, c.act)
		if !sc.Equal(telemetry.StepSpan(c.run, c.step, c.act)) || !sc.IsValid() {
			t.Errorf("StepSpan%v = %v: want valid and the same every time", c, sc)
		}
		if sc.TraceID() != telemetry.TraceID(c.run) {
			t.Errorf("StepSpan%v is in trace %v, not its run's %v", c, sc.TraceID(), telemetry.TraceID(c.run))
		}
		if prev, ok := seen[sc.SpanID()]; ok {
			t.Errorf("StepSpan%v has the span id of %s", c, prev)
		}
		seen[sc.SpanID()] = c.run + "/" + c.step
	}
	if telemetry.TraceID("r1") == telemetry.TraceID("r2") {
		t.Error("two runs share a trace id")
	}
}

// TestCarrier: a span context written into NATS headers is read back the same, beside the
// headers already there; headers without one, or with a malformed one, give none.
func TestCarrier(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: telemetry.TraceID("r"), SpanID: telemetry.StepSpan("r", "s", 1).SpanID(),
		TraceFlags: trace.FlagsSampled, Remote: true})
	h := nats.Header{"Nats-Msg-Id": {"r/s/1/1/1"}}
	telemetry.Inject(h, sc)
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if got := h.Get("traceparent"); got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}
	if h.Get("Nats-Msg-Id") != "r/s/1/1/1" {
		t.Errorf("the message id changed: %v", h)
	}
	if got := telemetry.Extract(h); !got.Equal(sc) {
		t.Errorf("Extract = %v, want %v", got, sc)
	}
	for _, bad := range []nats.Header{nil, {}, {"traceparent": {"00-zz-01"}}, {"traceparent": {"00-00000000000000000000000000000000-0000000000000000-01"}}} {
		if got := telemetry.Extract(bad); got.IsValid() {
			t.Errorf("Extract(%v) = %v, want invalid", bad, got)
		}
	}
}

func FuzzExtract(f *testing.F) {
	f.Add("00-" + strings.Repeat("ab", 16) + "-" + strings.Repeat("cd", 8) + "-01")
	f.Add("ff-00")
	f.Fuzz(func(t *testing.T, tp string) {
		sc := telemetry.Extract(nats.Header{"traceparent": {tp}})
		if !sc.IsValid() {
			return
		}
		h := nats.Header{}
		telemetry.Inject(h, sc)
		if again := telemetry.Extract(h); again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() || again.IsSampled() != sc.IsSampled() {
			t.Fatalf("%q: extracted %v, injected and extracted again %v", tp, sc, again)
		}
	})
}

const secret = "sk-SECRET-4f1c9a"

// setup turns tracing on for the test, exporting to a receiver; capture turns the recording of
// contents on. The returned function flushes the spans.
func setup(t *testing.T, capture bool) (*otlptest.Receiver, func()) {
	t.Helper()
	r, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.Endpoint(), "OTEL_SERVICE_NAME": "unit"}
	if capture {
		vars[telemetry.CaptureContentEnv] = "true"
	}
	p, err := setupWith(t, vars)
	if err != nil || p == nil {
		t.Fatalf("Setup = %v, %v", p, err)
	}
	flushed := false
	flush := func() {
		if !flushed {
			flushed = true
			if err := p.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(flush)
	return r, flush
}

// emitRun exports what one run's processes would: the run and step spans with their derived
// ids, an iteration under the step span read from a task's headers, a model call and a tool
// call in it. Its prompt and tool payloads hold the secret.
func emitRun(t *testing.T) {
	t.Helper()
	start := time.Now().Add(-time.Second)
	telemetry.Emit(telemetry.Ended{ID: telemetry.RunSpan("run1"), Name: "run wf", Start: start, End: time.Now(),
		Attrs: []attribute.KeyValue{telemetry.AttrRunID.String("run1")}})
	telemetry.Emit(telemetry.Ended{ID: telemetry.StepSpan("run1", "agent", 1), Parent: telemetry.RunSpan("run1"), Name: "step agent",
		Start: start, End: time.Now(), Error: "failed"})
	task := nats.Header{}
	telemetry.Inject(task, telemetry.StepSpan("run1", "agent", 1))
	ctx, span := telemetry.Start(context.Background(), telemetry.Extract(task), "iteration agent", trace.SpanKindConsumer,
		telemetry.Usage(2, 2, 19, 7, 0.5)...)
	// The server answered with another name than the one asked for, and ended on its limit.
	m := telemetry.WrapModel(model.Func(func(context.Context, *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindAnswer, Text: "answer " + secret},
			Usage: model.Usage{InputTokens: 12, OutputTokens: 5}, CostUSD: 0.5,
			Model: "gpt-x-2026-01-01", FinishReason: "length", Truncated: true}, nil
	}), "openai", "gpt-x")
	req := &model.Request{Instructions: "be brief " + secret, Messages: []model.Message{
		{Role: model.RoleUser, Content: "prompt " + secret},
		{Role: model.RoleAssistant, Calls: []model.ToolCall{{ID: "call-0", Name: "lookup", Arguments: json.RawMessage(`{"q":1}`)}}},
		{Role: model.RoleTool, CallID: "call-0", Name: "lookup", Content: `{"found":true}`},
	}}
	if _, err := m.Generate(ctx, req); err != nil {
		t.Fatal(err)
	}
	// A provider that says neither: no response model, no finish reasons.
	silent := telemetry.WrapModel(model.Func(func(context.Context, *model.Request) (*model.Response, error) {
		return &model.Response{Proposal: model.Proposal{Kind: model.KindToolCalls, Calls: []model.ToolCall{{ID: "c9", Name: "lookup", Arguments: json.RawMessage(`{"q":2}`)}}},
			Usage: model.Usage{InputTokens: 7, OutputTokens: 2}}, nil
	}), "scripted", "clerk")
	if _, err := silent.Generate(ctx, &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	tl := telemetry.WrapTool(tool.New(tool.Spec{Name: "lookup"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return json.RawMessage(`"result ` + secret + `"`), nil
	}))
	if _, err := tl.Call(tool.WithInfo(ctx, &tool.Info{CallID: "call-1"}), json.RawMessage(`{"q":"`+secret+`"}`), "k"); err != nil {
		t.Fatal(err)
	}
	failing := telemetry.WrapTool(tool.New(tool.Spec{Name: "broken"}, func(context.Context, json.RawMessage, string) (json.RawMessage, error) {
		return nil, errors.New("down " + secret)
	}))
	if _, err := failing.Call(ctx, json.RawMessage(`{}`), "k2"); err == nil {
		t.Fatal("the failing tool did not fail")
	}
	span.End()
}

// TestExport: spans reach an OTLP receiver with the tree and attributes of a run, and the
// contents of calls only when the operator opts in.
func TestExport(t *testing.T) {
	for _, capture := range []bool{false, true} {
		t.Run(map[bool]string{false: "content_off", true: "content_on"}[capture], func(t *testing.T) {
			r, flush := setup(t, capture)
			emitRun(t)
			flush()
			if telemetry.Enabled() {
				t.Fatal("Enabled after Shutdown")
			}
			byName := map[string]otlptest.Span{}
			for _, s := range r.Spans() {
				byName[s.Name] = s
			}
			if len(byName) != 7 {
				t.Fatalf("received %d spans: %v", len(byName), byName)
			}
			run, step, iter, chat, call, broken := byName["run wf"], byName["step agent"], byName["iteration agent"], byName["chat gpt-x"], byName["execute_tool lookup"], byName["execute_tool broken"]
			tid := telemetry.TraceID("run1").String()
			for _, s := range byName {
				if s.TraceID != tid || s.Service != "unit" {
					t.Errorf("span %s: trace %s, service %s; want %s, unit", s.Name, s.TraceID, s.Service, tid)
				}
			}
			for _, c := range []struct {
				child, parent otlptest.Span
			}{{step, run}, {iter, step}, {chat, iter}, {call, iter}, {broken, iter}} {
				if c.child.ParentID != c.parent.SpanID {
					t.Errorf("%s's parent is %s, want %s (%s)", c.child.Name, c.child.ParentID, c.parent.SpanID, c.parent.Name)
				}
			}
			if run.ParentID != "" || run.SpanID != telemetry.RunSpan("run1").SpanID().String() || step.SpanID != telemetry.StepSpan("run1", "agent", 1).SpanID().String() {
				t.Errorf("the run and step spans do not have their derived ids: %+v %+v", run, step)
			}
			if !step.Failed || step.Error != "failed" || run.Failed {
				t.Errorf("statuses: step %v %q, run %v", step.Failed, step.Error, run.Failed)
			}
			if chat.Str("gen_ai.operation.name") != "chat" || chat.Str("gen_ai.provider.name") != "openai" || chat.Str("gen_ai.request.model") != "gpt-x" ||
				chat.Str("gen_ai.response.model") != "gpt-x-2026-01-01" || chat.Int("gen_ai.usage.input_tokens") != 12 || chat.Int("gen_ai.usage.output_tokens") != 5 ||
				chat.Attrs["reins.cost_usd"] != 0.5 || chat.Kind != "CLIENT" {
				t.Errorf("chat span: %+v", chat)
			}
			if fr, _ := chat.Attrs["gen_ai.response.finish_reasons"].([]any); len(fr) != 1 || fr[0] != "length" {
				t.Errorf("finish reasons: %v, want the server's [length]", chat.Attrs["gen_ai.response.finish_reasons"])
			}
			silent := byName["chat clerk"]
			for _, k := range []string{"gen_ai.response.model", "gen_ai.response.finish_reasons"} {
				if v, ok := silent.Attrs[k]; ok {
					t.Errorf("the reply said no %s, yet the span has %v", k, v)
				}
			}
			if silent.Int("gen_ai.usage.input_tokens") != 7 || silent.Str("gen_ai.request.model") != "clerk" {
				t.Errorf("chat clerk: %v", silent.Attrs)
			}
			checkNames(t, byName)
			if iter.Int("reins.input_tokens") != 19 || iter.Int("reins.output_tokens") != 7 || iter.Int("reins.model_calls") != 2 {
				t.Errorf("iteration span's sums: %v", iter.Attrs)
			}
			if call.Str("gen_ai.operation.name") != "execute_tool" || call.Str("gen_ai.tool.name") != "lookup" || call.Str("gen_ai.tool.call.id") != "call-1" {
				t.Errorf("tool span: %+v", call)
			}
			if !broken.Failed || broken.Str("error.type") != "tool_error" || broken.Error != "tool_error" {
				t.Errorf("failing tool span: %+v", broken)
			}
			if got := r.Contains(secret); got != capture {
				t.Errorf("the exported bytes hold the call contents: %v, want %v", got, capture)
			}
			if capture && !strings.Contains(call.Str("gen_ai.tool.call.result"), secret) {
				t.Errorf("content on, but the tool span does not carry the result: %+v", call.Attrs)
			}
			if capture {
				checkContent(t, chat, silent)
			}
		})
	}
}

// checkNames: every attribute a span carries is reins's own (reins.*) or a name of the
// semantic conventions in OpenTelemetry's semconv package; token usage (gen_ai.usage.*) is on
// the chat spans only, so that a backend summing a trace counts each call once.
func checkNames(t *testing.T, spans map[string]otlptest.Span) {
	t.Helper()
	for name, s := range spans {
		for k := range s.Attrs {
			if !strings.HasPrefix(k, "reins.") && !otlptest.SemconvName(k) {
				t.Errorf("span %q: attribute %q is neither reins.* nor a semconv name", name, k)
			}
			if strings.HasPrefix(k, "gen_ai.usage.") && !strings.HasPrefix(name, "chat ") {
				t.Errorf("span %q carries %s: usage belongs on chat spans only", name, k)
			}
		}
	}
}

// checkContent: with capture on, the chat spans' contents parse as the conventions' message
// format and say what was sent and answered.
func checkContent(t *testing.T, chat, silent otlptest.Span) {
	t.Helper()
	sys, err := otlptest.SystemInstructions(chat.Str("gen_ai.system_instructions"))
	if err != nil || len(sys) != 1 || sys[0].Type != "text" || sys[0].Content != "be brief "+secret {
		t.Errorf("system instructions %s: %+v, %v", chat.Str("gen_ai.system_instructions"), sys, err)
	}
	in, err := otlptest.InputMessages(chat.Str("gen_ai.input.messages"))
	if err != nil {
		t.Fatalf("input messages %s: %v", chat.Str("gen_ai.input.messages"), err)
	}
	if len(in) != 3 || in[0].Role != "user" || in[0].Parts[0].Content != "prompt "+secret ||
		in[1].Role != "assistant" || in[1].Parts[0].Type != "tool_call" || in[1].Parts[0].ID != "call-0" || in[1].Parts[0].Name != "lookup" || string(in[1].Parts[0].Arguments) != `{"q":1}` ||
		in[2].Role != "tool" || in[2].Parts[0].Type != "tool_call_response" || in[2].Parts[0].ID != "call-0" || string(in[2].Parts[0].Response) != `"{\"found\":true}"` {
		t.Errorf("input messages: %+v", in)
	}
	out, err := otlptest.OutputMessages(chat.Str("gen_ai.output.messages"))
	if err != nil || len(out) != 1 || out[0].Role != "assistant" || out[0].FinishReason != "length" || len(out[0].Parts) != 1 || out[0].Parts[0].Content != "answer "+secret {
		t.Errorf("output messages %s: %+v, %v", chat.Str("gen_ai.output.messages"), out, err)
	}
	out, err = otlptest.OutputMessages(silent.Str("gen_ai.output.messages"))
	if err != nil || len(out) != 1 || out[0].FinishReason != "tool_call" || out[0].Parts[0].Type != "tool_call" || out[0].Parts[0].ID != "c9" {
		t.Errorf("output messages of a tool call %s: %+v, %v", silent.Str("gen_ai.output.messages"), out, err)
	}
}
