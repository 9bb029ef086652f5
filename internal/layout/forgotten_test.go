package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestForgottenMergedNameRoundTrip(t *testing.T) {
	name := ForgottenMergedName("n1", 42, 43, 7)
	if want := "_forgotten/n1/merged-00000000000000000042-00000000000000000043-0007.json"; name != want {
		t.Fatalf("ForgottenMergedName = %q, want %q", name, want)
	}
	node, through, n, ok := ParseForgottenMergedName(name)
	if !ok || node != "n1" || through != 42 || n != 7 {
		t.Fatalf("parse %q: %q %d %d %v", name, node, through, n, ok)
	}
	// The two kinds never take each other's names, and merged names sort
	// after every regular one (a start pages from a checkpoint on).
	if _, _, _, ok := ParseForgottenName(name); ok {
		t.Fatalf("%q parses as a regular document", name)
	}
	regular := ForgottenName("n1", MaxCheckpoint, 9999)
	if _, _, _, ok := ParseForgottenMergedName(regular); ok {
		t.Fatalf("%q parses as a merged document", regular)
	}
	if ForgottenMergedName("n1", 0, 0, 0) <= regular {
		t.Fatalf("merged names sort before %q", regular)
	}
	for _, bad := range []string{
		"_forgotten/n1/merged-0000000000000000042-00000000000000000043-0007.json", "_forgotten/n1/merged-00000000000000000042-00000000000000000043-0007",
		"_forgotten/-n/merged-00000000000000000042-00000000000000000043-0007.json", "_forgotten/n1/merged-00000000000000000042-00000000000000000043_0007.json",
		"forgotten/n1/merged-00000000000000000042-00000000000000000043-0007.json", "_forgotten/n1/merged-99999999999999999999-00000000000000000043-0007.json",
		"_forgotten/n1/merged-00000000000000000042-99999999999999999999-0007.json", "_forgotten/n1/merged-00000000000000000042_00000000000000000043-0007.json",
		"_forgotten/n1/merged-00000000000000000042-0007.json", "_forgotten/n1/merged-00000000000000000042-+0000000000000000043-0007.json",
	} {
		if _, _, _, ok := ParseForgottenMergedName(bad); ok {
			t.Errorf("%q parses", bad)
		}
	}
}

