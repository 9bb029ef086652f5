package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/layout"
	"github.com/eosink/eosink/recovery"
	"github.com/eosink/eosink/server"
)

// twoNodes returns a destination holding the checkpoints of node n1 (this
// node) and node n2, with n1's lease live and n2's expired.
func twoNodes(t *testing.T, now time.Time) *memReader {
	t.Helper()
	data := map[string][]byte{}
	commit := func(node string, id uint64, stream string) {
		p := fmt.Sprintf("%s/dt=2026-11-29/hour=09/%s", stream, layout.PartName(node, id, 0, "ndjson"))
		data[p] = []byte("{\"a\":1}\n{\"a\":2}\n")
		m, err := recovery.BuildManifest(node, &recovery.Checkpoint{ID: id, PreparedAt: now,
			Files: []committer.File{{Stream: stream, Final: p, Bytes: 16, Records: 2, CRC32C: "00000000"}}})
		if err != nil {
			t.Fatal(err)
		}
		data[layout.ManifestName(node, id)] = m
	}
	commit("n1", 1, "clicks")
	commit("n2", 1, "clicks")
	commit("n2", 2, "orders")
	for node, exp := range map[string]time.Time{"n1": now.Add(time.Minute), "n2": now.Add(-time.Minute)} {
		b, err := json.Marshal(server.Lease{Node: node, Incarnation: "inc-" + node, Listen: "127.0.0.1:80" + node[1:], RenewedAt: exp.Add(-30 * time.Second), ExpiresAt: exp})
		if err != nil {
			t.Fatal(err)
		}
		data[layout.LeaseName(node)] = b
	}
	return newMemReader(data, now)
}

// TestTwoNodesUI: the UI covers every node of the destination: a nodes
// page with each lease's state, folders filtered by node, and another
// node's checkpoints from its manifests.
func TestTwoNodesUI(t *testing.T) {
	now := time.Now()
	files := twoNodes(t, now)
	h := newFakeUI(t, files, nil, nil, func(c *Config) { c.Node = "n1" })
	get := func(target string) string {
		t.Helper()
		rec := serveH(h, req("GET", target, ""))
		expectCode(t, rec, http.StatusOK)
		return rec.Body.String()
	}

	body := get("/ui/nodes")
	expectContains(t, body, `data-name="n1" data-state="live"`, `data-name="n2" data-state="expired"`, "inc-n2", "127.0.0.1:802",
		`href="/ui/checkpoints?node=n2"`, `href="/ui/files/?node=n2"`, "this node")

	// A folder filtered by node: n2's file only, sub-folders keep the filter.
	body = get("/ui/files/clicks/dt=2026-11-29/hour=09/?node=n2")
	if rows := rowNames(body); len(rows) != 1 || !strings.HasPrefix(rows[0], "part-n2-") {
		t.Fatalf("n2's rows %v", rows)
	}
	expectContains(t, body, `id="node-filter"`, `href="/ui/checkpoints/1?node=n2"`)
	if rows := rowNames(get("/ui/files/clicks/dt=2026-11-29/hour=09/")); len(rows) != 2 {
		t.Fatalf("every node's rows %v", rows)
	}
	expectContains(t, get("/ui/files/?node=n2"), `href="/ui/files/clicks/?node=n2"`)

	// n2's checkpoints from its manifests; n1's stay the state store's.
	body = get("/ui/checkpoints?node=n2")
	if ids := ckptRowRE.FindAllStringSubmatch(body, -1); len(ids) != 2 || ids[0][1] != "1" || ids[1][1] != "2" {
		t.Fatalf("n2's checkpoints %v", ids)
	}
	expectContains(t, body, `href="/ui/checkpoints/2?node=n2"`)
	if ids := ckptRowRE.FindAllStringSubmatch(get("/ui/checkpoints?node=n2&limit=1"), -1); len(ids) != 1 {
		t.Fatalf("one page of n2's checkpoints: %v", ids)
	}
	body = get("/ui/checkpoints/2?node=n2")
	expectContains(t, body, "orders/dt=2026-11-29/hour=09/part-n2-", "A checkpoint of node", `href="/ui/files/_manifests/n2/00000000000000000002.json"`)
	expectCode(t, serveH(h, req("GET", "/ui/checkpoints/3?node=n2", "")), http.StatusNotFound)
	// A file of n2 links its checkpoint to n2's manifest page.
	expectContains(t, get("/ui/files/orders/dt=2026-11-29/hour=09/"+layout.PartName("n2", 2, 0, "ndjson")), `href="/ui/checkpoints/2?node=n2"`)
}
