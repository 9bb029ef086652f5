package recovery

import (
	"fmt"
	"slices"
	"testing"
)

// TestForgottenProducerStartsAboveItsOldEpochs: a producer forgotten (by
// expiry or DELETE) and initialised again must not start at epoch 0, or a
// zombie of its old incarnation at epoch 0 would be taken for the new one
// instead of being fenced (I6).
func TestForgottenProducerStartsAboveItsOldEpochs(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	for range 3 { // epochs 0, 1, 2
		if _, err := s.InitProducer("p"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.InitProducer("q"); err != nil { // epoch 0, never forgotten
		t.Fatal(err)
	}
	// forgetThenInit deletes del, then inits id and returns its epoch.
	forgetThenInit := func(del, id string) int64 {
		t.Helper()
		if err := s.DeleteProducer(del); err != nil {
			t.Fatal(err)
		}
		p, err := s.InitProducer(id)
		if err != nil {
			t.Fatal(err)
		}
		return p.Epoch
	}
	if epoch := forgetThenInit("p", "p"); epoch != 3 {
		t.Fatalf("p initialised after it was forgotten at epoch 2: epoch %d, want 3", epoch)
	}
	// q's epoch 0 is below the floor: the floor stays.
	if epoch := forgetThenInit("q", "r"); epoch != 3 {
		t.Fatalf("a new producer after forgetting others: epoch %d, want 3 (above every forgotten epoch)", epoch)
	}
}

// TestProducerCount: the count kept in meta follows every way a producer
// is created or forgotten, and a reopened store keeps it.
func TestProducerCount(t *testing.T) {
	s, p := openTemp(t)
	count := func(want int) {
		t.Helper()
		if n, err := s.ProducerCount(); err != nil || n != want {
			t.Fatalf("count %d %v, want %d", n, err, want)
		}
	}
	count(0)
	for _, id := range []string{"a", "a", "b"} {
		if _, err := s.InitProducer(id); err != nil {
			t.Fatal(err)
		}
	}
	count(2)
	if err := s.Prepare(&Checkpoint{ID: 1, Seqs: map[string]map[string]int64{"a": {"s": 1}, "ghost": {"s": 1}}}); err != nil {
		t.Fatal(err)
	}
	count(3)
	if err := s.RestoreProducers(map[string]map[string]StreamSeq{"b": {"s": {CommittedSeq: 2}}, "c": {"s": {CommittedSeq: 2}}}); err != nil {
		t.Fatal(err)
	}
	count(4)
	if err := s.DeleteProducer("ghost"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProducer("ghost"); err == nil {
		t.Fatal("deleted twice")
	}
	count(3)
	s = reopen(t, s, p)
	count(3)
}

// TestProducersPageStreams: each producer of a page has exactly its own
// streams, with ids that are prefixes of each other ("p1", "p1.x", "p10"),
// producers without streams between them, and any page size.
func TestProducersPageStreams(t *testing.T) {
	s, _ := openTemp(t)
	defer s.Close()
	ids := []string{"a", "p1", "p1.x", "p10", "p1_", "p2", "q", "z"}
	seqs := map[string]map[string]int64{}
	for i, id := range ids {
		if _, err := s.InitProducer(id); err != nil {
			t.Fatal(err)
		}
		if id == "p1.x" || id == "q" {
			continue // no streams
		}
		seqs[id] = map[string]int64{}
		for j := range i + 1 {
			seqs[id][fmt.Sprintf("%s-s%d", id, j)] = int64(10*i + j)
		}
	}
	if err := s.Prepare(&Checkpoint{ID: 1, Seqs: seqs}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, id := range ids {
		p, err := s.Producer(id)
		if err != nil || p == nil {
			t.Fatalf("producer %s: %v %v", id, p, err)
		}
		want[id] = fmt.Sprint(p.Streams)
		if len(p.Streams) != len(seqs[id]) {
			t.Fatalf("producer %s: %d streams, want %d", id, len(p.Streams), len(seqs[id]))
		}
	}
	for limit := 1; limit <= len(ids)+1; limit++ {
		var got []string
		after := ""
		for {
			page, next, err := s.ProducersPage(after, limit)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				got = append(got, p.ID)
				if fmt.Sprint(p.Streams) != want[p.ID] {
					t.Errorf("limit %d: producer %s streams %v, want %s", limit, p.ID, p.Streams, want[p.ID])
				}
			}
			if next == "" {
				break
			}
			after = next
		}
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		if !slices.Equal(got, sorted) {
			t.Errorf("limit %d: pages hold %v, want %v", limit, got, sorted)
		}
	}
}

func TestSequenceRule(t *testing.T) {
	checks := []struct {
		seq, next int64
		want      SeqVerdict
	}{
		{0, 0, SeqAccept},
		{5, 5, SeqAccept},
		{4, 5, SeqDuplicate},
		{0, 5, SeqDuplicate},
		{6, 5, SeqGap},
		{1, 0, SeqGap},
	}
	for _, c := range checks {
		if got := CheckSeq(c.seq, c.next); got != c.want {
			t.Errorf("CheckSeq(%d, next %d) = %v, want %v", c.seq, c.next, got, c.want)
		}
	}

	steps := []struct {
		name string
		from StreamSeq
		step func(StreamSeq) StreamSeq
		want StreamSeq
	}{
		{"prepare a new stream", NewStreamSeq(), func(s StreamSeq) StreamSeq { return s.Prepared(3) },
			StreamSeq{NextSeq: 3, CommittedSeq: -1}},
		{"prepare keeps committed", StreamSeq{NextSeq: 3, CommittedSeq: 2, CommittedIn: 7}, func(s StreamSeq) StreamSeq { return s.Prepared(5) },
			StreamSeq{NextSeq: 5, CommittedSeq: 2, CommittedIn: 7}},
		{"commit raises committed", StreamSeq{NextSeq: 5, CommittedSeq: 2, CommittedIn: 7}, func(s StreamSeq) StreamSeq { return s.Committed(5, 8) },
			StreamSeq{NextSeq: 5, CommittedSeq: 4, CommittedIn: 8}},
		{"commit leaves next alone", StreamSeq{NextSeq: 9, CommittedSeq: -1}, func(s StreamSeq) StreamSeq { return s.Committed(5, 8) },
			StreamSeq{NextSeq: 9, CommittedSeq: 4, CommittedIn: 8}},
		{"a late commit never lowers committed", StreamSeq{NextSeq: 9, CommittedSeq: 8, CommittedIn: 9}, func(s StreamSeq) StreamSeq { return s.Committed(5, 8) },
			StreamSeq{NextSeq: 9, CommittedSeq: 8, CommittedIn: 9}},
		{"a replayed commit names its checkpoint again", StreamSeq{NextSeq: 5, CommittedSeq: 4, CommittedIn: 8}, func(s StreamSeq) StreamSeq { return s.Committed(5, 8) },
			StreamSeq{NextSeq: 5, CommittedSeq: 4, CommittedIn: 8}},
		{"restore raises a stream the store lacks", NewStreamSeq(), func(s StreamSeq) StreamSeq {
			return s.Restored(StreamSeq{CommittedSeq: 6, CommittedIn: 3})
		}, StreamSeq{NextSeq: 7, CommittedSeq: 6, CommittedIn: 3}},
		{"restore keeps state beyond the destination", StreamSeq{NextSeq: 9, CommittedSeq: 8, CommittedIn: 9}, func(s StreamSeq) StreamSeq {
			return s.Restored(StreamSeq{CommittedSeq: 6, CommittedIn: 3})
		}, StreamSeq{NextSeq: 9, CommittedSeq: 8, CommittedIn: 9}},
		{"restore keeps a higher next", StreamSeq{NextSeq: 12, CommittedSeq: 2, CommittedIn: 1}, func(s StreamSeq) StreamSeq {
			return s.Restored(StreamSeq{CommittedSeq: 6, CommittedIn: 3})
		}, StreamSeq{NextSeq: 12, CommittedSeq: 6, CommittedIn: 3}},
	}
	for _, s := range steps {
		if got := s.step(s.from); got != s.want {
			t.Errorf("%s: %+v -> %+v, want %+v", s.name, s.from, got, s.want)
		}
	}
}
