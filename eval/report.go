package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/reins-run/reins/fixture"
	"github.com/reins-run/reins/loop"
	"github.com/reins-run/reins/model"
)

// LoadAll discovers and loads every fixture under paths. Any invalid fixture, or two fixtures with
// the same case_id, is an *fixture.InvalidError.
func LoadAll(paths []string) ([]*fixture.Fixture, error) { return LoadSuite(paths, nil) }

// LoadSuite is [LoadAll], except that a *.json file found inside a directory of paths that is not
// meant as a fixture ([fixture.IsFixture]: JSON without any key every fixture has) is left out and
// passed to skipped (nil: left out silently). A file that paths names itself is always loaded
// as a fixture, and so is one that has some of a fixture's keys: its problems are errors.
func LoadSuite(paths []string, skipped func(file string)) ([]*fixture.Fixture, error) {
	named := map[string]bool{}
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			named[p] = true
		}
	}
	files, err := fixture.Discover(paths)
	if err != nil {
		return nil, &fixture.InvalidError{File: "reins eval", Msg: err.Error()}
	}
	seen := map[string]string{}
	fixtures := make([]*fixture.Fixture, 0, len(files))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, &fixture.InvalidError{File: file, Msg: fmt.Sprintf("cannot read the fixture: %v", err)}
		}
		if !named[file] && !fixture.IsFixture(data) {
			if skipped != nil {
				skipped(file)
			}
			continue
		}
		f, err := fixture.Parse(file, data)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[f.CaseID]; dup {
			return nil, &fixture.InvalidError{File: file, Key: "case_id", Msg: fmt.Sprintf("%q is also the case_id of %s", f.CaseID, other)}
		}
		seen[f.CaseID] = file
		fixtures = append(fixtures, f)
	}
	if len(fixtures) == 0 {
		return nil, &fixture.InvalidError{File: fmt.Sprint(paths), Msg: "no *.json fixture files found"}
	}
	return fixtures, nil
}

// CaseResult is every run of one case; a case passes only if all its runs pass (pass^k).
type CaseResult struct {
	CaseID string      `json:"case_id"`
	File   string      `json:"file"`
	Passed bool        `json:"passed"`
	Runs   []RunResult `json:"runs"`
}

// Metrics summarise a suite.
type Metrics struct {
	Cases              int     `json:"cases"`
	Passed             int     `json:"passed"`
	K                  int     `json:"k"`
	Runs               int     `json:"runs"`
	CorrectStopReason  int     `json:"correct_stop_reason"`
	CompletionRate     float64 `json:"completion_rate"`
	InvalidActionRate  float64 `json:"invalid_action_rate"`
	RepeatedActionRate float64 `json:"repeated_action_rate"`
	ToolCalls          int     `json:"tool_calls"`
	Tokens             int64   `json:"tokens"`
	CostUSD            float64 `json:"cost_usd"`
	P50Latency         float64 `json:"p50_latency_ms"`
}

// Report is the result of a suite.
type Report struct {
	Cases   []CaseResult `json:"cases"`
	Metrics Metrics      `json:"metrics"`
	Passed  int          `json:"passed"`
	Failed  int          `json:"failed"`
}

// RunSuite runs every fixture k times, calling onRun after each run (for live output).
func RunSuite(ctx context.Context, fixtures []*fixture.Fixture, k int, opts Options, onRun func(*fixture.Fixture, RunResult)) (*Report, error) {
	if k < 1 {
		k = 1
	}
	rep := &Report{}
	for _, f := range fixtures {
		cr := CaseResult{CaseID: f.CaseID, File: f.File, Passed: true}
		for run := 1; run <= k; run++ {
			rr, err := RunCase(ctx, f, run, opts)
			if err != nil {
				return nil, err
			}
			cr.Runs = append(cr.Runs, rr)
			cr.Passed = cr.Passed && rr.Passed
			if onRun != nil {
				onRun(f, rr)
			}
		}
		if cr.Passed {
			rep.Passed++
		} else {
			rep.Failed++
		}
		rep.Cases = append(rep.Cases, cr)
	}
	rep.Metrics = metrics(fixtures, rep, k)
	return rep, nil
}

func metrics(fixtures []*fixture.Fixture, rep *Report, k int) Metrics {
	m := Metrics{Cases: len(rep.Cases), Passed: rep.Passed, K: k}
	var completed, proposals, invalid, repeated int
	var latencies []time.Duration
	for i, cr := range rep.Cases {
		for _, rr := range cr.Runs {
			m.Runs++
			if rr.StopReason == fixtures[i].Expected.StopReason {
				m.CorrectStopReason++
			}
			if rr.StopReason == loop.Completed {
				completed++
			}
			proposals += rr.Proposals
			invalid += rr.InvalidActions
			repeated += rr.RepeatedProposals
			m.ToolCalls += rr.ToolCalls
			m.Tokens += rr.Tokens
			m.CostUSD = model.AddCost(m.CostUSD, rr.CostUSD)
			latencies = append(latencies, rr.Latency)
		}
	}
	m.CompletionRate = ratio(completed, m.Runs)
	m.InvalidActionRate = ratio(invalid, proposals)
	m.RepeatedActionRate = ratio(repeated, proposals)
	if len(latencies) > 0 {
		slices.Sort(latencies)
		m.P50Latency = float64(latencies[(len(latencies)-1)/2]) / float64(time.Millisecond)
	}
	return m
}

func ratio(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// Line is the result line of one run: "PASS case_id" or "FAIL case_id: reason", with the run
// number when a case runs more than once.
func Line(caseID string, rr RunResult, k int) string {
	name := caseID
	if k > 1 {
		name = fmt.Sprintf("%s (run %d of %d)", caseID, rr.Run, k)
	}
	if rr.Passed {
		return "PASS " + name
	}
	return "FAIL " + name + ": " + rr.Failure
}

// WriteSummary writes the metrics table and the closing "N passed, M failed" line.
func (r *Report) WriteSummary(w io.Writer) error {
	m := r.Metrics
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	pct := func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
	rows := [][2]string{
		{"cases", fmt.Sprint(m.Cases)},
		{"passed", fmt.Sprintf("%d (pass^%d)", m.Passed, m.K)},
		{"correct stop reason", fmt.Sprintf("%s (%d of %d runs)", pct(ratio(m.CorrectStopReason, m.Runs)), m.CorrectStopReason, m.Runs)},
		{"completion rate", pct(m.CompletionRate)},
		{"invalid-action rate", pct(m.InvalidActionRate)},
		{"repeated-action rate", pct(m.RepeatedActionRate)},
		{"tool calls", fmt.Sprint(m.ToolCalls)},
		{"tokens", fmt.Sprint(m.Tokens)},
		{"cost", fmt.Sprintf("$%.4f", m.CostUSD)},
		{"p50 latency", fmt.Sprintf("%.1fms", m.P50Latency)},
	}
	fmt.Fprintln(tw, "\nmetric\tvalue")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed\n", r.Passed, r.Failed)
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
