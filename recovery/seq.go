package recovery

// The sequence rule (DESIGN "Producers", I5): one producer's batches on one
// stream carry sequence numbers 0, 1, 2, ... A batch is accepted when its
// number is the next one expected, a duplicate when it is below, and
// refused (the client resends from the next one) when it is above. A
// checkpoint's "prepared" record raises NextSeq to the next number as of its
// barrier; its commit raises CommittedSeq to the one before that, and never
// lowers it. The store (Prepare, Commit) and the engine's in-memory mirror
// both apply these functions, so the rule is written once.

// SeqVerdict is what the sequence rule says of a batch's number.
type SeqVerdict int

// Verdicts of CheckSeq.
const (
	SeqAccept    SeqVerdict = iota // the next number: accept it
	SeqDuplicate                   // below the next: accepted before, write nothing
	SeqGap                         // above the next: refuse; resend from the next
)

// CheckSeq applies the rule to seq with next expected.
func CheckSeq(seq, next int64) SeqVerdict {
	switch {
	case seq < next:
		return SeqDuplicate
	case seq > next:
		return SeqGap
	}
	return SeqAccept
}

// NewStreamSeq is the state of a stream the producer never wrote to.
func NewStreamSeq() StreamSeq { return StreamSeq{CommittedSeq: -1} }

// Prepared is s once a checkpoint whose barrier saw next as the next number
// is recorded prepared.
func (s StreamSeq) Prepared(next int64) StreamSeq {
	s.NextSeq = next
	return s
}

// Committed is s once checkpoint id, whose barrier saw next as the next
// number, is committed: everything below next is committed, in id unless a
// later checkpoint already committed more (commits of a stream are in
// order, but a replay may come late).
func (s StreamSeq) Committed(next int64, id uint64) StreamSeq {
	if next-1 >= s.CommittedSeq {
		s.CommittedSeq, s.CommittedIn = next-1, id
	}
	return s
}

// Restored is s raised to what the destination shows committed (c, from
// Rebuild): state beyond it is kept.
func (s StreamSeq) Restored(c StreamSeq) StreamSeq {
	if s.CommittedSeq >= c.CommittedSeq {
		return s
	}
	s.CommittedSeq, s.CommittedIn = c.CommittedSeq, c.CommittedIn
	s.NextSeq = max(s.NextSeq, c.CommittedSeq+1)
	return s
}
