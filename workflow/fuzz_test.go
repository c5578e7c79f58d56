package workflow_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reins-run/reins/workflow"
)

// parseCodes are the codes Parse may report; everything else is the validator's.
var parseCodes = map[workflow.Code]bool{
	workflow.EParse:       true,
	workflow.EUnknownKey:  true,
	workflow.EType:        true,
	workflow.EUnknownType: true,
	workflow.EBadDuration: true,
}

// FuzzParse checks that any input gives a definition or problems, never a panic, and that every
// problem is complete: a code Parse owns, a message, the file, a line. A definition is validated
// too (the graph analyses of E_CYCLE and E_UNBOUND_REF included): no panic, every problem with
// a code and a message; a valid one derives the workflow of each of its agent tools.
func FuzzParse(f *testing.F) {
	if full, err := os.ReadFile(filepath.Join("testdata", "full.toml")); err == nil {
		f.Add(string(full))
	}
	for _, seed := range []string{
		"",
		"name = \"x\"\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\n",
		"[[steps]]\nid = \"a\"\ntype = \"llm\"\nhandler = \"x\"\noutput_schema = { type = \"object\" }\n",
		"[[steps]]\nid = \"fan\"\ntype = \"parallel\"\nbranches = [\"a\", { workflow = \"s.toml\" }, 3, {}]\n",
		"deadline = \"-1s\"\nmax_steps = \"x\"\nfoo = 1\n[[edges]]\nfrom = 1\n",
		"[tools.t]\nmock = [ { output = nan } ]\ninput_schema = { d = 1979-05-27, t = 07:32:00 }\n",
		"[[steps]]\ntype = \"agent\"\n[steps.budget]\nmax_cost_usd = inf\nmax_tokens = 1.5\n[steps.policy]\nallow = [1]\n",
		"steps = [ \"x\", [ [] ] ]\nmodels = { m = 1 }\n",
		"[models.m]\nprovider = \"scripted\"\nscript = [{ text = \"s\" }]\n[[steps]]\nid = \"a\"\ntype = \"agent\"\nmodel = \"m\"\ngoal = \"g\"\ninstructions = \"Be brief.\"\ncontext = { max_tokens = 3, strategy = \"summarize\", keep_last = -1, summarizer = \"ghost\" }\n",
		"[[steps]]\ntype = \"agent\"\n[steps.context]\nmax_tokens = 1e3\nstrategy = \"forget\"\nsummarizer = 1\nkeep = 2\n",
		"[[steps]]\nid = \"a\"\nid = \"b\"\n",
		"name = \n",
		"[models.a.b]\nprovider = \"x\"\n[[models.m.script]]\nreply = 1\n",
		"\"\" = 1\n[models.\"a.b\"]\n\"x y\" = 2\n",
		"start = \"s\"\n[[steps]]\nid = \"s\"\ntype = \"parallel\"\nbranches = [\"a\", \"b\"]\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\ninput = \"{{b.output ?? 1}} {{s.output}}\"\n[[steps]]\nid = \"b\"\ntype = \"task\"\nhandler = \"h\"\n[[steps]]\nid = \"j\"\ntype = \"switch\"\nexpr = \"{{a.output.x ?? \\\"y\\\"}}\"\n[[edges]]\nfrom = \"s\"\nto = \"j\"\n[[edges]]\nfrom = \"a\"\nto = \"j\"\nwhen = \"error\"\n[[edges]]\nfrom = \"j\"\nto = \"s\"\nmax_iterations = 2\n",
		tResearch,
		tTriggers,
		"[[triggers]]\nname = 1\nschedule = \"61 * * * *\"\ntimezone = \"../x\"\nsubject = \"$KV.>\"\ncatch_up = -1\noverlap = 3\n[[triggers]]\n",
		"name = \"c\"\nconcurrency = { key = \"{{input.customer_id}}-{{input.x ?? \\\"none\\\"}}\", limit = 2 }\n[[steps]]\nid = \"a\"\ntype = \"task\"\nhandler = \"h\"\n",
		"[concurrency]\nkey = \"{{a.output}}{{\"\nlimit = -1\nkeys = 1\n",
		"concurrency = 3\n",
		"name = \"r\"\n[tools.t]\nagent = \"a\"\nworkflow = \"w.toml\"\n[[steps]]\nid = \"a\"\ntype = \"agent\"\ntools = [\"t\"]\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		def, problems := workflow.Parse("fuzz.toml", []byte(src))
		if def == nil && len(problems) == 0 {
			t.Fatal("neither a definition nor problems")
		}
		if def == nil && !problems.Has(workflow.EParse) {
			t.Fatalf("nil definition without E_PARSE: %v", problems)
		}
		if def != nil {
			if problems.Has(workflow.EParse) {
				t.Fatalf("a definition and E_PARSE: %v", problems)
			}
			if def.Source == nil || def.Source.File != "fuzz.toml" {
				t.Fatalf("Source = %+v", def.Source)
			}
			if len(problems) == 0 {
				// A clean definition has a canonical form: its raw JSON is valid.
				if _, err := def.CanonicalJSON(); err != nil {
					t.Fatalf("CanonicalJSON of a clean definition: %v", err)
				}
			}
			vps := workflow.Validate(def, workflow.Options{})
			for _, p := range vps {
				if p.Code == "" || p.Message == "" {
					t.Fatalf("incomplete problem %+v from Validate", p)
				}
			}
			for _, a := range def.ToolAgents() {
				// A valid definition derives the workflow of each of its agent tools.
				if _, err := def.AgentDefinition(a); len(problems)+len(vps) == 0 && err != nil {
					t.Fatalf("AgentDefinition(%s) of a valid definition: %v", a, err)
				}
			}
		}
		for _, p := range problems {
			if !parseCodes[p.Code] || p.Message == "" || p.File != "fuzz.toml" || p.Line <= 0 {
				t.Fatalf("incomplete problem %+v in %v", p, problems)
			}
			if strings.Contains(p.Message, "internal error") {
				t.Fatalf("Parse panicked: %v", p)
			}
			if p.Code != workflow.EParse && p.Key == "" {
				t.Fatalf("problem without a key: %+v", p)
			}
		}
	})
}
