package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/eosink/eosink/internal/ctxsleep"
	"github.com/eosink/eosink/internal/layout"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// DefaultMaxBuffered is the default bound of the bytes of kept batches.
const DefaultMaxBuffered = 128 << 20

// Polling of the producer's state while waiting for commits.
const (
	pollMin = 20 * time.Millisecond
	pollMax = time.Second
)

// Option configures a Client.
type Option func(*config)

type config struct {
	hc          *http.Client
	tls         *tls.Config
	token       string
	producer    string
	retry       Retry
	maxBuffered int64
	log         *slog.Logger
}

// WithHTTPClient sets the HTTP client; the default is a new http.Client
// without a timeout (every call is bounded by its ctx). A Timeout set here
// bounds each attempt; keep it above the service's wait timeout (30s by
// default) when using SendWait.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithToken sends "Authorization: Bearer <token>" on every request.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithProducer sets the producer id, which Init, Send, SendWait and Flush
// need: ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$. Use one id per live writer:
// a second Client with the same id fences the first at its Init.
func WithProducer(id string) Option { return func(c *config) { c.producer = id } }

// WithRetry sets the retry policy; zero fields take DefaultRetry's values.
func WithRetry(r Retry) Option { return func(c *config) { c.retry = r } }

// WithMaxBuffered bounds the bytes of batches kept until committed (bodies
// as sent); n <= 0 means DefaultMaxBuffered. A Send that would go over it
// waits for commits; see Send.
func WithMaxBuffered(n int64) Option { return func(c *config) { c.maxBuffered = n } }

// WithLogger receives retries and resends (debug and info) and fencing
// (warn). Nil, the default, discards.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// Client is a producer of one eosink service. It is safe for concurrent
// use: Sends on one stream are serialized, since sequence order matters;
// Sends on different streams run in parallel.
type Client struct {
	base        *url.URL
	hc          *http.Client
	token       string
	producer    string
	retry       Retry
	maxBuffered int64
	log         *slog.Logger

	mu      sync.Mutex // guards everything below and every stream's state
	epoch   int64
	inited  bool
	initing int // Inits in flight: a newer epoch seen meanwhile may be ours
	// initCut: an Init ended without an answer taken up (its ctx ended,
	// its retries ran out) after its request may have reached the
	// service, which bumps the epoch before the barrier: a newer epoch
	// seen since may be that Init's, not another writer's. Cleared when
	// an Init's answer is taken up.
	initCut  bool
	inits    uint64 // Init answers taken up: a state read across one is stale (staleLocked)
	fenced   bool   // terminal
	streams  map[string]*stream
	buffered int64         // bytes of kept batches and reservations
	space    chan struct{} // closed and replaced when buffered shrinks
}

// stream is the client's state of one stream. The fields other than name
// and sendLock are guarded by Client.mu.
type stream struct {
	name string
	// sendLock is held by whoever sends the stream's batches: one
	// request in flight per stream, in sequence order.
	sendLock chan struct{}

	next      int64    // sequence number of the next new batch
	committed int64    // highest sequence number known committed, -1 if none
	kept      []*batch // sent, not known committed; kept[i].seq == kept[0].seq+i
	broken    error    // set once the stream cannot go on (ErrSequenceLost)
}

// batch is one kept batch.
type batch struct {
	seq     int64
	body    []byte
	records int
	// confirmed: the service answered that it holds the batch. Reset when
	// it says it lost it (an expected_seq at or below seq).
	confirmed bool
	// maybeSent: an attempt may have reached the service (any answer
	// other than a refusal before the append). From then on the sequence
	// number belongs to this body for good: a slow earlier attempt may
	// still land.
	maybeSent bool
	committed bool
	ans       writeAnswer // the answer that confirmed it
}

