package layout

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eosink/eosink/committer"
)

var nodeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func TestNode(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"n1", true}, {"eosink-0", true}, {"a.b_c-d", true}, {"E2E", true}, {strings.Repeat("a", 64), true},
		{"", false}, {"-a", false}, {"_a", false}, {".", false}, {"..", false}, {"a/b", false}, {"a:b", false},
		{"a b", false}, {"é", false}, {strings.Repeat("a", 65), false},
	} {
		if got := Node(c.s); got != c.want || got != nodeRE.MatchString(c.s) {
			t.Errorf("Node(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}

func TestSanitizeNode(t *testing.T) {
	for host, want := range map[string]string{
		"eosink-0":              "eosink-0",
		"web1.example.com":      "web1.example.com",
		"-._x":                  "x",
		"":                      "node",
		"---":                   "node",
		"host name:1":           "host_name_1",
		strings.Repeat("h", 70): strings.Repeat("h", 64),
		"ünï":                   "n__", // each non-ASCII byte becomes '_'; leading ones are dropped
	} {
		got := SanitizeNode(host)
		if got != want {
			t.Errorf("SanitizeNode(%q) = %q, want %q", host, got, want)
		}
		if !Node(got) {
			t.Errorf("SanitizeNode(%q) = %q, not a node id", host, got)
		}
	}
}

func TestStagingAndLeaseNames(t *testing.T) {
	name := StagingName("eosink-0", "clicks/dt=2026-11-29/hour=09/part-eosink-0-00000000000000000001-0000.ndjson")
	if want := "_staging/eosink-0/clicks/dt=2026-11-29/hour=09/part-eosink-0-00000000000000000001-0000.ndjson"; name != want {
		t.Fatalf("StagingName = %q, want %q", name, want)
	}
	node, final, ok := ParseStagingName(name)
	if !ok || node != "eosink-0" || final != "clicks/dt=2026-11-29/hour=09/part-eosink-0-00000000000000000001-0000.ndjson" {
		t.Fatalf("ParseStagingName(%q) = %q %q %v", name, node, final, ok)
	}
	for _, bad := range []string{"", "_staging/", "_staging/n1", "_staging/n1/", "_staging//x", "x/_staging/n1/x", "_stagingx/n1/x"} {
		if _, _, ok := ParseStagingName(bad); ok {
			t.Errorf("ParseStagingName(%q) accepted", bad)
		}
	}
	if got := LeaseName("eosink-0"); got != "_nodes/eosink-0.json" {
		t.Fatalf("LeaseName = %q", got)
	}
	if n, ok := ParseLeaseName("_nodes/eosink-0.json"); !ok || n != "eosink-0" {
		t.Fatalf("ParseLeaseName = %q %v", n, ok)
	}
	for _, bad := range []string{"", "_nodes/.json", "_nodes/a/b.json", "_nodes/a.jsonx", "nodes/a.json"} {
		if _, ok := ParseLeaseName(bad); ok {
			t.Errorf("ParseLeaseName(%q) accepted", bad)
		}
	}
	if got := StreamConfName("clicks"); got != "_streams/clicks.json" {
		t.Fatalf("StreamConfName = %q", got)
	}
	if s, ok := ParseStreamConfName("_streams/clicks.json"); !ok || s != "clicks" {
		t.Fatalf("ParseStreamConfName = %q %v", s, ok)
	}
	for _, bad := range []string{"", "_streams/.json", "_streams/a/b.json", "_streams/a.jsonx", "streams/a.json", "_streams/_x.json", "_streams/A.json", "_streams/a..b.json"} {
		if _, ok := ParseStreamConfName(bad); ok {
			t.Errorf("ParseStreamConfName(%q) accepted", bad)
		}
	}
	if got := TempName("/data/staging", "part-n1-00000000000000000001-0000.ndjson"); got != "/data/staging/part-n1-00000000000000000001-0000.ndjson.inprogress" || !IsTempName(got) {
		t.Fatalf("TempName = %q", got)
	}
}

// goldenManifest is the document behind testdata/manifest-golden.json,
// whose bytes were written by recovery.BuildManifest before the manifest
// moved here: existing manifests must decode, and a re-commit after a
// crash compares bytes, so encoding must give them back exactly.
func goldenManifest() *Manifest {
	at := time.Date(2026, 11, 29, 9, 30, 1, 123456789, time.FixedZone("x", 3600))
	return NewManifest("eosink-0", 42, at, []committer.File{
		{Final: "clicks/dt=2026-11-29/hour=08/part-eosink-0-00000000000000000042-0000.ndjson", Stream: "clicks", Bytes: 120, Records: 3,
			CRC32C: "0a1b2c3d", Producers: map[string]committer.SeqRanges{"p-2": {{5, 5}}, "p:1": {{0, 3}, {7, 9}}}},
		{Final: "logs/part-eosink-0-00000000000000000042-0001.txt.gz", Stream: "logs", CRC32C: "00000000"},
	})
}

func TestManifestGolden(t *testing.T) {
	want, err := os.ReadFile("testdata/manifest-golden.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeManifest(goldenManifest())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeManifest changed the bytes:\n%s\nwant\n%s", got, want)
	}
	m, err := DecodeManifest(ManifestName("eosink-0", 42), bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, goldenManifest()) {
		t.Fatalf("DecodeManifest = %+v, want %+v", m, goldenManifest())
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	good, err := EncodeManifest(goldenManifest())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ at, body string }{
		"not JSON":                      {ManifestName("eosink-0", 42), "{"},
		"other node":                    {ManifestName("n2", 42), string(good)},
		"other id":                      {ManifestName("eosink-0", 43), string(good)},
		"wrong seqs":                    {ManifestName("n", 1), `{"checkpoint":1,"node":"n","files":[{"producers":{"p":"x"}}]}`},
		"not a manifest":                {"clicks/x.json", string(good)},
		"id beyond MaxCheckpoint":       {ManifestName("n", 1<<64-1), `{"checkpoint":18446744073709551615,"node":"n","files":[]}`},
		"another node's file":           {ManifestName("n", 1), manifestOf(`{"path":"a/part-m-00000000000000000001-0000.ndjson","stream":"a"}`)},
		"another checkpoint's file":     {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000002-0000.ndjson","stream":"a"}`)},
		"outside its stream":            {ManifestName("n", 1), manifestOf(`{"path":"b/part-n-00000000000000000001-0000.ndjson","stream":"a"}`)},
		"dot dot":                       {ManifestName("n", 1), manifestOf(`{"path":"a/../part-n-00000000000000000001-0000.ndjson","stream":"a"}`)},
		"negative bytes":                {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","bytes":-1}`)},
		"bad producer":                  {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"-p":[[0,1]]}}`)},
		"reversed range":                {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[5,4]]}}`)},
		"overlapping ranges":            {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[0,4],[4,6]]}}`)},
		"seq near 2^63":                 {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[0,9223372036854775807]]}}`)},
		"negative seq":                  {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[-2,-1]]}}`)},
		"epoch below its incarnation":   {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[0,1]]},"epochs":{"p":{"epoch":1,"incarnation":2}}}`)},
		"epoch without ranges":          {ManifestName("n", 1), manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[[0,1]]},"epochs":{"q":{"epoch":1,"incarnation":0}}}`)},
		"displaced from another part":   {ManifestName("n", 1), manifestOf(`{"path":"a/_displaced/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"a/d=1/part-n-00000000000000000001-0001.ndjson"}`)},
		"displaced from another stream": {ManifestName("n", 1), manifestOf(`{"path":"a/_displaced/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"b/d=1/part-n-00000000000000000001-0000.ndjson"}`)},
		"displaced from dot dot":        {ManifestName("n", 1), manifestOf(`{"path":"a/_displaced/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"a/../d/part-n-00000000000000000001-0000.ndjson"}`)},
		"displaced from displaced":      {ManifestName("n", 1), manifestOf(`{"path":"a/_displaced/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"a/_displaced/part-n-00000000000000000001-0000.ndjson"}`)},
		"not displaced":                 {ManifestName("n", 1), manifestOf(`{"path":"a/d=1/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"a/d=1/part-n-00000000000000000001-0000.ndjson"}`)},
	} {
		_, err := DecodeManifest(c.at, strings.NewReader(c.body))
		if !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v, want ErrBadManifest", name, err)
		}
	}
	// The older one-pair form of producer ranges still decodes, and a
	// manifest without epochs (written before they were kept).
	m, err := DecodeManifest(ManifestName("n", 1), strings.NewReader(manifestOf(`{"path":"a/part-n-00000000000000000001-0000.ndjson","stream":"a","producers":{"p":[3,4]}}`)))
	if err != nil || !reflect.DeepEqual(m.Files[0].Producers["p"], committer.SeqRanges{{3, 4}}) {
		t.Fatalf("one-pair form: %+v, %v", m, err)
	}
	// A displaced file names the name it was prepared with.
	m, err = DecodeManifest(ManifestName("n", 1), strings.NewReader(manifestOf(`{"path":"a/_displaced/part-n-00000000000000000001-0000.ndjson","stream":"a","displaced_from":"a/d=1/part-n-00000000000000000001-0000.ndjson"}`)))
	if err != nil || m.Files[0].DisplacedFrom != "a/d=1/part-n-00000000000000000001-0000.ndjson" {
		t.Fatalf("displaced file: %+v, %v", m, err)
	}
}

