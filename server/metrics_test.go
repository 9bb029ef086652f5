package server

import (
	"fmt"
	"github.com/eosink/eosink/internal/buildinfo"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eosink/eosink/recovery"
	"github.com/prometheus/client_golang/prometheus"
)

// series gathers reg into "name{label="value",...}" → value, for counters
// and gauges, labels in the exposition's order.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			out[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

// TestMetricsStartAtZero: before anything happens, every checkpoint state
// and every rejection reason is a series at 0 (so alerts see 0, not "no
// data"), and eosink_build_info is 1; events count on from there.
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewMetrics(reg, nil).Hooks()
	l := buildLabels(buildinfo.Read())
	if l["goversion"] != runtime.Version() {
		t.Errorf("goversion label %q, want %q", l["goversion"], runtime.Version())
	}
	want := map[string]float64{
		`eosink_checkpoints_total{state="committed"}`: 0,
		`eosink_checkpoints_total{state="aborted"}`:   0,
		fmt.Sprintf(`eosink_build_info{goversion=%q,revision=%q,version=%q}`, l["goversion"], l["revision"], l["version"]): 1,
	}
	for _, r := range rejectReasons() {
		want[fmt.Sprintf(`eosink_batches_rejected_total{reason=%q}`, r)] = 0
	}
	check := func(when string) {
		t.Helper()
		got := series(t, reg)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present: %v), want %v", when, k, g, ok, v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && (strings.HasPrefix(k, "eosink_checkpoints_total") || strings.HasPrefix(k, "eosink_batches_rejected_total") || strings.HasPrefix(k, "eosink_build_info")) {
				t.Errorf("%s: unexpected series %s", when, k)
			}
		}
	}
	check("before any event")
	h.Rejected("producer_fenced")
	h.Checkpoint(CheckpointResult{State: recovery.Aborted})
	want[`eosink_batches_rejected_total{reason="producer_fenced"}`] = 1
	want[`eosink_checkpoints_total{state="aborted"}`] = 1
	check("after a fenced write and an aborted checkpoint")
}

// TestRejectReasonsComplete keeps rejectReasons equal to the reasons the
// engine passes to e.reject, read from the package's source: a new reason
// must start at 0 too.
func TestRejectReasonsComplete(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var used []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "reject" || len(call.Args) != 1 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: reject with a reason that is not a string literal: the metrics can't start it at 0", fset.Position(call.Pos()))
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			used = append(used, v)
			return true
		})
	}
	slices.Sort(used)
	used = slices.Compact(used)
	want := slices.Sorted(slices.Values(rejectReasons()))
	if len(used) == 0 {
		t.Fatal("found no e.reject call in the package")
	}
	if !slices.Equal(used, want) {
		t.Errorf("the engine rejects with %v; rejectReasons() is %v", used, want)
	}
}

func TestBuildLabels(t *testing.T) {
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want prometheus.Labels
	}{
		{"no build info", nil, false, prometheus.Labels{"version": "unknown", "revision": "unknown", "goversion": runtime.Version()}},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}},
			true, prometheus.Labels{"version": "v1.2.3", "revision": "unknown", "goversion": "go1.26.0"}},
		{"built in a clean checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "8aa96fd0"}, {Key: "vcs.modified", Value: "false"}}},
			true, prometheus.Labels{"version": "(devel)", "revision": "8aa96fd0", "goversion": "go1.26.0"}},
		{"built in a changed checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "8aa96fd0"}}},
			true, prometheus.Labels{"version": "(devel)", "revision": "8aa96fd0-dirty", "goversion": "go1.26.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := buildLabels(buildinfo.From(tt.bi, tt.ok, "", false))
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
