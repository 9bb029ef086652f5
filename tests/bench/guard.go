package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errDiskLow stops a run before it fills the filesystem the harness
// shares with everything else on the machine.
var errDiskLow = errors.New("free disk space below --min-free")

// freeBytes returns the space available to this user on dir's filesystem.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// guardDisk cancels the returned context, with errDiskLow as its cause,
// when free space under dir drops below min. Checked every 500 ms.
func guardDisk(ctx context.Context, dir string, min int64) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			if free, err := freeBytes(dir); err == nil && free < min {
				cancel(fmt.Errorf("%w: %.1f GiB left on the filesystem of %s", errDiskLow, float64(free)/(1<<30), dir))
				return
			}
			select {
			case <-done:
				return
			case <-gctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return gctx, func() { once.Do(func() { close(done); cancel(nil) }) }
}

// consumer deletes committed files the way a downstream reader that moves
// them away would, so that a long run does not fill the disk: every
// interval it reads the manifests of <dest>/_manifests/<node>/ it has not
// seen and removes the files they list. A manifest is written after every
// file of its checkpoint has its final name, so only committed files go.
type consumer struct {
	dest, node string
	seen       map[string]bool
	Files      int
	Bytes      int64
	stop       chan struct{}
	done       chan struct{}
}

func startConsumer(dest, node string, every time.Duration) *consumer {
	c := &consumer{dest: dest, node: node, seen: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.sweep()
			}
		}
	}()
	return c
}

// Stop ends the consumer; it reports what it removed.
func (c *consumer) Stop() (files int, bytes int64) {
	close(c.stop)
	<-c.done
	return c.Files, c.Bytes
}

func (c *consumer) sweep() {
	dir := filepath.Join(c.dest, "_manifests", c.node)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if c.seen[e.Name()] || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var m struct {
			Files []struct {
				Path  string `json:"path"`
				Bytes int64  `json:"bytes"`
			} `json:"files"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue // being written? try again next time
		}
		c.seen[e.Name()] = true
		for _, f := range m.Files {
			p := filepath.Join(c.dest, filepath.FromSlash(f.Path))
			if rel, err := filepath.Rel(c.dest, p); err != nil || strings.HasPrefix(rel, "..") || strings.HasPrefix(rel, "_manifests") {
				continue
			}
			if os.Remove(p) == nil {
				c.Files++
				c.Bytes += f.Bytes
			}
		}
	}
}
