// Command mutants runs a seeded random sample of a package's mutants (the
// operators of gremlins, package mutants) against its tests and reports
// the kill ratio with a 95% interval. It works on a copy of the committed
// tree, so the checkout is never mutated, and it resumes: the results of a
// run that was stopped are kept, and running it again runs the rest.
//
//	go run ./internal/mutants/cmd/mutants -n 60 -seed 1 -out /tmp/mutants ./mysqlstore ./rollout
//
// The servers of scripts/services must be up and their environment set,
// as for `go test`.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seed31b0e981/reservoir/internal/mutants"
)

const modulePath = "github.com/seed31b0e981/reservoir"

// result is one line of a package's results file.
type result struct {
	mutants.Mutant
	Status string `json:"status"` // KILLED, LIVED, TIMED_OUT, NOT_VIABLE
	Killer string `json:"killer,omitempty"`
	// Elsewhere: the package's own tests let it live and the -also
	// package's killed it.
	Elsewhere bool    `json:"elsewhere,omitempty"`
	Seconds   float64 `json:"seconds"`
}

func main() {
	n := flag.Int("n", 60, "mutants to sample per package (0: all covered ones)")
	seed := flag.Uint64("seed", 1, "seed of the sample; the same seed and commit give the same mutants")
	out := flag.String("out", filepath.Join(os.TempDir(), "reservoir-mutants"), "directory for the tree's copy, cover profiles and results")
	survivors := flag.String("survivors", "", "instead of sampling, run again the mutants that lived in an earlier run's -out directory (same -seed): after tests were added, are they killed now?")
	also := flag.String("also", "", "a package whose tests also judge a mutant the package's own tests let live (./internal/lossless: the adversarial cases that drive every package through the facade)")
	alsoRun := flag.String("also-run", ".", "the -run pattern for the -also package's tests")
	exclude := flag.String("exclude", "", "sample only mutants that were not in an earlier run's sample (its -out directory): a fresh estimate after tests were written for that one")
	timeout := flag.Duration("timeout", 0, "how long one mutant's tests may run before it counts as timed out (0: five times the coverage run, plus a minute)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mutants [flags] ./pkg...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r := runner{out: *out, n: *n, seed: *seed, survivorsOf: *survivors, also: *also, alsoRun: *alsoRun, timeout: *timeout, exclude: *exclude}
	if err := r.run(ctx, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

// runner holds the flags of one run.
type runner struct {
	out, survivorsOf, also, alsoRun string
	exclude                         string
	n                               int
	seed                            uint64
	timeout                         time.Duration
	src                             string // the tree's copy
}

func (rn *runner) run(ctx context.Context, pkgs []string) error {
	out, n, seed := rn.out, rn.n, rn.seed
	commit, err := output(ctx, ".", "git", "rev-parse", "HEAD")
	if err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	src := filepath.Join(out, "src")
	rn.src = src
	if err := copyTree(ctx, src, commit); err != nil {
		return err
	}
	fmt.Printf("commit %s, seed %d, %d per package\n", commit[:12], seed, n)
	var summary strings.Builder
	fmt.Fprintf(&summary, "| package | covered mutants | sampled | killed | (by %s) | lived | timed out | not viable | kill ratio (95%% interval) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n", cmp.Or(rn.also, "-also"))
	var survivors []result
	for _, pkg := range pkgs {
		rs, covered, err := rn.runPackage(ctx, strings.TrimPrefix(filepath.Clean(pkg), "./"))
		if err != nil {
			return err
		}
		c := map[string]int{}
		for _, r := range rs {
			c[r.Status]++
			if r.Elsewhere {
				c["elsewhere"]++
			}
			if r.Status == "LIVED" {
				survivors = append(survivors, r)
			}
		}
		k, l := c["KILLED"], c["LIVED"]
		lo, hi := mutants.Interval(k, k+l)
		ratio := "-"
		if k+l > 0 {
			ratio = fmt.Sprintf("%s (%s-%s)", mutants.Percent(float64(k)/float64(k+l)), mutants.Percent(lo), mutants.Percent(hi))
		}
		fmt.Fprintf(&summary, "| %s | %d | %d | %d | %d | %d | %d | %d | %s |\n", pkg, covered, len(rs), k, c["elsewhere"], l, c["TIMED_OUT"], c["NOT_VIABLE"], ratio)
	}
	fmt.Fprintf(&summary, "\nSurvivors:\n\n")
	for _, r := range survivors {
		fmt.Fprintf(&summary, "- `%s` `%s`\n", r.Mutant, sourceLine(src, r.Mutant))
	}
	fmt.Print("\n", summary.String())
	return os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary.String()), 0o644)
}

// copyTree extracts the commit into dir once; a dir holding another
// commit is an error rather than a silent mix of two trees' results.
func copyTree(ctx context.Context, dir, commit string) error {
	mark := filepath.Join(dir, ".mutants-commit")
	if b, err := os.ReadFile(mark); err == nil {
		if strings.TrimSpace(string(b)) != commit {
			return fmt.Errorf("%s holds commit %s, not HEAD %s: pick another -out or remove it", dir, strings.TrimSpace(string(b)), commit)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", commit, dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %v: %s", commit, err, b)
	}
	return os.WriteFile(mark, []byte(commit+"\n"), 0o644)
}

func (rn *runner) runPackage(ctx context.Context, dir string) ([]result, int, error) {
	src, out, n, seed, survivorsOf := rn.src, rn.out, rn.n, rn.seed, rn.survivorsOf
	name := strings.ReplaceAll(dir, "/", "_")
	resultsName := fmt.Sprintf("%s.seed%d.jsonl", name, seed)
	profile := filepath.Join(out, name+".cover")
	baseFile := filepath.Join(out, name+".baseline")
	if _, err := os.Stat(profile); err != nil {
		fmt.Printf("%s: coverage run\n", dir)
		start := time.Now()
		if b, err := goTest(ctx, src, dir, 30*time.Minute, "-coverprofile="+profile, "-covermode=set"); err != nil {
			return nil, 0, fmt.Errorf("%s: the tests fail without a mutant, so no mutant can be judged: %v\n%s", dir, err, tail(b))
		}
		if err := os.WriteFile(baseFile, []byte(time.Since(start).String()), 0o644); err != nil {
			return nil, 0, err
		}
	}
	b, err := os.ReadFile(baseFile)
	if err != nil {
		return nil, 0, err
	}
	baseline, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, 0, err
	}
	timeout := cmp.Or(rn.timeout, 5*baseline+time.Minute)
	cov, err := mutants.ReadCoverage(profile, modulePath)
	if err != nil {
		return nil, 0, err
	}
	all, err := mutants.Find(src, dir)
	if err != nil {
		return nil, 0, err
	}
	var covered []mutants.Mutant
	for _, m := range all {
		if cov.Covers(m) {
			covered = append(covered, m)
		}
	}
	sample := append([]mutants.Mutant(nil), covered...)
	if rn.exclude != "" {
		seen, err := sampled(rn.exclude, src, name)
		if err != nil {
			return nil, 0, err
		}
		sample = slices.DeleteFunc(sample, func(m mutants.Mutant) bool { return seen[m.String()] })
		fmt.Printf("%s: %d of %d covered mutants were in %s's sample; sampling from the other %d\n", dir, len(covered)-len(sample), len(covered), rn.exclude, len(sample))
	}
	rand.New(rand.NewPCG(seed, 0)).Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	if n > 0 && n < len(sample) {
		sample = sample[:n]
	}
	if survivorsOf != "" {
		earlier, err := readResults(filepath.Join(survivorsOf, resultsName))
		if err != nil {
			return nil, 0, err
		}
		sample = sample[:0]
		for _, r := range earlier {
			if r.Status != "LIVED" {
				continue
			}
			m, ok, err := findAgain(survivorsOf, src, r.Mutant)
			if err != nil {
				return nil, 0, err
			}
			if !ok {
				fmt.Printf("%s: %s: its line is gone from the current tree (rewritten), not judged again\n", dir, r.Mutant)
				continue
			}
			sample = append(sample, m)
		}
		sort.Slice(sample, func(i, j int) bool { return sample[i].String() < sample[j].String() })
	}

	resultsFile := filepath.Join(out, resultsName)
	done, err := readResults(resultsFile)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(resultsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var rs []result
	for i, m := range sample {
		if r, ok := done[m.String()]; ok {
			rs = append(rs, r)
			continue
		}
		r, err := rn.runMutant(ctx, dir, m, timeout)
		if err != nil {
			return nil, 0, err
		}
		line, _ := json.Marshal(r)
		if _, err := f.Write(append(line, '\n')); err != nil {
			return nil, 0, err
		}
		rs = append(rs, r)
		fmt.Printf("%s [%d/%d] %-10s %s %s (%.0fs)\n", dir, i+1, len(sample), r.Status, m, r.Killer, r.Seconds)
	}
	return rs, len(covered), nil
}

// sampled names the mutants of the package (name) in every sample of the
// run in dir, found again in the tree at src.
func sampled(dir, src, name string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, name+".seed*.jsonl"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range files {
		rs, err := readResults(f)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			m, ok, err := findAgain(dir, src, r.Mutant)
			if err != nil {
				return nil, err
			}
			if ok {
				seen[m.String()] = true
			}
		}
	}
	return seen, nil
}

