package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/eosink/eosink/internal/catalog"
)

func (s *Server) initProducer(w http.ResponseWriter, r *http.Request) {
	id, ok := producerParam(w, r)
	if !ok {
		return
	}
	// init waits for the barrier over the producer's older epochs (I12).
	// Its commit is retried for as long as the destination is away, so
	// the wait is bounded like a wait=commit write: the epoch is already
	// durable and the barrier goes on, and a retried init answers once
	// those batches are prepared, whether or not they committed yet.
	ctx, cancel := context.WithTimeout(r.Context(), s.wait)
	defer cancel()
	st, err := s.eng.InitProducer(ctx, id)
	if s.waitedOut(w, r, err, "init producer "+id, "the new epoch is recorded: retry the init") {
		return
	}
	if err != nil {
		s.engineError(w, r, err, false)
		return
	}
	writeJSON(w, http.StatusOK, producerFrom(st))
}

func (s *Server) getProducer(w http.ResponseWriter, r *http.Request) {
	id, ok := s.readyProducerParam(w, r)
	if !ok {
		return
	}
	st, ok := s.eng.Producer(id)
	if !ok {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: fmt.Sprintf("producer %q is not known", id)})
		return
	}
	writeJSON(w, http.StatusOK, producerFrom(st))
}

func (s *Server) postCheckpoint(w http.ResponseWriter, r *http.Request) {
	res, err := s.eng.Checkpoint(r.Context())
	if err != nil {
		s.engineError(w, r, err, false)
		return
	}
	// An aborted checkpoint is a result, not a failure of this call.
	w.Header().Set(CheckpointHeader, strconv.FormatUint(res.ID, 10))
	writeJSON(w, http.StatusOK, checkpointFromResult(res))
}

func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	raw, _ := pathParam(r, "id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidID, Message: fmt.Sprintf("checkpoint id %q: want an unsigned integer", raw)})
		return
	}
	// Not in the store: the open checkpoint, or one between its barrier
	// and its "prepared" record (or its abort record).
	c, err := s.cat.CheckpointAt(id, func() catalog.Live { return liveOf(s.eng.Status()) })
	switch {
	case errors.Is(err, catalog.ErrNoCheckpoint):
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: fmt.Sprintf("checkpoint %d is not known", id)})
	case err != nil:
		s.internal(w, r, err)
	default: // files only of a stored one: "files" is absent for open and running
		writeJSON(w, http.StatusOK, checkpointFrom(&c, c.State != catalog.Open && c.State != catalog.Running))
	}
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after") // "" is the newest, "0" nothing (no id is below it)
	var before uint64
	if after != "" {
		id, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidID, Message: fmt.Sprintf("after %q: want the next cursor of the previous page, a checkpoint id", after)})
			return
		}
		before = id
	}
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	s.storeAnswer(w, r, "checkpoints\x00"+after+"\x00"+strconv.Itoa(limit), func() (any, error) {
		var cs []catalog.Checkpoint
		if before > 0 || after == "" {
			var err error
			if cs, err = s.cat.Checkpoints(before, limit+1); err != nil {
				return nil, err
			}
		}
		out := CheckpointList{Checkpoints: make([]Checkpoint, 0, min(len(cs), limit))}
		for i := range cs[:min(len(cs), limit)] {
			out.Checkpoints = append(out.Checkpoints, checkpointFrom(&cs[i], false))
		}
		if len(cs) > limit {
			out.Next = strconv.FormatUint(cs[limit-1].ID, 10)
		}
		return out, nil
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if st := s.eng.Status(); st.Failed != "" {
		// The engine stopped; the process must be restarted to recover.
		writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeFailed, Message: st.Failed})
		return
	}
	writeJSON(w, http.StatusOK, Status{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	st := s.eng.Status()
	if !st.Ready || st.Failed != "" || st.Draining {
		msg := "recovery running"
		switch {
		case st.Failed != "":
			msg = st.Failed
		case st.Draining:
			msg = "shutting down"
		case st.Recovering != "":
			msg = "recovery running: " + st.Recovering
		}
		w.Header().Set("Retry-After", s.retryAfter)
		writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeNotReady, Message: msg})
		return
	}
	if st.StuckPermanent {
		// A prepared checkpoint fails with an error no retry cures: every
		// later commit waits behind it until an operator acts. (A stuck
		// commit that may pass, the object store down, keeps the node
		// ready: the metric eosink_commit_stuck says it.)
		w.Header().Set("Retry-After", s.retryAfter)
		writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeNotReady,
			Message: fmt.Sprintf("commit of checkpoint %d stuck since %s, needs an operator: %s", st.StuckCheckpoint, st.StuckSince.UTC().Format(time.RFC3339), st.Stuck)})
		return
	}
	if st.DiskFull != "" {
		// Writes are refused for space: say why, while it lasts.
		w.Header().Set("Retry-After", s.retryAfter)
		writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeInsufficientStorage, Message: st.DiskFull})
		return
	}
	writeJSON(w, http.StatusOK, Status{Status: "ready"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPI)))
	_, _ = w.Write(openAPI)
}

const indexPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>eosink</title></head>
<body><h1>eosink</h1><ul>
<li><a href="/v1/streams">/v1/streams</a></li>
<li><a href="/v1/files">/v1/files</a></li>
<li><a href="/v1/checkpoints">/v1/checkpoints</a></li>
<li><a href="/v1/producers">/v1/producers</a></li>
<li><a href="/v1/openapi.yaml">/v1/openapi.yaml</a></li>
<li><a href="/metrics">/metrics</a></li>
<li><a href="/readyz">/readyz</a></li>
</ul></body></html>
`

// index is the root page without a UI; with one, the router sends "/" to it.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(indexPage))
}

// waitedOut answers 503 not_ready, and true, when err is the end of a
// request's bounded wait (s.wait) for the checkpoint holding the earlier
// batches of what it changes, while its client still waits: op is the
// request ("init producer p1"), done says what of it stands and what to
// retry. For any other err it answers nothing and returns false.
func (s *Server) waitedOut(w http.ResponseWriter, r *http.Request, err error, op, done string) bool {
	if !errors.Is(err, context.DeadlineExceeded) || r.Context().Err() != nil {
		return false
	}
	w.Header().Set("Retry-After", s.retryAfter)
	writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeNotReady,
		Message: op + ": the checkpoint holding its earlier batches is still committing; " + done})
	return true
}

// readyOr503 answers 503 not_ready while recovery runs: it may still
// restore producers (from the destination, when the store was lost), and a
// 404 then would tell a client its producer is unknown.
func (s *Server) readyOr503(w http.ResponseWriter) bool {
	if s.eng.Status().Ready {
		return true
	}
	w.Header().Set("Retry-After", s.retryAfter)
	writeError(w, http.StatusServiceUnavailable, &ErrorResponse{Error: CodeNotReady, Message: "recovery running"})
	return false
}
