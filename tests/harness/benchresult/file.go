package benchresult

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
)

// File is the JSON file `make bench` writes (_out/bench.json) and the
// committed one the doc is generated from (docs/bench-results.json).
type File struct {
	Results []Result `json:"results"`
}

// Gather reads every result line from r (a `go test -bench` output),
// copying all of r to echo if it is not nil.
func Gather(r io.Reader, echo io.Writer) ([]Result, error) {
	var out []Result
	var bad []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if echo != nil {
			fmt.Fprintln(echo, line)
		}
		res, ok, err := Parse(line)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if ok {
			out = append(out, res)
		}
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%d unreadable result lines, the first: %v", len(bad), bad[0])
	}
	return out, nil
}

// Merge returns base with every benchmark that fresh measured replaced by
// fresh's results (a benchmark's figures always come from one run), the
// others kept with their own dates.
func Merge(base, fresh []Result) []Result {
	measured := map[string]bool{}
	for _, r := range fresh {
		measured[r.Benchmark] = true
	}
	var out []Result
	for _, r := range base {
		if !measured[r.Benchmark] {
			out = append(out, r)
		}
	}
	out = append(out, fresh...)
	slices.SortStableFunc(out, func(a, b Result) int {
		switch {
		case a.Benchmark < b.Benchmark:
			return -1
		case a.Benchmark > b.Benchmark:
			return 1
		}
		return 0
	})
	return out
}

// Load reads a results file.
func Load(path string) (File, error) {
	var f File
	raw, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, fmt.Errorf("%s: %v (expected {\"results\": [...]} as written by benchjson)", path, err)
	}
	return f, nil
}

// Save writes a results file, one result per line for readable diffs.
func Save(path string, f File) error {
	buf := []byte("{\"results\": [\n")
	for i, r := range f.Results {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf = append(buf, "  "...)
		buf = append(buf, line...)
		if i < len(f.Results)-1 {
			buf = append(buf, ',')
		}
		buf = append(buf, '\n')
	}
	buf = append(buf, "]}\n"...)
	return os.WriteFile(path, buf, 0o644)
}
