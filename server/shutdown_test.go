package server

import (
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/invariant"
)

// A stop (the SIGTERM path: Shutdown, a final checkpoint, then Close) at
// the moment the start reports ready: the start is held in its last log
// line, after ready, before the coordinator loop runs. A batch accepted
// then, and a checkpoint asked for then, are served once the start goes
// on: Shutdown's final checkpoint commits the batch (not a not_ready
// answer, nor a hang), and a restart finds it committed once.
func TestShutdownAtReady(t *testing.T) {
	r := newRig(t, nil)
	e, release := r.openHeld("recovery done")
	if !e.Status().Ready {
		close(release)
		t.Fatal("not ready at the start's last log line")
	}
	res := mustSend(t, e, nil, "s", 1, 2)
	asked := commitInBackground(e, res.Checkpoint)
	stopped := shutdownInBackground(e)
	time.Sleep(20 * time.Millisecond)
	if _, err := send(e, nil, "s", 2, 1); err == nil {
		close(release)
		t.Fatal("a write accepted after Shutdown began")
	}
	close(release)
	if err := <-asked; err != nil {
		t.Fatalf("the checkpoint asked for at ready: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown at ready: %v", err)
	}
	r.e, r.tweak = nil, nil
	r.start(nil)
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Stream: "s", Seq: 1}: true}, Exact: true})
}

// A stop during a start that is rebuilding the store (held in the
// rebuild's log line): Shutdown asks for no final checkpoint (not ready)
// and returns; the start goes on into a closed engine, which must not
// mark the store rebuilt (the next start rebuilds again) nor accept
// writes; the next start serves the committed batch as a duplicate.
func TestShutdownDuringRebuild(t *testing.T) {
	r := newRig(t, nil)
	e, p, ck := r.startCommitted(t)
	r.stopLosingStore()
	e, release := r.openHeld("the state store is behind the destination (lost, or an older copy): rebuilding producers from the manifests")
	stopped := shutdownInBackground(e)
	time.Sleep(20 * time.Millisecond)
	close(release)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Shutdown during the rebuild: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown during the rebuild: no return")
	}
	if _, err := send(e, p, "s", 1, 1); err == nil {
		t.Fatal("a write accepted by an engine stopped during its start")
	}
	r.e = nil
	if through, err := rebuiltThrough(t, r.storePath); err != nil || through != 0 {
		t.Fatalf("the store after a start stopped in its rebuild: mark %d, %v; want none (the next start rebuilds again)", through, err)
	}
	r.tweak = nil
	e = r.start(nil)
	if res, err := send(e, p, "s", 0, 1); err != nil || !res.Duplicate || !res.Committed {
		t.Fatalf("the resend of batch 0 (committed in %d) after a start stopped in its rebuild: %+v %v", ck, res, err)
	}
	mustSend(t, e, p, "s", 1, 1)
	r.commit()
	r.check(invariant.Expect{Must: map[invariant.BatchID]bool{{Producer: "p", Stream: "s", Seq: 0}: true, {Producer: "p", Stream: "s", Seq: 1}: true}, Exact: true})
}
