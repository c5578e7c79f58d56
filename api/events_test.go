package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/protocol"
	"github.com/reins-run/reins/workflow"
)

const (
	draftText  = "Dear customer, your refund of 12 EUR is on its way."
	answerText = "The order arrived four days late: refund approved."
)

// twoSteps is a workflow that waits for the signal "go" (when wait), then runs an llm step
// "draft" and an agent step "decide" on scripted models, both streaming when stream.
func twoSteps(wait, stream bool) *workflow.Builder {
	script := func(text string) json.RawMessage {
		b, _ := json.Marshal([]map[string]any{{"text": text, "usage": map[string]int{"input_tokens": 10, "output_tokens": 5}}})
		return b
	}
	b := workflow.New("two").
		Model("writer", workflow.ModelDef{Provider: "scripted", Script: script(draftText)}).
		Model("judge", workflow.ModelDef{Provider: "scripted", Script: script(answerText)})
	draft := b.LLM("draft", "writer").WithPrompt("Write to the customer.")
	decide := b.Agent("decide", "judge").WithGoal("Decide the refund.")
	if stream {
		draft.WithStream()
		decide.WithStream()
	}
	b.Edge("draft", "decide")
	if wait {
		b.WaitEvent("hold", "go")
		b.Edge("hold", "draft")
		b.Start("hold")
	} else {
		b.Start("draft")
	}
	return b
}

func waiting(rec *client.Record) bool  { return rec.Run.Status == protocol.RunWaiting }
func finished(rec *client.Record) bool { return rec.Finished() }

// events are the messages of kind event among msgs.
func events(msgs []msg) []msg {
	var out []msg
	for _, m := range msgs {
		if m.Event == "event" {
			out = append(out, m)
		}
	}
	return out
}

// checkTrace checks that evs are the run's durable events, in order, with increasing ids.
func (v *stack) checkTrace(runID string, evs []msg) {
	v.t.Helper()
	want, err := v.Admin.Events(v.Ctx, runID)
	if err != nil {
		v.t.Fatal(err)
	}
	if len(evs) != len(want) {
		v.t.Fatalf("%d events streamed, the run has %d", len(evs), len(want))
	}
	var last uint64
	for i, m := range evs {
		id, err := strconv.ParseUint(m.ID, 10, 64)
		if err != nil || id <= last {
			v.t.Errorf("event %d has id %q after %d: want increasing numbers", i, m.ID, last)
		}
		last = id
		var got protocol.Event
		decode(v.t, m, &got)
		if got.Type != want[i].Type || got.Step != want[i].Step || got.Iteration != want[i].Iteration || !got.At.Equal(want[i].At) {
			v.t.Errorf("event %d is %s %s %d, want %s %s %d", i, got.Type, got.Step, got.Iteration, want[i].Type, want[i].Step, want[i].Iteration)
		}
	}
}

// checkEnd checks that msgs end with the finished run's status, then end.
func checkEnd(t *testing.T, msgs []msg, want protocol.RunStatus) {
	t.Helper()
	n := len(msgs)
	if n < 2 || msgs[n-2].Event != "status" || msgs[n-1].Event != "end" {
		t.Fatalf("the stream does not end with status and end: %+v", msgs[max(n-3, 0):])
	}
	var st struct {
		RunID    string             `json:"run_id"`
		Status   protocol.RunStatus `json:"status"`
		Workflow string             `json:"workflow"`
		Steps    []json.RawMessage  `json:"steps"`
	}
	decode(t, msgs[n-2], &st)
	if st.Status != want || st.Workflow != "two" || len(st.Steps) == 0 {
		t.Errorf("last status %s, want %s of workflow two with its steps", msgs[n-2].Data, want)
	}
	var end map[string]string
	decode(t, msgs[n-1], &end)
	if end["status"] != string(want) {
		t.Errorf("end %s, want status %s", msgs[n-1].Data, want)
	}
}

