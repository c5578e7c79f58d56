// Package promtest reads what a Prometheus scrape returned, for the tests of metrics (`metrics`,
// `cmd/reins`): the text format parsed into families, and one sample's value by name and labels.
//
// It must not be imported by anything but tests, or import any reins package: it stands for the
// scraper the metrics are for.
package promtest

import (
	"fmt"
	"maps"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads a scrape in the text format.
func Parse(body string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("not the Prometheus text format: %w", err)
	}
	return fams, nil
}

// Value returns the value of the sample of name whose labels are exactly labels (name, value
// pairs, in any order): a counter's or gauge's value, a histogram's count; and whether there is
// one.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(got, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
