package streamconf

import (
	"fmt"
	"testing"
)

// sameAsParse fails t unless utcMicros(v) agrees with ParseTimestamp: when
// it takes v, ParseTimestamp takes it too, at the same microsecond.
func sameAsParse(t *testing.T, v []byte) (fast bool) {
	t.Helper()
	us, ok := utcMicros(v)
	if !ok {
		return false
	}
	tm, err := ParseTimestamp(v)
	if err != nil {
		t.Fatalf("utcMicros(%s) = %d, ParseTimestamp refuses it: %v", v, us, err)
	}
	if tm.UnixMicro() != us {
		t.Fatalf("utcMicros(%s) = %d, ParseTimestamp: %d (%s)", v, us, tm.UnixMicro(), tm)
	}
	return true
}

// TestUTCMicros: every day of leap and century years at the calendar's
// edges, times at their bounds, fractions of 0 to 10 digits, and forms
// the fast path leaves to time.Parse (offsets, a comma, a lower-case z,
// escapes, out-of-range fields).
func TestUTCMicros(t *testing.T) {
	fast := 0
	for _, y := range []int{0, 1, 2, 3, 4, 99, 100, 400, 1600, 1700, 1899, 1900, 1969, 1970, 1971, 2000, 2024, 2026, 2100, 9998, 9999} {
		for m := 0; m <= 13; m++ {
			for d := 0; d <= 32; d++ {
				if sameAsParse(t, fmt.Appendf(nil, `"%04d-%02d-%02dT00:00:00Z"`, y, m, d)) {
					fast++
				}
			}
		}
	}
	// Years 1 to 9999 of the list: 4, 400, 1600, 2000 and 2024 are leap
	// years, the other 15 (100, 1700, 1900, 2100 among them) are not.
	if want := 5*366 + 15*365; fast != want {
		t.Errorf("fast path took %d dates, want %d (each valid date once)", fast, want)
	}
	for _, tc := range []struct {
		v    string
		fast bool
	}{
		{`"2026-11-29T09:00:00Z"`, true},
		{`"2026-11-29T09:01:02.003Z"`, true},
		{`"2026-11-29T23:59:59.9Z"`, true},
		{`"2026-11-29T23:59:59.123456Z"`, true},
		{`"2026-11-29T23:59:59.1234567Z"`, true},
		{`"2026-11-29T23:59:59.999999999Z"`, true},
		{`"9999-12-31T23:59:59.999999999Z"`, true},
		{`"0001-01-01T00:00:00Z"`, true},
		{`"1969-12-31T23:59:59.999999Z"`, true},
		{`"2026-11-29T23:59:59.1234567891Z"`, false}, // 10 digits: time.Parse's
		{`"2026-11-29T23:59:59.Z"`, false},
		{`"2026-11-29T23:59:59,5Z"`, false},
		{`"2026-11-29T09:00:00+01:00"`, false},
		{`"2026-11-29t09:00:00Z"`, false},
		{`"2026-11-29T09:00:00z"`, false},
		{`"2026-11-29T24:00:00Z"`, false},
		{`"2026-11-29T23:60:00Z"`, false},
		{`"2026-11-29T23:59:60Z"`, false},
		{`"2026-02-29T00:00:00Z"`, false},
		{`"0000-01-01T00:00:00Z"`, false},
		{`"\u0032026-11-29T09:00:00Z"`, false},
		{`"2026-11-29T09:00:00.12a4Z"`, false},
		{`"2026-1a-29T09:00:00Z"`, false},
		{`"+026-11-29T09:00:00Z"`, false},
		{`1796000000000`, false},
		{`"2026-11-29T09:00:00"`, false},
	} {
		if got := sameAsParse(t, []byte(tc.v)); got != tc.fast {
			t.Errorf("utcMicros(%s) took it: %v, want %v", tc.v, got, tc.fast)
		}
	}
}

// FuzzUTCMicros: whatever utcMicros takes, ParseTimestamp takes at the
// same microsecond.
func FuzzUTCMicros(f *testing.F) {
	for _, s := range []string{`"2026-11-29T09:00:00Z"`, `"2026-11-29T09:01:02.003Z"`, `"2000-02-29T23:59:59.999999999Z"`, `"0001-01-01T00:00:00Z"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) { sameAsParse(t, v) })
}

// BenchmarkTimestamp: the load harness's timestamp through the fast path
// and through ParseTimestamp.
func BenchmarkTimestamp(b *testing.B) {
	v := []byte(`"2026-11-29T09:41:17.017Z"`)
	b.Run("utcMicros", func(b *testing.B) {
		for b.Loop() {
			if _, ok := utcMicros(v); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("ParseTimestamp", func(b *testing.B) {
		for b.Loop() {
			if _, err := ParseTimestamp(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
