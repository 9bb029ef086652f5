package layout

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Table streams (docs/design.md "Tables"): the partition template of a
// stream that is an Iceberg table must map to Iceberg partition
// transforms, and the paths it gives are parsed back into partition
// values. Both directions live here, next to the template itself.

// TableMetadataDir is the directory under a table stream that holds the
// table's metadata: <stream>/metadata/. No partition path may start with it.
const TableMetadataDir = "metadata"

// Partition transforms a table template can give.
const (
	TransformIdentity = "identity" // {field:F}
	TransformDay      = "day"      // {time:F:%Y-%m-%d}
	TransformHour     = "hour"     // {time:F:%H}, after a day of the same F
)

// TablePart is one partition field of a table stream: the transform of a
// record field, and where in the partition path its value is.
type TablePart struct {
	Transform string // TransformIdentity, TransformDay or TransformHour
	Field     string // the record field
	Segment   int    // index of the path segment that holds the value
	Prefix    string // literal text before the value in that segment
	Suffix    string // literal text after it
}

// TableTemplate is a compiled partition template of a table stream.
type TableTemplate struct {
	*Template
	Parts    []TablePart
	segments int
}

// CompileTableTemplate compiles src as the partition template of a table
// stream. Beyond CompileTemplate's rules, every placeholder must map to an
// Iceberg transform: {time:F:%Y-%m-%d} is day(F), {time:F:%H} is hour(F)
// (and needs day(F) before it: an hour alone is not one value per file),
// {field:F} is identity(F); {ingest:...} and other time formats are
// refused, and so is a segment with more than one placeholder. A template
// of literal text only is an unpartitioned table. The error is a
// *TemplateError naming the offending byte. The compiled template refuses,
// at Eval, a first path segment equal to TableMetadataDir.
func CompileTableTemplate(src string) (*TableTemplate, error) {
	t, err := CompileTemplate(src)
	if err != nil {
		return nil, err
	}
	fail := func(off int, format string, a ...any) (*TableTemplate, error) {
		return nil, &TemplateError{Template: src, Offset: off, Msg: fmt.Sprintf(format, a...)}
	}
	// The k-th placeholder piece starts at the k-th '{' of src: '{' is
	// never literal text.
	var offsets []int
	for i := 0; i < len(src); i++ {
		if src[i] == '{' {
			offsets = append(offsets, i)
		}
	}
	tt := &TableTemplate{Template: t}
	seg, k := -1, 0
	inSeg := 0 // placeholders in the current segment
	var lit strings.Builder
	for i, p := range t.pieces {
		if p.segStart {
			seg++
			inSeg = 0
			lit.Reset()
		}
		if p.kind == pieceLiteral {
			if inSeg == 0 {
				lit.WriteString(p.lit)
			} else {
				tt.Parts[len(tt.Parts)-1].Suffix += p.lit
			}
			if i == 0 && (i+1 == len(t.pieces) || t.pieces[i+1].segStart) && strings.EqualFold(p.lit, TableMetadataDir) {
				return fail(0, "the first path segment %q is where the table's metadata lives", p.lit)
			}
			continue
		}
		off := offsets[k]
		k++
		if inSeg++; inSeg > 1 {
			return fail(off, "a table stream takes one placeholder per path segment, so that each value can be read back from the path")
		}
		if p.kind == pieceIngest {
			return fail(off, "{ingest:...} is no record field: a table's partitions come from its columns ({time:F:%%Y-%%m-%%d}, {time:F:%%H} or {field:F})")
		}
		part := TablePart{Field: t.fields[p.field], Segment: seg, Prefix: lit.String()}
		switch p.kind {
		case pieceField:
			part.Transform = TransformIdentity
		case pieceTime:
			switch f := formatString(p.format); f {
			case "%Y-%m-%d":
				part.Transform = TransformDay
			case "%H":
				part.Transform = TransformHour
			default:
				return fail(off, "{time:%s:%s} has no Iceberg transform: a table takes %%Y-%%m-%%d (day) or %%H (hour)", part.Field, f)
			}
		}
		for _, q := range tt.Parts {
			if q.Field == part.Field && q.Transform == part.Transform {
				return fail(off, "%s(%s) appears twice", part.Transform, part.Field)
			}
		}
		if part.Transform == TransformHour && !tt.has(TransformDay, part.Field) {
			return fail(off, "hour(%s) needs {time:%s:%%Y-%%m-%%d} before it: an hour alone is not one value per file", part.Field, part.Field)
		}
		tt.Parts = append(tt.Parts, part)
	}
	tt.segments = seg + 1
	t.table = true
	return tt, nil
}

func (tt *TableTemplate) has(transform, field string) bool {
	for _, q := range tt.Parts {
		if q.Field == field && q.Transform == transform {
			return true
		}
	}
	return false
}

func formatString(f []verb) string {
	var b strings.Builder
	for _, v := range f {
		if v.isVerb {
			b.WriteByte('%')
		}
		b.WriteByte(v.c)
	}
	return b.String()
}

// checkTableFirst refuses a partition path whose first segment is the
// table's metadata directory (a {field:F} value "metadata").
func (t *Template) checkTableFirst(out []byte) error {
	first, _, _ := strings.Cut(string(out), "/")
	if !strings.EqualFold(first, TableMetadataDir) {
		return nil
	}
	for i, p := range t.pieces {
		if p.segStart && i > 0 {
			break
		}
		if p.kind == pieceField {
			return &PartitionError{Field: t.fields[p.field], Reason: fmt.Sprintf("the value %q would put files in the table's metadata directory", first)}
		}
	}
	return fmt.Errorf("partition segment %q is the table's metadata directory: %w", first, ErrInvalidPartition)
}

