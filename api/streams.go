package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/server"
)

// StreamConfigurer is the optional part of Engine that keeps stream
// configurations (*server.Engine has it). Without it PUT and GET
// /v1/streams/{stream} answer 404 for every stream.
type StreamConfigurer interface {
	// PutStream is a barrier over the stream's batches accepted so far,
	// then records a configuration durably and puts it in force; a
	// barrier that outlasts ctx returns ctx's error and changes nothing.
	// An invalid one is a *streamconf.FieldError.
	PutStream(ctx context.Context, stream string, c streamconf.Config) (server.StreamInfo, error)
	// Stream returns a stream's configuration (the defaults when never
	// configured).
	Stream(stream string) server.StreamInfo
}

var _ StreamConfigurer = (*server.Engine)(nil)

// maxStreamBody bounds a PUT /v1/streams/{stream} body.
const maxStreamBody = 1 << 20

// StreamConfig is a stream's configuration on the wire: PUT's answer,
// and the configuration part of GET's.
type StreamConfig struct {
	Stream string `json:"stream"`
	streamconf.Config
	// Version is the newest accepted configuration's (0: never
	// configured); ActiveVersion the one in force, the same once a PUT
	// answered.
	Version       int64     `json:"version"`
	ActiveVersion int64     `json:"active_version"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
}

// StreamDetail answers GET /v1/streams/{stream}: the configuration and
// counts over the stream's committed files.
type StreamDetail struct {
	StreamConfig
	Files   int   `json:"files"`
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

func streamConfigFrom(in server.StreamInfo) StreamConfig {
	return StreamConfig{Stream: in.Stream, Config: in.Config, Version: in.Config.Version,
		ActiveVersion: in.ActiveVersion, UpdatedAt: in.UpdatedAt}
}

// producerParam returns the {producer} path parameter, or answers 400
// invalid_producer and returns false.
func producerParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, ok := pathParam(r, "producer")
	if !ok || !validProducer(id) {
		writeError(w, http.StatusBadRequest, invalidProducer(id))
		return "", false
	}
	return id, true
}

// readyProducerParam is producerParam, then readyOr503: a bad id is
// answered 400 before a node not ready is answered 503.
func (s *Server) readyProducerParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, ok := producerParam(w, r)
	if !ok || !s.readyOr503(w) {
		return "", false
	}
	return id, true
}

// streamParam returns the {stream} path parameter, or answers 400
// invalid_stream and returns false.
func (s *Server) streamParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	stream, ok := pathParam(r, "stream")
	if !ok || !validStream(stream) {
		writeError(w, http.StatusBadRequest, invalidStream(stream))
		return "", false
	}
	return stream, true
}

// invalidProducer and invalidStream are the 400 answers to a name that
// breaks its rule, stating the rule.
func invalidProducer(id string) *ErrorResponse {
	return &ErrorResponse{Error: CodeInvalidProducer,
		Message: fmt.Sprintf("producer %q: want ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", id)}
}

func invalidStream(stream string) *ErrorResponse {
	return &ErrorResponse{Error: CodeInvalidStream,
		Message: fmt.Sprintf("stream %q: want ^[a-z0-9][a-z0-9_.-]{0,127}$ without \"..\"", stream)}
}

func (s *Server) putStream(w http.ResponseWriter, r *http.Request) {
	stream, ok := s.streamParam(w, r)
	if !ok {
		return
	}
	sc, ok := s.eng.(StreamConfigurer)
	if !ok {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: "this server keeps no stream configurations"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxStreamBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, &ErrorResponse{Error: CodeTooLarge, Message: fmt.Sprintf("body over %d bytes", maxStreamBody)})
			return
		}
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody, Message: "read body: " + err.Error()})
		return
	}
	c, err := streamconf.Decode(body)
	if err == nil {
		err = c.Validate()
	}
	var fe *streamconf.FieldError
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody, Field: fe.Field, Message: fe.Error()})
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody, Message: err.Error()})
		return
	}
	// The barrier waits for the commit of what the stream holds, which an
	// outage holds back: bounded like init's.
	ctx, cancel := context.WithTimeout(r.Context(), s.wait)
	defer cancel()
	info, err := sc.PutStream(ctx, stream, c)
	if s.waitedOut(w, r, err, "configure stream "+stream, "nothing changed: retry the PUT") {
		return
	}
	if errors.As(err, &fe) {
		writeError(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidBody, Field: fe.Field, Message: fe.Error()})
		return
	}
	if err != nil {
		s.engineError(w, r, err, false)
		return
	}
	writeJSON(w, http.StatusOK, streamConfigFrom(info))
}

func (s *Server) getStream(w http.ResponseWriter, r *http.Request) {
	stream, ok := s.streamParam(w, r)
	if !ok {
		return
	}
	out := StreamDetail{StreamConfig: StreamConfig{Stream: stream}}
	configured := false
	if sc, ok := s.eng.(StreamConfigurer); ok {
		info := sc.Stream(stream)
		out.StreamConfig, configured = streamConfigFrom(info), info.Configured
	}
	st, err := s.cat.Stream(r.Context(), stream)
	out.Files, out.Bytes, out.Records = st.Files, st.Bytes, st.Records
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !configured && out.Files == 0 {
		writeError(w, http.StatusNotFound, &ErrorResponse{Error: CodeNotFound, Message: fmt.Sprintf("stream %s: never configured and no committed file", stream)})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// streamError answers the write errors of stream configurations; false
// when err is none of them.
func (s *Server) streamError(w http.ResponseWriter, err error) bool {
	var re *server.RecordError
	switch {
	case errors.As(err, &re) && errors.Is(err, layout.ErrInvalidPartition):
		s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidPartition, Line: re.Line, Field: re.Field, Message: err.Error()})
	case errors.As(err, &re) && errors.Is(err, server.ErrRecordTooLarge):
		s.writeFail(w, http.StatusRequestEntityTooLarge, &ErrorResponse{Error: CodeTooLarge, Line: re.Line, Message: err.Error()})
	case errors.Is(err, errBodyBudget):
		w.Header().Set("Retry-After", s.retryAfter)
		s.writeFail(w, http.StatusTooManyRequests, &ErrorResponse{Error: CodeBackpressure,
			Message: fmt.Sprintf("request bodies in flight hold the limit of %d bytes (a batch split over partitions counts twice); retry later", s.inflight.limit)})
	case errors.As(err, &re) && errors.Is(err, streamconf.ErrSchemaMismatch):
		s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeSchemaMismatch, Line: re.Line, Field: re.Field, Message: err.Error()})
	case errors.Is(err, layout.ErrInvalidPartition):
		s.writeFail(w, http.StatusBadRequest, &ErrorResponse{Error: CodeInvalidPartition, Message: err.Error()})
	case errors.Is(err, streamconf.ErrContentMismatch):
		s.writeFail(w, http.StatusUnsupportedMediaType, &ErrorResponse{Error: CodeUnsupportedMediaType, Message: err.Error()})
	default:
		return false
	}
	return true
}