// A client connected to a run sees the deltas of its streaming llm and agent steps, whose
// concatenation is each reply; then the durable events, the status at each change, and end.
func TestEventsStreamDeltas(t *testing.T) {
	v := newStackWith(t, stackOptions{Ticks: make(chan time.Time)}) // no keep-alive comment
	v.startBuilt(twoSteps(true, true), "live")
	v.waitFor("live", waiting)
	s := v.open("live", "")
	msgs := s.until(func(m msg) bool { return m.Event == "status" }) // connected: the status of now
	var st protocol.Result
	decode(t, msgs[len(msgs)-1], &st)
	if st.Status != protocol.RunWaiting {
		t.Fatalf("status at connection %s, want waiting", st.Status)
	}
	if err := v.Admin.Signal(v.Ctx, "live", "go", nil); err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, s.rest()...)
	checkEnd(t, msgs, protocol.RunCompleted)
	v.checkTrace("live", events(msgs))

	texts := map[string]string{}
	statuses := 0
	for _, m := range msgs {
		switch m.Event {
		case "delta":
			var d struct {
				Step      string `json:"step"`
				Iteration int    `json:"iteration"`
				Text      string `json:"text"`
			}
			decode(t, m, &d)
			if d.Iteration != 1 {
				t.Errorf("delta %s: want iteration 1", m.Data)
			}
			if m.ID != "" {
				t.Errorf("delta %s has id %s: deltas are not kept, and have none", m.Data, m.ID)
			}
			texts[d.Step] += d.Text
		case "status":
			statuses++
		}
	}
	if texts["draft"] != draftText || texts["decide"] != answerText {
		t.Errorf("the deltas make %q, want the replies %q and %q", texts, draftText, answerText)
	}
	if statuses < 3 {
		t.Errorf("%d statuses, want one at connection and at the changes of the run", statuses)
	}
}

// A client that reconnects with the id of the last event it read gets the events after it,
// none missed and none twice; with the last id of a finished run, only its status and end.
func TestEventsResume(t *testing.T) {
	v := newStackWith(t, stackOptions{Ticks: make(chan time.Time)}) // no keep-alive comment
	v.startBuilt(twoSteps(false, false), "done")
	v.waitFor("done", finished)
	full := v.open("done", "").rest()
	checkEnd(t, full, protocol.RunCompleted)
	all := events(full)
	v.checkTrace("done", all)
	if all[0].Event != "event" || full[0].Event != "event" {
		t.Errorf("the stream begins with %+v, want the first event", full[0])
	}
	for _, k := range []int{1, len(all) / 2, len(all) - 1, len(all)} {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			s := v.open("done", "")
			read := 0
			first := s.until(func(m msg) bool {
				if m.Event == "event" {
					read++
				}
				return read == k
			})
			s.close()
			last := events(first)[k-1].ID
			rest := v.open("done", last).rest()
			checkEnd(t, rest, protocol.RunCompleted)
			got := append(events(first), events(rest)...)
			if !slices.Equal(got, all) {
				t.Errorf("read %d events, then from id %s %d more: %d in all, want the %d of the run once each", k, last, len(events(rest)), len(got), len(all))
			}
		})
	}
}

// A run's events and records are the same with and without streaming, but for times, ids and
// the definition's hash.
func TestEventsSameRecordWithoutStream(t *testing.T) {
	v := newStackWith(t, stackOptions{Ticks: make(chan time.Time)}) // no keep-alive comment
	trace := func(runID string, stream bool) ([]string, string) {
		v.startBuilt(twoSteps(true, stream), runID)
		v.waitFor(runID, waiting)
		s := v.open(runID, "") // a client watches: the deltas are published and relayed
		s.until(func(m msg) bool { return m.Event == "status" })
		if err := v.Admin.Signal(v.Ctx, runID, "go", nil); err != nil {
			t.Fatal(err)
		}
		s.rest()
		evs, err := v.Admin.Events(v.Ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, normalized(t, ev, runID))
		}
		rec := v.waitFor(runID, finished)
		res, err := v.Admin.Result(v.Ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		return out, normalized(t, res, runID)
	}
	on, onResult := trace("streamed", true)
	off, offResult := trace("plain", false)
	if !slices.Equal(on, off) {
		t.Errorf("the events differ with streaming:\n%s\nwithout:\n%s", strings.Join(on, "\n"), strings.Join(off, "\n"))
	}
	if onResult != offResult {
		t.Errorf("the results differ with streaming:\n%s\nwithout:\n%s", onResult, offResult)
	}
}

