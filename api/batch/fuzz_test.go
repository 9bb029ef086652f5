package batch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/eosink/eosink/api/batch"
)

// fuzzTypes are the Content-Types FuzzParse picks from by index.
var fuzzTypes = []string{
	"application/x-ndjson",
	"application/json",
	"text/plain",
	"application/ndjson",
	"Application/JSON; charset=utf-8",
	"TEXT/PLAIN; charset=utf-8",
	"application/xml",
	"",
}

type fuzzFormat int

const (
	fuzzNDJSON fuzzFormat = iota
	fuzzArray
	fuzzText
	fuzzUnsupported
)

var fuzzFormats = []fuzzFormat{fuzzNDJSON, fuzzArray, fuzzText, fuzzNDJSON, fuzzArray, fuzzText, fuzzUnsupported, fuzzUnsupported}

// FuzzParse checks Parse against a slow reference model built from
// bytes.Split and json.Unmarshal, under the default limits and under the
// fuzzed record limit m (with a body limit of 8m).
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, ct uint8, body []byte, maxRecord uint16) {
		if len(body) > batch.DefaultMaxRecord {
			t.Skip("larger than a record: covered by unit tests")
		}
		i := int(ct) % len(fuzzTypes)
		contentType, format := fuzzTypes[i], fuzzFormats[i]
		orig := bytes.Clone(body)

		got, err := batch.Parse(contentType, body, batch.DefaultLimits())
		if !bytes.Equal(body, orig) {
			t.Fatalf("Parse modified its body")
		}
		if format == fuzzUnsupported {
			if !errors.Is(err, batch.ErrUnsupportedMediaType) {
				t.Fatalf("Parse(%q) error = %v, want ErrUnsupportedMediaType", contentType, err)
			}
			return
		}
		checkShape(t, format, got, err)

		// The properties the contract states directly.
		switch format {
		case fuzzNDJSON:
			allValid := true
			for _, l := range bytes.Split(body, []byte("\n")) {
				l = bytes.TrimSuffix(l, []byte("\r"))
				if len(bytes.Trim(l, " \t\r")) > 0 && !(json.Valid(l) && utf8.Valid(l)) {
					allValid = false
					break
				}
			}
			if (err == nil) != allValid {
				t.Fatalf("NDJSON %q: error = %v, but every non-empty line valid = %v", body, err, allValid)
			}
		case fuzzArray:
			var elems []json.RawMessage
			uerr := json.Unmarshal(body, &elems)
			isArray := bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("["))
			if (err == nil) != (uerr == nil && isArray && utf8.Valid(body)) {
				t.Fatalf("array %q: error = %v, but Unmarshal error = %v, is array = %v", body, err, uerr, isArray)
			}
			if err == nil {
				var want bytes.Buffer
				for _, e := range elems {
					if cerr := json.Compact(&want, e); cerr != nil {
						t.Fatalf("Compact(%q): %v", e, cerr)
					}
					want.WriteByte('\n')
				}
				if !bytes.Equal(got.Data, want.Bytes()) {
					t.Fatalf("array %q: Data = %q, want %q", body, got.Data, want.Bytes())
				}
			}
		}
		compareReference(t, format, body, batch.DefaultLimits(), got, err)

		if maxRecord > 0 {
			lim := batch.Limits{MaxRecord: int(maxRecord), MaxBody: 8 * int64(maxRecord)}
			got, err := batch.Parse(contentType, body, lim)
			checkShape(t, format, got, err)
			compareReference(t, format, body, lim, got, err)
		}
	})
}

// checkShape checks what must hold of any result: Records lines in Data,
// each one valid JSON for JSON formats; an empty Batch with an error.
func checkShape(t *testing.T, format fuzzFormat, got batch.Batch, err error) {
	t.Helper()
	if err != nil {
		if got.Data != nil || got.Records != 0 {
			t.Fatalf("error %v with non-empty batch", err)
		}
		if !errors.Is(err, batch.ErrInvalidJSON) && !errors.Is(err, batch.ErrTooLarge) {
			t.Fatalf("unexpected error class: %v", err)
		}
		return
	}
	if n := bytes.Count(got.Data, []byte("\n")); n != got.Records {
		t.Fatalf("Data has %d lines, Records = %d", n, got.Records)
	}
	if len(got.Data) > 0 && got.Data[len(got.Data)-1] != '\n' {
		t.Fatalf("Data does not end with a newline: %q", got.Data)
	}
	want := batch.NDJSON
	if format == fuzzText {
		want = batch.Text
	}
	if got.Kind != want {
		t.Fatalf("Kind = %v, want %v", got.Kind, want)
	}
	if format == fuzzText {
		return
	}
	for l := range bytes.Lines(got.Data) {
		if !json.Valid(l[:len(l)-1]) {
			t.Fatalf("output line %q is not valid JSON", l)
		}
	}
}

