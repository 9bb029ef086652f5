package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/eosink/eosink/server"
)

// Producer list limits (DESIGN: every list takes limit and after).
const (
	defaultProducerLimit = 1000
	maxProducerLimit     = 10000
)

// listProducers answers GET /v1/producers?limit=N&after=C, a page at a
// time, from the state store: it never waits on the ingest lock.
func (s *Server) listProducers(w http.ResponseWriter, r *http.Request) {
	limit := defaultProducerLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxProducerLimit {
			writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidLimit, Message: fmt.Sprintf("limit %q: want an integer from 1 to %d", v, maxProducerLimit)})
			return
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	if after != "" && !validProducer(after) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidProducer, Message: fmt.Sprintf("after %q: want the next cursor of the previous page, a producer id", after)})
		return
	}
	if !s.readyOr503(w) {
		return
	}
	s.storeAnswer(w, r, "producers\x00"+after+"\x00"+strconv.Itoa(limit), func() (any, error) {
		ps, next, err := s.eng.ProducersPage(after, limit)
		if err != nil {
			return nil, err
		}
		out := ProducerList{Producers: make([]Producer, 0, len(ps)), Next: next}
		for _, p := range ps {
			out.Producers = append(out.Producers, producerFrom(p))
		}
		return out, nil
	})
}

// storeAnswer answers 200 with what answer returns, encoded: an answer
// made of the state store alone, kept under key until the store changes.
func (s *Server) storeAnswer(w http.ResponseWriter, r *http.Request, key string, answer func() (any, error)) {
	body, err := s.cat.Answer("api\x00"+key, func() (any, int, error) {
		v, err := answer()
		if err != nil {
			return nil, 0, err
		}
		b, err := encodeJSON(v)
		return b, len(b), err
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSONBody(w, http.StatusOK, body.([]byte))
}

// deleteProducer answers DELETE /v1/producers/{producer} (admin): 204, 404
// when unknown, 409 producer_busy while it has uncommitted batches.
func (s *Server) deleteProducer(w http.ResponseWriter, r *http.Request) {
	id, ok := s.readyProducerParam(w, r)
	if !ok {
		return
	}
	switch err := s.eng.DeleteProducer(r.Context(), id); {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, server.ErrUnknownProducer):
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: fmt.Sprintf("producer %q is not known", id)})
	default:
		s.engineError(w, r, err, false)
	}
}
