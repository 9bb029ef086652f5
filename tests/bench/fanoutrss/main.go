// Command fanoutrss measures the peak RSS (VmHWM) of an eosink binary
// that is sent NDJSON bodies whose records all fall into distinct
// partitions ({field:k}): issue 22 item 2. It starts the binary on a
// loopback port with a fresh data dir, configures the stream, sends the
// bodies (concurrently with -n), and prints VmHWM before and after with
// each answer's status.
//
//	go build -o /tmp/eosink ./cmd/eosink
//	go run ./tests/bench/fanoutrss -bin /tmp/eosink -mib 60 -n 1
//	go run ./tests/bench/fanoutrss -bin /tmp/eosink -mib 60 -distinct 400
//
// Measured on the 2-core dev box (60 MiB, 4,573,260 records; VmHWM from
// 22-23 MB idle), before -> after issue 22's write-time bounds:
//
//	every record its own partition, 1 body:  1,036 MB (429 after 47 s) -> 147 MB (400 at record 1001, 2.3 s)
//	every record its own partition, 2 bodies: 2,090 MB (connections cut) -> 244 MB (both 400, 4.4 s)
//	400 partitions, 6,469,367 records:          375 MB (202)              -> 270 MB (202)
//
// What is left is the body itself (its read steps and one joined copy,
// held against --max-inflight-body) and, when it fits, one buffer of its
// pieces (held too) and the 256 KiB staging buffer of each partition.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	bin := flag.String("bin", "", "eosink binary")
	mib := flag.Int("mib", 60, "body size in MiB")
	n := flag.Int("n", 1, "bodies sent at once")
	distinct := flag.Int("distinct", 0, "distinct partitions of a body (k = record number modulo this); 0: every record its own")
	flag.Parse()
	if err := run(*bin, *mib, *n, *distinct); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(bin string, mib, n, distinct int) error {
	dir, err := os.MkdirTemp("", "fanoutrss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data-dir", filepath.Join(dir, "data"), "--checkpoint-interval", "0",
		"--max-body", "64MiB", "--max-inflight-body", "1GiB", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	for i := 0; ; i++ {
		if r, err := http.Get(base + "/readyz"); err == nil && r.StatusCode == 200 {
			r.Body.Close()
			break
		}
		if i > 200 {
			return fmt.Errorf("not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/streams/fan", strings.NewReader(`{"format":"ndjson","partition":"k={field:k}"}`))
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 {
		return fmt.Errorf("put stream: %d %s", r.StatusCode, b)
	}
	// The PUT applies at the next barrier.
	if r, err := http.Post(base+"/v1/checkpoints", "application/json", nil); err == nil {
		r.Body.Close()
	}
	var body bytes.Buffer
	for i := 0; body.Len() < mib<<20-32; i++ {
		body.WriteString(`{"k":`)
		k := i
		if distinct > 0 {
			k = i % distinct
		}
		body.WriteString(strconv.Itoa(k))
		body.WriteString("}\n")
	}
	records := bytes.Count(body.Bytes(), []byte{'\n'})
	before := hwm(cmd.Process.Pid)
	var wg sync.WaitGroup
	out := make([]string, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := http.Post(base+"/v1/streams/fan/records", "application/x-ndjson", bytes.NewReader(body.Bytes()))
			if err != nil {
				out[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if len(b) > 160 {
				b = b[:160]
			}
			out[i] = fmt.Sprintf("%d %s", r.StatusCode, bytes.TrimSpace(b))
		}()
	}
	wg.Wait()
	fmt.Printf("body %d bytes, %d records, %d at once, %v\n", body.Len(), records, n, time.Since(start).Round(time.Millisecond))
	for _, s := range out {
		fmt.Println("answer:", s)
	}
	fmt.Printf("VmHWM before %s, after %s\n", before, hwm(cmd.Process.Pid))
	return nil
}

func hwm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			return strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return "?"
}
