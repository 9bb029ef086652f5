package layout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCompileTableTemplate(t *testing.T) {
	for _, c := range []struct {
		src, parts, err string
		off             int
	}{
		{src: "dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}/r={field:region}", parts: "day(ts)@0 hour(ts)@1 identity(region)@2"},
		{src: "data", parts: ""},
		{src: "{field:k}-x", parts: "identity(k)@0"},
		{src: "dt={ingest:%Y-%m-%d}", err: "{ingest:...} is no record field", off: 3},
		{src: "m={time:ts:%Y-%m}", err: "has no Iceberg transform", off: 2},
		{src: "h={time:ts:%H}", err: "hour(ts) needs", off: 2},
		{src: "{field:a}-{field:b}", err: "one placeholder per path segment", off: 10},
		{src: "d={time:t:%Y-%m-%d}/e={time:t:%Y-%m-%d}", err: "day(t) appears twice", off: 22},
		{src: "metadata", err: "where the table's metadata lives", off: 0},
	} {
		tt, err := CompileTableTemplate(c.src)
		if c.err != "" {
			var te *TemplateError
			if !errors.As(err, &te) || !strings.Contains(te.Msg, c.err) || te.Offset != c.off {
				t.Errorf("%s: %v, want %q at byte %d", c.src, err, c.err, c.off)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		var got []string
		for _, p := range tt.Parts {
			got = append(got, p.Transform+"("+p.Field+")@"+string(rune('0'+p.Segment)))
		}
		if strings.Join(got, " ") != c.parts {
			t.Errorf("%s: parts %v, want %s", c.src, got, c.parts)
		}
	}
}

// TestTableValuesRoundTrip: what Eval writes, Values reads back.
func TestTableValuesRoundTrip(t *testing.T) {
	tt, err := CompileTableTemplate("dt={time:ts:%Y-%m-%d}/hour={time:ts:%H}/r={field:region}x")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := tt.Eval(time.Now(), []byte(`{"ts":"2026-11-29T09:10:00Z","region":"eu-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := tt.Values(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(vals, ",") != "2026-11-29,09,eu-1" {
		t.Fatalf("%s gives %v", dir, vals)
	}
	if _, err := tt.Values("dt=2026-11-29/hour=09"); err == nil {
		t.Fatal("a path of two segments parsed")
	}
}

// TestTableTemplateRefuses: a table's values never land in its metadata
// directory and never need %XX (readers take paths as URIs).
func TestTableTemplateRefuses(t *testing.T) {
	tt, err := CompileTableTemplate("{field:k}")
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []string{`{"k":"metadata"}`, `{"k":"METADATA"}`, `{"k":"a b"}`, `{"k":"_x"}`} {
		var pe *PartitionError
		if _, err := tt.Eval(time.Now(), []byte(rec)); !errors.As(err, &pe) || pe.Field != "k" {
			t.Errorf("%s: %v, want a partition error naming k", rec, err)
		}
	}
	if _, err := tt.Eval(time.Now(), []byte(`{"k":"meta"}`)); err != nil {
		t.Fatal(err)
	}
	// A plain stream may have a partition named metadata.
	plain, _ := CompileTemplate("{field:k}")
	if _, err := plain.Eval(time.Now(), []byte(`{"k":"metadata"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestTableNames(t *testing.T) {
	name := TableMetadataName("orders", 12)
	if s, v, ok := ParseTableMetadataName(name); !ok || s != "orders" || v != 12 {
		t.Fatalf("%s parses as %s %d %v", name, s, v, ok)
	}
	for _, bad := range []string{"orders/metadata/v0.metadata.json", "orders/metadata/v01.metadata.json", "orders/metadata/x.metadata.json", "_x/metadata/v1.metadata.json"} {
		if _, _, ok := ParseTableMetadataName(bad); ok {
			t.Errorf("%s parsed", bad)
		}
	}
	for name, want := range map[string]bool{
		TableHintName("o"):                  true,
		TableManifestName("o", "n1", 3):     true,
		TableAvroName("o", "snap", 5, "ab"): true,
		name:                                true,
		"o/metadata/part-n1-00000000000000000001-0000.parquet": false,
		"o/metadata/x/y.avro":     false,
		"o/dt=1/v1.metadata.json": false,
	} {
		if IsTableMetadata(name) != want {
			t.Errorf("IsTableMetadata(%s) = %v", name, !want)
		}
	}
}

// A table's value is refused for what it holds, and for a leading . or _
// only where it starts a path segment: the reason says which.
func TestTableValueReasons(t *testing.T) {
	for _, tc := range []struct {
		tmpl, rec string
		ok        bool
		reason    string
	}{
		{"{field:k}", `{"k":"_x"}`, false, "as it starts a path segment, not start with . or _"},
		{"{field:k}", `{"k":"a b"}`, false, "as it starts a path segment"},
		{"k={field:k}", `{"k":"a b"}`, false, "may hold only A-Z a-z 0-9 _ . -"},
		{"k={field:k}", `{"k":".x"}`, true, ""},
		{"k={field:k}", `{"k":"_x"}`, true, ""},
	} {
		tt, err := CompileTableTemplate(tc.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tt.Eval(time.Now(), []byte(tc.rec))
		var pe *PartitionError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %s: %v, want it taken", tc.tmpl, tc.rec, err)
		case !tc.ok && (!errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.reason)):
			t.Errorf("%s %s: %v, want a partition error saying %q", tc.tmpl, tc.rec, err, tc.reason)
		case !tc.ok && !strings.HasPrefix(tc.tmpl, "{") && strings.Contains(pe.Reason, "start with"):
			t.Errorf("%s %s: %q speaks of the start of a value that does not start a segment", tc.tmpl, tc.rec, pe.Reason)
		}
	}
}
