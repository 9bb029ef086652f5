package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
)

// getSeq answers GET /v1/producers/{producer}/streams/{stream}/seqs/{seq}
// (role ingest or read): which committed file holds the producer's batch
// seq on the stream, from the manifests' exact ranges (catalog.LocateSeq).
// 404 when no manifest read holds it; the message says what this node
// knows of the batch (accepted, not yet committed; committed, beyond the
// manifests read; never accepted).
func (s *Server) getSeq(w http.ResponseWriter, r *http.Request) {
	id, ok := producerParam(w, r)
	if !ok {
		return
	}
	stream, ok := s.streamParam(w, r)
	if !ok {
		return
	}
	v, _ := pathParam(r, "seq")
	seq, err := strconv.ParseInt(v, 10, 64)
	if err != nil || seq < 0 || seq >= layout.MaxSeq {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidID, Message: fmt.Sprintf("seq %q: want a sequence number from 0 to %d", v, int64(layout.MaxSeq)-1)})
		return
	}
	locs, complete, err := s.cat.LocateSeq(r.Context(), id, stream, seq, 0)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if len(locs) == 0 {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: s.seqNotFound(id, stream, seq, complete)})
		return
	}
	out := SeqLocations{Producer: id, Stream: stream, Seq: seq, Complete: complete, Locations: make([]SeqLocation, 0, len(locs))}
	for _, l := range locs {
		wl := SeqLocation{Node: l.Node, Checkpoint: l.Checkpoint, Manifest: l.Manifest, Path: l.Path, First: l.First, Last: l.Last}
		if !l.CommittedAt.IsZero() {
			at := l.CommittedAt
			wl.CommittedAt = &at
		}
		if l.HasEpoch {
			ep, inc := l.Epoch, l.Incarnation
			wl.Epoch, wl.Incarnation = &ep, &inc
		}
		out.Locations = append(out.Locations, wl)
	}
	writeJSON(w, http.StatusOK, out)
}

// seqNotFound says what this node knows of a batch no manifest read holds.
func (s *Server) seqNotFound(id, stream string, seq int64, complete bool) string {
	scope := "no committed manifest holds it"
	if !complete {
		scope = fmt.Sprintf("none of the newest %d manifests holds it", catalog.DefaultSeqScan)
	}
	st, ok := s.eng.Producer(id)
	ss, has := st.Streams[stream]
	switch {
	case !ok || !has:
		return fmt.Sprintf("batch %d of producer %s on stream %s: %s, and this node knows no such producer or stream", seq, id, stream, scope)
	case seq <= ss.CommittedSeq:
		return fmt.Sprintf("batch %d of producer %s on stream %s: %s, though this node has it committed (committed_seq %d)", seq, id, stream, scope, ss.CommittedSeq)
	case seq < ss.NextSeq:
		return fmt.Sprintf("batch %d of producer %s on stream %s: accepted, not committed yet (committed_seq %d)", seq, id, stream, ss.CommittedSeq)
	}
	return fmt.Sprintf("batch %d of producer %s on stream %s: %s; this node expects %d next", seq, id, stream, scope, ss.NextSeq)
}