func (s *stream) lock(ctx context.Context) error {
	select {
	case s.sendLock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stream) tryLock() bool {
	select {
	case s.sendLock <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *stream) unlock() { <-s.sendLock }

// New returns a Client of the service at baseURL (such as
// "http://127.0.0.1:8080"; a path is kept as a prefix).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("new client: parse base url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("new client: base url %q: want http(s)://host[:port][/prefix]", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.producer != "" && !layout.Producer(cfg.producer) {
		return nil, fmt.Errorf("new client: producer id %q: want ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", cfg.producer)
	}
	switch {
	case cfg.hc != nil && cfg.tls != nil:
		return nil, errors.New("new client: WithTLSConfig and WithHTTPClient: set TLS on the given client's transport instead")
	case cfg.tls != nil:
		cfg.hc = tlsHTTPClient(cfg.tls)
	case cfg.hc == nil:
		cfg.hc = &http.Client{}
	}
	if cfg.maxBuffered <= 0 {
		cfg.maxBuffered = DefaultMaxBuffered
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	return &Client{
		base: u, hc: cfg.hc, token: cfg.token, producer: cfg.producer, retry: cfg.retry.withDefaults(),
		maxBuffered: cfg.maxBuffered, log: cfg.log.With("producer", cfg.producer),
		streams: map[string]*stream{}, space: make(chan struct{}),
	}, nil
}

// Producer returns the producer id, "" without WithProducer.
func (c *Client) Producer() string { return c.producer }

// Epoch returns the epoch of the last Init, 0 before.
func (c *Client) Epoch() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// Init asks the service for a new epoch of the producer (POST
// /v1/producers/{id}/init), which fences every other Client with the same
// id, and takes up the service's sequence state: per stream, the next new
// batch gets next_seq. Call it once before sending. Called again, it fences
// the Client's own earlier epoch: batches kept are delivered with the new
// one, and those the service lost are resent from its next_seq.
//
// The service answers init only once every batch of the older epochs is
// prepared or aborted, so its next_seq is exactly what it holds: kept
// batches from next_seq on are resent, renumbered from next_seq if the
// service lost more than the client expected, and a stream broken by
// ErrSequenceLost is usable again. Send, SendWait and Flush re-init by
// themselves when the service expects a sequence number below every batch
// they keep (it lost batches it had confirmed).
//
// An Init that fails after its request may have reached the service (its
// ctx ended, its retries ran out) may still have taken effect: the next
// call that meets the newer epoch Inits again instead of taking it for
// another writer's and fencing the client.
func (c *Client) Init(ctx context.Context) (ProducerState, error) {
	c.mu.Lock()
	if err := c.checkLocked(false); err != nil {
		c.mu.Unlock()
		return ProducerState{}, fmt.Errorf("init producer: %w", err)
	}
	c.initing++
	gen := c.inits
	c.mu.Unlock()

	var ps ProducerState
	err := c.call(ctx, "init producer", request{method: http.MethodPost, path: "/v1/producers/" + c.producer + "/init"}, &ps)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.initing--
	if err != nil {
		c.initCut = true
		return ProducerState{}, err
	}
	if c.fenced {
		return ProducerState{}, fmt.Errorf("init producer: %w", ErrFenced)
	}
	if c.inited && ps.Epoch < c.epoch && gen != c.inits {
		// A newer Init answered first and took up the newer state.
		return ps, nil
	}
	// An older epoch than the client's with no other Init answered
	// meanwhile: the service lost the epochs since (its state store
	// rebuilt from manifests): its answer is what it holds.
	c.epoch = ps.Epoch
	c.inited = true
	c.initCut = false
	c.inits++
	for name, ss := range ps.Streams {
		c.adoptLocked(c.streamLocked(name), ss)
	}
	for name, st := range c.streams {
		if _, ok := ps.Streams[name]; !ok {
			c.adoptLocked(st, StreamState{NextSeq: 0, CommittedSeq: -1})
		}
	}
	return ps, nil
}

// adoptLocked takes up the service's state of st after an Init: it holds
// exactly the batches below next_seq (init is a barrier), and attempts
// made with the older epoch can no longer land, so kept batches from
// next_seq on may take new numbers.
func (c *Client) adoptLocked(st *stream, ss StreamState) {
	st.broken = nil
	c.trimLocked(st, ss.CommittedSeq)
	st.committed = ss.CommittedSeq
	if first := st.next - int64(len(st.kept)); ss.NextSeq < first {
		// The service lost batches it had confirmed, and more than the
		// client keeps: resend what it keeps, numbered from next_seq.
		c.log.Warn("service lost batches it had confirmed; renumbering the kept ones",
			"stream", st.name, "next_seq", ss.NextSeq, "kept_from", first, "kept", len(st.kept))
		for i, b := range st.kept {
			b.seq, b.confirmed = ss.NextSeq+int64(i), false
		}
		st.next = ss.NextSeq + int64(len(st.kept))
		return
	}
	switch {
	case ss.NextSeq > st.next:
		if len(st.kept) > 0 {
			c.log.Warn("service ahead of the batches kept: another writer used this producer id",
				"stream", st.name, "next_seq", ss.NextSeq, "kept_up_to", st.next-1)
		}
		st.next = ss.NextSeq
	case ss.NextSeq < st.next:
		// The service lost batches; the next delivery resends them.
		_ = c.rewindLocked(st, ss.NextSeq)
	}
}

// State returns the producer's state in the service (GET
// /v1/producers/{id}) and drops the kept batches it reports committed.
func (c *Client) State(ctx context.Context) (ProducerState, error) {
	c.mu.Lock()
	err := c.checkLocked(false)
	c.mu.Unlock()
	if err != nil {
		return ProducerState{}, fmt.Errorf("get producer: %w", err)
	}
	ps, gen, err := c.fetchState(ctx)
	if err != nil {
		return ProducerState{}, err
	}
	c.mu.Lock()
	_, err = c.observeLocked(ps, gen)
	c.mu.Unlock()
	return ps, err
}

// fetchState gets the producer's state, with retries, and the count of
// Init answers taken up before it was asked for (observeLocked). A state
// with an epoch newer than the client's after one of its Inits was cut
// (initCut) may show that Init's own epoch: the client finishes it (Inits
// again) and reads again, rather than take itself for fenced.
func (c *Client) fetchState(ctx context.Context) (ProducerState, uint64, error) {
	for inits := 0; ; inits++ {
		c.mu.Lock()
		gen := c.inits
		c.mu.Unlock()
		ps, err := c.fetchStateOnly(ctx)
		if err != nil {
			return ps, gen, err
		}
		c.mu.Lock()
		cut := c.ownNewerLocked(ps.Epoch)
		c.mu.Unlock()
		if !cut || inits == maxReinits {
			// Past the bound (Inits cut again and again), observeLocked
			// judges the newer epoch.
			return ps, gen, nil
		}
		if err := c.finishCutInit(ctx, fmt.Sprintf("service has epoch %d", ps.Epoch)); err != nil {
			return ProducerState{}, gen, err
		}
	}
}

// ownNewerLocked reports whether epoch, newer than the client's, may be
// its own: an Init of the client was cut before its answer (initCut) and
// none is in flight.
func (c *Client) ownNewerLocked(epoch int64) bool {
	return c.inited && c.initCut && c.initing == 0 && epoch > c.epoch
}

// finishCutInit Inits again on the client's own behalf: the service holds
// an epoch newer than the client's, which an Init of the client cut
// before its answer may have taken. The answer says what the service
// holds (adoptLocked). Should another writer have taken the producer id
// meanwhile, this Init fences it, as an application retrying its Init
// would; the cut Init is finished once (its answer clears initCut).
func (c *Client) finishCutInit(ctx context.Context, why string) error {
	c.log.Warn("newer epoch after an Init of this client was cut: initialising again", "why", why)
	if _, err := c.Init(ctx); err != nil {
		return fmt.Errorf("finish an init cut before its answer (%s): %w", why, err)
	}
	return nil
}

func (c *Client) fetchStateOnly(ctx context.Context) (ProducerState, error) {
	s := streak{pol: c.retry}
	for readySeen := false; ; {
		var ps ProducerState
		err := c.call(ctx, "get producer", request{method: http.MethodGet, path: "/v1/producers/" + c.producer}, &ps)
		if !errors.Is(err, ErrNotFound) || readySeen {
			if errors.Is(err, ErrNotFound) {
				err = fmt.Errorf("%w: %w", ErrUnknownProducer, err)
			}
			return ps, err
		}
		// While it recovers, the service knows no producer yet and answers
		// 404 rather than 503: believe a 404 only if it came after /readyz
		// said ready.
		rerr := c.do(ctx, request{method: http.MethodGet, path: "/readyz"}, nil)
		var ae *APIError
		var retryAfter time.Duration
		switch {
		case rerr == nil:
			readySeen = true
			continue
		case ctx.Err() != nil:
			return ps, fmt.Errorf("get producer: %w", ctx.Err())
		case errors.As(rerr, &ae) && ae.Status != http.StatusServiceUnavailable:
			return ps, fmt.Errorf("%w: %w", ErrUnknownProducer, err)
		case ae != nil:
			retryAfter = ae.RetryAfter
		}
		d, ok := s.next(retryAfter)
		if !ok {
			return ps, fmt.Errorf("get producer: giving up after %d attempts: %w", s.n, rerr)
		}
		c.log.Debug("retrying", "op", "get producer", "attempt", s.n, "wait", d, "err", rerr)
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return ps, fmt.Errorf("get producer: %w", err)
		}
	}
}

