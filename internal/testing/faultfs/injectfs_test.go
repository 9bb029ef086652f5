package faultfs

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/spf13/afero"
)

// step is one operation of a workload and what it returned.
type step struct {
	kind OpKind
	err  error
}

// workload makes a file final the way production code does, then lists and
// removes it. Every step is exactly one InjectFS operation; it keeps going
// after errors, skipping steps that need a file it could not open, and
// returns the steps it ran.
func workload(fs afero.Fs) []step {
	var steps []step
	do := func(kind OpKind, err error) bool {
		steps = append(steps, step{kind, err})
		return err == nil
	}
	do(OpMkdir, fs.MkdirAll("/d", 0o755))
	f, err := fs.Create("/d/f.tmp")
	if do(OpOpen, err) {
		_, err = f.Write([]byte("hello "))
		do(OpWrite, err)
		_, err = f.WriteString("world")
		do(OpWrite, err)
		do(OpSync, f.Sync())
		do(OpClose, f.Close())
	}
	do(OpRename, fs.Rename("/d/f.tmp", "/d/f"))
	d, err := fs.Open("/d")
	if do(OpOpen, err) {
		do(OpSync, d.Sync())
		_, err = d.Readdirnames(-1)
		do(OpRead, err)
		do(OpClose, d.Close())
	}
	_, err = fs.Stat("/d")
	do(OpStat, err)
	do(OpRemove, fs.RemoveAll("/d/f"))
	return steps
}

// workloadCounts returns the operations workload runs when nothing fails.
func workloadCounts() map[OpKind]int64 {
	return map[OpKind]int64{
		OpOpen: 2, OpWrite: 2, OpSync: 2, OpClose: 2, OpRename: 1,
		OpRemove: 1, OpMkdir: 1, OpTruncate: 0, OpRead: 1, OpStat: 1, OpSetAttr: 0,
	}
}

func TestInjectFSCount(t *testing.T) {
	for run := range 2 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			fs := NewInjectFS(NewCrashFS(), nil)
			for _, s := range workload(fs) {
				if s.err != nil {
					t.Fatalf("%s: %v", s.kind, s.err)
				}
			}
			got := map[OpKind]int64{}
			var total int64
			for k := range OpKind(numKinds) {
				got[k] = fs.Count(Kinds(k))
				total += got[k]
			}
			if want := workloadCounts(); !maps.Equal(got, want) {
				t.Errorf("counts = %v, want %v", got, want)
			}
			if all := fs.Count(AllKinds); all != total || all != 13 {
				t.Errorf("Count(AllKinds) = %d, want 13 (sum %d)", all, total)
			}
			if got := fs.Count(Kinds(OpWrite, OpSync)); got != 4 {
				t.Errorf("Count(write, sync) = %d, want 4", got)
			}
		})
	}
}

// TestFailNthSweep fails each operation of the chosen kinds in turn, as a
// sweep in an engine test does, and checks exactly that operation failed,
// with the chosen errno, in the OS's error type.
func TestFailNthSweep(t *testing.T) {
	tests := []struct {
		kinds KindSet
		err   syscall.Errno
	}{
		{Kinds(OpWrite), syscall.ENOSPC},
		{Kinds(OpSync), syscall.EIO},
		{Kinds(OpRename, OpRemove), syscall.EIO},
		{Kinds(OpOpen, OpClose), syscall.EIO},
		{AllKinds, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.kinds.String(), func(t *testing.T) {
			counter := NewInjectFS(NewCrashFS(), nil)
			workload(counter)
			total := counter.Count(tt.kinds)
			for n := int64(0); n <= total; n++ {
				inj := FailNth(n, tt.kinds, tt.err)
				steps := workload(NewInjectFS(NewCrashFS(), inj))
				op, fired := inj.Fired()
				if n == total {
					if fired {
						t.Errorf("n=%d: fired at %v past the last operation", n, op)
					}
					for i, s := range steps {
						if s.err != nil {
							t.Errorf("n=%d: step %d %s: %v", n, i, s.kind, s.err)
						}
					}
					continue
				}
				if !fired {
					t.Fatalf("n=%d: did not fire", n)
				}
				// The failed step is the n-th of the chosen kinds; any
				// later errors follow from it and carry other errnos.
				failed, seen := -1, int64(0)
				for i, s := range steps {
					if errors.Is(s.err, tt.err) {
						if failed >= 0 {
							t.Errorf("n=%d: steps %d and %d both failed with %v", n, failed, i, tt.err)
						}
						failed = i
						if seen != n {
							t.Errorf("n=%d: failed the %d-th %v operation", n, seen, tt.kinds)
						}
					}
					if failed < 0 && tt.kinds.Has(s.kind) {
						seen++
					}
				}
				if failed < 0 {
					t.Fatalf("n=%d: no step failed with %v: %v", n, tt.err, steps)
				}
				s := steps[failed]
				if op.Kind != s.kind || op.Index != int64(failed) {
					t.Errorf("n=%d: Fired() = %v, want #%d %s", n, op, failed, s.kind)
				}
				var pe *os.PathError
				var le *os.LinkError
				if s.kind == OpRename && !errors.As(s.err, &le) {
					t.Errorf("n=%d: err = %T, want *os.LinkError", n, s.err)
				}
				if s.kind != OpRename && !errors.As(s.err, &pe) {
					t.Errorf("n=%d: err = %T, want *os.PathError", n, s.err)
				}
			}
		})
	}
}

