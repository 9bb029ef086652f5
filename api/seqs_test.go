package api

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestLocateSeq(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.waitReady()
	write := func(epoch int64, seq int, body string) {
		t.Helper()
		expectStatus(t, r.admin("POST", "/v1/streams/clicks/records", body, "Content-Type", "application/x-ndjson",
			"Producer-Id", "p1", "Producer-Epoch", strconv.FormatInt(epoch, 10), "Producer-Seq", strconv.Itoa(seq)), http.StatusAccepted)
	}
	ep := r.initProducer("p1")
	write(ep, 0, "{\"a\":0}\n")
	write(ep, 1, "{\"a\":1}\n")
	first := r.checkpoint()
	write(ep, 2, "{\"a\":2}\n")
	second := r.checkpoint()

	got := getOK[SeqLocations](r, "/v1/producers/p1/streams/clicks/seqs/2")
	if len(got.Locations) != 1 || !got.Complete {
		t.Fatalf("seq 2: %+v", got)
	}
	l := got.Locations[0]
	if l.Checkpoint != second.ID || l.First != 2 || l.Last != 2 || l.Incarnation == nil || l.Epoch == nil || *l.Epoch != ep ||
		!strings.HasPrefix(l.Path, "clicks/") || l.Manifest == "" || l.CommittedAt == nil {
		t.Fatalf("seq 2: %+v", l)
	}
	// The file holds it: download it.
	if body := r.do("GET", "/v1/files/"+l.Path, "").Body.String(); body != "{\"a\":2}\n" {
		t.Fatalf("file %s holds %q", l.Path, body)
	}

	// Deleted and created again: seq 0 is now in two incarnations, the
	// newest first.
	expectStatus(t, r.admin("DELETE", "/v1/producers/p1", ""), http.StatusNoContent)
	ep2 := r.initProducer("p1")
	write(ep2, 0, "{\"b\":0}\n")
	third := r.checkpoint()
	got = decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/0", ""))
	if len(got.Locations) != 2 || got.Locations[0].Checkpoint != third.ID || got.Locations[1].Checkpoint != first.ID ||
		*got.Locations[0].Incarnation <= *got.Locations[1].Incarnation {
		t.Fatalf("seq 0: %+v", got)
	}

	// Seq 1 of the new incarnation is not committed yet: the old one's is
	// the only location, labelled as such.
	write(ep2, 1, "{\"b\":1}\n")
	write(ep2, 2, "{\"b\":2}\n")
	write(ep2, 3, "{\"b\":3}\n")
	got = decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/1", ""))
	if len(got.Locations) != 1 || got.Locations[0].Checkpoint != first.ID || *got.Locations[0].Incarnation == *decode[SeqLocations](t, r.do("GET", "/v1/producers/p1/streams/clicks/seqs/0", "")).Locations[0].Incarnation {
		t.Fatalf("seq 1: %+v", got)
	}
	// Not committed yet, never sent: 404 saying which.
	for seq, want := range map[string]string{"3": "not committed yet", "7": "expects 4 next"} {
		rec := r.do("GET", "/v1/producers/p1/streams/clicks/seqs/"+seq, "")
		if e := decode[ErrorResponse](t, rec); rec.Code != http.StatusNotFound || e.Error != CodeNotFound || !strings.Contains(e.Message, want) {
			t.Errorf("seq %s: %d %+v, want 404 %q", seq, rec.Code, e, want)
		}
	}
	for target, code := range map[string]string{
		"/v1/producers/p1/streams/clicks/seqs/-1":  CodeInvalidID,
		"/v1/producers/p1/streams/clicks/seqs/x":   CodeInvalidID,
		"/v1/producers/p1/streams/Clicks/seqs/1":   CodeInvalidStream,
		"/v1/producers/p%20/streams/clicks/seqs/1": CodeInvalidProducer,
	} {
		rec := r.do("GET", target, "")
		if rec.Code != http.StatusBadRequest || decode[ErrorResponse](t, rec).Error != code {
			t.Errorf("%s: %d %s, want 400 %s", target, rec.Code, rec.Body, code)
		}
	}
}