// compareReference checks Parse's result against refParse.
func compareReference(t *testing.T, format fuzzFormat, body []byte, lim batch.Limits, got batch.Batch, err error) {
	t.Helper()
	want, wline, werr := refParse(format, body, lim)
	if !errors.Is(err, werr) || (err == nil) != (werr == nil) {
		t.Fatalf("%v %q %+v: error = %v, reference error = %v (line %d)", format, body, lim, err, werr, wline)
	}
	if err == nil {
		if !bytes.Equal(got.Data, want.Data) || got.Records != want.Records {
			t.Fatalf("%v %q %+v: got %q (%d), reference %q (%d)", format, body, lim, got.Data, got.Records, want.Data, want.Records)
		}
		return
	}
	var le *batch.LineError
	isLine := errors.As(err, &le)
	if isLine != (wline != 0) {
		t.Fatalf("%v %q %+v: error %v: LineError = %v, reference line %d", format, body, lim, err, isLine, wline)
	}
	switch {
	case !isLine:
	case wline > 0 && le.Line != wline:
		t.Fatalf("%v %q %+v: error %v, reference line %d", format, body, lim, err, wline)
	case le.Line < 1 || le.Line > 1+bytes.Count(body, []byte("\n")):
		t.Fatalf("%v %q: error %v: line out of range", format, body, err)
	}
}

// refParse is the reference model. It returns the error class, and the line
// of a line error: -1 when the model does not know it (arrays), 0 for an
// error without a line.
func refParse(format fuzzFormat, body []byte, lim batch.Limits) (batch.Batch, int, error) {
	var b batch.Batch
	if int64(len(body)) > lim.MaxBody {
		return batch.Batch{}, 0, batch.ErrTooLarge
	}
	var data []byte
	if format == fuzzArray {
		b.Kind = batch.NDJSON
		if !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("[")) {
			return batch.Batch{}, -1, batch.ErrInvalidJSON
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil || !utf8.Valid(body) {
			return batch.Batch{}, -1, batch.ErrInvalidJSON
		}
		for k, e := range elems {
			var c bytes.Buffer
			_ = json.Compact(&c, e)
			if c.Len() > lim.MaxRecord {
				return batch.Batch{}, refElementLine(body, k), batch.ErrTooLarge
			}
			data = append(append(data, c.Bytes()...), '\n')
			b.Records++
		}
		b.Data = data
		return b, 0, nil
	}
	b.Kind = batch.NDJSON
	if format == fuzzText {
		b.Kind = batch.Text
	}
	lines := bytes.Split(body, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if format == fuzzNDJSON && len(bytes.Trim(l, " \t\r")) == 0 {
			continue
		}
		if len(l) > lim.MaxRecord {
			return batch.Batch{}, i + 1, batch.ErrTooLarge
		}
		if format == fuzzNDJSON && !(json.Valid(l) && utf8.Valid(l)) {
			return batch.Batch{}, i + 1, batch.ErrInvalidJSON
		}
		data = append(append(data, l...), '\n')
		b.Records++
	}
	b.Data = data
	return b, 0, nil
}

// refElementLine returns the line on which element k of the valid JSON
// array in body starts, found with a json.Decoder.
func refElementLine(body []byte, k int) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return -1
	}
	for i := 0; dec.More(); i++ {
		off := int(dec.InputOffset())
		for off < len(body) && bytes.IndexByte([]byte(" \t\r\n,"), body[off]) >= 0 {
			off++
		}
		if i == k {
			return 1 + bytes.Count(body[:off], []byte("\n"))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return -1
		}
	}
	return -1
}
