// Command benchjson gathers the benchmarks' result lines into JSON and
// generates docs/benchmarks.md's tables from it (tests/harness/benchresult).
//
//	benchjson run -out _out/bench.json -- go test -run '^$' -bench . ./tests/...
//	benchjson merge -into docs/bench-results.json _out/bench.json
//	benchjson doc [-check] -results docs/bench-results.json docs/benchmarks.md
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
)

const usage = `usage:
  benchjson run -out FILE -- COMMAND [ARG...]   run a go test -bench command, echo its output, write its results to FILE
  benchjson merge -into FILE RESULTS...           replace FILE's results of every benchmark RESULTS measured (runs in several RESULTS are all kept)
  benchjson doc [-check] -results FILE DOC        regenerate DOC's marked tables from FILE (-check: fail if DOC differs)`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "merge":
		err = merge(os.Args[2:])
	case "doc":
		err = doc(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q\n%s", os.Args[1], usage)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchjson:", err)
		os.Exit(1)
	}
}

// run keeps the results of the benchmarks that finished even when a later
// one fails, and then exits with the command's status.
func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	out := fs.String("out", "", "JSON file to write")
	_ = fs.Parse(args)
	cmdline := fs.Args()
	if *out == "" || len(cmdline) == 0 {
		return fmt.Errorf("run needs -out FILE and a command after --\n%s", usage)
	}
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		return err
	}
	gathered := make(chan error, 1)
	var results []benchresult.Result
	go func() {
		var err error
		results, err = benchresult.Gather(pr, os.Stdout)
		_, _ = io.Copy(io.Discard, pr)
		gathered <- err
	}()
	runErr := cmd.Wait()
	pw.Close()
	gatherErr := <-gathered
	if err := benchresult.Save(*out, benchresult.File{Results: results}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "benchjson: %d results in %s\n", len(results), *out)
	if runErr != nil {
		return runErr
	}
	return gatherErr
}

func merge(args []string) error {
	fs := flag.NewFlagSet("merge", flag.ExitOnError)
	into := fs.String("into", "", "results file to update")
	_ = fs.Parse(args)
	if *into == "" || fs.NArg() == 0 {
		return fmt.Errorf("merge needs -into FILE and at least one results file\n%s", usage)
	}
	base, err := benchresult.Load(*into)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	// The files given together are runs of one session: a benchmark in
	// several of them keeps every run (the doc shows their median).
	var fresh []benchresult.Result
	for _, p := range fs.Args() {
		f, err := benchresult.Load(p)
		if err != nil {
			return err
		}
		fresh = append(fresh, f.Results...)
	}
	base.Results = benchresult.Merge(base.Results, fresh)
	return benchresult.Save(*into, base)
}

func doc(args []string) error {
	fs := flag.NewFlagSet("doc", flag.ExitOnError)
	resultsPath := fs.String("results", "", "results file")
	check := fs.Bool("check", false, "do not write: fail if the doc's tables differ from the results")
	_ = fs.Parse(args)
	if *resultsPath == "" || fs.NArg() != 1 {
		return fmt.Errorf("doc needs -results FILE and one doc\n%s", usage)
	}
	f, err := benchresult.Load(*resultsPath)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	gen, err := benchresult.GenerateDoc(string(old), f.Results)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if gen == string(old) {
		return nil
	}
	if *check {
		return fmt.Errorf("%s: its generated tables differ from %s; run benchjson doc (make bench-doc)", path, *resultsPath)
	}
	return os.WriteFile(path, []byte(gen), 0o644)
}
