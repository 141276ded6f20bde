package benchresult

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerateDocFromFixedJSON(t *testing.T) {
	f, err := Load("testdata/results.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("testdata/doc.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/doc.golden.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := GenerateDoc(string(doc), f.Results)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("generated doc differs from testdata/doc.golden.md:\n%s", got)
	}
	// Generating again changes nothing.
	again, err := GenerateDoc(got, f.Results)
	if err != nil || again != got {
		t.Errorf("a second generation changed the doc (err %v):\n%s", err, again)
	}
}

func TestGenerateDocErrorsNameTheProblem(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"<!-- benchresults BenchmarkX -->\n<!-- end benchresults -->\n", "no results of BenchmarkX in the JSON"},
		{"<!-- benchresults BenchmarkA -->\ntext\n", "has no \"<!-- end benchresults -->\""},
		{"<!-- benchresults -->\n<!-- end benchresults -->\n", "names no benchmark"},
	} {
		_, err := GenerateDoc(c.doc, []Result{{Benchmark: "BenchmarkA", Name: "a", Value: 1, Unit: "ms"}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("doc %q: error %v, want one containing %q", c.doc, err, c.want)
		}
	}
}

// A line a benchmark prints is read back as the same result, whatever go
// test puts around it; a quoted reference gets no ratio.
func TestFormatParseRoundTrip(t *testing.T) {
	tb := &fakeTB{name: "BenchmarkX"}
	r := Figure(tb, "gap", 120, "ms").Against("restart only", 240).Target(Below(150, "under 150 ms")).Result()
	if r.Ratio == nil || *r.Ratio != 0.5 || r.Met == nil || !*r.Met {
		t.Fatalf("measured reference: ratio %v met %v, want 0.5 and true", r.Ratio, r.Met)
	}
	line, err := Format(r)
	if err != nil {
		t.Fatal(err)
	}
	back, ok, err := Parse("BenchmarkX-2   \t" + line)
	if err != nil || !ok || back.Name != "gap" || *back.Ratio != 0.5 || back.Benchmark != "BenchmarkX" {
		t.Fatalf("Parse(%q) = %+v, %v, %v", line, back, ok, err)
	}
	q := Figure(tb, "rebuild", 62, "ms").Quoted("Kube-OVN 29 s", "its own report").Target(RatioAtMost(0.1, "x")).Result()
	if q.Ratio != nil || q.ReferenceValue != nil || q.Met != nil || q.Source != "its own report" {
		t.Fatalf("quoted reference: %+v; want no ratio, no reference value, met unjudged", q)
	}
	if _, ok, _ := Parse("BenchmarkX-2 1 100 ns/op"); ok {
		t.Fatal("a go test line was read as a result")
	}
	if _, _, err := Parse(Prefix + `{"name":"x"}`); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("a result without benchmark and unit: %v", err)
	}
}

func TestGatherAndMerge(t *testing.T) {
	out := "goos: linux\n" + Prefix + `{"benchmark":"BenchmarkA","name":"a","value":1,"unit":"ms","measured":"2026-12-06"}` + "\nok\n"
	fresh, err := Gather(strings.NewReader(out), nil)
	if err != nil || len(fresh) != 1 {
		t.Fatalf("Gather: %v %v", fresh, err)
	}
	base := []Result{
		{Benchmark: "BenchmarkA", Name: "old a", Value: 9, Unit: "ms"},
		{Benchmark: "BenchmarkB", Name: "b", Value: 2, Unit: "ms"},
	}
	m := Merge(base, fresh)
	if len(m) != 2 || m[0].Name != "a" || m[1].Name != "b" {
		t.Fatalf("Merge kept %+v; want A replaced, B kept", m)
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := Save(path, File{Results: m}); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil || len(f.Results) != 2 {
		t.Fatalf("Load after Save: %+v %v", f, err)
	}
}

// The committed doc's generated tables are what the committed results
// give: neither can change without the other (make bench-doc).
func TestBenchmarksDocMatchesCommittedResults(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	f, err := Load(filepath.Join(root, "docs", "bench-results.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), beginMarker) {
		t.Fatal("docs/benchmarks.md has no generated table: its results tables go between benchresults markers")
	}
	got, err := GenerateDoc(string(doc), f.Results)
	if err != nil {
		t.Fatalf("docs/benchmarks.md: %v", err)
	}
	if got != string(doc) {
		t.Error("docs/benchmarks.md's generated tables differ from docs/bench-results.json: run `make bench-doc` (benchjson doc) and commit both")
	}
}

type fakeTB struct {
	testing.TB
	name string
}

func (f *fakeTB) Name() string { return f.name }
