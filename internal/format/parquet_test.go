package format

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestParquetWriterBatches: rows handed to the column writers in batches
// come back as written, in order, whatever the records' sizes (strings
// past a batch's bytes, a record larger than a page), nulls and escapes,
// and however the caller reuses its line buffer after each WriteRecord.
func TestParquetWriterBatches(t *testing.T) {
	base := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	var lines, want []string
	for i := range 3000 {
		ts := base.Add(time.Duration(i)*time.Millisecond + 1500*time.Nanosecond) // the 500 ns are truncated
		tsIn := strconv.Quote(ts.Format(time.RFC3339Nano))
		if i%5 == 0 {
			ts = base.Add(time.Duration(i) * time.Millisecond)
			tsIn = strconv.FormatInt(ts.UnixMilli(), 10)
		}
		padLen := i * 37 % 2000
		if i%97 == 0 {
			padLen = 100 << 10
		}
		pad := strings.Repeat(string(rune('a'+i%26)), padLen)
		in := []string{`"ts":` + tsIn}
		out := []string{`"ts":` + strconv.Quote(ts.Truncate(time.Microsecond).Format(time.RFC3339Nano))}
		switch {
		case i%11 == 0: // absent
		case i%7 == 0:
			in = append(in, `"producer":null`)
		case i%13 == 0:
			in = append(in, fmt.Sprintf(`"producer":"p-\"%d"`, i))
			out = append(out, `"producer":`+strconv.Quote(fmt.Sprintf(`p-"%d`, i)))
		default:
			in = append(in, fmt.Sprintf(`"producer":"p-%d"`, i))
			out = append(out, fmt.Sprintf(`"producer":"p-%d"`, i))
		}
		in = append(in, fmt.Sprintf(`"i":%d`, i))
		out = append(out, fmt.Sprintf(`"i":%d`, i))
		if i%17 == 0 {
			in = append(in, `"event":"e\u00e9"`)
			out = append(out, `"event":"eé"`)
		}
		in = append(in, fmt.Sprintf(`"user":{"id":%d}`, i), fmt.Sprintf(`"latency_ms":%d.25`, i))
		out = append(out, fmt.Sprintf(`"user":{"id":%d}`, i), fmt.Sprintf(`"latency_ms":%d.25`, i))
		if i%3 == 0 {
			in = append(in, `"tags":["a",1]`)
			out = append(out, `"tags":["a",1]`)
		}
		in = append(in, `"pad":"`+pad+`"`)
		out = append(out, `"pad":"`+pad+`"`)
		lines = append(lines, "{"+strings.Join(in, ",")+"}")
		want = append(want, "{"+strings.Join(out, ",")+"}")
	}
	for _, group := range []int64{256 << 10, DefaultRowGroupBytes} {
		var file bytes.Buffer
		pw, err := NewParquetWriter(&file, Encoding{Format: "parquet", Schema: benchSchema, RowGroupBytes: group}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var line []byte
		for _, l := range lines {
			line = append(line[:0], l...)
			if err := pw.WriteRecord(line); err != nil {
				t.Fatal(err)
			}
			for j := range line {
				line[j] = '#' // the writer must have copied what it keeps
			}
		}
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
		recs, err := OpenRecords(bytes.NewReader(file.Bytes()), int64(file.Len()), "f.parquet")
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			got, err := recs.Next()
			if err != nil {
				t.Fatalf("row group bytes %d: record %d: %v", group, i, err)
			}
			if string(got) != w {
				t.Fatalf("row group bytes %d: record %d:\n got %.300s\nwant %.300s", group, i, got, w)
			}
		}
		if got, err := recs.Next(); err == nil {
			t.Fatalf("row group bytes %d: a record more: %.100s", group, got)
		}
		_ = recs.Close()
	}
}

// TestPageCodecLowMem: the page codec's lower-memory encoder
// (zstd.WithLowerEncoderMem: a history sized for the window, block
// buffers grown as needed) writes the frames the same encoder writes
// without it, for pages within the window and past it.
func TestPageCodecLowMem(t *testing.T) {
	low, err := newZstdPages(1)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(pageOptions(1, pageWindow), zstd.WithLowerEncoderMem(false))
	full, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var recs []byte
	for i := 0; len(recs) < 3*pageWindow; i++ {
		recs = append(recs, benchRecord(i%300)...) // repeats within and across pages
		if i%7 == 0 {
			recs = append(recs, byte(r.IntN(256)))
		}
	}
	for _, n := range []int{0, 10, 1000, 128 << 10, 200 << 10, 256 << 10, 300 << 10, pageWindow, pageWindow + 1, 2*pageWindow + 12345, 3 * pageWindow} {
		got, err := low.Encode(nil, recs[:n])
		if err != nil {
			t.Fatal(err)
		}
		if want := full.EncodeAll(recs[:n], nil); !bytes.Equal(got, want) {
			t.Errorf("page of %d bytes: %d bytes with lower memory, %d without", n, len(got), len(want))
		}
	}
}

// TestPageCodecWindow: the page codec's 512 KiB window writes the bytes a
// 1 MiB window (zstdWindow, what it used before) writes for pages of up
// to the window, which is every page the writer makes of 256 KiB page
// buffers, so the smaller window only saves memory.
func TestPageCodecWindow(t *testing.T) {
	small, err := newZstdPages(1)
	if err != nil {
		t.Fatal(err)
	}
	large, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(pageLevel),
		zstd.WithWindowSize(zstdWindow), zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	var recs []byte
	for i := 0; len(recs) < 512<<10; i++ {
		recs = append(recs, benchRecord(i%300)...) // repeats within and across pages
	}
	for _, n := range []int{0, 1000, 200 << 10, 256 << 10, 300 << 10, 512 << 10} {
		got, err := small.Encode(nil, recs[:n])
		if err != nil {
			t.Fatal(err)
		}
		if want := large.EncodeAll(recs[:n], nil); !bytes.Equal(got, want) {
			t.Errorf("page of %d bytes: %d bytes with a %d KiB window, %d with %d KiB", n, len(got), pageWindow>>10, len(want), zstdWindow>>10)
		}
	}
}