// observeLocked applies a state of the producer read from the service
// (gen: c.inits before it was asked for): kept batches it reports
// committed are dropped, a newer epoch fences the client, unless the read
// is stale (staleLocked). It returns the
// streams that need a delivery: kept batches the service does not confirm
// holding (lost in a crash or never confirmed).
func (c *Client) observeLocked(ps ProducerState, gen uint64) ([]*stream, error) {
	if c.fenced {
		return nil, ErrFenced
	}
	if c.staleLocked(gen) {
		return nil, nil
	}
	if c.inited && ps.Epoch > c.epoch && c.initing == 0 {
		c.fenceLocked(fmt.Sprintf("service has epoch %d, this client %d", ps.Epoch, c.epoch))
		return nil, ErrFenced
	}
	if c.inited && ps.Epoch < c.epoch {
		// Read after this client's Init answered: the service lost the
		// epoch (its state store, rebuilt from manifests, knows none
		// handed out after the producer's last commit). Nothing in it is
		// believed either (its committed_seq may count an incarnation
		// forgotten before that Init), and waiting would not change it.
		return nil, fmt.Errorf("%w: service has epoch %d, this client %d (the service lost it): call Init", ErrInvalidEpoch, ps.Epoch, c.epoch)
	}
	var need []*stream
	for name, st := range c.streams {
		ss, ok := ps.Streams[name]
		if !ok {
			ss = StreamState{NextSeq: 0, CommittedSeq: -1}
		}
		c.trimLocked(st, ss.CommittedSeq)
		for _, b := range st.kept {
			if !b.confirmed || b.seq >= ss.NextSeq {
				need = append(need, st)
				break
			}
		}
	}
	return need, nil
}

