package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := func(rev, mod string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: mod}}
	}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		rev  string
		mod  bool
		want Info
	}{
		{"nothing", nil, false, "", false, Info{GoVersion: runtime.Version()}},
		{"the script's revision only", nil, false, "0123abcd", true, Info{Revision: "0123abcd", Modified: true, GoVersion: runtime.Version()}},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}, true, "", false,
			Info{Version: "v1.2.3", GoVersion: "go1.26.0"}},
		{"Go's VCS data wins over the script's", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs("8aa96fd0", "false")},
			true, "ffff", true, Info{Version: "(devel)", Revision: "8aa96fd0", GoVersion: "go1.26.0"}},
		{"a changed checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs("8aa96fd0", "true")},
			true, "", false, Info{Version: "(devel)", Revision: "8aa96fd0", Modified: true, GoVersion: "go1.26.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := From(tt.bi, tt.ok, tt.rev, tt.mod); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
