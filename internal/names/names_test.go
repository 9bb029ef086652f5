package names

import (
	"regexp"
	"strings"
	"testing"
)

func TestAgainstDesignRegexps(t *testing.T) {
	streamRE := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
	producerRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	cases := []string{"", "a", "clicks", "a.b-c_d", "..", "a..b", "A", "-a", "_a", "a/b", "a:b", "p:1.x", "é",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a\x00", " a", "a "}
	for _, c := range cases {
		if got, want := Stream(c), streamRE.MatchString(c) && !strings.Contains(c, ".."); got != want {
			t.Errorf("Stream(%q) = %v, want %v", c, got, want)
		}
		if got, want := Producer(c), producerRE.MatchString(c); got != want {
			t.Errorf("Producer(%q) = %v, want %v", c, got, want)
		}
	}
}

func FuzzNames(f *testing.F) {
	streamRE := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
	producerRE := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	f.Add("clicks")
	f.Add("p:1")
	f.Fuzz(func(t *testing.T, s string) {
		if Stream(s) != (streamRE.MatchString(s) && !strings.Contains(s, "..")) {
			t.Fatalf("Stream(%q)", s)
		}
		if Producer(s) != producerRE.MatchString(s) {
			t.Fatalf("Producer(%q)", s)
		}
	})
}