// staleLocked reports whether a state read was sent before this client's
// newest Init answered (an Init answer taken up since gen, c.inits before
// the read): nothing in it is believed, whatever its epoch. Its
// committed_seq may count another incarnation's batches (the producer
// forgotten, by DELETE or expiry, and initialised again), whose numbers
// the batches sent since reuse: trimmed by it, they would be dropped
// uncommitted, and a crash would lose them with no resend; before they
// are sent, it set the stream's committed above them and Flush returned
// nil with them kept. Its epoch tells nothing: it may even equal the
// Init's (a service that lost its store hands out lower epochs again,
// and a DELETE raises the floor of new producers' epochs back to the
// read's). Nor does its epoch fence the client when newer: read before
// the service lost the epoch (its state store rebuilt from the
// manifests), it may be this client's own older one, above the one its
// Init took since; taken for a fence, it stopped the client for good
// (I12). Should another writer have taken the producer since, the
// service refuses the next write (producer_fenced), which fences the
// client then.
func (c *Client) staleLocked(gen uint64) bool {
	return c.inited && gen != c.inits
}

// Stats counts the batches a Client keeps.
type Stats struct {
	Batches     int   // kept: sent, not known committed
	Bytes       int64 // their bodies
	Unconfirmed int   // of which the service has not confirmed holding
}

