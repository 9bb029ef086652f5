package layout

import "testing"

// The one traversal guard: what the API's downloads and the UI's browser
// both refuse, escaped or not.
func TestCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"s1/dt=1/part-n1-00000000000000000001-0000.ndjson": true,
		"a": true, "a b/c%d": true,
		"": false, ".": false, "..": false, "a/../b": false, "a/./b": false, "/a": false, "a/": false,
		"a//b": false, `a\b`: false, "a\x00b": false, "a\x7fb": false, "a\nb": false, "\xc0\xae\xc0\xae/x": false,
		string(make([]byte, MaxPath+1)): false,
	} {
		if got := CleanPath(p); got != want {
			t.Errorf("CleanPath(%q) = %v, want %v", p, got, want)
		}
	}
	for p, want := range map[string]bool{"": true, "a": true, "a/": true, "a/b": true, "a/.": false, "../a": false, "/a": false, "a//b": false, `a\`: false} {
		if got := CleanPrefix(p); got != want {
			t.Errorf("CleanPrefix(%q) = %v, want %v", p, got, want)
		}
	}
	for p, want := range map[string]bool{"": true, "a/b%20c/": true, "a%2Fb": false, "%2e%2e/a": false, "a/%2E": false, "a%5Cb": false, "a%00": false, "a//b": false, "a%zz": false} {
		if _, got := SplitEscaped(p); got != want {
			t.Errorf("SplitEscaped(%q) = %v, want %v", p, got, want)
		}
	}
	if segs, _ := SplitEscaped("a/b%20c/"); len(segs) != 3 || segs[1] != "b c" || segs[2] != "" {
		t.Errorf("SplitEscaped: %q", segs)
	}
}

func TestParsePath(t *testing.T) {
	for p, want := range map[string]PathName{
		ManifestName("n1", 7):                        {Kind: ManifestPath, Node: "n1", Checkpoint: 7},
		"s1/dt=1/" + PartName("n-2", 9, 0, "ndjson"): {Kind: PartPath, Node: "n-2", Checkpoint: 9},
		LeaseName("n1"):                              {}, "_x/" + PartName("n1", 1, 0, "txt"): {}, "s1/a.txt": {},
	} {
		if got := ParsePath(p); got != want {
			t.Errorf("ParsePath(%q) = %+v, want %+v", p, got, want)
		}
	}
}
