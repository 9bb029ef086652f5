package recovery

import "testing"

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