// Stats returns what the client keeps now.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Stats
	for _, st := range c.streams {
		for _, b := range st.kept {
			s.Batches++
			s.Bytes += int64(len(b.body))
			if !b.confirmed {
				s.Unconfirmed++
			}
		}
	}
	return s
}

// checkLocked returns why the client cannot work: no producer, fenced,
// or (needInit) not initialised.
func (c *Client) checkLocked(needInit bool) error {
	switch {
	case c.producer == "":
		return ErrNoProducer
	case c.fenced:
		return ErrFenced
	case needInit && !c.inited:
		return ErrNotInitialized
	}
	return nil
}

// sendableLocked reports why batches of st cannot be sent now: the
// client's state (checkLocked) or the stream's sticky failure.
func (c *Client) sendableLocked(st *stream) error {
	if err := c.checkLocked(true); err != nil {
		return err
	}
	return st.broken
}

// streamLocked returns the state of a stream, creating it.
func (c *Client) streamLocked(name string) *stream {
	st := c.streams[name]
	if st == nil {
		st = &stream{name: name, sendLock: make(chan struct{}, 1), committed: -1}
		c.streams[name] = st
	}
	return st
}

// trimLocked drops the kept batches up to committed.
func (c *Client) trimLocked(st *stream, committed int64) {
	if committed <= st.committed {
		return
	}
	st.committed = committed
	i := 0
	for i < len(st.kept) && st.kept[i].seq <= committed {
		b := st.kept[i]
		b.confirmed, b.committed = true, true
		c.releaseLocked(int64(len(b.body)))
		st.kept[i] = nil
		i++
	}
	st.kept = st.kept[i:]
	if len(st.kept) == 0 {
		st.kept = nil // let the array go
	}
}

// releaseLocked gives back n buffered bytes and wakes waiting Sends.
func (c *Client) releaseLocked(n int64) {
	if n <= 0 {
		return
	}
	c.buffered -= n
	close(c.space)
	c.space = make(chan struct{})
}

// behindLocked reports whether the service expects seq below every batch
// st keeps: it lost batches it had confirmed, which only an Init (whose
// answer is what the service holds) can sort out.
func (c *Client) behindLocked(st *stream, seq int64) bool {
	return st.broken == nil && seq < st.next-int64(len(st.kept))
}

// rewindLocked handles "the service expects seq": every kept batch from
// seq on is marked unconfirmed, to be resent in order.
func (c *Client) rewindLocked(st *stream, seq int64) error {
	if st.broken != nil {
		return st.broken
	}
	first := st.next - int64(len(st.kept))
	if seq < first || seq > st.next {
		st.broken = fmt.Errorf("stream %s: service expects seq %d, this client keeps %d..%d: %w",
			st.name, seq, first, st.next-1, ErrSequenceLost)
		return st.broken
	}
	for _, b := range st.kept {
		if b.seq >= seq {
			b.confirmed = false
		} else if !b.confirmed {
			// The service holds every seq below the one it expects.
			b.confirmed = true
		}
	}
	return nil
}

// fenceLocked makes the client a zombie: kept batches are dropped.
func (c *Client) fenceLocked(why string) {
	if c.fenced {
		return
	}
	c.fenced = true
	var batches int
	var bytes int64
	for _, st := range c.streams {
		for _, b := range st.kept {
			batches++
			bytes += int64(len(b.body))
		}
		st.kept = nil
	}
	c.log.Warn("producer fenced: dropping kept batches", "why", why, "batches", batches, "bytes", bytes)
	c.releaseLocked(bytes)
}
