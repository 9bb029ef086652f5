package tests

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eosink/eosink/internal/testing/testenv"
	"github.com/eosink/eosink/internal/testing/testsrv"
)

// Knobs (see doc.go).
const (
	envSeed      = "EOSINK_E2E_SEED"
	envKills     = "EOSINK_E2E_KILLS"
	envProducers = "EOSINK_E2E_PRODUCERS"
	envProducer  = "EOSINK_E2E_PRODUCER"
	envRace      = "EOSINK_E2E_RACE"
	envKeep      = "EOSINK_E2E_KEEP"
)

var (
	// eosinkBin is the service binary, built once by TestMain.
	eosinkBin string
	// shared is one MinIO server for the S3 tests that do not stop it.
	shared testsrv.Shared
	// baseSeed seeds every test; each test derives its own from it and
	// its name, so one test replays alone with the same choices.
	baseSeed uint64
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	baseSeed = uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tests: %s=%q: want an unsigned integer\n", envSeed, v)
			return 2
		}
		baseSeed = s
	}
	fmt.Printf("tests: seed %d (replay with %s=%d)\n", baseSeed, envSeed, baseSeed)

	dir, err := os.MkdirTemp("", "eosink-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	eosinkBin, err = buildEosink(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		return 1
	}
	fmt.Printf("tests: built %s in %s\n", eosinkBin, time.Since(start).Round(time.Millisecond))
	return shared.Run(m)
}

// buildEosink builds ./cmd/eosink from the module root into dir.
func buildEosink(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside the module (%q)", gomod)
	}
	bin := filepath.Join(dir, "eosink")
	args := []string{"build", "-o", bin}
	if os.Getenv(envRace) == "1" {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/eosink")
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// testRand returns the test's random source, seeded from the base seed and
// the test's name, and logs how to replay it.
func testRand(t testing.TB) (*rand.Rand, uint64) {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	seed := baseSeed ^ h.Sum64()
	t.Logf("seed %d for %s (replay the run with %s=%d)", seed, t.Name(), envSeed, baseSeed)
	return rand.New(rand.NewPCG(seed, seed>>1|1)), seed
}

// envInt reads a positive integer knob, def when unset (testenv.Int).
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	n := testenv.Int(t, name, def)
	if n < 0 {
		t.Fatalf("%s=%d: want an integer >= 0", name, n)
	}
	return n
}

// workDir returns a directory for the test's data and logs. It is removed
// when the test passes (unless EOSINK_E2E_KEEP=1) and kept, with its path
// printed, when it fails: the logs and the destination are the evidence.
func workDir(t testing.TB) string {
	t.Helper()
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_")
	dir, err := os.MkdirTemp("", "eosink-e2e-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv(envKeep) == "1" {
			t.Logf("kept the test's data and logs in %s", dir)
			fmt.Printf("%s: kept data and logs in %s\n", t.Name(), dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// sharedMinIO returns the shared MinIO server, or ends the test as testsrv says
// (skip, or fail with CI=true) when there is none.
func sharedMinIO(t testing.TB) *testsrv.MinIO {
	t.Helper()
	return shared.Get(t)
}

// report prints a measurement to the test log and to stdout.
func report(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	fmt.Printf("%s: %s\n", t.Name(), msg)
}
