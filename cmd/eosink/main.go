// Command eosink is the exactly-once file sink: `eosink serve` runs the
// service, `eosink verify` checks a destination, `eosink version` prints
// the build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/eosink/eosink/internal/buildinfo"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee exitError
		if !errors.As(err, &ee) && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "eosink:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitCode is the process status for run's error: 0 for none, the code of
// an exitError, 2 for a usage or configuration error, else 1.
func exitCode(err error) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return int(ee)
	case errors.Is(err, flag.ErrHelp), errors.Is(err, errUsage), errors.Is(err, errNoDest):
		return 2
	}
	return 1
}

// exitError ends the process with a status and nothing more to say.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Errors that exit 2: the command line asks for something that cannot be.
var (
	errUsage  = errors.New("usage")
	errNoDest = errors.New("no such destination")
)

// usageError marks a flag parsing error as a usage error; --help stays
// flag.ErrHelp.
func usageError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %w", errUsage, err)
}

const usage = `eosink lands records in files, exactly once.

Usage:
  eosink [serve] [flags]     run the service (the default)
  eosink verify --dest URL   check a destination against its manifests
  eosink version             print the version
  eosink healthcheck         exit 0 if the local service answers /healthz (for containers)

Run 'eosink serve --help' or 'eosink verify --help' for their flags.
Every flag can also be set as EOSINK_<FLAG>, e.g. EOSINK_DATA_DIR=/var/lib/eosink.
`

// run is main without the process: args without the program name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "verify":
		return verify(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "eosink", version())
		return nil
	case "healthcheck":
		return healthcheck(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

// version is the module version, the VCS revision and the Go version:
// "v1.2.3 (revision 0123abcd..., modified) go1.26.8 linux/amd64"; a binary
// built without VCS data or the build script's revision says "revision
// unknown" (internal/buildinfo).
func version() string {
	in := buildinfo.Read()
	v := in.Version
	if v == "" {
		v = "(unknown)"
	}
	r := "revision unknown"
	if in.Revision != "" {
		r = "revision " + in.Revision
		if in.Modified {
			r += ", modified"
		}
	}
	return fmt.Sprintf("%s (%s) %s %s/%s", v, r, in.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// newFlagSet is a command's flag set: errors and usage go to stderr, the
// usage being the command's text, then its flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// envFlags sets each flag of fs not given on the command line from
// EOSINK_<NAME>, with dashes as underscores. Command-line flags win.
func envFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		key := "EOSINK_" + upperUnderscore(f.Name)
		if v, ok := os.LookupEnv(key); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", key, v, serr)
			}
		}
	})
	return err
}

func upperUnderscore(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
