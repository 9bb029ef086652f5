package committer

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestSeqRangesJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    string // fmt of the ranges; "" means an error
		has, no int64
	}{
		{`[[0,2],[5,5]]`, "[[0 2] [5 5]]", 5, 3},
		{`[[7,9]]`, "[[7 9]]", 8, 10},
		{`[]`, "[]", -1, 0},
		{`[3,5]`, "[[3 5]]", 4, 6}, // the older single pair
		{`"x"`, "", 0, 0},
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
			if tc.has >= 0 && !r.Contains(tc.has) {
				t.Errorf("%v does not contain %d", r, tc.has)
			}
			if r.Contains(tc.no) {
				t.Errorf("%v contains %d", r, tc.no)
			}
			out, err := json.Marshal(r)
			if err != nil || (len(r) > 0 && out[1] != '[') {
				t.Errorf("encoded %s %v, want a list of ranges", out, err)
			}
		})
	}
}
