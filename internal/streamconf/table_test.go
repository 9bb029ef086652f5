package streamconf

import (
	"errors"
	"testing"
)

var tableSchema = &Schema{Fields: []Field{
	{Name: "id", Type: TypeInt64, Required: true},
	{Name: "region", Type: TypeString, Required: true},
	{Name: "ts", Type: TypeTimestamp, Required: true},
	{Name: "note", Type: TypeString},
}}

// TestTableValidate: a table stream's configuration errors name the field.
func TestTableValidate(t *testing.T) {
	ok := Config{Format: FormatParquet, Table: TableIceberg, Schema: tableSchema, Partition: "dt={time:ts:%Y-%m-%d}/r={field:region}"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"not parquet", func(c *Config) { c.Format = FormatNDJSON; c.Schema = nil }, "table"},
		{"unknown table", func(c *Config) { c.Table = "delta" }, "table"},
		{"no partition", func(c *Config) { c.Partition = "" }, "partition"},
		{"ingest", func(c *Config) { c.Partition = "dt={ingest:%Y-%m-%d}" }, "partition"},
		{"time of a string", func(c *Config) { c.Partition = "d={time:region:%Y-%m-%d}" }, "partition"},
		{"identity of a time", func(c *Config) { c.Partition = "d={field:ts}" }, "partition"},
		{"optional column", func(c *Config) { c.Partition = "d={field:note}" }, "partition"},
		{"keep_snapshots range", func(c *Config) { c.KeepSnapshots = -1 }, "keep_snapshots"},
		{"keep_snapshots of a plain stream", func(c *Config) { c.Table = ""; c.KeepSnapshots = 5 }, "keep_snapshots"},
	} {
		cfg := ok
		c.edit(&cfg)
		var fe *FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an error of field %s", c.name, err, c.field)
		}
	}
	if c, err := Decode([]byte(`{"table":"iceberg","keep_snapshots":7}`)); err != nil || c.Table != TableIceberg || c.KeepSnapshots != 7 {
		t.Fatalf("decode: %+v %v", c, err)
	}
}

func TestCheckChange(t *testing.T) {
	old := Config{Format: FormatParquet, Table: TableIceberg, Schema: &Schema{Fields: tableSchema.Fields[:3]}, Partition: "r={field:region}"}
	grow := old
	grow.Schema = tableSchema
	if err := CheckChange(old, grow); err != nil {
		t.Fatalf("an optional field at the end: %v", err)
	}
	if err := CheckChange(Config{}, old); err != nil {
		t.Fatalf("a plain stream becoming a table: %v", err)
	}
	swapped := old
	swapped.Schema = &Schema{Fields: []Field{tableSchema.Fields[1], tableSchema.Fields[0], tableSchema.Fields[2]}}
	reqd := old
	reqd.Schema = &Schema{Fields: append(append([]Field(nil), old.Schema.Fields...), Field{Name: "x", Type: TypeString, Required: true})}
	for name, next := range map[string]Config{
		"schema.fields[0]":          swapped,
		"schema.fields[3].required": reqd,
		"schema.fields":             {Format: FormatParquet, Table: TableIceberg, Schema: &Schema{Fields: tableSchema.Fields[:2]}, Partition: old.Partition},
		"partition":                 {Format: FormatParquet, Table: TableIceberg, Schema: old.Schema, Partition: "x={field:id}"},
		"table":                     {Format: FormatParquet, Schema: old.Schema, Partition: old.Partition},
	} {
		var fe *FieldError
		if err := CheckChange(old, next); !errors.As(err, &fe) || fe.Field != name {
			t.Errorf("%s: %v", name, err)
		}
	}
}
