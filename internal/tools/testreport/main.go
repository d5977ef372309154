package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var (
		passed, failed, skipped int
		output                  = map[string]*capped{} // package/test -> output
		failures                []string
		skips                   []string
		durations               []timed // top-level tests that ended, for the slowest list
		pkgFailed               bool
	)
	key := func(e event) string { return e.Package + " " + e.Test }
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Println(string(line)) // build errors and other plain output
			continue
		}
		switch e.Action {
		case "output":
			b := output[key(e)]
			if b == nil {
				b = &capped{}
				output[key(e)] = b
			}
			b.write(e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				status := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "--  "}[e.Action]
				if e.Action == "skip" {
					fmt.Printf("%s %s (no tests)\n", status, e.Package)
				} else {
					fmt.Printf("%s %s (%.1fs)\n", status, e.Package, e.Elapsed)
				}
				if e.Action == "fail" {
					pkgFailed = true
					if b := output[key(e)]; b != nil {
						failures = append(failures, "--- package "+e.Package+"\n"+b.String())
					}
				}
				continue
			}
			if !strings.Contains(e.Test, "/") {
				durations = append(durations, timed{e.Package + " " + e.Test, e.Elapsed})
			}
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				failures = append(failures, "--- FAIL "+e.Package+" "+e.Test+"\n"+output[key(e)].String())
			case "skip":
				skipped++
				skips = append(skips, e.Package+" "+e.Test+": "+skipReason(output[key(e)]))
			}
			delete(output, key(e))
		}
	}
	if len(failures) > 0 {
		fmt.Println("\n=== failures")
		for _, f := range failures {
			fmt.Println(f)
		}
	}
	if len(skips) > 0 {
		sort.Strings(skips)
		fmt.Println("\n=== skipped (and why)")
		for _, s := range skips {
			fmt.Println(s)
		}
	}
	printSlowest(durations, slowestShown)
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || pkgFailed {
		os.Exit(1)
	}
}

// capped keeps a test's output within headBytes + tailBytes: its beginning and its end, where a
// failed assertion is printed, with how much was left out between them.
type capped struct {
	head    strings.Builder
	tail    []string
	tailLen int
	dropped int
}

const headBytes, tailBytes = 32 << 10, 224 << 10

func (c *capped) write(s string) {
	if c.head.Len() < headBytes {
		c.head.WriteString(s)
		return
	}
	c.tail = append(c.tail, s)
	c.tailLen += len(s)
	for c.tailLen > tailBytes && len(c.tail) > 1 {
		c.tailLen -= len(c.tail[0])
		c.dropped += len(c.tail[0])
		c.tail = c.tail[1:]
	}
}

func (c *capped) String() string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(c.head.String())
	if c.dropped > 0 {
		fmt.Fprintf(&b, "    [... %d bytes of output left out ...]\n", c.dropped)
	}
	for _, s := range c.tail {
		b.WriteString(s)
	}
	return b.String()
}

func skipReason(b *capped) string {
	if b == nil {
		return "(no reason given)"
	}
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "---") || strings.HasPrefix(l, "===") || l == "" {
			continue
		}
		return l
	}
	return "(no reason given)"
}

// timed is a test and how long it took, in seconds.
type timed struct {
	name    string
	elapsed float64
}

// slowestShown is how many of the slowest top-level tests the report lists: where to look when
// make test grows past its budget.
const slowestShown = 15

func printSlowest(ts []timed, n int) {
	if len(ts) == 0 {
		return
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].elapsed > ts[j].elapsed })
	fmt.Println("\n=== slowest tests")
	for _, t := range ts[:min(n, len(ts))] {
		fmt.Printf("%7.1fs %s\n", t.elapsed, t.name)
	}
}
