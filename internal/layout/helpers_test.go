package layout

import (
	"encoding/json"
	"strconv"
	"testing"
)

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

func percentDecode(t *testing.T, s string) string {
	t.Helper()
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q", s)
		}
		out = append(out, byte(n))
		i += 2
	}
	return string(out)
}