// normalized is v as JSON without what differs between two runs of the same workflow: times,
// durations, the run's id, a signal's random id and the definition's hash.
func normalized(t *testing.T, v any, runID string) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var x any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(string(b), runID, "RUN")), &x); err != nil {
		t.Fatal(err)
	}
	var strip func(x any) any
	strip = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			if x["type"] == "signal" {
				delete(x, "id") // a signal's own random id
			}
			for k, e := range x {
				switch {
				case k == "at" || k == "time" || strings.HasSuffix(k, "_at") || strings.HasSuffix(k, "_ns") || strings.HasSuffix(k, "_ms") || strings.Contains(k, "duration") ||
					k == "workflow" || k == "hash" || k == "nonce" || k == "deadline":
					delete(x, k)
				default:
					x[k] = strip(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = strip(x[i])
			}
		}
		return x
	}
	out, _ := json.Marshal(strip(x))
	return string(out)
}

// Without a token the stream is refused (401); an unknown run is a 404 problem document, and
// a Last-Event-ID that is not a number a 400, before any stream begins.
func TestEventsErrors(t *testing.T) {
	v := newStackWith(t, stackOptions{Ticks: make(chan time.Time)}) // no keep-alive comment
	v.startBuilt(twoSteps(false, false), "known")
	for _, tc := range []struct {
		name, path, token, lastID string
		status                    int
		detail                    string
	}{
		{"no token", "/v1/runs/known/events", "", "", http.StatusUnauthorized, "Authorization: Bearer"},
		{"an unknown token", "/v1/runs/known/events", "nobody", "", http.StatusUnauthorized, "not the token"},
		{"an unknown run", "/v1/runs/nope/events", v.Tokens["vera"], "", http.StatusNotFound, "there is no run nope"},
		{"a run id that cannot be one", "/v1/runs/a.b/events", v.Tokens["vera"], "", http.StatusNotFound, "there is no run a.b"},
		{"a bad Last-Event-ID", "/v1/runs/known/events", v.Tokens["vera"], "x", http.StatusBadRequest, "Last-Event-ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := v.doWith("GET", tc.path, tc.token, "", map[string]string{"Last-Event-ID": tc.lastID})
			if a.Status != tc.status || a.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(a.Body), tc.detail) {
				t.Errorf("%d %s: %s\n%s", a.Status, a.Header.Get("Content-Type"), a.Body, tc.detail)
			}
			if tc.status == http.StatusUnauthorized && !strings.HasPrefix(a.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
		})
	}
}

// A stream sends a keep-alive comment on each tick of its clock, and stops (its handler
// returns, with every goroutine it started) when the client goes away.
func TestEventsKeepAliveAndDisconnect(t *testing.T) {
	ticks := make(chan time.Time)
	v := newStackWith(t, stackOptions{Ticks: ticks})
	v.startBuilt(twoSteps(true, true), "held")
	v.waitFor("held", waiting)
	s := v.open("held", "")
	s.until(func(m msg) bool { return m.Event == "status" })
	for range 2 {
		ticks <- time.Now()
		if m, ok := s.next(); !ok || m.Comment != "keep-alive" || m.Event != "" {
			t.Fatalf("after a tick: %+v, want the comment keep-alive", m)
		}
	}
	s.close()
	returned := make(chan struct{})
	go func() { v.served.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's handler did not return after the client went away")
	}
}

// A client of a live run that disconnects and reconnects with the id of the last event it read,
// before the run goes on, gets the rest of the run: every event once, then end.
func TestEventsResumeLive(t *testing.T) {
	v := newStackWith(t, stackOptions{Ticks: make(chan time.Time)}) // no keep-alive comment
	v.startBuilt(twoSteps(true, true), "again")
	v.waitFor("again", waiting)
	s := v.open("again", "")
	first := s.until(func(m msg) bool { return m.Event == "status" })
	s.close()
	evs := events(first)
	if len(evs) == 0 {
		t.Fatal("no event before the status of a waiting run")
	}
	s = v.open("again", evs[len(evs)-1].ID)
	second := s.until(func(m msg) bool { return m.Event == "status" })
	if len(events(second)) != 0 {
		t.Errorf("reconnected after the last event, got %d events again", len(events(second)))
	}
	if err := v.Admin.Signal(v.Ctx, "again", "go", nil); err != nil {
		t.Fatal(err)
	}
	rest := append(second, s.rest()...)
	checkEnd(t, rest, protocol.RunCompleted)
	v.checkTrace("again", append(evs, events(rest)...))
}