// manifestOf returns checkpoint 1 of node n with one file, as JSON.
func manifestOf(file string) string {
	return `{"checkpoint":1,"node":"n","files":[` + file + `]}`
}

// extRE is what a part name's extension may be (ParsePartName).
var extRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.]*$`)

// FuzzPartName: for every node id, checkpoint, index and extension a part
// can have, ParsePartName(PartName(...)) gives them back.
func FuzzPartName(f *testing.F) {
	f.Add("n1", uint64(1), 0, "ndjson")
	f.Add("eosink-0", uint64(18446744073709551615), 999999999, "ndjson.gz")
	f.Add("a-00000000000000000001-0001.b", uint64(2), 3, "txt.zst")
	f.Add("n-1.x", uint64(7), 12, "parquet")
	f.Fuzz(func(t *testing.T, node string, id uint64, idx int, ext string) {
		if !Node(node) || idx < 0 || idx > 999999999 || !extRE.MatchString(ext) {
			return
		}
		base := PartName(node, id, idx, ext)
		n, gotID, gotIdx, gotExt, ok := ParsePartName(base)
		if !ok || n != node || gotID != id || gotIdx != idx || gotExt != ext {
			t.Fatalf("ParsePartName(%q) = %q %d %d %q %v, want %q %d %d %q", base, n, gotID, gotIdx, gotExt, ok, node, id, idx, ext)
		}
	})
}

// FuzzManifestName: ManifestName then ParseManifestName gives the input
// back, and a name ParseManifestName accepts is the one ManifestName makes.
func FuzzManifestName(f *testing.F) {
	f.Add("n1", uint64(1), "_manifests/n1/00000000000000000001.json")
	f.Add("eosink-0", uint64(18446744073709551615), "_manifests/x/1.json")
	f.Fuzz(func(t *testing.T, node string, id uint64, name string) {
		if Node(node) {
			got := ManifestName(node, id)
			n, gotID, ok := ParseManifestName(got)
			if id > MaxCheckpoint {
				if ok {
					t.Fatalf("ParseManifestName(%q) accepts an id beyond MaxCheckpoint", got)
				}
			} else if !ok || n != node || gotID != id {
				t.Fatalf("ParseManifestName(%q) = %q %d %v", got, n, gotID, ok)
			}
		}
		if n, gotID, ok := ParseManifestName(name); ok && ManifestName(n, gotID) != name {
			t.Fatalf("ParseManifestName(%q) = %q %d, which names %q", name, n, gotID, ManifestName(n, gotID))
		}
	})
}

// FuzzManifest: a manifest encodes, decodes at its own name to the same
// document, and encodes again to the same bytes.
func FuzzManifest(f *testing.F) {
	f.Add("eosink-0", uint64(42), int64(1796000000), "clicks/dt=2026-11-29/part-eosink-0-00000000000000000042-0000.ndjson", "clicks", int64(120), int64(3), "0a1b2c3d", "p:1", int64(0), int64(9))
	f.Add("eosink-0", uint64(42), int64(1796000000), "clicks/part-x", "clicks", int64(120), int64(3), "0a1b2c3d", "p:1", int64(0), int64(9))
	f.Add("n1", uint64(0), int64(0), "", "", int64(0), int64(0), "", "", int64(-1), int64(-2))
	f.Fuzz(func(t *testing.T, node string, id uint64, sec int64, path, stream string, size, records int64, crc, producer string, first, last int64) {
		// Node ids and the names in a manifest are ASCII or UTF-8 (stream
		// names, producer ids, partition values made path-safe).
		if !Node(node) || !utf8.ValidString(path) || !utf8.ValidString(stream) || !utf8.ValidString(crc) || !utf8.ValidString(producer) {
			return
		}
		at := time.Unix(sec%253402300800, 0)
		files := []committer.File{{Final: path, Stream: stream, Bytes: size, Records: records, CRC32C: crc}}
		if producer != "" {
			files[0].Producers = map[string]committer.SeqRanges{producer: {{first, last}}}
		}
		m := NewManifest(node, id, at, files)
		b, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeManifest(ManifestName(node, id), bytes.NewReader(b))
		if cerr := CheckManifest(m.Name(), m); cerr != nil {
			// Not what eosink writes: refused, whatever else it holds.
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("decode of a manifest CheckManifest refuses (%v): %v, want ErrBadManifest", cerr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		b2, err := EncodeManifest(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("re-encoded differently:\n%s\n%s", b, b2)
		}
		if got.Node != node || got.Checkpoint != id || !got.CommittedAt.Equal(at) || got.Files[0].Bytes != size || got.Files[0].Records != records {
			t.Fatalf("decoded %+v from %+v", got, m)
		}
	})
}
