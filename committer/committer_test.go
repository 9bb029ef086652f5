package committer

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestSeqRangesJSON(t *testing.T) {
	tests := []struct {
		in   string
		want string // fmt of the ranges; "" means an error
	}{
		{`[[0,2],[5,5]]`, "[[0 2] [5 5]]"},
		{`[[7,9]]`, "[[7 9]]"},
		{`[]`, "[]"},
		{`[3,5]`, "[[3 5]]"}, // the older single pair
		{`"x"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var r SeqRanges
			err := json.Unmarshal([]byte(tc.in), &r)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("decoded %v, want an error", r)
				}
				return
			}
			if err != nil || fmt.Sprint(r) != tc.want {
				t.Fatalf("got %v %v, want %s", r, err, tc.want)
			}
			out, err := json.Marshal(r)
			if err != nil || (len(r) > 0 && out[1] != '[') {
				t.Errorf("encoded %s %v, want a list of ranges", out, err)
			}
		})
	}
}