func TestDecodeForgottenMergedChecks(t *testing.T) {
	name := ForgottenMergedName("n1", 10, 11, 0)
	good := ForgottenMerged{Node: "n1", Through: 10, Entries: []ForgottenEntry{{"p", 3, 1}, {"q", 10, 0}}}
	enc := func(m ForgottenMerged) []byte {
		b, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	got, err := DecodeForgottenMerged(name, bytes.NewReader(enc(good)))
	if err != nil || !reflect.DeepEqual(*got, good) {
		t.Fatalf("decode: %+v, %v", got, err)
	}
	for what, m := range map[string]ForgottenMerged{
		"other node":          {Node: "n2", Through: 10, Entries: good.Entries},
		"other checkpoint":    {Node: "n1", Through: 11, Entries: good.Entries},
		"no entries":          {Node: "n1", Through: 10},
		"entry beyond it":     {Node: "n1", Through: 10, Entries: []ForgottenEntry{{"p", 11, 1}}},
		"bad producer":        {Node: "n1", Through: 10, Entries: []ForgottenEntry{{"-p", 1, 1}}},
		"epoch out of bounds": {Node: "n1", Through: 10, Entries: []ForgottenEntry{{"p", 1, MaxSeq}}},
	} {
		if _, err := DecodeForgottenMerged(name, bytes.NewReader(enc(m))); !errors.Is(err, ErrBadForgotten) {
			t.Errorf("%s: %v, want ErrBadForgotten", what, err)
		}
	}
}

// MergeForgotten keeps exactly the entries no other entry dominates: for
// random sets, every entry dropped is dominated by one kept, and no entry
// kept is dominated by another input entry (save its own duplicates).
func TestMergeForgottenKeepsTheFrontier(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for range 200 {
		var in []ForgottenEntry
		for range rng.IntN(30) {
			in = append(in, ForgottenEntry{Producer: string(rune('a' + rng.IntN(4))), After: uint64(rng.IntN(6)), Epoch: int64(rng.IntN(6))})
		}
		out := MergeForgotten(in)
		for i, o := range out {
			for _, o2 := range out[i+1:] {
				if o == o2 || o2.dominates(o) || o.dominates(o2) {
					t.Fatalf("kept %v and %v of %v", o, o2, in)
				}
			}
		}
		for _, e := range in {
			covered := false
			for _, o := range out {
				covered = covered || o.dominates(e)
			}
			if !covered {
				t.Fatalf("%v of %v dropped and not covered by %v", e, in, out)
			}
		}
	}
}

func TestForgottenMergedDocs(t *testing.T) {
	m := ForgottenMerged{Node: "n1", Through: 9, Entries: []ForgottenEntry{{"p", 3, 1}, {"q", 9, 2}, {"r", 3, 0}, {"s", 1, 5}}}
	docs := m.Docs(2)
	want := []*Forgotten{
		{Node: "n1", After: 3, Producers: map[string]int64{"p": 1, "r": 0}},
		{Node: "n1", After: 9, Producers: map[string]int64{"q": 2}},
	}
	if !reflect.DeepEqual(docs, want) {
		t.Fatalf("Docs(2) = %+v, want %+v", docs, want)
	}
}

// A sealed document checks after a JSON round trip (what a start reads is
// the bytes published), and any change of what it says, or another key,
// breaks the seal; documents at or below Since, or read without a key,
// are believed unsealed.
func TestForgottenSeal(t *testing.T) {
	s := ForgottenSeal{Key: []byte("0123456789abcdef0123456789abcdef"), Since: 10}
	doc := Forgotten{Node: "n1", After: 11, Producers: map[string]int64{"b": 2, "a": 1}}
	if err := s.Seal(&doc); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	read := func(b []byte) *Forgotten {
		var f Forgotten
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		return &f
	}
	name := ForgottenName("n1", 11, 0)
	if err := s.Check(name, read(body)); err != nil {
		t.Fatalf("the sealed document, read back: %v", err)
	}
	changed := read(body)
	changed.Producers["a"] = 3
	other := ForgottenSeal{Key: []byte("another key, another key, anoth."), Since: 10}
	unsealed := read(body)
	unsealed.MAC = ""
	for what, c := range map[string]struct {
		s ForgottenSeal
		f *Forgotten
	}{"an epoch changed": {s, changed}, "another key": {other, read(body)}, "no seal": {s, unsealed}} {
		if err := c.s.Check(name, c.f); !errors.Is(err, ErrBadForgotten) {
			t.Errorf("%s: %v, want ErrBadForgotten", what, err)
		}
	}
	if err := (ForgottenSeal{Key: s.Key, Since: 11}).Check(name, unsealed); err != nil {
		t.Errorf("an unsealed document at the seal's checkpoint: %v, want believed", err)
	}
	if err := (ForgottenSeal{}).Check(name, changed); err != nil {
		t.Errorf("without a key: %v, want believed", err)
	}
	m := ForgottenMerged{Node: "n1", Through: 12, Entries: []ForgottenEntry{{Producer: "a", After: 12, Epoch: 1}}}
	if err := s.SealMerged(&m); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckMerged(ForgottenMergedName("n1", 12, 13, 0), &m); err != nil {
		t.Fatalf("the sealed merged document: %v", err)
	}
	m.Entries[0].Epoch = 0
	if err := s.CheckMerged(ForgottenMergedName("n1", 12, 13, 0), &m); !errors.Is(err, ErrBadForgotten) {
		t.Fatalf("a merged document changed after its seal: %v, want ErrBadForgotten", err)
	}
}

// The seal is over the decoded document, re-encoded: what the JSON says
// to this binary, not its bytes. A sealed document rewritten without
// changing what it decodes to (escapes, key order, unknown fields, a key
// given twice with the sealed value last) still checks; one that decodes
// to anything else (a key given twice adding a producer, a field name in
// another case merging into the map, an epoch past int64, a checkpoint
// written as a float) does not, or does not decode.
func TestForgottenSealCanonical(t *testing.T) {
	s := ForgottenSeal{Key: []byte("0123456789abcdef0123456789abcdef"), Since: 1}
	doc := Forgotten{Node: "n1", After: 5, Producers: map[string]int64{"p-1": 3, "A:b": 123456789012}}
	if err := s.Seal(&doc); err != nil {
		t.Fatal(err)
	}
	name := ForgottenName("n1", 5, 0)
	mac := doc.MAC
	check := func(body string) error {
		f, err := DecodeForgotten(name, strings.NewReader(body))
		if err != nil {
			return err
		}
		return s.Check(name, f)
	}
	same := []string{
		fmt.Sprintf(`{"mac":%q,"producers":{"p-1":3,"A:b":123456789012},"after_checkpoint":5,"node":"n1"}`, mac),
		fmt.Sprintf(`{"node":"\u006e1","after_checkpoint":5,"producers":{"p\u002d1":3,"A:b":123456789012},"mac":%q,"extra":[1,2]}`, mac),
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5,"producers":{"p-1":7,"p-1":3,"A:b":123456789012},"mac":%q}`, mac),
	}
	for _, b := range same {
		if err := check(b); err != nil {
			t.Errorf("%s: %v, want the seal to hold (it decodes to what was sealed)", b, err)
		}
	}
	other := []string{
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5,"producers":{"p-1":3,"A:b":123456789012},"producers":{"q":1},"mac":%q}`, mac),
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5,"producers":{"p-1":3,"A:b":123456789012},"Producers":{"q":1},"mac":%q}`, mac),
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5,"producers":{"p-1":3,"A:b":9223372036854775808},"mac":%q}`, mac),
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5.0,"producers":{"p-1":3,"A:b":123456789012},"mac":%q}`, mac),
		fmt.Sprintf(`{"node":"n1","after_checkpoint":5,"producers":{"p-1":3,"A:b":123456789012},"mac":%q}`, strings.ToUpper(mac)),
	}
	for _, b := range other {
		if err := check(b); err == nil {
			t.Errorf("%s: believed, want the seal to fail (or the document refused)", b)
		}
	}
}