func TestFailNthErrors(t *testing.T) {
	tests := []struct {
		name     string
		kind     OpKind
		op       func(afero.Fs) error
		wantOp   string
		wantPath string
	}{
		{"stat", OpStat, func(fs afero.Fs) error { _, err := fs.Stat("/f"); return err }, "stat", "/f"},
		{"open", OpOpen, func(fs afero.Fs) error { _, err := fs.Open("/f"); return err }, "open", "/f"},
		{"mkdir", OpMkdir, func(fs afero.Fs) error { return fs.Mkdir("/d", 0o755) }, "mkdir", "/d"},
		{"chmod", OpSetAttr, func(fs afero.Fs) error { return fs.Chmod("/f", 0o600) }, "chmod", "/f"},
		{"truncate", OpTruncate, func(fs afero.Fs) error {
			f, err := fs.OpenFile("/f", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(0)
		}, "truncate", "/f"},
		{"read", OpRead, func(fs afero.Fs) error {
			f, err := fs.Open("/f")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.ReadAt(make([]byte, 1), 0)
			return err
		}, "read", "/f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crash := NewCrashFS()
			writeFile(t, crash, "/f", "hello", false)
			err := tt.op(NewInjectFS(crash, FailNth(0, Kinds(tt.kind), syscall.EIO)))
			var pe *os.PathError
			if !errors.As(err, &pe) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("err = %v, want *os.PathError wrapping EIO", err)
			}
			if pe.Op != tt.wantOp || pe.Path != tt.wantPath {
				t.Errorf("PathError{Op: %q, Path: %q}, want {%q, %q}", pe.Op, pe.Path, tt.wantOp, tt.wantPath)
			}
			if got := readAll(t, crash, "/f"); got != "hello" {
				t.Errorf("/f = %q after a failed op, want it untouched", got)
			}
		})
	}
}

// TestInjectedCloseStillCloses checks a failed Close releases the file, as
// close(2) does.
func TestInjectedCloseStillCloses(t *testing.T) {
	fs := NewInjectFS(NewCrashFS(), FailNth(0, Kinds(OpClose), syscall.EIO))
	f, err := fs.Create("/f")
	must(t, err)
	if err := f.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first Close: err = %v, want EIO", err)
	}
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("second Close: err = %v, want os.ErrClosed", err)
	}
}

func TestShortWrite(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		write func(f afero.File, data string) (int, error)
		want  string
	}{
		{"Write", "0123456789", func(f afero.File, s string) (int, error) { return f.Write([]byte(s)) }, "01234"},
		{"WriteString", "0123456789", func(f afero.File, s string) (int, error) { return f.WriteString(s) }, "01234"},
		{"WriteAt", "0123456789", func(f afero.File, s string) (int, error) { return f.WriteAt([]byte(s), 0) }, "01234"},
		{"odd length", "abc", func(f afero.File, s string) (int, error) { return f.Write([]byte(s)) }, "a"},
		{"one byte", "a", func(f afero.File, s string) (int, error) { return f.Write([]byte(s)) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crash := NewCrashFS()
			fs := NewInjectFS(crash, ShortWriteNth(1, syscall.ENOSPC))
			f, err := fs.Create("/f")
			must(t, err)
			defer f.Close()
			if _, err := f.Write([]byte("ok")); err != nil {
				t.Fatalf("write 0: %v", err)
			}
			must(t, f.Truncate(0))
			_, err = f.Seek(0, 0)
			must(t, err)

			n, err := tt.write(f, tt.data)
			var pe *os.PathError
			if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Op != "write" {
				t.Errorf("err = %v, want write PathError wrapping ENOSPC", err)
			}
			if n != len(tt.want) {
				t.Errorf("n = %d, want %d", n, len(tt.want))
			}
			if got := readAll(t, crash, "/f"); got != tt.want {
				t.Errorf("content = %q, want %q", got, tt.want)
			}
			// The code under test truncates back; that must work.
			must(t, f.Truncate(0))
			if got := readAll(t, crash, "/f"); got != "" {
				t.Errorf("content after truncate = %q, want empty", got)
			}
		})
	}
}

