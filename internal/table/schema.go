package table

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
)

// IcebergSchema maps a stream schema to an Iceberg schema with the given
// id. Field ids are positions from 1, as internal/format writes them into
// the Parquet files; since a table's schema only grows at the end
// (streamconf.CheckChange), a field keeps its id for good.
//
//	string → string, int64 → long, double → double, bool → boolean,
//	timestamp → timestamptz (microseconds, UTC), json → string (its JSON text)
func IcebergSchema(s *streamconf.Schema, id int) (*iceberg.Schema, error) {
	if s == nil || len(s.Fields) == 0 {
		return nil, fmt.Errorf("%w: a table needs a schema", ErrIncompatible)
	}
	fields := make([]iceberg.NestedField, len(s.Fields))
	for i, f := range s.Fields {
		var t iceberg.Type
		switch f.Type {
		case streamconf.TypeString, streamconf.TypeJSON:
			t = iceberg.PrimitiveTypes.String
		case streamconf.TypeInt64:
			t = iceberg.PrimitiveTypes.Int64
		case streamconf.TypeDouble:
			t = iceberg.PrimitiveTypes.Float64
		case streamconf.TypeBool:
			t = iceberg.PrimitiveTypes.Bool
		case streamconf.TypeTimestamp:
			t = iceberg.PrimitiveTypes.TimestampTz
		default:
			return nil, fmt.Errorf("%w: field %q of type %q", ErrIncompatible, f.Name, f.Type)
		}
		fields[i] = iceberg.NestedField{ID: i + 1, Name: f.Name, Type: t, Required: f.Required}
	}
	return iceberg.NewSchema(id, fields...), nil
}

// partitionFieldStart is the first partition field id (the spec's).
const partitionFieldStart = 1000

// specParts returns the template's parts that are partition fields: all
// but a day(F) that an hour(F) follows (Iceberg calls the pair redundant:
// the hour holds the day).
func specParts(tt *layout.TableTemplate) []int {
	var out []int
	for i, p := range tt.Parts {
		if p.Transform == layout.TransformDay && hasPart(tt, layout.TransformHour, p.Field) {
			continue
		}
		out = append(out, i)
	}
	return out
}

func hasPart(tt *layout.TableTemplate, transform, field string) bool {
	for _, p := range tt.Parts {
		if p.Transform == transform && p.Field == field {
			return true
		}
	}
	return false
}

// PartitionSpec maps a table stream's partition template to an Iceberg
// partition spec: day(F), hour(F) and identity(F) of the schema's columns,
// in the template's order, with field ids from 1000. A day followed by
// an hour of the same column is one field, hour(F).
func PartitionSpec(tt *layout.TableTemplate, s *streamconf.Schema) (iceberg.PartitionSpec, error) {
	parts := specParts(tt)
	fields := make([]iceberg.PartitionField, len(parts))
	for i, pi := range parts {
		p := tt.Parts[pi]
		src := schemaIndex(s, p.Field)
		if src < 0 {
			return iceberg.PartitionSpec{}, fmt.Errorf("%w: partition field %q is not in the schema", ErrIncompatible, p.Field)
		}
		pf := iceberg.PartitionField{SourceIDs: []int{src + 1}, FieldID: partitionFieldStart + i}
		switch p.Transform {
		case layout.TransformIdentity:
			pf.Name, pf.Transform = p.Field, iceberg.IdentityTransform{}
		case layout.TransformDay:
			pf.Name, pf.Transform = p.Field+"_day", iceberg.DayTransform{}
		case layout.TransformHour:
			pf.Name, pf.Transform = p.Field+"_hour", iceberg.HourTransform{}
		}
		fields[i] = pf
	}
	return iceberg.NewPartitionSpec(fields...), nil
}

func schemaIndex(s *streamconf.Schema, name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// partitionData reads a committed file's partition values back from its
// name (<stream>/<partition path>/<part file>), keyed by partition field
// id, as Iceberg's manifests hold them: days since the epoch (date),
// hours since the epoch (int), identity values as string or long.
func partitionData(tt *layout.TableTemplate, s *streamconf.Schema, stream, final string) (data map[int]any, types map[int]string, err error) {
	if len(tt.Parts) == 0 {
		return nil, nil, nil
	}
	dir, ok := strings.CutPrefix(path.Dir(final), stream+"/")
	if !ok {
		return nil, nil, fmt.Errorf("%w: file %s is not under its stream %s", ErrIncompatible, final, stream)
	}
	vals, err := tt.Values(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrIncompatible, err)
	}
	data, types = make(map[int]any, len(vals)), map[int]string{}
	days := map[string]int32{} // field → its day, for its hour
	for i, p := range tt.Parts {
		if p.Transform == layout.TransformDay {
			d, _ := time.Parse(time.DateOnly, vals[i]) // checked by Values
			days[p.Field] = int32(d.Unix() / 86400)
		}
	}
	for k, i := range specParts(tt) {
		p, id := tt.Parts[i], partitionFieldStart+k
		switch p.Transform {
		case layout.TransformDay:
			data[id], types[id] = iceberg.Date(days[p.Field]), "date"
		case layout.TransformHour:
			h, _ := strconv.Atoi(vals[i]) // checked by Values
			data[id] = days[p.Field]*24 + int32(h)
		case layout.TransformIdentity:
			if f := s.Fields[schemaIndex(s, p.Field)]; f.Type == streamconf.TypeInt64 {
				n, err := strconv.ParseInt(vals[i], 10, 64)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: file %s: %s=%q is not an int64", ErrIncompatible, final, p.Field, vals[i])
				}
				data[id] = n
			} else {
				data[id] = vals[i]
			}
		}
	}
	return data, types, nil
}
