package layout

import (
	"regexp"
	"strings"
	"testing"
)

func TestAgainstDesignRegexps(t *testing.T) {
	streamRE := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
	producerRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	cases := []string{"", "a", "clicks", "a.b-c_d", "..", "a..b", "A", "-a", "_a", "a/b", "a:b", "p:1.x", "é",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a\x00", " a", "a "}
	for _, c := range cases {
		if got, want := Stream(c), streamRE.MatchString(c) && !strings.Contains(c, ".."); got != want {
			t.Errorf("Stream(%q) = %v, want %v", c, got, want)
		}
		if got, want := Producer(c), producerRE.MatchString(c); got != want {
			t.Errorf("Producer(%q) = %v, want %v", c, got, want)
		}
	}
}

func FuzzNames(f *testing.F) {
	streamRE := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
	producerRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	f.Add("clicks")
	f.Add("p:1")
	f.Fuzz(func(t *testing.T, s string) {
		if Stream(s) != (streamRE.MatchString(s) && !strings.Contains(s, "..")) {
			t.Fatalf("Stream(%q)", s)
		}
		if Producer(s) != producerRE.MatchString(s) {
			t.Fatalf("Producer(%q)", s)
		}
	})
}

func TestPartNameRoundTrip(t *testing.T) {
	cases := []struct {
		node string
		id   uint64
		idx  int
		ext  string
	}{
		{"n1", 1, 0, "ndjson"},
		{"e2e", 18446744073709551615, 9999, "ndjson.gz"},
		{"a.b_c", 42, 12345, "txt.zst"},
		{"x", 7, 3, "parquet"},
	}
	for _, c := range cases {
		base := PartName(c.node, c.id, c.idx, c.ext)
		node, id, idx, ext, ok := ParsePartName(base)
		if !ok || node != c.node || id != c.id || idx != c.idx || ext != c.ext {
			t.Errorf("ParsePartName(%q) = %q %d %d %q %v, want %+v", base, node, id, idx, ext, ok, c)
		}
	}
}

func TestParsePartNameRejects(t *testing.T) {
	for _, base := range []string{
		"", "part-", "part-n1", "part--00000000000000000001-0000.ndjson",
		"part-n1-1-0000.ndjson", "part-n1-00000000000000000001-000.ndjson",
		"part-n1-00000000000000000001-0000", "part-n1-00000000000000000001-0000.",
		"xpart-n1-00000000000000000001-0000.ndjson", "part-n1-00000000000000000001-0000.ndjson.inprogress/x",
		"part-n1-99999999999999999999-0000.ndjson", // beyond uint64
		"00000000000000000001.json",
	} {
		if node, _, _, _, ok := ParsePartName(base); ok {
			t.Errorf("ParsePartName(%q) accepted, node %q", base, node)
		}
	}
}

func TestManifestNameRoundTrip(t *testing.T) {
	for _, c := range []struct {
		node string
		id   uint64
	}{{"n1", 1}, {"e2e", MaxCheckpoint}, {"a.b", 0}} {
		name := ManifestName(c.node, c.id)
		node, id, ok := ParseManifestName(name)
		if !ok || node != c.node || id != c.id {
			t.Errorf("ParseManifestName(%q) = %q %d %v, want %+v", name, node, id, ok, c)
		}
	}
	for _, name := range []string{"", "_manifests/", "_manifests/n1/", "_manifests/n1/1.json",
		"_manifests//00000000000000000001.json", "_manifests/n1/0000000000000000000x.json",
		"_manifests/n1/00000000000000000001.json.tmp", "_manifests/n1/sub/00000000000000000001.json",
		"x/_manifests/n1/00000000000000000001.json", "_manifests/n1/99999999999999999999.json",
		"_manifests/n1/18446744073709551615.json", // beyond MaxCheckpoint: planted ids must not wrap
		"_manifests/-x/00000000000000000001.json", // not a node id
	} {
		if node, _, ok := ParseManifestName(name); ok {
			t.Errorf("ParseManifestName(%q) accepted, node %q", name, node)
		}
	}
}

func TestDisplacedNameRoundTrip(t *testing.T) {
	final := "clicks/dt=2026-12-02/region=eu/" + PartName("n1", 7, 3, "ndjson")
	got := DisplacedName(final)
	if want := "clicks/_displaced/" + PartName("n1", 7, 3, "ndjson"); got != want {
		t.Fatalf("DisplacedName = %q, want %q", got, want)
	}
	stream, part, ok := ParseDisplacedName(got)
	if !ok || stream != "clicks" || part != PartName("n1", 7, 3, "ndjson") {
		t.Fatalf("ParseDisplacedName(%q) = %q %q %v", got, stream, part, ok)
	}
	for _, bad := range []string{"clicks/" + PartName("n1", 7, 3, "ndjson"), "clicks/_displaced/x/" + PartName("n1", 7, 3, "ndjson"), "clicks/_displaced/notapart", "/_displaced/" + PartName("n1", 7, 3, "ndjson")} {
		if _, _, ok := ParseDisplacedName(bad); ok {
			t.Errorf("ParseDisplacedName(%q) ok", bad)
		}
	}
}

func TestReservedElem(t *testing.T) {
	for elem, want := range map[string]bool{
		PartName("n1", 7, 0, "ndjson"):              true,
		PartName("eosink-0", 1<<40, 12345, "txt"):   true,
		"Part-N1-00000000000000000007-0000.Parquet": true,
		"a.inprogress":          true,
		"_displaced":            true,
		"_Displaced":            true,
		"_displaced2":           false,
		"a.enc.INPROGRESS":      true,
		"part-a":                false,
		"part-n1-7-0000.ndjson": false,
		"parts":                 false,
		"x.inprogres":           false,
		"dt=2026-11-29":         false,
		"inprogress":            false,
	} {
		if got := ReservedElem(elem); got != want {
			t.Errorf("ReservedElem(%q) = %v, want %v", elem, got, want)
		}
	}
}

func TestQuarantineNameRoundTrip(t *testing.T) {
	part := PartName("n1", 7, 2, "ndjson")
	final := "clicks/dt=2026-11-29/hour=09/" + part
	got := QuarantineName("n1", final)
	if want := "_quarantine/n1/clicks/" + part; got != want {
		t.Fatalf("QuarantineName = %q, want %q", got, want)
	}
	node, stream, back, ok := ParseQuarantineName(got)
	if !ok || node != "n1" || stream != "clicks" || back != part {
		t.Fatalf("ParseQuarantineName(%q) = %q %q %q %v", got, node, stream, back, ok)
	}
	for _, bad := range []string{
		"_quarantine/n1/" + part,                      // no stream folder
		"_quarantine/n2/clicks/" + part,               // another node's part
		"_quarantine/n1/clicks/x.ndjson",              // not a part name
		"_quarantine/n1/clicks/dt=2026-11-29/" + part, // a partition path
		"_quarantine/n1/_x/" + part,                   // not a stream name
		"_quarantine/../clicks/" + part,
		final,
	} {
		if _, _, _, ok := ParseQuarantineName(bad); ok {
			t.Errorf("ParseQuarantineName(%q) ok", bad)
		}
	}
}
