package bench

import (
	"fmt"
	"strings"

	"github.com/reins-run/reins/workflow"
)

// GenerateWorkflow writes an n-step workflow file: a chain of task, llm, agent_loop and switch
// steps (every tenth a switch with two labelled edges, every 25th step the target of a loop edge
// from 5 steps later), so that loading and validation meet every kind of key and edge.
func GenerateWorkflow(n int) []byte {
	var b strings.Builder
	b.WriteString("name = \"generated\"\ndeadline = \"1h\"\nstart = \"s0\"\n\n")
	b.WriteString("[models.writer]\nprovider = \"scripted\"\nscript = [ { text = \"ok\" } ]\n\n")
	for i := range n {
		fmt.Fprintf(&b, "[[steps]]\nid = \"s%d\"\n", i)
		switch {
		case i%10 == 9:
			fmt.Fprintf(&b, "type = \"switch\"\nexpr = \"s%d.output.label\"\n", i-1)
		case i%10 == 3:
			fmt.Fprintf(&b, "type = \"llm\"\nmodel = \"writer\"\nprompt = \"Improve: {{s%d.output.text}}\"\ntimeout = \"30s\"\n", i-1)
		case i%10 == 6:
			b.WriteString("type = \"agent_loop\"\nhandler = \"loop\"\nmax_iterations = 5\nmax_duration = \"1m\"\nloop_delay = \"100ms\"\n")
		default:
			b.WriteString("type = \"task\"\nhandler = \"work\"\nretry = { max_attempts = 3, backoff = \"exponential\", initial_delay = \"1s\", max_delay = \"30s\" }\n")
		}
		b.WriteString("\n")
	}
	for i := 0; i+1 < n; i++ {
		if i%10 == 9 {
			fmt.Fprintf(&b, "[[edges]]\nfrom = \"s%d\"\nto = \"s%d\"\nwhen = \"yes\"\n\n[[edges]]\nfrom = \"s%d\"\nto = \"s%d\"\nwhen = \"no\"\n\n", i, i+1, i, i+1)
			continue
		}
		fmt.Fprintf(&b, "[[edges]]\nfrom = \"s%d\"\nto = \"s%d\"\n\n", i, i+1)
		if i%25 == 5 && i >= 5 {
			fmt.Fprintf(&b, "[[edges]]\nfrom = \"s%d\"\nto = \"s%d\"\nwhen = \"retry\"\nmax_iterations = 3\n\n", i, i-5)
		}
	}
	return []byte(b.String())
}

// LoadValidate measures parsing and validating a generated workflow of n steps.
func LoadValidate(n int) func(B) {
	return func(b B) {
		data := GenerateWorkflow(n)
		if _, problems := parseAndValidate(data); len(problems) > 0 {
			b.Fatalf("the generated %d-step workflow is invalid: %v", n, problems[0])
		}
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.Loops() {
			if _, problems := parseAndValidate(data); len(problems) > 0 {
				b.Fatal(problems)
			}
		}
	}
}

func parseAndValidate(data []byte) (*workflow.Definition, workflow.Problems) {
	d, problems := workflow.Parse("generated.toml", data)
	if len(problems) > 0 {
		return nil, problems
	}
	return d, workflow.Validate(d, workflow.Options{})
}