// TestCrashAfter checks the n-th operation of the chosen kinds is the last
// to run and everything after it fails with ErrCrashed.
func TestCrashAfter(t *testing.T) {
	for _, kinds := range []KindSet{AllKinds, Kinds(OpSync), Kinds(OpWrite, OpRename)} {
		t.Run(kinds.String(), func(t *testing.T) {
			var total int64
			for k, c := range workloadCounts() {
				if kinds.Has(k) {
					total += c
				}
			}
			for n := int64(0); n <= total; n++ {
				inj := CrashAfter(n, kinds)
				steps := workload(NewInjectFS(NewCrashFS(), inj))
				if inj.Crashed() != (n < total) {
					t.Errorf("n=%d: Crashed() = %t, want %t", n, inj.Crashed(), n < total)
				}
				seen := int64(0)
				for i, s := range steps {
					crashed := seen > n
					if kinds.Has(s.kind) {
						seen++
					}
					if crashed && !errors.Is(s.err, ErrCrashed) {
						t.Errorf("n=%d: step %d %s after crash: err = %v, want ErrCrashed", n, i, s.kind, s.err)
					}
					if !crashed && s.err != nil {
						t.Errorf("n=%d: step %d %s before crash: %v", n, i, s.kind, s.err)
					}
				}
			}
		})
	}
}

// TestCrashAfterPowerCut runs the workload until just after each sync and
// checks what a process crash and a power cut would each leave.
func TestCrashAfterPowerCut(t *testing.T) {
	tests := []struct {
		name        string
		afterSync   int64
		wantProcess map[string]string
		wantPower   map[string]string
	}{
		{
			name:        "after file sync",
			afterSync:   0,
			wantProcess: map[string]string{"/d": dirMark, "/d/f.tmp": "hello world"},
			wantPower:   map[string]string{},
		},
		{
			name:        "after dir sync",
			afterSync:   1,
			wantProcess: map[string]string{"/d": dirMark, "/d/f": "hello world"},
			// The workload never syncs the root, so /d itself is lost.
			wantPower: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crash := NewCrashFS()
			inj := CrashAfter(tt.afterSync, Kinds(OpSync))
			workload(NewInjectFS(crash, inj))
			if !inj.Crashed() {
				t.Fatal("did not crash")
			}
			if got := tree(t, crash); !maps.Equal(got, tt.wantProcess) {
				t.Errorf("process crash left %v, want %v", got, tt.wantProcess)
			}
			if got := tree(t, crash.CrashClone()); !maps.Equal(got, tt.wantPower) {
				t.Errorf("power cut left %v, want %v\n%s", got, tt.wantPower, crash)
			}
		})
	}

	// With /d made durable first, the dir sync makes the renamed file
	// survive a power cut.
	crash := NewCrashFS()
	must(t, crash.Mkdir("/d", 0o755))
	syncDir(t, crash, "/")
	inj := CrashAfter(1, Kinds(OpSync))
	workload(NewInjectFS(crash, inj))
	want := map[string]string{"/d": dirMark, "/d/f": "hello world"}
	if got := tree(t, crash.CrashClone()); !maps.Equal(got, want) {
		t.Errorf("power cut after dir sync left %v, want %v", got, want)
	}
}

// TestInjectFSConcurrent is for the race detector: counts must add up when
// goroutines share an InjectFS.
func TestInjectFSConcurrent(t *testing.T) {
	crash := NewCrashFS()
	fs := NewInjectFS(crash, FailNth(1000, AllKinds, syscall.EIO))
	const workers, writes = 8, 20
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			writeX(t, fs, fmt.Sprintf("/f%d", i), writes)
		})
	}
	wg.Wait()
	if got, want := fs.Count(AllKinds), int64(workers*(writes+3)); got != want {
		t.Errorf("Count(AllKinds) = %d, want %d", got, want)
	}
	if got, want := fs.Count(Kinds(OpWrite)), int64(workers*writes); got != want {
		t.Errorf("Count(write) = %d, want %d", got, want)
	}
}

func TestKindSet(t *testing.T) {
	tests := []struct {
		set  KindSet
		want string
	}{
		{Kinds(), "{}"},
		{Kinds(OpSync, OpWrite), "{write,sync}"},
		{AllKinds, "{open,write,sync,close,rename,remove,mkdir,truncate,read,stat,setattr}"},
	}
	for _, tt := range tests {
		if got := tt.set.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	if Kinds(OpSync).Has(OpWrite) || !AllKinds.Has(OpSetAttr) {
		t.Error("Has is wrong")
	}
}

// TestSwapInjector: faults follow the injector set last, and none after
// Set(nil).
func TestSwapInjector(t *testing.T) {
	var sw SwapInjector
	fs := NewInjectFS(NewCrashFS(), &sw)
	full := InjectorFunc(func(op Op) error {
		if op.Kind == OpOpen {
			return syscall.ENOSPC
		}
		return nil
	})
	for i, tc := range []struct {
		inj  Injector
		want error
	}{{nil, nil}, {full, syscall.ENOSPC}, {nil, nil}, {FailNth(0, Kinds(OpOpen), syscall.EIO), syscall.EIO}} {
		sw.Set(tc.inj)
		f, err := fs.Create(fmt.Sprintf("/f%d", i))
		if !errors.Is(err, tc.want) {
			t.Fatalf("create %d: %v, want %v", i, err, tc.want)
		}
		if err == nil {
			_ = f.Close()
		}
	}
}