// Values reads the partition values back from a partition path that Eval
// gave (without the stream and the file name), one per part, in Parts'
// order: identity values unescaped as Eval wrote them, days as
// 2006-01-02, hours as 00..23.
func (tt *TableTemplate) Values(dir string) ([]string, error) {
	segs := strings.Split(dir, "/")
	if len(segs) != tt.segments {
		return nil, fmt.Errorf("partition path %q: %d segments, the template %q has %d", dir, len(segs), tt.src, tt.segments)
	}
	out := make([]string, len(tt.Parts))
	for i, p := range tt.Parts {
		s := segs[p.Segment]
		v, ok := strings.CutPrefix(s, p.Prefix)
		if ok {
			v, ok = strings.CutSuffix(v, p.Suffix)
		}
		if !ok || v == "" {
			return nil, fmt.Errorf("partition path %q: segment %q does not fit %q…%q", dir, s, p.Prefix, p.Suffix)
		}
		switch p.Transform {
		case TransformIdentity:
			u, err := UnescapeValue(v)
			if err != nil {
				return nil, fmt.Errorf("partition path %q: %w", dir, err)
			}
			v = u
		case TransformDay:
			if _, err := time.Parse(time.DateOnly, v); err != nil {
				return nil, fmt.Errorf("partition path %q: day %q: %w", dir, v, err)
			}
		case TransformHour:
			if h, err := strconv.Atoi(v); err != nil || h < 0 || h > 23 || len(v) != 2 {
				return nil, fmt.Errorf("partition path %q: hour %q is not 00..23", dir, v)
			}
		}
		out[i] = v
	}
	return out, nil
}

// UnescapeValue is appendSafe's inverse: %XX (upper-case hex) back to the
// byte, every other byte as is.
func UnescapeValue(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("value %q: %% without two hex digits", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("value %q: %% without two hex digits", s)
		}
		b = append(b, byte(n))
		i += 2
	}
	return string(b), nil
}

// Names under a table's metadata directory (the Hadoop-catalog layout
// that readers follow). Every one of them is a single element under
// <stream>/metadata/ that is not a part file's name.
const (
	tableHint    = "version-hint.text"
	tableMetaExt = ".metadata.json"
	tableAvroExt = ".avro"
)

// MaxTableVersion bounds a table metadata version read from the
// destination (a name, a version hint): no table sees 2^62 commits, and
// a version past it is not believed, so the next one never wraps.
const MaxTableVersion = 1 << 62

// TableMetadataName is the name of version v of stream's table metadata.
func TableMetadataName(stream string, v int64) string {
	return stream + "/" + TableMetadataDir + "/v" + strconv.FormatInt(v, 10) + tableMetaExt
}

// ParseTableMetadataName is TableMetadataName's inverse.
func ParseTableMetadataName(name string) (stream string, v int64, ok bool) {
	stream, rest, ok := strings.Cut(name, "/"+TableMetadataDir+"/v")
	if !ok || !Stream(stream) {
		return "", 0, false
	}
	num, ok := strings.CutSuffix(rest, tableMetaExt)
	if !ok || num == "" || num[0] == '0' {
		return "", 0, false
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 1 || v > MaxTableVersion {
		return "", 0, false
	}
	return stream, v, true
}

// TableHintName is the name of stream's version hint: the newest
// metadata version as decimal text.
func TableHintName(stream string) string {
	return stream + "/" + TableMetadataDir + "/" + tableHint
}

// TableManifestName is the name of the Avro manifest listing the files a
// node's checkpoint added to stream's table: one per (node, checkpoint),
// so a retried commit writes the same name.
func TableManifestName(stream, node string, checkpoint uint64) string {
	return TableManifestNameN(stream, node, checkpoint, 0)
}

// TableManifestNameN is the n-th name of that manifest: the next is
// taken when a name holds other content (a planted file: internal/table).
func TableManifestNameN(stream, node string, checkpoint uint64, n int) string {
	return fmt.Sprintf("%s/%s/eosink-%s-%020d-m%d%s", stream, TableMetadataDir, node, checkpoint, n, tableAvroExt)
}

// TableAvroName is the name of another Avro file of stream's table (a
// manifest list, a merged manifest): kind, the snapshot id and a unique
// token, since each try of a commit writes its own.
func TableAvroName(stream, kind string, snapshotID int64, token string) string {
	return fmt.Sprintf("%s/%s/%s-%d-%s%s", stream, TableMetadataDir, kind, snapshotID, token, tableAvroExt)
}

// IsTableMetadata reports whether name lies in a table's metadata
// directory: <stream>/metadata/<one element> that is no part file. Such
// files are the table's own, not committed data (verify, listings).
func IsTableMetadata(name string) bool {
	stream, rest, ok := strings.Cut(name, "/"+TableMetadataDir+"/")
	if !ok || !Stream(stream) || rest == "" || strings.Contains(rest, "/") {
		return false
	}
	if _, _, _, _, part := ParsePartName(rest); part {
		return false
	}
	return rest == tableHint || strings.HasSuffix(rest, tableMetaExt) || strings.HasSuffix(rest, tableAvroExt) || strings.HasSuffix(rest, ".lock")
}