// findAgain finds a mutant of the earlier run in dir (whose tree copy is
// dir/src) in the tree at src, where its file may have changed since; false
// when its line, or its file, is gone.
func findAgain(dir, src string, m mutants.Mutant) (mutants.Mutant, bool, error) {
	before, err := os.ReadFile(filepath.Join(dir, "src", m.File))
	if err != nil {
		return m, false, err
	}
	after, err := os.ReadFile(filepath.Join(src, m.File))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	m, ok := mutants.Relocate(before, after, m)
	return m, ok, nil
}

func readResults(path string) (map[string]result, error) {
	done := map[string]result{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r result
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		done[r.Mutant.String()] = r
	}
	return done, s.Err()
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// runMutant writes the mutant into the copy, runs the package's tests and
// puts the file back, also when the run is interrupted.
func (rn *runner) runMutant(ctx context.Context, dir string, m mutants.Mutant, timeout time.Duration) (result, error) {
	src := rn.src
	path := filepath.Join(src, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return result{}, err
	}
	mutated, err := mutants.Apply(orig, m)
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return result{}, err
	}
	defer os.WriteFile(path, orig, 0o644)
	start := time.Now()
	b, err := goTest(ctx, src, dir, timeout, "-failfast")
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	elsewhere := false
	if err == nil && rn.also != "" {
		b, err = goTest(ctx, src, strings.TrimPrefix(filepath.Clean(rn.also), "./"), timeout, "-failfast", "-run", rn.alsoRun)
		if ctx.Err() != nil {
			return result{}, ctx.Err()
		}
		elsewhere = err != nil
	}
	r := result{Mutant: m, Seconds: time.Since(start).Seconds(), Elsewhere: elsewhere}
	switch {
	case err == nil:
		r.Status = "LIVED"
	case bytes.Contains(b, []byte("[build failed]")) || bytes.Contains(b, []byte("[setup failed]")):
		r.Status = "NOT_VIABLE"
	case bytes.Contains(b, []byte("panic: test timed out")) || errors.Is(err, context.DeadlineExceeded):
		r.Status = "TIMED_OUT"
	default:
		r.Status = "KILLED"
		if f := failRE.FindSubmatch(b); f != nil {
			r.Killer = string(f[1])
		}
	}
	return r, nil
}

func goTest(ctx context.Context, src, dir string, timeout time.Duration, flags ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	args := append([]string{"test", "-count=1", "-timeout", timeout.String()}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "./"+dir)...)
	cmd.Dir = src
	b, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return b, ctx.Err()
	}
	return b, err
}

func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	return strings.TrimSpace(string(b)), err
}

func sourceLine(src string, m mutants.Mutant) string {
	b, err := os.ReadFile(filepath.Join(src, m.File))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if m.Line-1 < len(lines) {
		return strings.TrimSpace(lines[m.Line-1])
	}
	return ""
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
