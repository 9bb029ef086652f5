package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npm icebird 0.3.1 reads a table over fetch(): it turns s3://b/k into
// https://b.s3.amazonaws.com/k and can't fetch file:// at all. The script
// below wraps fetch so that every location in the destination is served
// by this test over loopback HTTP (Range requests included, as hyparquet
// reads Parquet footers with them); icebird's own logic — the version
// hint, metadata JSON, Avro manifest list and manifests, Parquet — runs
// unchanged.
const icebirdScript = `
const [,, module, tableUrl, loc, base] = process.argv
const realFetch = globalThis.fetch
globalThis.fetch = (url, init) => {
  let u = String(url)
  const m = u.match(/^https:\/\/([^./]+)\.s3\.amazonaws\.com\/(.*)$/)
  if (m) u = 's3://' + m[1] + '/' + m[2]
  if (!u.startsWith(loc + '/')) throw new Error('fetch outside the destination: ' + u)
  return realFetch(base + '/' + u.slice(loc.length + 1), init)
}
const { icebergRead } = await import(module)
const rows = await icebergRead({ tableUrl })
for (const r of rows) console.log(JSON.stringify(r, (k, v) => typeof v === 'bigint' ? Number(v) : v))
`

// icebirdModule returns icebird's entry module, or "" when it is not
// installed (scripts/icebird.sh installs it).
func icebirdModule() string {
	dir := os.Getenv("EOSINK_ICEBIRD")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "eosink", "icebird", "node_modules", "icebird")
	}
	mod := filepath.Join(dir, "src", "index.js")
	if _, err := os.Stat(mod); err != nil {
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	return mod
}

// checkIcebird reads stream's table with icebird and checks it holds
// exactly want. Without icebird or node it says so and checks nothing,
// unless CI=true, where that fails the test.
func checkIcebird(t testing.TB, d tableDest, want map[batchKey]int) {
	t.Helper()
	mod := icebirdModule()
	if mod == "" {
		if os.Getenv("CI") == "true" {
			t.Errorf("icebird: not installed (run scripts/icebird.sh)")
		} else {
			t.Logf("icebird: not installed (run scripts/icebird.sh): its check is skipped")
		}
		return
	}
	rows, err := readIcebird(t.Context(), t, mod, d, tableStream)
	if err != nil {
		t.Errorf("icebird: %v", err)
		return
	}
	checkTableRows(t, "icebird", rows, want)
	report(t, "icebird read %d rows of %d batches, each record once", len(rows), len(want))
}

func readIcebird(ctx context.Context, t testing.TB, mod string, d tableDest, stream string) ([]tableRecord, error) {
	if loc, err := d.newest(ctx, stream); err != nil || loc == "" {
		return nil, err // no table yet: nothing to read
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, err := d.read(r.Context(), strings.TrimPrefix(r.URL.Path, "/"))
		if errors.Is(err, os.ErrNotExist) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	script := filepath.Join(t.TempDir(), "read.mjs")
	if err := os.WriteFile(script, []byte(icebirdScript), 0o644); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", script, mod, d.loc+"/"+stream, d.loc, "http://"+ln.Addr().String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New("node: " + err.Error() + ": " + lastLine(stderr.String()))
	}
	var rows []tableRecord
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, errors.New("icebird row " + sc.Text() + ": " + err.Error())
		}
		rows = append(rows, tableRecord{batchKey{P: r.P, S: r.S, Q: r.Q}, r.I})
	}
	return rows, sc.Err()
}
